"""Slow-Server-Algo, tail splitting and piece geometry as pure functions."""

from __future__ import annotations

import math

import pytest
from pftp_client.pieces import MAX_PIECE, MIN_PIECE, PieceGrid, choose_piece_size
from pftp_client.slow_server import FlowProgress, find_slow_flows, reduced_portion
from pftp_client.tail import Duplicate, LaneView, Steal, choose_victim, plan_tail_move, victim_keeps

MIB = 1024 * 1024


def test_slow_flow_is_the_one_far_below_the_mean():
    # T_m = D_m / F_m: equal portions, one flow at a tenth of the others' rate.
    prog = [
        FlowProgress("a", 10 * MIB, 100 * MIB),
        FlowProgress("b", 10 * MIB, 100 * MIB),
        FlowProgress("c", 1 * MIB, 100 * MIB),
    ]
    (v,) = find_slow_flows(prog)
    assert v.flow_id == "c"
    assert math.isclose(v.t_mean, 0.07) and math.isclose(v.keep_fraction, 0.01 / 0.07)
    # paper 001 line 35: F_m' = T_m / T_mean * F_temp
    assert reduced_portion(70 * MIB, v) == int(70 * MIB * 0.01 / 0.07)


def test_relative_to_portion_not_raw_rate():
    # b is slower in bytes but has proportionally less to do: not slow.
    prog = [FlowProgress("a", 10 * MIB, 100 * MIB), FlowProgress("b", 3 * MIB, 30 * MIB)]
    assert find_slow_flows(prog) == []


def test_no_verdict_with_one_flow_or_nobody_moving():
    assert find_slow_flows([FlowProgress("a", 0, 10)]) == []
    assert find_slow_flows([FlowProgress("a", 0, 10), FlowProgress("b", 0, 10)]) == []
    assert find_slow_flows([FlowProgress("a", 5, 10), FlowProgress("b", 5, 0)]) == []
    with pytest.raises(ValueError):
        find_slow_flows([], slow_ratio=1.5)


def test_threshold_is_half_the_mean():
    just_above = [FlowProgress("a", 100, 100), FlowProgress("b", 34, 100)]  # mean .67, b=.34 > .335
    assert find_slow_flows(just_above) == []
    below = [FlowProgress("a", 100, 100), FlowProgress("b", 33, 100)]
    assert [v.flow_id for v in find_slow_flows(below)] == ["b"]


GRID = PieceGrid(1000 * MIB, MIB)


def test_steal_splits_so_both_finish_together():
    victim = LaneView(1, reserved=0, end=100 * MIB, rate=1 * MIB)
    move = plan_tail_move(
        [victim], thief_rate=3 * MIB, thief_latency_s=0.0, grid=GRID, duplicate_budget_left=0
    )
    assert isinstance(move, Steal)
    assert move.split == 25 * MIB  # victim keeps r_v / (r_v + r_t) = 1/4
    assert move.split % MIB == 0


def test_steal_is_half_when_rates_unknown():
    victim = LaneView(1, reserved=10 * MIB, end=30 * MIB, rate=None)
    move = plan_tail_move(
        [victim], thief_rate=None, thief_latency_s=0.1, grid=GRID, duplicate_budget_left=0
    )
    assert move == Steal(1, 20 * MIB, 30 * MIB)


def test_latency_gives_the_victim_more():
    assert victim_keeps(100, 1.0, 1.0, 10.0) == 55
    assert victim_keeps(100, 0.0, 1.0, 0.0) == 0  # stalled victim keeps nothing


def test_victim_is_the_lane_that_finishes_last():
    lanes = [
        LaneView(1, 0, 50 * MIB, 10 * MIB),
        LaneView(2, 0, 20 * MIB, 1 * MIB),
        LaneView(3, 0, 5 * MIB, 0.0),
    ]
    assert choose_victim(lanes).lane_id == 3  # stalled: infinite time
    assert choose_victim(lanes[:2]).lane_id == 2
    assert choose_victim([LaneView(1, 5, 5, 1.0)]) is None


def test_a_connection_on_trial_is_taken_from_only_when_no_other_lane_gives():
    # the trial's new connection in its ramp: slow, so it would finish last
    trial = LaneView(1, reserved=20 * MIB, end=23 * MIB, rate=0.1 * MIB, owner="m1#2",
                     on_trial=True)
    other = LaneView(2, reserved=0, end=8 * MIB, rate=0.5 * MIB, owner="m0")
    kw = dict(thief_rate=1.2 * MIB, thief_latency_s=0.5, grid=GRID, duplicate_budget_left=0)
    move = plan_tail_move([trial, other], **kw)
    assert isinstance(move, Steal) and move.lane_id == 2
    # not on trial, the same lane is the victim
    plain = LaneView(1, reserved=20 * MIB, end=23 * MIB, rate=0.1 * MIB, owner="m1#2")
    assert plan_tail_move([plain, other], **kw).lane_id == 1
    # nothing else worth a steal: the trial's lane is split after all
    done = LaneView(2, reserved=8 * MIB, end=8 * MIB, rate=0.5 * MIB, owner="m0")
    move = plan_tail_move([trial, done], **kw)
    assert isinstance(move, Steal) and move.lane_id == 1 and 20 * MIB < move.split < 23 * MIB


def test_no_steal_below_one_piece_then_bounded_duplicate():
    small = LaneView(1, reserved=999 * MIB + 10, end=1000 * MIB, rate=1000.0)
    # the remainder is inside the last piece: nothing to split
    move = plan_tail_move(
        [small],
        thief_rate=50 * MIB,
        thief_latency_s=0.01,
        grid=GRID,
        duplicate_budget_left=10 * MIB,
    )
    assert move == Duplicate(1, small.reserved, small.end)
    # no budget left: no duplicate
    assert (
        plan_tail_move(
            [small], thief_rate=50 * MIB, thief_latency_s=0.01, grid=GRID, duplicate_budget_left=100
        )
        is None
    )
    # a victim nearly as fast as the thief is not raced
    fast = LaneView(1, reserved=999 * MIB + 10, end=1000 * MIB, rate=40 * MIB)
    assert (
        plan_tail_move(
            [fast],
            thief_rate=50 * MIB,
            thief_latency_s=0.01,
            grid=GRID,
            duplicate_budget_left=10 * MIB,
        )
        is None
    )
    # a lane already raced is left alone
    raced = LaneView(1, small.reserved, small.end, 1000.0, shadowed=True)
    assert (
        plan_tail_move(
            [raced],
            thief_rate=50 * MIB,
            thief_latency_s=0.0,
            grid=GRID,
            duplicate_budget_left=10 * MIB,
        )
        is None
    )


def test_steal_not_worth_a_request_is_skipped():
    lane = LaneView(1, reserved=0, end=2 * MIB, rate=100 * MIB)  # done in 20 ms
    assert (
        plan_tail_move(
            [lane], thief_rate=1 * MIB, thief_latency_s=0.5, grid=GRID, duplicate_budget_left=0
        )
        is None
    )


def test_piece_sizes():
    assert choose_piece_size(4 * 1024**3, 4) == MAX_PIECE
    assert choose_piece_size(1000, 4) == MIN_PIECE
    assert choose_piece_size(100 * MIB, 4) == MIB
    assert choose_piece_size(100 * MIB, 4, hashed_piece_size=12345) == 12345
    g = PieceGrid(10, 4)
    assert g.count == 3 and g.bounds(2) == (8, 10) and list(g.touching(3, 9)) == [0, 1, 2]
    assert g.align_up(5) == 8 and g.align_up(9) == 10 and g.align_down(7) == 4


def test_a_flow_about_to_finish_counts_as_done_not_as_many_times_done():
    """Session 16: at the end of a wide-area download, a flow with a sliver left
    (T_m = 8) lifted the mean so far that a far mirror with a second of work left
    was cut as slow. T_m is at most 1."""
    prog = [
        FlowProgress("near", 2 * MIB, MIB // 4),  # done within the interval
        FlowProgress("far", 1 * MIB, 2 * MIB),  # half of what it has left
        FlowProgress("fast", 4 * MIB, 8 * MIB),
    ]
    assert find_slow_flows(prog) == []
    stuck = [*prog[:2], FlowProgress("stuck", MIB // 10, 8 * MIB)]
    assert [v.flow_id for v in find_slow_flows(stuck)] == ["stuck"]
