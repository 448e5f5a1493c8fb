"""The scheduler, probes and agents API feed the ops metrics: each path is run for
real (job wrapper on SQLite, probes of a pyftpdlib server and a closed port, agent
posts through the app) and the counters are read back from the /metrics text.

The metrics live in the process-wide registry, so every check is a difference
between two scrapes, and mirror names are unique per test."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from coordinator_testkit import running_app
from fastapi.testclient import TestClient
from pftp_coordinator.agent_tokens import issue_token
from pftp_coordinator.config import Settings
from pftp_coordinator.db import session_scope
from pftp_coordinator.models import MirrorUrl
from pftp_coordinator.probes.service import probe_mirror
from pftp_coordinator.scheduler.jobs import run_job
from pftp_coordinator.scheduler.locks import LocalJobLocks
from probe_db import add_mirror, migrated_factory, tree_root
from probe_servers import ftp_server, make_tree
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import select

Sample = tuple[str, tuple[tuple[str, str], ...]]


def scrape(client: TestClient) -> dict[Sample, float]:
    """GET /metrics, parsed: (sample name, sorted labels) -> value."""
    r = client.get("/metrics")
    assert r.status_code == 200
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(r.text)
        for s in family.samples
    }


def value(samples: dict[Sample, float], name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def moved(before: dict[Sample, float], after: dict[Sample, float], name: str, **labels: str):
    return value(after, name, **labels) - value(before, name, **labels)


def _batch(n: int) -> dict:
    now = datetime.now(UTC)
    return {
        "samples": [
            {
                "ts": (now - timedelta(seconds=15 * i)).isoformat(),
                "cpu_percent": 10.0,
                "memory_percent": 30.0,
            }
            for i in range(n)
        ]
    }


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A loopback port that refuses connections (bound, never listening), held for the test."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    try:
        yield s.getsockname()[1]
    finally:
        s.close()


def test_job_wrapper_counts_runs_failures_and_duration(sqlite_url: str, tmp_path: Path) -> None:
    factory = migrated_factory(sqlite_url)
    locks = LocalJobLocks()

    def boom() -> None:
        raise RuntimeError("job exploded")

    with running_app(sqlite_url, tmp_path) as client:
        before = scrape(client)
        assert run_job("wiring-ok", lambda: None, locks=locks, factory=factory, interval_s=60)
        assert run_job("wiring-bad", boom, locks=locks, factory=factory, interval_s=60)
        assert run_job("wiring-bad", boom, locks=locks, factory=factory, interval_s=60)
        after = scrape(client)

    runs = "pftp_job_runs_total"
    assert moved(before, after, runs, job="wiring-ok", outcome="ok") == 1
    assert moved(before, after, runs, job="wiring-ok", outcome="failed") == 0
    assert moved(before, after, runs, job="wiring-bad", outcome="failed") == 2
    assert moved(before, after, runs, job="wiring-bad", outcome="ok") == 0
    assert moved(before, after, "pftp_job_duration_seconds_count", job="wiring-ok") == 1
    assert moved(before, after, "pftp_job_duration_seconds_count", job="wiring-bad") == 2


def test_job_lock_held_elsewhere_counts_nothing(sqlite_url: str, tmp_path: Path) -> None:
    factory = migrated_factory(sqlite_url)
    locks = LocalJobLocks()
    with running_app(sqlite_url, tmp_path) as client:
        before = scrape(client)
        assert locks.acquire("wiring-held")
        try:
            ran = run_job("wiring-held", lambda: None, locks=locks, factory=factory, interval_s=60)
        finally:
            locks.release("wiring-held")
        after = scrape(client)
    assert not ran
    for outcome in ("ok", "failed"):
        assert moved(before, after, "pftp_job_runs_total", job="wiring-held", outcome=outcome) == 0


def test_probes_count_results_and_flip_mirror_gauge(
    sqlite_url: str, tmp_path: Path, closed_port: int
) -> None:
    factory = migrated_factory(sqlite_url)
    root = tree_root(tmp_path, "mirror")
    make_tree(root, {"pub/big.bin": 300_000})
    name = f"wire-{uuid.uuid4().hex[:8]}"
    settings = Settings(
        database_url=None,
        probe_timeout_s=10.0,
        throughput_probe_bytes=128 * 1024,
        down_after_failures=2,
        probe_interval_s=60.0,
    )
    with running_app(sqlite_url, tmp_path) as client:
        before = scrape(client)
        assert value(before, "pftp_mirror_up", mirror=name) == 0  # absent: unknown

        with ftp_server(root) as srv:
            mid = add_mirror(factory, name, srv.url, {"big.bin": ("pub/big.bin", 300_000)})
            up = probe_mirror(factory, mid, settings, allow_raw=False, retry_pause_s=0.1)
        assert up is not None and up.ok and up.state == "up"
        mid_scrape = scrape(client)
        # Present and 1 only now: the gauge series is created by the first known state.
        assert ("pftp_mirror_up", (("mirror", name),)) in mid_scrape
        assert value(mid_scrape, "pftp_mirror_up", mirror=name) == 1

        # The same mirror now points at a port that refuses: up -> down in one round.
        with session_scope(factory) as s:
            url = s.scalar(select(MirrorUrl).where(MirrorUrl.mirror_id == mid))
            url.base_url = f"ftp://127.0.0.1:{closed_port}/"
        down = probe_mirror(factory, mid, settings, allow_raw=False, retry_pause_s=0.1)
        assert down is not None and not down.ok and down.state == "down"
        assert down.attempts == 2
        after = scrape(client)

    results = "pftp_probe_results_total"
    # Success round: 1 TCP connect RTT + 1 ranged read, both ok.
    assert moved(before, mid_scrape, results, method="tcp-connect", outcome="ok") >= 1
    assert moved(before, mid_scrape, results, method="ftp-range", outcome="ok") == 1
    assert moved(before, mid_scrape, "pftp_probe_rtt_seconds_count", method="tcp-connect") >= 1
    # Failure round: the RTT (refused) and both ranged-read attempts fail.
    assert moved(mid_scrape, after, results, method="tcp-connect", outcome="failed") >= 1
    assert moved(mid_scrape, after, results, method="ftp-range", outcome="failed") == 2
    assert moved(mid_scrape, after, results, method="ftp-range", outcome="ok") == 0
    assert value(after, "pftp_mirror_up", mirror=name) == 0
    assert ("pftp_mirror_up", (("mirror", name),)) in after


def test_agent_samples_and_token_refusals(sqlite_url: str, tmp_path: Path) -> None:
    factory = migrated_factory(sqlite_url)
    name = f"agent-{uuid.uuid4().hex[:8]}"
    add_mirror(factory, name, "ftp://10.9.0.1/")
    with session_scope(factory) as s:
        token = issue_token(s, name)
    url = "/api/v1/agents/samples"
    with running_app(sqlite_url, tmp_path) as client:
        before = scrape(client)
        assert value(before, "pftp_agents_reporting") == 0
        good = {"Authorization": f"Bearer {token}"}
        assert client.post(url, json=_batch(3), headers=good).json()["accepted"] == 3
        assert client.post(url, json=_batch(2), headers=good).json()["accepted"] == 2
        assert client.post(url, json=_batch(1)).status_code == 401
        wrong = {"Authorization": "Bearer pftpa_not-a-real-token"}
        assert client.post(url, json=_batch(1), headers=wrong).status_code == 401
        assert client.post(url, json=_batch(1), headers=wrong).status_code == 401
        after = scrape(client)

    assert moved(before, after, "pftp_agent_reports_total", mirror=name) == 2
    assert moved(before, after, "pftp_agent_samples_total", mirror=name) == 5
    assert moved(before, after, "pftp_agent_refusals_total", reason="missing") == 1
    assert moved(before, after, "pftp_agent_refusals_total", reason="wrong") == 2
    assert value(after, "pftp_agents_reporting") == 1  # recounted from the database
