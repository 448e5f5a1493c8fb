"""Ranking snapshot built from a real database (SQLite and PostgreSQL)."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from pftp_coordinator.config import Settings
from pftp_coordinator.db import create_db_engine, make_session_factory
from pftp_coordinator.models import (
    Base,
    CongestionPenalty,
    Download,
    File,
    Mirror,
    MirrorReport,
    MirrorUrl,
    PathProbe,
    PredictorFit,
    Replica,
    UtilizationSample,
)
from pftp_coordinator.planner import plan_assignments
from pftp_coordinator.ranking_inputs import SnapshotCache, build_snapshot
from pftp_coordinator.services.reports import access_limited, record_report
from pftp_wire.models import AssignmentRequest, DownloadReport
from pftp_wire.models import MirrorReport as WireMirrorReport
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

NOW = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
T = NOW.timestamp()
HL = 1800.0
SHA = "ef" * 32


@pytest.fixture
def factory(db_url: str) -> Iterator[sessionmaker[Session]]:
    engine = create_db_engine(db_url)
    Base.metadata.create_all(engine)
    try:
        yield make_session_factory(engine)
    finally:
        engine.dispose()


def ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


def populate(s: Session) -> dict[str, int]:
    ms = {}
    for i, name in enumerate(["alpha", "beta", "gamma", "delta"], start=1):
        m = Mirror(name=name, state="up" if i != 4 else "down")
        m.urls = [MirrorUrl(protocol="ftp", base_url=f"ftp://10.1.0.{i}/pub/")]
        s.add(m)
        ms[name] = m
    f1 = File(name="a.iso", size=1000, sha256=SHA)
    f2 = File(
        name="b.iso", size=5000, sha256=SHA, piece_size=4096, piece_sha256=["aa" * 32, "bb" * 32]
    )
    f3 = File(name="c.iso", size=10, sha256=SHA, piece_sha256=None)
    s.add_all([f1, f2, f3])
    s.flush()
    s.add_all(
        [
            Replica(mirror_id=ms["alpha"].id, file_id=f1.id, path="x/a.iso", size_seen=1000),
            Replica(
                mirror_id=ms["beta"].id, file_id=f1.id, path="x/a.iso", size_seen=None
            ),  # admin-registered
            Replica(
                mirror_id=ms["gamma"].id, file_id=f1.id, path="x/a.iso", size_seen=999
            ),  # wrong size
            Replica(
                mirror_id=ms["delta"].id,
                file_id=f1.id,
                path="x/a.iso",
                size_seen=1000,
                present=False,
            ),
            Replica(mirror_id=ms["alpha"].id, file_id=f2.id, path="y/b.iso", size_seen=5000),
            # different paths per mirror for one file
            Replica(mirror_id=ms["gamma"].id, file_id=f3.id, path="p3/c.iso", size_seen=10),
            Replica(mirror_id=ms["alpha"].id, file_id=f3.id, path="p1/c.iso", size_seen=10),
            Replica(mirror_id=ms["beta"].id, file_id=f3.id, path="p1/c.iso", size_seen=10),
        ]
    )
    a, b = ms["alpha"].id, ms["beta"].id
    s.add_all(
        [
            # alpha: two good probes, a failed one, a stale one (ignored)
            PathProbe(
                mirror_id=a,
                ts=ago(0),
                method="tcp-connect",
                rtt_s=0.010,
                loss=0.0,
                throughput_bps=8e6,
            ),
            PathProbe(
                mirror_id=a,
                ts=ago(HL),
                method="tcp-connect",
                rtt_s=0.040,
                loss=0.1,
                throughput_bps=2e6,
            ),
            PathProbe(mirror_id=a, ts=ago(10), method="tcp-connect", ok=False, error="timeout"),
            PathProbe(mirror_id=a, ts=ago(7 * 3600), method="tcp-connect", rtt_s=9.0),
            # beta: one aggregated row standing for 3 samples, capacity only
            PathProbe(
                mirror_id=b,
                ts=ago(60),
                method="packet-pair",
                capacity_bps=50e6,
                rtt_s=0.02,
                samples=3,
            ),
            UtilizationSample(mirror_id=a, ts=ago(120), cpu_percent=90.0, memory_percent=50.0),
            UtilizationSample(mirror_id=a, ts=ago(30), cpu_percent=20.0, memory_percent=40.0),
            PredictorFit(fitted_at=ago(3600), a=1.0, b=1.0, r2=0.5, n_samples=10),
            PredictorFit(fitted_at=ago(60), a=247.44, b=344.0, r2=0.9, n_samples=50),
            CongestionPenalty(
                mirror_a_id=a,
                mirror_b_id=b,
                detected_at=ago(60),
                expires_at=NOW + timedelta(hours=1),
            ),
            CongestionPenalty(
                mirror_a_id=a,
                mirror_b_id=ms["gamma"].id,
                detected_at=ago(7200),
                expires_at=ago(3600),
            ),
        ]
    )
    d = Download(file_name="a.iso", size=1000, seconds=1.0, sha256_ok=True, reported_at=ago(0))
    d.mirror_reports = [
        MirrorReport(
            mirror_id=b,
            mirror_name="beta",
            bytes=500,
            seconds=1,
            throughput_bps=30e6,
            reported_at=ago(0),
        ),
        MirrorReport(
            mirror_id=b,
            mirror_name="beta",
            bytes=500,
            seconds=1,
            throughput_bps=10e6,
            reported_at=ago(HL),
        ),
        MirrorReport(
            mirror_id=b,
            mirror_name="beta",
            bytes=500,
            seconds=1,
            throughput_bps=1.0,
            bad_data=True,
            reported_at=ago(0),
        ),
    ]
    s.add(d)
    s.commit()
    return {n: m.id for n, m in ms.items()}


def test_snapshot_from_database(factory):
    with factory() as s:
        ids = populate(s)
    with factory() as s:
        snap = build_snapshot(s, now=T, half_life_s=HL, stale_after_s=6 * 3600)
    a, b, g = ids["alpha"], ids["beta"], ids["gamma"]

    # Replica map: present + right size, or never scanned; sorted by mirror id.
    assert sorted(m for m, _ in snap.replicas_of("a.iso")) == sorted([a, b])
    assert snap.replicas_of("b.iso") == [(a, "y/b.iso")]
    assert snap.replicas_of("c.iso") == [(a, "p1/c.iso"), (b, "p1/c.iso"), (g, "p3/c.iso")]
    assert snap.replicas_of("nope") == []
    assert snap.files_by_name["a.iso"].size == 1000

    # Demand: alpha holds a.iso (2 holders), b.iso (1) and c.iso (3) -> 1/2 + 1 + 1/3
    assert snap.mirrors[a].metrics.demand == pytest.approx(1.5 + 1 / 3)
    assert snap.mirrors[b].metrics.demand == pytest.approx(0.5 + 1 / 3)
    assert snap.mirrors[g].metrics.demand == pytest.approx(1 / 3)
    assert snap.mirrors[ids["delta"]].metrics.demand is None

    # Decayed means: weights 1 (fresh) and 1/2 (one half-life old).
    ma = snap.mirrors[a].metrics
    assert ma.rtt_s == pytest.approx((0.010 + 0.5 * 0.040) / 1.5)
    assert ma.loss == pytest.approx(0.05 / 1.5)
    assert ma.probe_throughput_bps == pytest.approx((8e6 + 1e6) / 1.5)
    assert ma.capacity_bps is None
    assert ma.probe_ts == pytest.approx(T)
    # latest utilization sample
    assert (ma.cpu_percent, ma.memory_percent) == (20.0, 40.0)
    assert ma.utilization_ts == pytest.approx(T - 30)

    mb = snap.mirrors[b].metrics
    assert mb.capacity_bps == pytest.approx(50e6) and mb.rtt_s == pytest.approx(0.02)
    # client history: bad-data report excluded; (30 + 0.5 * 10) / 1.5
    assert mb.throughput_bps == pytest.approx(35e6 / 1.5)
    assert mb.cpu_percent is None  # no agent

    assert snap.mirrors[ids["delta"]].state == "down"
    assert snap.mirrors[a].urls == {"ftp": "ftp://10.1.0.1/pub/"}
    assert snap.predictor is not None and snap.predictor.a == pytest.approx(247.44)
    assert snap.congested_pairs == frozenset({frozenset((a, b))})


def test_snapshot_cache_feeds_the_planner_and_sees_changes(factory):
    with factory() as s:
        ids = populate(s)
    now = [T]
    settings = Settings(snapshot_refresh_s=5.0, min_portion_bytes=1)
    cache = SnapshotCache(factory, settings, clock=lambda: now[0])
    snap = cache.get()
    assert cache.get() is snap  # fresh: no reload
    req = AssignmentRequest(file="b.iso", protocols=["ftp"])
    resp = plan_assignments(
        snap, req, settings=settings, request_rate_rps=0, rng=random.Random(1), now=T
    )
    assert [a.mirror for a in resp.assignments] == ["alpha"]
    assert resp.file.piece_sha256 == ["aa" * 32, "bb" * 32]
    assert resp.assignments[0].url == "ftp://10.1.0.1/pub/y/b.iso"

    # A new replica is picked up by the next refresh (the newest id changed).
    with factory() as s:
        s.add(
            Replica(
                mirror_id=ids["beta"],
                file_id=s.query(File.id).filter_by(name="b.iso").scalar(),
                path="b.iso",
            )
        )
        s.commit()
    snap2 = cache.refresh()
    assert sorted(m for m, _ in snap2.replicas_of("b.iso")) == sorted([ids["alpha"], ids["beta"]])

    # An in-place change (disable a replica) after invalidate_replicas().
    with factory() as s:
        s.query(Replica).filter_by(mirror_id=ids["beta"], path="b.iso").update({"present": False})
        s.commit()
    cache.invalidate_replicas()
    assert [m for m, _ in cache.refresh().replicas_of("b.iso")] == [ids["alpha"]]


def test_stale_snapshot_is_served_while_refreshing_in_background(factory):
    with factory() as s:
        populate(s)
    now = [T]
    settings = Settings(snapshot_refresh_s=2.0)
    cache = SnapshotCache(factory, settings, clock=lambda: now[0])
    first = cache.get()
    now[0] += 10  # older than snapshot_refresh_s
    # Even while another (slow) refresh holds the refresh lock, get() answers at once.
    with cache._lock:
        assert cache.get() is first
    assert cache.get() is first or cache.get().taken_at == T + 10
    deadline = time.monotonic() + 60
    while cache.get() is first and time.monotonic() < deadline:
        time.sleep(0.05)
    second = cache.get()
    assert second is not first and second.taken_at == T + 10
    assert cache.last_error is None
    assert threading.active_count() < 50


def test_periodic_refresh_thread_starts_and_stops(factory):
    with factory() as s:
        populate(s)
    cache = SnapshotCache(factory, Settings(snapshot_refresh_s=0.05))
    first = cache.get()
    cache.start()
    try:
        deadline = time.monotonic() + 60
        while cache.get() is first and time.monotonic() < deadline:
            time.sleep(0.05)
        assert cache.get() is not first
    finally:
        cache.close()


def _next_snapshot(cache: SnapshotCache, previous, now: list[float], step: float):
    """Advance the clock past snapshot_refresh_s and wait for the background refresh."""
    now[0] += step
    deadline = time.monotonic() + 60
    while (snap := cache.get()) is previous and time.monotonic() < deadline:
        time.sleep(0.05)
    assert snap is not previous and cache.last_error is None
    return snap


def test_plan_cache_carried_over_only_while_ranking_inputs_are_unchanged(factory):
    with factory() as s:
        ids = populate(s)
    now = [T]
    settings = Settings(snapshot_refresh_s=2.0, min_portion_bytes=1, plan_cache_size=16)
    cache = SnapshotCache(factory, settings, clock=lambda: now[0])
    req = AssignmentRequest(file="a.iso", protocols=["ftp"])

    def ask(snap):
        plan_assignments(snap, req, settings=settings, request_rate_rps=0, rng=random.Random(1))
        return snap.memo["plan_cache"][2]

    first = cache.get()
    entries = ask(first)
    assert len(entries) == 1
    # Nothing changed (measurements are reused for METRICS_REFRESH_S): same rankings.
    second = _next_snapshot(cache, first, now, 3.0)
    assert second.memo["plan_cache"][2] is entries
    # A mirror changed state: rankings are made afresh.
    with factory() as s:
        s.get(Mirror, ids["beta"]).state = "down"
        s.commit()
    third = _next_snapshot(cache, second, now, 3.0)
    assert "plan_cache" not in third.memo
    assert ask(third) is not entries


def test_request_does_not_refresh_when_the_periodic_thread_keeps_up(factory):
    with factory() as s:
        populate(s)
    now = [T]
    cache = SnapshotCache(factory, Settings(snapshot_refresh_s=2.0), clock=lambda: now[0])
    first = cache.get()
    cache._thread = threading.current_thread()  # stands in for a running refresh thread
    try:
        now[0] += 3  # due, but the thread has not fallen behind (2 x refresh_s)
        assert cache.get() is first and not cache._refreshing
        now[0] += 2  # fallen behind: the request triggers one
        second = _next_snapshot(cache, first, now, 0.0)
        assert second.taken_at == T + 5
    finally:
        cache._thread = None


def test_connections_of_the_newest_throughput_probe_reach_the_answer(factory):
    with factory() as s:
        ids = populate(s)
        a, b, g = ids["alpha"], ids["beta"], ids["gamma"]

        def tp(mid: int, age_s: float, conns: int | None, ok: bool = True) -> PathProbe:
            return PathProbe(mirror_id=mid, ts=ago(age_s), method="ftp-range", ok=ok,
                             throughput_bps=20e6 if ok else None, connections=conns)

        s.add_all(
            [
                # alpha: 3 at the newest probe that knew; a newer one whose parallel
                # read failed (None) and a failed one do not hide it; a stale 6 does.
                tp(a, 7 * 3600, 6),
                tp(a, 600, 3),
                tp(a, 300, None),
                tp(a, 60, None, ok=False),
                # beta: held once, then one connection was what the path gave
                tp(b, 900, 4),
                tp(b, 100, 1),
                # gamma: only a stale row
                tp(g, 7 * 3600, 2),
            ]
        )
        s.commit()
    with factory() as s:
        snap = build_snapshot(s, now=T, half_life_s=HL, stale_after_s=6 * 3600)
    assert snap.mirrors[a].metrics.probe_connections == 3
    assert snap.mirrors[b].metrics.probe_connections == 1
    assert snap.mirrors[g].metrics.probe_connections is None

    settings = Settings(min_portion_bytes=1, max_mirrors=3, backup_count=3)
    req = AssignmentRequest(file="c.iso", protocols=["ftp"])
    resp = plan_assignments(
        snap, req, settings=settings, request_rate_rps=0, rng=random.Random(1), now=T
    )
    got = {e.mirror: e.connections for e in [*resp.assignments, *resp.backups]}
    assert got == {"alpha": 3, "beta": 1, "gamma": 1}


def test_connections_a_clients_trials_kept_reach_the_answer(factory):
    """A probe's short read cannot see a limit counted in whole seconds (nginx
    limit_rate lets a connection's first second through at the path's rate); a
    client whose own trials kept 4 connections to the mirror says so in its
    report, and the next client is told 4 at once."""
    with factory() as s:
        ids = populate(s)
        a, b, g = ids["alpha"], ids["beta"], ids["gamma"]
        s.add_all([
            PathProbe(mirror_id=a, ts=ago(300), method="http-range", ok=True,
                      throughput_bps=38e6, connections=1),
            PathProbe(mirror_id=b, ts=ago(300), method="http-range", ok=True,
                      throughput_bps=20e6, connections=3),
        ])
        d = Download(file_name="c.iso", size=1000, seconds=1.0, sha256_ok=True,
                     reported_at=ago(0))

        def rep(mid: int, age_s: float, conns: int | None, bad: bool = False) -> MirrorReport:
            return MirrorReport(mirror_id=mid, mirror_name="x", bytes=500, seconds=1,
                                throughput_bps=30e6, bad_data=bad, connections=conns,
                                reported_at=ago(age_s))

        d.mirror_reports = [
            # alpha: the probe said 1, a client's trials kept 4
            rep(a, 600, 4),
            rep(a, 60, None),  # (a newer client that tried none does not hide it)
            rep(a, 30, 8, bad=True),  # (nor a client that got bad bytes from it)
            # beta: the probe's 3 stands above a client that kept 1
            rep(b, 60, 1),
            # gamma: only a stale report
            rep(g, 7 * 3600, 5),
        ]
        s.add(d)
        s.commit()
    with factory() as s:
        snap = build_snapshot(s, now=T, half_life_s=HL, stale_after_s=6 * 3600)
    assert snap.mirrors[a].metrics.report_connections == 4
    assert snap.mirrors[b].metrics.report_connections == 1
    assert snap.mirrors[g].metrics.report_connections is None

    settings = Settings(min_portion_bytes=1, max_mirrors=3, backup_count=3)
    req = AssignmentRequest(file="c.iso", protocols=["ftp"])
    resp = plan_assignments(
        snap, req, settings=settings, request_rate_rps=0, rng=random.Random(1), now=T
    )
    got = {e.mirror: e.connections for e in [*resp.assignments, *resp.backups]}
    assert got == {"alpha": 4, "beta": 3, "gamma": 1}


def _report(access_bps: int | None, rates: dict[str, float]) -> DownloadReport:
    return DownloadReport(
        file="a.iso", size=1000, seconds=1.0, sha256_ok=True, access_bandwidth_bps=access_bps,
        mirrors=[WireMirrorReport(mirror=name, bytes=500, seconds=1.0, throughput_bps=bps)
                 for name, bps in rates.items()],
    )


def test_access_limited_is_the_flows_filling_the_clients_link():
    assert access_limited(_report(4_000_000, {"alpha": 3.8e6}))
    assert access_limited(_report(10_000_000, {"alpha": 4.5e6, "beta": 4.5e6}))
    assert not access_limited(_report(100_000_000, {"alpha": 40e6, "beta": 20e6}))
    assert not access_limited(_report(None, {"alpha": 3.8e6}))  # link unknown
    bad = _report(4_000_000, {"alpha": 1e6, "beta": 3e6})
    bad.mirrors[1].bad_data = True  # (bytes that failed verification carried nothing)
    assert not access_limited(bad)


def test_a_slow_clients_full_link_does_not_make_mirrors_look_slow(factory):
    """A client behind a 4 Mbit/s link gets 3.8 from alpha, which the prober reads
    at 40: its report is a floor, and the next client is still told ~40. A client
    whose link was not full sets alpha's history; a newer floor above it raises it."""
    with factory() as s:
        ids = populate(s)
        a = ids["alpha"]
        s.add(PathProbe(mirror_id=a, ts=ago(600), method="ftp-range", ok=True,
                        throughput_bps=40e6))
        s.commit()
    with factory() as s:
        record_report(s, report=_report(4_000_000, {"alpha": 3.8e6}), penalty_ttl_s=60,
                      now=ago(60))
        s.commit()
    with factory() as s:
        snap = build_snapshot(s, now=T, half_life_s=HL, stale_after_s=6 * 3600)
    ma = snap.mirrors[a].metrics
    assert ma.throughput_floor_bps == pytest.approx(3.8e6 * 0.5 ** (60 / HL))
    assert ma.throughput_floor_ts == pytest.approx(T - 60)
    settings = Settings(min_portion_bytes=1, max_mirrors=3, backup_count=3)
    req = AssignmentRequest(file="a.iso", protocols=["ftp"], access_bandwidth_bps=1_000_000_000)
    rng = random.Random(1)

    def expected() -> dict[str, float | None]:
        snap = build_snapshot(s, now=T, half_life_s=HL, stale_after_s=6 * 3600)
        resp = plan_assignments(snap, req, settings=settings, request_rate_rps=0, rng=rng, now=T)
        return {e.mirror: e.expected_bps for e in [*resp.assignments, *resp.backups]}

    with factory() as s:
        # The probes' mean (8 fresh, 2 a half-life old, 40 ten minutes old), not
        # the slow client's 3.8.
        got = expected()["alpha"]
        assert got == pytest.approx(snap.mirrors[a].metrics.probe_throughput_bps)
        assert got is not None and got > 3.8e6
        # beta's history (30 and 10 Mbit/s, from clients with no link figure) is
        # untouched by alpha's floor.
        assert expected()["beta"] == pytest.approx(35e6 / 1.5)
    with factory() as s:
        # A client on a fast link sets alpha's history at 12; then a 25 Mbit/s
        # client's full link carries 20 from it: a newer floor above the history.
        record_report(s, report=_report(1_000_000_000, {"alpha": 12e6}), penalty_ttl_s=60,
                      now=ago(40))
        s.commit()
        assert expected()["alpha"] == pytest.approx(12e6)
        record_report(s, report=_report(25_000_000, {"alpha": 20e6, "beta": 3e6}),
                      penalty_ttl_s=60, now=ago(20))
        s.commit()
        assert expected()["alpha"] == pytest.approx(20e6 * 0.5 ** (20 / HL))
        # beta's floor of 3 is below its history: the history stands.
        assert expected()["beta"] == pytest.approx(35e6 / 1.5)
        rows = s.scalars(select(MirrorReport.access_limited).order_by(MirrorReport.id)).all()
        assert rows[-4:] == [True, False, True, True]
