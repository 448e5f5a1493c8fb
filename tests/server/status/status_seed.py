"""A small, realistic coordinator database for status-page tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from pftp_coordinator import migrate
from pftp_coordinator.db import create_db_engine, make_session_factory, session_scope
from pftp_coordinator.models import (
    Agent,
    Download,
    File,
    JobRun,
    Mirror,
    MirrorReport,
    MirrorUrl,
    PathProbe,
    PredictorFit,
    Replica,
    UtilizationSample,
)

MIRRORS = ("mirror-alpha", "mirror-bravo", "mirror-charlie", "mirror-down")
NOW = datetime.now(UTC)


def seed_database(url: str, *, now: datetime | None = None) -> None:
    """Migrate ``url`` and fill it: 4 mirrors (one down, one without agent), 2 h of
    probes, utilization, replicas, 6 downloads with per-mirror reports, job runs, a fit."""
    now = now or datetime.now(UTC)
    migrate.upgrade(url)
    engine = create_db_engine(url)
    try:
        with session_scope(make_session_factory(engine)) as s:
            files = [
                File(name=f"pub/iso/disk{i}.iso", size=(i + 1) * 50 << 20, sha256="a" * 64)
                for i in range(3)
            ]
            s.add_all(files)
            mirrors = []
            for i, name in enumerate(MIRRORS):
                m = Mirror(
                    name=name,
                    region=f"campus-{i % 2}",
                    state="down" if name == "mirror-down" else "up",
                    consecutive_failures=4 if name == "mirror-down" else 0,
                    last_probe_at=now - timedelta(minutes=2),
                )
                m.urls = [
                    MirrorUrl(protocol="ftp", base_url=f"ftp://anon:secret@10.9.{i}.2/pub/"),
                    MirrorUrl(protocol="http", base_url=f"http://10.9.{i}.2/pub/"),
                ]
                mirrors.append(m)
            s.add_all(mirrors)
            s.flush()
            for m in mirrors:
                for f in files:
                    s.add(Replica(mirror_id=m.id, file_id=f.id, path=f.name, size_seen=f.size))
            # Probe history: every 5 minutes for 2 hours; mirrors differ in RTT/throughput.
            for k, m in enumerate(mirrors):
                for step in range(24):
                    ts = now - timedelta(minutes=5 * (24 - step))
                    down = m.name == "mirror-down" and step > 18
                    s.add(
                        PathProbe(
                            mirror_id=m.id,
                            ts=ts,
                            method="ftp-range",
                            ok=not down,
                            rtt_s=None if down else 0.004 * (k + 1) + 0.0005 * (step % 5),
                            loss=None if down else 0.001 * k,
                            capacity_bps=None if down else (40 - 8 * k) * 1e6,
                            throughput_bps=None if down else (30 - 6 * k + step % 4) * 1e6,
                            # bravo holds each connection: its probes read over 3
                            connections=3 if m.name == "mirror-bravo" else 1,
                            error="connection refused" if down else None,
                        )
                    )
            for k, m in enumerate(mirrors[:2]):  # alpha and bravo run an agent
                s.add(
                    UtilizationSample(
                        mirror_id=m.id,
                        ts=now - timedelta(seconds=30),
                        cpu_percent=20.0 + 30 * k,
                        memory_percent=40.0 + 5 * k,
                        load1=0.5 + k,
                        nic_tx_bps=(80 + 40 * k) * 1e6,
                        connections=12 + k,
                    )
                )
                s.add(Agent(mirror_id=m.id, token_hash=f"hash-{k}", last_seen_at=now))
            for d in range(6):
                f = files[d % 3]
                dl = Download(
                    file_id=f.id,
                    file_name=f.name,
                    size=f.size,
                    seconds=f.size * 8 / ((50 + 5 * d) * 1e6),
                    sha256_ok=True,
                    mode="ranked",
                    reported_at=now - timedelta(minutes=60 - 10 * d),
                )
                dl.mirror_reports = [
                    MirrorReport(
                        mirror_id=m.id,
                        mirror_name=m.name,
                        bytes=f.size // 3,
                        seconds=dl.seconds,
                        throughput_bps=(24 - 6 * k + d) * 1e6,
                        # charlie's clients kept 4 connections to it (a limit the
                        # probe's short read does not see); the newest says so
                        connections=4 if m.name == "mirror-charlie" and d == 5 else None,
                        reported_at=dl.reported_at,
                    )
                    for k, m in enumerate(mirrors[:3])
                ]
                s.add(dl)
            s.add(
                JobRun(
                    job="probe", runner="host:1", started_at=now - timedelta(minutes=2),
                    finished_at=now - timedelta(minutes=1), ok=True, runs=24,
                )
            )
            s.add(
                JobRun(
                    job="scan", runner="host:1", started_at=now - timedelta(minutes=30),
                    finished_at=now - timedelta(minutes=29), ok=False, error="timeout", runs=2,
                )
            )
            s.add(PredictorFit(a=2.5, b=1.2, r2=0.87, n_samples=18, fitted_at=now))
    finally:
        engine.dispose()
