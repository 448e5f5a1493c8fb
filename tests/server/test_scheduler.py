"""Scheduler: job wrapper, advisory-lock leadership, retention, and two real
coordinator processes on one PostgreSQL database."""

from __future__ import annotations

import itertools
import os
import re
import signal
import subprocess
import sys
import time
from collections import defaultdict
from datetime import timedelta
from pathlib import Path

import pytest
from coordinator_testkit import wait_until
from pftp_coordinator.config import Settings
from pftp_coordinator.db import session_scope
from pftp_coordinator.models import JobRun, Mirror, PathProbe, UtilizationSample, utcnow
from pftp_coordinator.retention import apply_retention
from pftp_coordinator.scheduler import CoordinatorScheduler, first_run
from pftp_coordinator.scheduler.jobs import run_job
from pftp_coordinator.scheduler.locks import LocalJobLocks, PgLeaderLocks, lock_key
from probe_db import add_mirror, migrated_factory, tree_root
from probe_servers import ftp_server, make_tree
from sqlalchemy import func, select

HERE = Path(__file__).parent


def test_run_job_records_success_and_failure(sqlite_url):
    factory = migrated_factory(sqlite_url)
    locks = LocalJobLocks()
    assert run_job("ok-job", lambda: None, locks=locks, factory=factory, interval_s=10)

    def boom() -> None:
        raise RuntimeError("disk on fire")

    assert run_job("bad-job", boom, locks=locks, factory=factory, interval_s=10)
    assert run_job("bad-job", boom, locks=locks, factory=factory, interval_s=10)
    with session_scope(factory) as s:
        runs = {j.job: j for j in s.scalars(select(JobRun))}
    assert runs["ok-job"].ok and runs["ok-job"].runs == 1 and runs["ok-job"].finished_at
    assert runs["bad-job"].ok is False and runs["bad-job"].runs == 2
    assert "disk on fire" in runs["bad-job"].error


def test_a_jobs_first_run_waits_an_interval_after_its_last() -> None:
    now = utcnow()
    # never run: after the start's delay and jitter
    assert first_run(now, 300, 5, 2) == now + timedelta(seconds=7)
    # run a minute ago: one interval after that, with the jitter
    assert first_run(now, 300, 5, 2, now - timedelta(seconds=60)) == now + timedelta(seconds=242)
    # run long ago: due, so after the start's delay only
    assert first_run(now, 300, 5, 2, now - timedelta(hours=3)) == now + timedelta(seconds=7)
    # a last run stamped in the future (another host's clock) counts as now
    assert first_run(now, 300, 5, 0, now + timedelta(days=2)) == now + timedelta(seconds=300)


def test_a_restarted_coordinator_does_not_probe_fresh_mirrors_again(sqlite_url):
    # `probe --all` then `serve` (the lab bench, an operator), or a restart: the
    # mirrors read a minute ago are not read again 5 s after the start, under the
    # downloads of the clients the coordinator is already serving
    factory = migrated_factory(sqlite_url)
    fresh = add_mirror(factory, "fresh", "ftp://10.2.0.1/")
    new = add_mirror(factory, "new", "ftp://10.2.0.2/")
    now = utcnow()
    with session_scope(factory) as s:
        m = s.get(Mirror, fresh)
        m.last_probe_at = now - timedelta(seconds=60)
        m.last_scan_at = now - timedelta(seconds=10)
    settings = Settings(
        database_url=sqlite_url, probe_interval_s=300, probe_jitter_s=0, scan_interval_s=3600
    )
    sched = CoordinatorScheduler(settings, factory, LocalJobLocks())
    sched.scheduler.start(paused=True)
    try:
        sched.sync_mirror_jobs()
        due = {j.id: (j.next_run_time - now).total_seconds() for j in sched.scheduler.get_jobs()}
    finally:
        sched.scheduler.shutdown(wait=False)
    assert due[f"probe:{fresh}"] == pytest.approx(240, abs=2)
    assert due[f"scan:{fresh}"] == pytest.approx(3590, abs=2)
    assert due[f"probe:{new}"] == pytest.approx(5, abs=2)
    assert due[f"scan:{new}"] == pytest.approx(5, abs=2)


def test_pg_leadership_moves_when_holder_goes(pg_url):
    a, b = PgLeaderLocks(pg_url), PgLeaderLocks(pg_url)
    try:
        assert a.acquire("job-x") and a.acquire("job-x")  # kept between runs
        assert not b.acquire("job-x")
        assert b.acquire("job-y")  # other jobs may lead elsewhere
        a.close()  # like a dead process: the connection goes, so does the lock
        # PostgreSQL frees a session's advisory locks when its backend exits, which
        # happens just after the client's close returns: poll for it, bounded.
        wait_until(lambda: b.acquire("job-x"), timeout=10, what="the lock to move")
    finally:
        a.close()
        b.close()
    assert lock_key("a") != lock_key("b") and -(2**63) <= lock_key("a") < 2**63


def test_retention_aggregates_hourly(db_url):
    factory = migrated_factory(db_url)
    mid = add_mirror(factory, "m", "ftp://10.2.0.1/")
    now = utcnow()
    old = (now - timedelta(days=40)).replace(minute=0, second=0, microsecond=0)
    with session_scope(factory) as s:
        for i in range(6):  # two hours, three samples each
            ts = old + timedelta(minutes=20 * i)
            s.add(
                PathProbe(mirror_id=mid, ts=ts, method="tcp-connect", ok=True, rtt_s=0.01 * (i + 1))
            )
            s.add(
                UtilizationSample(
                    mirror_id=mid, ts=ts, cpu_percent=10.0 * i, memory_percent=50, connections=i
                )
            )
            # throughput rows: the hour's connections are the most any probe needed
            s.add(
                PathProbe(
                    mirror_id=mid,
                    ts=ts,
                    method="ftp-range",
                    ok=True,
                    throughput_bps=1e6 * (i + 1),
                    connections=[1, None, 3, None, None, 2][i],
                )
            )
        s.add(PathProbe(mirror_id=mid, ts=now, method="tcp-connect", ok=True, rtt_s=0.5))
    out = apply_retention(factory, Settings(database_url=None, retention_days=30))
    assert (out.probes_aggregated, out.probe_rows_written) == (12, 4)
    assert (out.samples_aggregated, out.sample_rows_written) == (6, 2)
    with session_scope(factory) as s:
        probes = s.scalars(
            select(PathProbe).where(PathProbe.method == "tcp-connect").order_by(PathProbe.ts)
        ).all()
        assert [p.samples for p in probes] == [3, 3, 1]
        assert probes[0].ts == old and abs(probes[0].rtt_s - 0.02) < 1e-9
        tps = s.scalars(
            select(PathProbe).where(PathProbe.method == "ftp-range").order_by(PathProbe.ts)
        ).all()
        assert [(p.samples, p.connections) for p in tps] == [(3, 3), (3, 2)]
        assert abs(tps[0].throughput_bps - 2e6) < 1e-3
        util = s.scalars(select(UtilizationSample).order_by(UtilizationSample.ts)).all()
        assert [u.samples for u in util] == [3, 3] and util[1].cpu_percent == 40.0
    # Idempotent: nothing left to aggregate.
    again = apply_retention(factory, Settings(database_url=None, retention_days=30))
    assert again.probes_aggregated == 0 and again.samples_aggregated == 0


_RAN = re.compile(r"^(\d+\.\d+) \S+ job (\S+) ran on (\S+) in (\d+\.\d+) s")


def _runs(logs: list[Path]) -> dict[str, list[tuple[float, str]]]:
    out: dict[str, list[tuple[float, str]]] = defaultdict(list)
    for log in logs:
        for line in log.read_text().splitlines():
            m = _RAN.match(line)
            if m:
                # The line is written when the job ends; a run's start is what the
                # schedule fixes (a probe's duration varies by seconds).
                started = float(m.group(1)) - float(m.group(4))
                out[m.group(2)].append((started, m.group(3)))
    return {k: sorted(v) for k, v in out.items()}


@pytest.mark.slow
def test_two_coordinators_run_each_job_once_per_interval(pg_url, tmp_path):
    interval = 3.0
    factory = migrated_factory(pg_url)
    root = tree_root(tmp_path, "m")
    make_tree(root, {"a.bin": 100_000})
    procs: list[subprocess.Popen] = []
    logs = [tmp_path / "c1.log", tmp_path / "c2.log"]
    with ftp_server(root) as ftp:
        add_mirror(factory, "m", ftp.url, {"a": ("a.bin", 100_000)})
        try:
            for log in logs:
                procs.append(
                    subprocess.Popen(
                        [sys.executable, str(HERE / "scheduler_proc.py"), pg_url, str(interval)],
                        stdout=subprocess.DEVNULL,
                        stderr=log.open("w"),
                        cwd=HERE,
                    )
                )
            jobs = {"predictor-refit", "retention", "probe:1", "scan:1"}
            wait_until(
                lambda: (
                    jobs <= set(_runs(logs))
                    and all(len(v) >= 3 for k, v in _runs(logs).items() if k != "scan:1")
                ),
                timeout=90,
                what="three runs of every job",
            )
            runs = _runs(logs)
            for job, seq in runs.items():
                step = interval * (2 if job.startswith("scan") else 1)
                gaps = [b[0] - a[0] for a, b in itertools.pairwise(seq)]
                # Twice per interval (both processes) would leave gaps near 0.
                assert min(gaps, default=step) > step * 0.5, (job, seq)
                assert len({r for _, r in seq}) == 1, f"{job} ran on both: {seq}"

            # Kill the leader of predictor-refit outright: the other takes over.
            leader = runs["predictor-refit"][-1][1]
            pid = int(leader.rsplit(":", 1)[1])
            victim = next(p for p in procs if p.pid == pid)
            victim.send_signal(signal.SIGKILL)
            victim.wait(30)
            killed_at = time.time()
            survivor = next(
                r for p in procs if p.pid != pid for r in [f"{os.uname().nodename}:{p.pid}"]
            )
            wait_until(
                lambda: any(
                    t > killed_at and r == survivor
                    for t, r in _runs(logs).get("predictor-refit", [])
                ),
                timeout=60,
                what="takeover by the surviving coordinator",
            )
        finally:
            for p in procs:
                if p.poll() is None:
                    p.terminate()
                    try:
                        p.wait(20)
                    except subprocess.TimeoutExpired:
                        p.kill()
                        p.wait(10)
    with session_scope(factory) as s:
        jr = s.scalar(select(JobRun).where(JobRun.job == "predictor-refit"))
        assert jr.runner == survivor and jr.ok
        assert s.scalar(select(func.count()).select_from(PathProbe)) > 0
