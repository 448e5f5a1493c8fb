"""Tail splits at a finer unit than pieces (paper 000: termination idle time is
bounded by one split unit over the slowest mirror's rate), and the CLI's options."""

from __future__ import annotations

import math

import pytest
from pftp_client.cli import EXIT_USAGE, build_parser, run
from pftp_client.pieces import SPLIT_UNIT, PieceGrid, split_unit
from pftp_client.tail import (
    LaneView,
    Steal,
    measures_a_request,
    plan_tail_move,
    switch_latency_s,
)

KIB = 1024
MIB = 1024 * KIB


def test_a_stalled_victim_gives_up_all_but_what_it_is_on():
    """Rate 0 (no byte within the rate window, or none past the stall timeout since
    its request): any split gains, though both of the old check's times were
    infinite and it never stole; 15 MB waited for the stall timeout and the abort."""
    size = 100 * MIB
    victim = LaneView(1, reserved=40 * MIB, end=40 * MIB + 15_000_000, rate=0.0)
    grid = PieceGrid(size, split_unit(256 * KIB))
    move = plan_tail_move([victim], thief_rate=4_000_000.0, thief_latency_s=0.01, grid=grid,
                          duplicate_budget_left=0)
    assert isinstance(move, Steal) and move.end == victim.end
    assert move.split - victim.reserved <= 16 * KIB
    # a thief that is stalled itself takes nothing from it
    assert plan_tail_move([victim], thief_rate=0.0, thief_latency_s=0.01, grid=grid,
                          duplicate_budget_left=0) is None
    # a stalled lane with no rate at all yet (None) is not judged on nothing
    unknown = LaneView(1, reserved=40 * MIB, end=40 * MIB + 15_000_000, rate=None)
    halved = plan_tail_move([unknown], thief_rate=4_000_000.0, thief_latency_s=0.01,
                            grid=grid, duplicate_budget_left=0)
    assert isinstance(halved, Steal) and halved.split - unknown.reserved >= 7 * MIB


def test_split_unit_is_small_but_never_above_the_piece():
    assert split_unit(4 * MIB) == SPLIT_UNIT == 16 * KIB
    assert split_unit(256 * KIB) == 16 * KIB
    assert split_unit(4 * KIB) == 4 * KIB
    assert split_unit(1) == 1


def test_slow_victim_near_the_end_keeps_only_its_share():
    """A 2 Mbit/s lane with 200 KiB left next to an idle 40 Mbit/s flow: with
    256 KiB pieces the victim would keep a whole piece (~0.8 s); with the split
    unit it keeps about r_v / (r_v + r_t) of the rest, rounded up to 16 KiB."""
    size = 100 * MIB
    victim = LaneView(1, reserved=size - 200 * KIB, end=size, rate=250_000.0)
    fine = PieceGrid(size, split_unit(256 * KIB))
    move = plan_tail_move(
        [victim], thief_rate=5_000_000.0, thief_latency_s=0.01, grid=fine, duplicate_budget_left=0
    )
    assert isinstance(move, Steal)
    kept = move.split - victim.reserved
    assert move.split % (16 * KIB) == 0
    ideal = 250_000 * (200 * KIB + 5_000_000 * 0.01) / 5_250_000
    assert ideal <= kept < ideal + 16 * KIB
    t_victim = kept / 250_000.0
    t_thief = 0.01 + (victim.end - move.split) / 5_000_000.0
    assert t_victim < 0.2 and t_thief < 0.2  # both done well before the old 0.8 s
    coarse = plan_tail_move(
        [victim],
        thief_rate=5_000_000.0,
        thief_latency_s=0.01,
        grid=PieceGrid(size, 256 * KIB),
        duplicate_budget_left=0,
    )
    assert coarse is None  # the last piece cannot be split at piece granularity


def test_cli_has_the_options_the_bench_uses():
    help_text = build_parser().format_help()
    assert "get" in help_text
    args = build_parser().parse_args(
        ["get", "-m", "ftp://a/f", "--mirror", "ftp://b/f", "--no-discovery", "--json", "-q"]
    )
    assert args.mirror == ["ftp://a/f", "ftp://b/f"]
    assert args.no_discovery and args.json_out and args.quiet
    assert args.stall_timeout is None and args.output is None


def test_cli_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]):
    assert run([]) == EXIT_USAGE
    assert run(["get"]) == EXIT_USAGE
    assert "--mirror" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        run(["get", "--bogus"])
    assert exc.value.code == EXIT_USAGE


def test_rate_of_a_stalled_flow_falls_to_zero_within_the_window():
    from pftp_client.rate import RateMeter

    m = RateMeter(window_s=3.0, step_s=0.1)
    m.start(0.0)
    t = 0.0
    while t < 5.0:  # 1 MB/s for 5 s
        t += 0.05
        m.add(50_000, t)
    assert m.rate(t) == pytest.approx(1_000_000, rel=0.05)
    assert m.rate(t + 1.0) == pytest.approx(2_000_000 / 3, rel=0.1)  # 2 s of data in 3 s
    # stalled: was ~460 kB/s (1/t) once, then the bytes after the last sample
    # (kept one per 0.1 s) still read as ~14 kB/s; silent for a window: 0
    assert m.rate(t + 3.5) == 0.0
    m.stop()
    assert m.rate(t + 10) == m.rate(t + 3.5)  # idle (between requests): frozen


def test_a_flow_back_from_a_long_silence_is_measured_from_where_it_resumed():
    """A link down for 2 s and back: what the flow carries now is its rate, not the
    silence averaged in (blackhole-back sweep: 38 Mbit/s read as ~10 for 3 s). A
    silence shorter than restart_after_s (loss recovery) stays part of the rate."""
    from pftp_client.rate import RateMeter

    def run(silence_s: float, restart: float | None) -> float | None:
        m = RateMeter(window_s=3.0, step_s=0.1, restart_after_s=restart)
        m.start(0.0)
        t = 0.0
        while t < 2.0:  # 1 MB/s
            t += 0.01
            m.add(10_000, t)
        t += silence_s
        end = t + 0.6
        while t < end:  # 4 MB/s
            t += 0.01
            m.add(40_000, t)
        return m.rate(t)

    assert run(2.0, 1.5) == pytest.approx(4_000_000, rel=0.05)
    assert run(2.0, None) == pytest.approx((0.4 * 1e6 + 0.6 * 4e6) / 3.0, rel=0.1)
    assert run(0.5, 1.5) == pytest.approx((1.9 * 1e6 + 0.6 * 4e6) / 3.0, rel=0.1)
    # the first byte of a request after a long wait is not a restart: the request's
    # latency is the flow's own (warm_up covers the lane's start)
    m = RateMeter(window_s=3.0, step_s=0.1, restart_after_s=1.5)
    m.start(0.0)
    m.add(1_000_000, 2.0)
    m.add(1_000_000, 2.5)
    assert m.rate(2.5) == pytest.approx(2_000_000 / 2.5, rel=0.01)
    # a range that ends 0.1 s after its flow came back: frozen at what came since
    # (over at least min_span_s), not at what the silence had worn the rate down to
    m = RateMeter(window_s=3.0, step_s=0.1, min_span_s=0.2, restart_after_s=1.5)
    m.start(0.0)
    m.add(100_000, 0.5)
    assert m.rate(4.0) == 0.0  # silent for a window
    m.add(200_000, 4.0)
    m.add(200_000, 4.1)
    m.stop(4.1)
    assert m.rate(5.0) == pytest.approx(400_000 / 0.2)


def test_a_stalled_leaders_last_bytes_are_raced_once_another_flow_is_free():
    """CI, session 30: a leader cut off by its link (lead start) kept the 112 bytes
    up to the split grid's next boundary; its meter still read the bytes that came
    after its last sample as a small rate, so the first free flow stole from a
    working one instead, and the last 112 bytes waited 17 s for the stall timeout."""
    from pftp_client.rate import RateMeter
    from pftp_client.tail import Duplicate

    m = RateMeter(window_s=3.0, step_s=0.1)
    m.start(0.0)
    t = 0.0
    while t < 1.5:  # 4 Mbit/s, then the link goes down
        t += 0.003
        m.add(1448, t)
    size = 3 * MIB
    grid = PieceGrid(size, split_unit(256 * KIB))
    leader = LaneView(1, reserved=524_176, end=524_288, rate=m.rate(t + 5.0))
    other = LaneView(2, reserved=2 * MIB, end=size, rate=250_000.0)
    move = plan_tail_move([leader, other], thief_rate=250_000.0, thief_latency_s=0.01,
                          grid=grid, duplicate_budget_left=size // 100)
    assert isinstance(move, Duplicate) and move.lane_id == 1
    assert (move.start, move.end) == (524_176, 524_288)


def test_a_period_that_ended_in_a_stall_freezes_zero_not_the_rate_before_it():
    """A range cut where its server stopped sending ends "done": frozen at the rate
    from before the stall, the flow took its own handed-over remainder straight
    back (and stalled again). A period that ends right after its last byte keeps
    its rate, as before."""
    from pftp_client.rate import RateMeter

    def run(stop_at: float) -> RateMeter:
        m = RateMeter(window_s=3.0, step_s=0.1)
        m.start(0.0)
        t = 0.0
        while t < 5.0:  # 1 MB/s for 5 s, then nothing
            t += 0.05
            m.add(50_000, t)
        m.stop(stop_at)
        return m

    assert run(5.0).rate(20.0) == pytest.approx(1_000_000, rel=0.05)
    assert run(5.0 + 0.3).rate(20.0) == pytest.approx(1_000_000, rel=0.05)  # final reply
    assert run(5.0 + 1.5).rate(20.0) == 0.0  # cut where its server stopped sending


def test_steal_never_splits_below_what_the_server_is_already_sending():
    """The victim's server may already be sending up to ``floor`` (its receive
    window's right edge): a split below it would throw those bytes away, so
    the split moves up to the floor, rounded to the split unit."""
    size = 10 * MIB
    grid = PieceGrid(size, 16 * KIB)
    lane = dict(lane_id=1, reserved=size - 1 * MIB, end=size, rate=1_000_000.0)
    free = plan_tail_move(
        [LaneView(**lane)], thief_rate=1_000_000.0, thief_latency_s=0.0, grid=grid,
        duplicate_budget_left=0,
    )
    assert isinstance(free, Steal)
    floor = free.split + 100_000  # the window reaches past the balanced split
    held = plan_tail_move(
        [LaneView(**lane, floor=floor)], thief_rate=1_000_000.0, thief_latency_s=0.0,
        grid=grid, duplicate_budget_left=0,
    )
    assert isinstance(held, Steal)
    assert held.split == grid.align_up(floor) > free.split
    # a floor at the lane's end leaves nothing worth stealing
    assert plan_tail_move(
        [LaneView(**lane, floor=size)], thief_rate=1_000_000.0, thief_latency_s=0.0,
        grid=grid, duplicate_budget_left=0,
    ) is None


def test_slow_start_costs_round_trips_only_on_long_fat_paths():
    from pftp_wire.tcp_model import INITIAL_WINDOW_BYTES, slow_start_s

    assert slow_start_s(5_000_000.0, 0.0002) == 0.0  # a LAN: the first window is enough
    assert slow_start_s(None, 0.08) == 0.0 and slow_start_s(5_000_000.0, None) == 0.0
    # 40 Mbit/s over 80 ms: log2(400 kB / 14.5 kB) ~ 4.8 round trips to fill the path,
    # about one of them carrying data at the full rate
    cost = slow_start_s(5_000_000.0, 0.08)
    assert cost == pytest.approx(0.08 * (math.log2(400_000 / INITIAL_WINDOW_BYTES) - 1))
    assert 0.25 < cost < 0.35
    assert slow_start_s(5_000_000.0, 0.16) > 2 * cost  # more round trips, each longer


def test_a_steal_must_gain_more_than_the_thief_loses_switching():
    """Between two far flows a marginal steal ping-ponged: each new range costs
    the thief its switch (ABOR, passive port, request, slow start), so a steal
    must shorten the finish by at least that much, not only by 5 %."""
    size = 100 * MIB
    grid = PieceGrid(size, 16 * KIB)
    victim = LaneView(1, reserved=size - 2 * MIB, end=size, rate=2_500_000.0)  # 0.84 s left
    near = plan_tail_move([victim], thief_rate=5_000_000.0, thief_latency_s=0.01, grid=grid,
                          duplicate_budget_left=0)
    assert isinstance(near, Steal)  # a LAN thief: well worth it
    # a thief 80 ms away: switch ~0.32 s plus ~0.3 s of slow start. Balanced, both
    # would end at ~0.77 s: 0.07 s gained for 0.62 s of the thief's time
    far = plan_tail_move([victim], thief_rate=5_000_000.0, thief_latency_s=0.62, grid=grid,
                         duplicate_budget_left=0)
    assert far is None
    # with 4 s left the same thief gains ~1.2 s: it steals
    long = LaneView(1, reserved=size - 10 * MIB, end=size, rate=2_500_000.0)
    assert isinstance(plan_tail_move([long], thief_rate=5_000_000.0, thief_latency_s=0.62,
                                     grid=grid, duplicate_budget_left=0), Steal)


def test_a_fresh_lane_reads_at_least_the_flows_rate_before_while_it_warms_up():
    from pftp_client.engine import Flow
    from pftp_client.plan import MirrorSource
    from pftp_client.summary import MirrorStats

    flow = Flow("m", MirrorSource("m", "ftp://m/f"), MirrorStats("m", "ftp://m/f"))
    flow.rate.start(0.0)
    t = 0.0
    while t < 2.0:  # 5 MB/s
        t += 0.05
        flow.rate.add(250_000, t)
    flow.rate.stop()
    assert flow.rate_estimate(t) == pytest.approx(5_000_000, rel=0.05)
    # a new range: nothing for 0.25 s (its first byte), then slow start
    flow.warm_up(t, hold_s=1.0)
    flow.rate.start(t)
    start = t
    t += 0.25
    flow.rate.add(50_000, t)
    t += 0.1
    flow.rate.add(100_000, t)
    measured = flow.rate.rate(t)
    assert measured is not None and measured < 1_000_000  # what the meter says
    assert flow.rate_estimate(t) == pytest.approx(5_000_000, rel=0.05)  # what counts
    # once the hold is over the lane's own figure counts, slower or not
    while t < start + 1.5:
        t += 0.05
        flow.rate.add(50_000, t)  # 1 MB/s: this mirror did slow down
    assert flow.rate_estimate(t) == pytest.approx(flow.rate.rate(t))
    assert flow.rate_estimate(t) < 1_500_000


def test_work_given_up_is_shared_by_rate_not_taken_whole():
    """A slow mirror's remainder (14 MB) in the pool; the first flow free (1.25 MB/s)
    takes what it would fetch by the time all the work left is done, shared by rate;
    the others take the rest when their own work runs out."""
    from pftp_client.tail import pool_share

    grid = PieceGrid(100 * MIB, 16 * KIB)
    pool = (3 * MIB, 17 * MIB)
    others = [(5 * MIB, 2_500_000.0), (8 * MIB, 3_750_000.0)]  # both ~2 s from done
    split = pool_share(pool, 14 * MIB, 1_250_000.0, others, grid)
    assert split is not None and split % (16 * KIB) == 0
    work = 14 * MIB + 13 * MIB
    finish = work / (1_250_000 + 2_500_000 + 3_750_000)  # ~3.8 s for everyone
    assert split - pool[0] == pytest.approx(1_250_000 * finish, abs=16 * KIB)
    # an unmeasured rate (a backup that just started): the range whole, as before
    assert pool_share(pool, 14 * MIB, None, others, grid) is None
    assert pool_share(pool, 14 * MIB, 1_250_000.0, [(5 * MIB, None)], grid) is None
    # alone, or nearly all of it: whole, no sliver left behind
    assert pool_share(pool, 14 * MIB, 1_250_000.0, [], grid) is None
    assert pool_share((0, 2 * MIB), 2 * MIB, 5_000_000.0, [(MIB, 100_000.0)], grid) is None


def test_a_range_begun_ahead_is_up_to_speed_no_sooner_than_its_own_ramp():
    """Session 12: a far flow whose running range had been cut short by steals
    looked free at once, took the last bytes of a near flow and finished last.
    The latency of a range begun ahead is the time left, floored by a round trip
    and the slow start on the thief's own path."""
    from pftp_client.tail import begun_ahead_latency_s
    from pftp_wire.tcp_model import slow_start_s

    rate, far = 5_000_000.0, 0.08
    ramp = far + slow_start_s(rate, far)
    assert begun_ahead_latency_s(50_000, rate, far) == pytest.approx(ramp)  # 10 ms left
    assert begun_ahead_latency_s(10 * MIB, rate, far) == pytest.approx(10 * MIB / rate)
    assert begun_ahead_latency_s(50_000, rate, 0.0002) == pytest.approx(0.01)  # a LAN
    assert begun_ahead_latency_s(50_000, None, far) is None
    # The near victim has 0.2 s left. Planned with the 10 ms left, the far thief
    # steals; with its ramp (~0.38 s) it cannot be sooner, and it declines.
    size = 100 * MIB
    grid = PieceGrid(size, 16 * KIB)
    victim = LaneView(1, reserved=size - 500_000, end=size, rate=2_500_000.0)
    naive = plan_tail_move([victim], thief_rate=rate, thief_latency_s=0.01, grid=grid,
                           duplicate_budget_left=0)
    assert isinstance(naive, Steal)
    floored = plan_tail_move([victim], thief_rate=rate,
                             thief_latency_s=begun_ahead_latency_s(50_000, rate, far),
                             grid=grid, duplicate_budget_left=0)
    assert floored is None


@pytest.mark.parametrize(("mbit", "rtt"), [(40, 0.08), (10, 0.16), (20, 0.04), (100, 0.03)])
def test_the_overlap_lead_is_what_the_old_transfer_carries_while_the_new_one_ramps(mbit, rtt):
    """overlap_lead_bytes(margin 1.0) against a round-by-round model of the hand-over:
    the new transfer's first byte a round trip after its request, its window then
    doubling from the initial window until it fills the path; the old transfer
    carries the rest of the link meanwhile. The lead matches what the old one
    carries (within a fifth), so the two barely share the link."""
    from pftp_client.tail import overlap_lead_bytes
    from pftp_wire.tcp_model import INITIAL_WINDOW_BYTES

    rate = mbit * 1e6 / 8
    bdp = rate * rtt
    carried_by_old = bdp  # the request's round trip: the old transfer alone
    window = float(INITIAL_WINDOW_BYTES)
    while window < bdp:
        carried_by_old += bdp - window
        window *= 2
    lead = overlap_lead_bytes(rate, rtt)
    assert lead == pytest.approx(carried_by_old, rel=0.2)
    assert overlap_lead_bytes(rate, rtt, margin=1.5) == pytest.approx(1.5 * lead, rel=0.01)


def test_a_victim_keeps_its_share_of_all_the_work_left_not_only_the_pairs():
    """Session 16, wide-area --mirror: the far 40 Mbit/s flow, free first, split the
    slowest mirror's range as if the two of them were alone, so that mirror ran dry
    early and stole in turn. Each flow's rate x the time in which all of them, the
    thief included after its latency, finish together is what the victim keeps."""
    from pftp_client.tail import share_until_s

    size = 48 * MIB
    grid = PieceGrid(size, 16 * KIB)
    m0 = LaneView(1, reserved=1 * MIB, end=12 * MIB, rate=600_000.0, owner="m0")
    m1 = LaneView(2, reserved=14 * MIB, end=24 * MIB, rate=1_200_000.0, owner="m1")
    m2 = LaneView(3, reserved=30 * MIB, end=36 * MIB, rate=2_400_000.0, owner="m2")
    thief, latency = 4_800_000.0, 0.4
    work = 11 * MIB + 10 * MIB + 6 * MIB
    together = (work + thief * latency) / (600_000 + 1_200_000 + 2_400_000 + thief)
    assert share_until_s([m0, m1, m2], thief, latency) == pytest.approx(together)
    move = plan_tail_move([m0, m1, m2], thief_rate=thief, thief_latency_s=latency, grid=grid,
                          duplicate_budget_left=0)
    assert move == Steal(1, grid.align_up(1 * MIB + math.ceil(600_000 * together)), 12 * MIB)
    # alone with its victim, the thief splits as before (both finish together)
    alone = plan_tail_move([m0], thief_rate=thief, thief_latency_s=latency, grid=grid,
                           duplicate_budget_left=0)
    pair = 600_000 * (11 * MIB + thief * latency) / (600_000 + thief)
    assert alone == Steal(1, grid.align_up(1 * MIB + math.ceil(pair)), 12 * MIB)
    assert alone.split < move.split
    # a flow's range begun ahead is a second lane, not a second flow's rate
    ahead = LaneView(4, reserved=40 * MIB, end=41 * MIB, rate=2_400_000.0, owner="m2")
    both = share_until_s([m0, m1, m2, ahead], thief, latency)
    assert both == pytest.approx((work + 1 * MIB + thief * latency) / 9_000_000)
    # a rate not known yet leaves the pair's split
    fresh = LaneView(5, reserved=0, end=1 * MIB, rate=None)
    assert share_until_s([m0, fresh], thief, latency) is None
    # a thief that could not join before the others are done adds nothing
    assert share_until_s([m0], 100.0, 30.0) == pytest.approx(11 * MIB / 600_000)


def test_a_thief_takes_no_more_than_it_fetches_by_the_common_finish():
    """What the victim has beyond its share and the thief's is left at its end for
    the next flow to run out of work (one piece, not scraps of every victim)."""
    from pftp_client.tail import share_until_s

    size = 48 * MIB
    grid = PieceGrid(size, 16 * KIB)
    slow = LaneView(1, reserved=1 * MIB, end=40 * MIB, rate=600_000.0, owner="m0")
    mid = LaneView(2, reserved=42 * MIB, end=48 * MIB, rate=2_400_000.0, owner="m2")
    thief, latency = 4_800_000.0, 0.4
    together = share_until_s([slow, mid], thief, latency)
    assert together == pytest.approx((45 * MIB + thief * latency) / 7_800_000)
    move = plan_tail_move([slow, mid], thief_rate=thief, thief_latency_s=latency, grid=grid,
                          duplicate_budget_left=0)
    taken = math.floor(thief * (together - latency))
    assert move == Steal(1, grid.align_up(40 * MIB - taken), 40 * MIB)
    # more than the victim's own share stays with it: the middle flow's part
    kept_s = (move.split - slow.reserved) / slow.rate
    assert kept_s > together + 0.5


def test_with_no_other_flow_to_run_dry_the_pair_split_stands():
    """The end of a coordinated download: every other flow is busy to the end, so
    nobody but this thief will take the victims' excess. Held to its share, the
    victim left the others' excess for the thief to come back for (one more
    switch); the pair's split makes it one steal."""
    size = 48 * MIB
    grid = PieceGrid(size, 16 * KIB)
    last = LaneView(1, reserved=10 * MIB, end=13 * MIB, rate=600_000.0, owner="m0")
    busy = LaneView(2, reserved=20 * MIB, end=24 * MIB, rate=1_200_000.0, owner="m1")
    thief, latency = 2_400_000.0, 0.1
    move = plan_tail_move([last, busy], thief_rate=thief, thief_latency_s=latency, grid=grid,
                          duplicate_budget_left=0)
    pair = 600_000 * (3 * MIB + thief * latency) / (600_000 + thief)
    assert move == Steal(1, grid.align_up(10 * MIB + math.ceil(pair)), 13 * MIB)


def test_a_far_fast_thief_takes_a_long_range_rather_than_a_sliver():
    """r17: six connections of a limited mirror (200 KB/s each, 2 MiB left each)
    finish last, a far 2.9 MB/s flow has 10 MiB left. A near thief takes the last
    lane's excess as before; a far 7.2 MB/s thief whose switch costs it 1.5 s
    (a new data connection in slow start for its bandwidth-delay product) takes
    its share of the far flow's range instead, more than twice as much in one
    request (tail._bulkier_steal)."""
    from pftp_client.tail import _steal_from, share_until_s

    grid = PieceGrid(66 * MIB, 16 * KIB)
    limited = [LaneView(i, reserved=4 * i * MIB, end=4 * i * MIB + 2 * MIB, rate=200_000.0,
                        owner=f"lim#{i}") for i in range(1, 7)]
    far = LaneView(10, reserved=40 * MIB, end=50 * MIB, rate=2_900_000.0, owner="far")
    near = LaneView(11, reserved=55 * MIB, end=60 * MIB, rate=2_500_000.0, owner="near")
    lanes = [*limited, far, near]
    quick = plan_tail_move(lanes, thief_rate=7_200_000.0, thief_latency_s=0.1, grid=grid,
                           duplicate_budget_left=0)
    assert isinstance(quick, Steal) and quick.lane_id == 1
    rate, latency = 7_200_000.0, 1.5
    sliver = _steal_from(lanes, limited[0], rate, latency, grid,
                         share_until_s(lanes, rate, latency))
    assert sliver is not None and sliver.end - sliver.split < rate * latency
    bulk = plan_tail_move(lanes, thief_rate=rate, thief_latency_s=latency, grid=grid,
                          duplicate_budget_left=0)
    assert isinstance(bulk, Steal) and bulk.lane_id == far.lane_id and bulk.end == far.end
    assert bulk.end - bulk.split > 2 * (sliver.end - sliver.split)
    # the far flow and the thief then finish together (no other flow to run dry
    # before them: the pair's split)
    kept_s = (bulk.split - far.reserved) / far.rate
    assert kept_s == pytest.approx(latency + (bulk.end - bulk.split) / rate, abs=0.05)
    # nothing larger elsewhere: the last lane's steal stands
    alone = plan_tail_move([*limited], thief_rate=rate, thief_latency_s=latency, grid=grid,
                           duplicate_budget_left=0)
    assert isinstance(alone, Steal) and alone.lane_id in {v.lane_id for v in limited}


def test_a_first_byte_sooner_than_half_a_round_trip_measures_no_request():
    # an HTTP head start's buffered bytes reach the engine 30-50 us after it asks
    assert not measures_a_request(40e-6, 0.160)
    assert measures_a_request(0.165, 0.160)  # a GET on the kept connection
    assert measures_a_request(40e-6, None)  # no RTT known: taken as it comes
    assert measures_a_request(0.0003, 0.0004)  # a LAN's round trip


def test_a_switch_is_costed_in_round_trips_until_one_is_measured():
    assert switch_latency_s(0.21, 0.08, 2, 0.05) == 0.21
    assert switch_latency_s(None, 0.16, 1, 0.05) == pytest.approx(0.16)
    assert switch_latency_s(None, 0.08, 2, 0.05) == pytest.approx(0.16)
    assert switch_latency_s(None, 0.0, 2, 0.05) == 0.05


def _far_and_near_steal(
    victim_switch_s: float | None, thief_switch_s: float, *, thief_rate: float,
    victim_rate: float, left: int,
) -> tuple[Steal, LaneView]:
    size = 200 * MIB
    victim = LaneView(1, reserved=50 * MIB, end=50 * MIB + left, rate=victim_rate,
                      switch_s=victim_switch_s)
    move = plan_tail_move(
        [victim], thief_rate=thief_rate, thief_latency_s=thief_switch_s,
        grid=PieceGrid(size, split_unit(256 * KIB)), duplicate_budget_left=0,
        thief_switch_s=thief_switch_s,
    )
    assert isinstance(move, Steal)
    return move, victim


def test_a_far_fast_thief_takes_all_but_a_second_of_a_near_victims_range():
    """A 50 Mbit/s flow 250 ms away (a new range costs it ~2 s of its rate: two round
    trips and a slow start) runs dry beside a 5.6 Mbit/s one 40 ms away with 10 MB
    left. Split to finish together, the far one took 8.8 MB and, on a wrong rate,
    ran dry first again and switched again; now it takes all but about a second of
    the near one's work, and the near one, whose switch costs ~0.1 s, takes its share
    back from the far one's top when it runs dry."""
    far, near = 6_250_000.0, 700_000.0
    even, victim = _far_and_near_steal(None, 2.0, thief_rate=far, victim_rate=near,
                                       left=10_000_000)
    uneven, _ = _far_and_near_steal(0.1, 2.0, thief_rate=far, victim_rate=near,
                                    left=10_000_000)
    kept_even = even.split - victim.reserved
    kept = uneven.split - victim.reserved
    assert kept_even > 1_500_000  # (the even finish: ~2.3 s of the near one's work)
    assert near * 1.0 <= kept < near * 1.0 + 16 * KIB  # CHEAP_KEEPS_S, on the split grid
    assert uneven.end == even.end == victim.end
    # switches alike (both far, or both near): the even finish stands
    for victim_switch in (1.5, 2.0, 3.0):
        alike, _ = _far_and_near_steal(victim_switch, 2.0, thief_rate=far, victim_rate=near,
                                       left=10_000_000)
        assert alike == even
    # a dear thief slower than its victim keeps to the even finish too
    slow, _ = _far_and_near_steal(0.1, 1.2, thief_rate=2_000_000.0, victim_rate=far,
                                  left=40_000_000)
    slow_even, _ = _far_and_near_steal(None, 1.2, thief_rate=2_000_000.0, victim_rate=far,
                                       left=40_000_000)
    assert slow == slow_even


def test_a_near_thief_takes_a_far_fast_victims_top_in_chunks():
    """The other way round: the near flow takes at most CHUNK_S (2 s) of its own work
    from the far one's top at a time, not its share of the finish (~10 % of 40 MB),
    so that a far victim read slow in its ramp is not left too little and made to
    switch; it comes back for more."""
    far, near = 6_250_000.0, 700_000.0
    even, victim = _far_and_near_steal(None, 0.1, thief_rate=near, victim_rate=far,
                                       left=40_000_000)
    chunked, _ = _far_and_near_steal(2.0, 0.1, thief_rate=near, victim_rate=far,
                                     left=40_000_000)
    assert victim.end - even.split > 3_500_000
    taken = victim.end - chunked.split
    assert 2.0 * near - 16 * KIB < taken <= 2.0 * near
    # near the end the even finish takes less than a chunk: it stands
    end_even, _ = _far_and_near_steal(None, 0.1, thief_rate=near, victim_rate=far,
                                      left=8_000_000)
    end_chunked, _ = _far_and_near_steal(2.0, 0.1, thief_rate=near, victim_rate=far,
                                         left=8_000_000)
    assert end_chunked == end_even
