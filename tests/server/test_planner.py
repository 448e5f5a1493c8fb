"""Planner: from an in-memory snapshot to an AssignmentResponse."""

from __future__ import annotations

import random
from array import array

import pytest
from pftp_coordinator.config import Settings
from pftp_coordinator.planner import (
    NoUsableMirror,
    UnknownFile,
    plan_assignments,
    plan_assignments_json,
    replica_url,
)
from pftp_coordinator.portions import setup_round_trips, start_delay_s
from pftp_coordinator.ranking import MirrorMetrics
from pftp_coordinator.ranking_inputs import FileRecord, MirrorInfo, RankingSnapshot, ReplicaSet
from pftp_wire.models import AssignmentRequest, AssignmentResponse

NOW = 1_700_000_000.0
SHA = "ab" * 32
MIB = 1 << 20


def mirror(mid, *, mbps=10.0, enabled=True, state="up", urls=None, connections=None, rtt_s=0.02):
    return MirrorInfo(
        id=mid,
        name=f"m{mid}",
        enabled=enabled,
        state=state,
        urls=urls
        if urls is not None
        else {"ftp": f"ftp://10.0.0.{mid}/pub/", "http": f"http://10.0.0.{mid}"},
        metrics=MirrorMetrics(
            key=mid,
            probe_throughput_bps=mbps * 1e6,
            rtt_s=rtt_s,
            loss=0.0,
            probe_ts=NOW,
            probe_connections=connections,
        ),
    )


def snapshot(mirrors, *, size=100 * MIB + 1, holders=None, piece_size=None, pieces=None):
    holders = holders if holders is not None else [m.id for m in mirrors]
    f = FileRecord(1, "iso/big.iso", size, SHA, piece_size, pieces is not None)
    return RankingSnapshot(
        taken_at=NOW,
        mirrors={m.id: m for m in mirrors},
        files_by_name={f.name: f},
        replicas={1: ReplicaSet(array("i", holders), tuple(f"dist/{f.name}" for _ in holders))}
        if holders
        else {},
        piece_loader=(lambda fid: pieces) if pieces is not None else None,
    )


def plan(
    snap, *, bw=None, protocols=("ftp", "http"), rate=0.0, settings=None, file="iso/big.iso", seed=1
):
    req = AssignmentRequest(file=file, access_bandwidth_bps=bw, protocols=list(protocols))
    return plan_assignments(
        snap,
        req,
        settings=settings or Settings(),
        request_rate_rps=rate,
        rng=random.Random(seed),
        now=NOW,
    )


def test_assignments_cover_the_file_and_follow_rank():
    snap = snapshot([mirror(1, mbps=10), mirror(2, mbps=40), mirror(3, mbps=20), mirror(4, mbps=5)])
    resp = plan(snap, bw=int(60e6))
    assert resp.mode == "ranked"
    assert [a.mirror for a in resp.assignments] == ["m2", "m3"]  # 40 + 20 >= 60
    assert resp.assignments[0].offset == 0
    assert sum(a.length for a in resp.assignments) == resp.file.size
    assert resp.assignments[1].offset == resp.assignments[0].length
    # portions follow the expected rates 40:20, less what each cannot carry while it
    # starts (both 20 ms away: 5 round trips, and the faster one's longer slow start)
    first, second = (a.length for a in resp.assignments)
    lost = [r / 8 * start_delay_s(r, 0.02) for r in (40e6, 20e6)]
    assert 2 * second - first == pytest.approx(lost[0] - 2 * lost[1], abs=4)
    assert first == pytest.approx(2 * second, rel=0.01)
    assert [b.mirror for b in resp.backups] == ["m1", "m4"]
    assert resp.assignments[0].url == "ftp://10.0.0.2/pub/dist/iso/big.iso"
    assert set(resp.assignments[0].explain) >= {"bandwidth", "rtt", "loss"}
    assert resp.file.sha256 == SHA and len(resp.request_id) == 32


def test_portions_count_the_set_up_of_the_protocol_the_client_will_use():
    """Over HTTP a mirror's first byte comes two round trips sooner than over FTP
    (no login, no data connection): a far mirror loses less to its start, and its
    portion is counted with its own protocol's round trips."""
    snap = snapshot([mirror(1, mbps=10), mirror(2, mbps=40, rtt_s=0.1), mirror(3, mbps=20),
                     mirror(4, mbps=5)])
    resp = plan(snap, bw=int(60e6), protocols=("http", "ftp"))
    assert resp.assignments[0].url.startswith("http://")
    first, second = (a.length for a in resp.assignments)
    http = setup_round_trips("http://m/")
    lost = [40e6 / 8 * start_delay_s(40e6, 0.1, http), 20e6 / 8 * start_delay_s(20e6, 0.02, http)]
    assert 2 * second - first == pytest.approx(lost[0] - 2 * lost[1], abs=4)
    far_over_ftp = plan(snap, bw=int(60e6)).assignments[0]
    assert far_over_ftp.url.startswith("ftp://")
    # the far one starts 2 x (0.1 - 0.02) s sooner than before against the near one:
    # r_far x r_near / (r_far + r_near) x 0.16 s more bytes for it
    assert first - far_over_ftp.length == pytest.approx(5e6 * 2.5e6 / 7.5e6 * 0.16, abs=4)


def test_slow_client_gets_one_mirror():
    snap = snapshot([mirror(1, mbps=10), mirror(2, mbps=40)])
    resp = plan(snap, bw=56_000)
    assert [(a.mirror, a.offset, a.length) for a in resp.assignments] == [("m2", 0, 100 * MIB + 1)]


def test_unknown_file():
    with pytest.raises(UnknownFile, match="nope"):
        plan(snapshot([mirror(1)]), file="nope")


def test_no_replica():
    with pytest.raises(NoUsableMirror, match="no mirror holds"):
        plan(snapshot([mirror(1)], holders=[]))


def test_disabled_down_and_protocol_filtered():
    mirrors = [
        mirror(1, enabled=False),
        mirror(2, state="down"),
        mirror(3, urls={"http": "http://h3/"}),
        mirror(4, state="unknown", urls={"ftp": "ftp://h4"}),
    ]
    resp = plan(snapshot(mirrors), protocols=("ftp",))
    assert [a.mirror for a in resp.assignments] == ["m4"]
    assert resp.assignments[0].url == "ftp://h4/dist/iso/big.iso"
    with pytest.raises(NoUsableMirror, match=r"1 disabled, 1 down, 1 protocol"):
        plan(snapshot(mirrors[:3]), protocols=("ftp",))


def test_protocol_preference_order():
    resp = plan(snapshot([mirror(1)]), protocols=("http", "ftp"))
    assert resp.assignments[0].url.startswith("http://10.0.0.1/")


def test_min_portion_moves_dropped_mirrors_to_backups():
    settings = Settings(min_portion_bytes=4 * MIB, backup_count=2)
    snap = snapshot([mirror(i, mbps=10) for i in range(1, 6)], size=9 * MIB)
    resp = plan(snap, settings=settings)  # unknown access bandwidth: up to 8 mirrors
    assert len(resp.assignments) == 2
    assert all(a.length >= 4 * MIB for a in resp.assignments)
    assert sum(a.length for a in resp.assignments) == 9 * MIB
    assert len(resp.backups) == 2


def test_balanced_mode_above_threshold():
    settings = Settings(balanced_threshold_rps=10)
    snap = snapshot([mirror(i, mbps=10 + i) for i in range(1, 7)])
    firsts = {
        plan(snap, bw=int(5e6), rate=100.0, settings=settings, seed=s).assignments[0].mirror
        for s in range(60)
    }
    assert len(firsts) >= 4
    resp = plan(snap, bw=int(5e6), rate=100.0, settings=settings)
    assert resp.mode == "balanced"
    ranked_first = {
        plan(snap, bw=int(5e6), rate=1.0, settings=settings, seed=s).assignments[0].mirror
        for s in range(10)
    }
    assert ranked_first == {"m6"}


def test_zero_size_file():
    resp = plan(snapshot([mirror(1), mirror(2)], size=0))
    assert [(a.offset, a.length) for a in resp.assignments] == [(0, 0)]


def test_piece_hashes_and_alignment():
    piece = MIB
    pieces = ["cd" * 32] * 11
    snap = snapshot(
        [mirror(1), mirror(2), mirror(3)], size=10 * piece + 5, piece_size=piece, pieces=pieces
    )
    resp = plan(snap)
    assert resp.file.piece_sha256 == pieces and resp.file.piece_size == piece
    assert all(a.offset % piece == 0 for a in resp.assignments)


def test_congestion_pair_avoided():
    mirrors = [mirror(1, mbps=40), mirror(2, mbps=39), mirror(3, mbps=10)]
    base = snapshot(mirrors)
    snap = RankingSnapshot(
        taken_at=NOW,
        mirrors=base.mirrors,
        files_by_name=base.files_by_name,
        replicas=base.replicas,
        congested_pairs=frozenset({frozenset((1, 2))}),
    )
    resp = plan(snap, bw=int(50e6))
    assert [a.mirror for a in resp.assignments] == ["m1", "m3"]
    assert "m2" in [b.mirror for b in resp.backups]


def test_replica_url_joins():
    assert replica_url("ftp://h/pub", "a/b c.iso") == "ftp://h/pub/a/b%20c.iso"
    assert replica_url("ftp://h/pub/", "/a/b%20c.iso") == "ftp://h/pub/a/b%20c.iso"
    assert replica_url("http://h", "x") == "http://h/x"


def _both(snap, settings, *, bw, protocols, rate, seed):
    req = AssignmentRequest(file="iso/big.iso", access_bandwidth_bps=bw, protocols=list(protocols))
    kw = dict(settings=settings, request_rate_rps=rate, now=NOW)
    model = plan_assignments(snap, req, rng=random.Random(seed), **kw)
    fast = plan_assignments_json(snap, req, rng=random.Random(seed), **kw)
    return model, fast


@pytest.mark.parametrize("rate", [0.0, 1000.0])  # ranked and balanced
def test_json_hot_path_equals_the_validated_answer(rate):
    mirrors = [mirror(i, mbps=5 * i) for i in range(1, 9)] + [mirror(9, state="down")]
    settings = Settings(balanced_threshold_rps=50)
    for seed, bw in enumerate([None, int(1e6), int(30e6), int(1e9)]):
        snap = snapshot(mirrors, size=50 * MIB + 3)
        model, fast = _both(snap, settings, bw=bw, protocols=("http", "ftp"), rate=rate, seed=seed)
        parsed = AssignmentResponse.model_validate_json(fast.body)
        assert parsed.model_dump(exclude={"request_id"}) == model.model_dump(
            exclude={"request_id"}
        )
        assert fast.request_id == parsed.request_id and len(fast.request_id) == 32
        assert fast.mode == model.mode and fast.n_assignments == len(model.assignments)


def test_plan_cache_gives_the_same_answers_and_is_per_settings():
    mirrors = [mirror(i, mbps=3 * i) for i in range(1, 12)]
    asks = [(seed, p) for seed in range(6) for p in (("ftp", "http"), ("http",))]

    def answers(snap, settings):
        return [
            plan(snap, bw=int(20e6), protocols=p, settings=settings, seed=seed).model_dump(
                exclude={"request_id"}
            )
            for seed, p in asks
        ]

    cached_snap = snapshot(mirrors)
    cached = Settings(plan_cache_size=4)
    with_cache = answers(cached_snap, cached)
    entries = cached_snap.memo["plan_cache"][2]
    assert sorted(entries) == [(1, ("ftp", "http")), (1, ("http",))]
    hit = entries[(1, ("http",))]
    plan(cached_snap, protocols=("http",), settings=cached)
    assert entries[(1, ("http",))] is hit  # served from the cache, not re-ranked
    assert with_cache == answers(snapshot(mirrors), Settings(plan_cache_size=0))
    # Other settings (other weights) never see rankings made with these.
    plan(cached_snap, settings=Settings(plan_cache_size=4))
    assert cached_snap.memo["plan_cache"][2] is not entries
    # Bounded: a full cache starts over.
    other = snapshot(mirrors)
    small = Settings(plan_cache_size=1)
    plan(other, protocols=("ftp",), settings=small)
    plan(other, protocols=("http",), settings=small)
    assert list(other.memo["plan_cache"][2]) == [(1, ("http",))]


def test_connections_come_from_the_probe_and_default_to_one():
    # m2's probe found each connection held and 3 together carrying its 40 Mbit/s.
    mirrors = [mirror(1, mbps=10), mirror(2, mbps=40, connections=3), mirror(3, mbps=20),
               mirror(4, mbps=5, connections=1)]
    snap = snapshot(mirrors)
    resp = plan(snap, bw=int(60e6))
    assert [(a.mirror, a.connections) for a in resp.assignments] == [("m2", 3), ("m3", 1)]
    assert resp.backups and all(b.connections == 1 for b in resp.backups)
    # a backup carries its mirror's connections too
    held_backup = snapshot([mirror(1, mbps=40), mirror(2, mbps=20, connections=5)])
    resp = plan(held_backup, bw=int(30e6))
    assert [(b.mirror, b.connections) for b in resp.backups] == [("m2", 5)]
    # the hot path's plain data says the same
    model, fast = _both(snap, Settings(), bw=int(60e6), protocols=("ftp", "http"), rate=0.0,
                        seed=1)
    body = AssignmentResponse.model_validate_json(fast.body)
    assert body.model_dump(exclude={"request_id"}) == model.model_dump(exclude={"request_id"})
    assert {a.mirror: a.connections for a in body.assignments}["m2"] == 3


def test_a_far_fast_mirror_is_advised_connections_for_its_slow_start():
    from pftp_coordinator.portions import finish_together_weights, start_delay_s

    # m1: 50 Mbit/s at 250 ms (one connection would ramp ~1.4 s); m2: 6 Mbit/s next
    # door; m3 far but held per connection (its probe: 3 together).
    mirrors = [mirror(1, mbps=50, rtt_s=0.25), mirror(2, mbps=6, rtt_s=0.04),
               mirror(3, mbps=30, rtt_s=0.25, connections=3)]
    snap = snapshot(mirrors, size=64 * MIB)
    resp = plan(snap, bw=int(1e9), protocols=("ftp",))
    by = {a.mirror: a for a in resp.assignments}
    assert by["m1"].connections == 4 and by["m2"].connections == 1
    assert by["m3"].connections == 4  # the more of the two reasons
    # the portions count the shorter ramp: they finish together with 4 connections
    order = [by[n] for n in ("m1", "m2", "m3")]
    rates = [a.expected_bps for a in order]
    rtts = [0.25, 0.04, 0.25]
    starts = [start_delay_s(r, t, 5, a.connections)
              for r, t, a in zip(rates, rtts, order, strict=True)]
    weights = finish_together_weights(64 * MIB, rates, starts)
    share = [w / sum(weights) for w in weights]
    got = [a.length / (64 * MIB) for a in order]
    assert got == pytest.approx(share, abs=0.02)
    # a slower access link caps the rate the ramp is for
    slow = plan(snap, bw=int(8e6), protocols=("ftp",))
    assert all(a.connections == 1 for a in slow.assignments if a.mirror != "m3")
    # the operator's setting: 1 turns it off (a held mirror keeps its probe's count)
    off = plan(snap, bw=int(1e9), protocols=("ftp",), settings=Settings(ramp_max_connections=1))
    assert {a.mirror: a.connections for a in off.assignments} == {"m1": 1, "m2": 1, "m3": 3}
    # (with one connection each, the far ones start later: the near one takes more)
    off_len = {a.mirror: a.length for a in off.assignments}
    assert off_len["m2"] > by["m2"].length + 100_000  # ~0.3 s of its 6 Mbit/s
    assert off_len["m1"] + off_len["m3"] < by["m1"].length + by["m3"].length
