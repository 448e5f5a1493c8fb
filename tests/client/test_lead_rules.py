"""The lead-start verdicts (lead.py) on arrival series shaped like the ones the lab
shows: a 4 Mbit/s access link filled by one flow (with the loss-recovery stall
after slow start's first burst), a 20 Mbit/s mirror behind a 1 Gbit/s link, and a
flow that never answers."""

from __future__ import annotations

import pytest
from pftp_client.lead import (
    LeadSettings,
    budget_s,
    carrying,
    judge_start,
    judge_steady,
    pays_off,
    rate_after_recovery,
    rate_between,
)

S = LeadSettings()
ACCESS_4M = 4e6 / 8
RTT = 0.0015


def series(t0: float, t1: float, rate_Bps: float, *, start_bytes: int = 0, step: float = 0.006,
           t_first: float | None = None) -> list[tuple[float, int]]:
    """(time, cumulative bytes) every ``step`` from t0 to t1 at a steady rate."""
    out, t = [], t0
    while t <= t1 + 1e-9:
        out.append((round(t, 6), int(start_bytes + (t - t0) * rate_Bps)))
        t += step
    return out


def test_rate_between_uses_the_samples_at_or_before_each_end():
    s = [(0.0, 0), (1.0, 100), (2.0, 300)]
    assert rate_between(s, 0.5, 2.0) == 150.0  # from the sample at 0.0
    assert rate_between(s, 1.0, 2.0) == 200.0
    assert rate_between(s, 2.0, 2.0) is None  # one sample: no rate
    assert rate_between(s, -1.0, 2.0) is None  # nothing before the start


def test_waits_for_a_few_round_trips_before_any_verdict():
    s = series(0.0, 0.008, 100_000.0, step=0.002)  # far below the link, but only 8 ms old
    assert judge_start(s, started=0.0, now=0.008, rtt_s=RTT, access_Bps=ACCESS_4M, s=S)[0] == "wait"
    s = series(0.0, 0.014, 100_000.0, step=0.002)  # 5.6 round trips of 2.5 ms: not yet
    assert judge_start(s, started=0.0, now=0.014, rtt_s=0.0025, access_Bps=ACCESS_4M,
                       s=S)[0] == "wait"
    s = series(0.0, 0.016, 100_000.0, step=0.002)  # 6.4 round trips: judged
    assert judge_start(s, started=0.0, now=0.016, rtt_s=0.0025, access_Bps=ACCESS_4M,
                       s=S)[0] == "release"


def test_a_flow_far_below_a_fast_link_releases_the_others_at_once():
    """20 Mbit/s behind a 1 Gbit/s link: the standbys join after ~20 ms, not 0.3 s."""
    s = series(0.0, 0.024, 20e6 / 8, start_bytes=30_000)
    verdict, why = judge_start(s, started=0.0, now=0.025, rtt_s=RTT, access_Bps=1e9 / 8, s=S)
    assert verdict == "release"
    assert "of the 1000.00 Mbit/s access link" in why


def test_stall_after_the_first_burst_is_not_taken_for_a_short_flow():
    """Slow start overshoots the link's queue, then loss recovery: no data for
    150 ms. It carried the link's rate before, so it is not judged short; once data
    flows at that rate again, it is full."""
    burst = [(0.0, 28_960), (0.04, 50_680), (0.07, 65_536)]
    now = 0.22  # stalled since 0.07
    assert judge_start(burst, started=-0.002, now=now, rtt_s=RTT, access_Bps=ACCESS_4M,
                       s=S)[0] == "wait"
    s = burst + series(0.22, 0.62, 0.97 * ACCESS_4M, start_bytes=65_536)
    verdict, why = judge_start(s, started=-0.002, now=0.62, rtt_s=RTT, access_Bps=ACCESS_4M, s=S)
    assert verdict == "full", why


def test_a_slow_leader_is_released_on_its_first_arrival():
    """A 2 Mbit/s mirror behind a 40 Mbit/s link (paper 004 table 1's slowest; lab
    trace, session 6): 14 KB, then 33 ms (sometimes 80) of nothing. Counted in full,
    those 14 KB are under a quarter of the link 15 ms after they came, so the others
    join then instead of waiting for the second arrival. Each 10 ms of waiting
    cost table 1 about 0.2 %."""
    s = [(0.0049, 14_480)]
    assert judge_start(s, started=0.003, now=0.016, rtt_s=RTT, access_Bps=40e6 / 8,
                       s=S)[0] == "wait"  # 10.4 Mbit/s: more than a quarter
    verdict, why = judge_start(s, started=0.003, now=0.02, rtt_s=RTT, access_Bps=40e6 / 8, s=S)
    assert verdict == "release" and "at most 7.67 Mbit/s" in why, why
    s = [(0.0049, 14_480), (0.0379, 39_096)]  # second arrival: half the link is the limit
    verdict, why = judge_start(s, started=0.003, now=0.039, rtt_s=RTT, access_Bps=40e6 / 8, s=S)
    assert verdict == "release" and "at most 9.17 Mbit/s" in why, why


def test_a_small_first_arrival_and_a_pause_are_not_taken_for_a_short_leader():
    """Lab trace behind 4 Mbit/s (session 6): 7 KB at first, then 31 ms of nothing,
    then the link's rate. Judged on the first arrival, it looked like 1.85 Mbit/s and
    the standbys were let in for nothing."""
    first = [(0.0029, 7_240)]
    assert judge_start(first, started=0.0019, now=0.034, rtt_s=0.001, access_Bps=ACCESS_4M,
                       s=S)[0] == "wait"
    s = first + series(0.035, 0.4, 0.97 * ACCESS_4M, start_bytes=36_000)
    assert judge_start(s, started=0.0019, now=0.4, rtt_s=0.001, access_Bps=ACCESS_4M,
                       s=S)[0] == "full"


def test_a_leader_short_after_its_burst_is_released_on_its_rate_while_flowing():
    """Its burst made it look fast at first; once data has flowed for a while its
    rate (the burst left out) shows it short."""
    s = [(0.0, 200000), *series(0.01, 0.06, 10000000.0 / 8, start_bytes=200000, step=0.005)]
    verdict, why = judge_start(s, started=0.0, now=0.06, rtt_s=RTT, access_Bps=40e6 / 8, s=S)
    assert verdict == "release" and "carries 8.33 Mbit/s" in why, why  # 10 from 0.01 on


def test_nothing_after_the_first_arrival_is_released_after_the_stall_window():
    s = [(0.0, 28_960)]
    assert judge_start(s, started=0.0, now=0.05, rtt_s=RTT, access_Bps=ACCESS_4M, s=S)[0] == "wait"
    assert judge_start(s, started=0.0, now=0.1, rtt_s=RTT, access_Bps=ACCESS_4M,
                       s=S)[0] == "release"


def test_full_needs_the_last_window_at_the_link_rate_not_just_a_burst():
    """A 2 Mbit/s mirror behind 4 Mbit/s: its first burst is fast, then it runs at
    half the link. Never judged full; at max_wait the others join."""
    s = [(0.0, 32000), *series(0.01, 0.5, 2000000.0 / 8, start_bytes=40000)]
    assert judge_start(s, started=0.0, now=0.5, rtt_s=RTT, access_Bps=ACCESS_4M, s=S)[0] != "full"
    s = [(0.0, 32000), *series(0.01, 2.0, 2200000.0 / 8, start_bytes=40000)]
    assert judge_start(s, started=0.0, now=2.0, rtt_s=RTT, access_Bps=ACCESS_4M,
                       s=S)[0] == "release"


def test_no_data_at_all_releases_at_max_wait():
    assert judge_start([], started=0.0, now=1.0, rtt_s=RTT, access_Bps=ACCESS_4M,
                       s=S)[0] == "wait"
    verdict, why = judge_start([], started=0.0, now=S.max_wait_s, rtt_s=RTT,
                               access_Bps=ACCESS_4M, s=S)
    assert verdict == "release" and "no data" in why


@pytest.mark.parametrize(
    ("share", "rounds_before", "verdict", "rounds_after"),
    [
        (0.95, 1, "wait", 0),  # full again: the count starts over
        (0.5, 0, "wait", 1),  # low once: not yet
        (0.5, 1, "fell", 2),  # low twice in a row
        (1.6, 0, "above", 0),  # faster than configured: the figure is wrong
        (1.3, 0, "above", 0),
        (1.1, 0, "wait", 0),  # within a figure's error
    ],
)
def test_steady_state(share, rounds_before, verdict, rounds_after):
    v, n, why = judge_steady(share * ACCESS_4M, ACCESS_4M, rounds_before, S)
    assert (v, n) == (verdict, rounds_after)
    assert (why != "") == (verdict != "wait")


def test_a_leader_found_full_that_does_not_fill_the_link_lets_the_others_in():
    # 71 % of the link since the verdict (a lucky 0.3 s window said full): over a
    # whole look the standbys join, whatever the 2 s aggregate's rounds say
    look = S.steady_look_s
    v, n, why = judge_steady(0.71 * ACCESS_4M, ACCESS_4M, 0, S,
                             since_full=(look, int(0.71 * ACCESS_4M * look)))
    assert v == "fell" and "since it was found full" in why and n == 0
    # not before the look is over
    assert judge_steady(0.71 * ACCESS_4M, ACCESS_4M, 0, S,
                        since_full=(look - 0.5, int(0.71 * ACCESS_4M * (look - 0.5))))[0] == "wait"
    # a full link's goodput (0.9 of its rate) with one loss recovery in the look
    got = int(0.9 * ACCESS_4M * (look - 0.4))
    assert judge_steady(0.85 * ACCESS_4M, ACCESS_4M, 0, S, since_full=(look, got))[0] == "wait"


def test_steady_state_without_a_measured_aggregate_waits():
    assert judge_steady(None, ACCESS_4M, 1, S) == ("wait", 1, "")


def _filled_then_paused(pause_s: float, rate_Bps: float = 490_000.0) -> list[tuple[float, int]]:
    """The lab's series (head start, 4 Mbit/s): 0.1 s at the link rate, a pause of
    ``pause_s`` with nothing in order (loss recovery), then the link rate again."""
    before = series(0.0, 0.1, rate_Bps, start_bytes=95_000)
    t = before[-1][0] + pause_s
    return before + series(t, t + 0.006, rate_Bps, start_bytes=before[-1][1] + 2_900)


def test_a_recovery_pause_in_a_flow_that_filled_the_link_is_not_shortness():
    s = _filled_then_paused(0.15)
    now = s[-1][0]
    # averaged over the pause the flow carries ~1.7 Mbit/s of 4; judged on what came after
    assert judge_start(s, started=0.0, now=now, rtt_s=RTT, access_Bps=ACCESS_4M, s=S)[0] == "wait"
    # silent again right after: more recovery, still waiting
    assert judge_start(s, started=0.0, now=now + 0.12, rtt_s=RTT, access_Bps=ACCESS_4M,
                       s=S)[0] == "wait"
    # and it becomes "full" once a full window at the link rate follows the pause
    longer = s + series(now + 0.006, now + 0.33, 490_000.0, start_bytes=s[-1][1] + 2_900)
    verdict, _ = judge_start(longer, started=0.0, now=longer[-1][0], rtt_s=RTT,
                             access_Bps=ACCESS_4M, s=S)
    assert verdict == "full"


def test_after_a_recovery_a_short_rate_over_a_longer_stretch_releases():
    s = _filled_then_paused(0.15)
    t = s[-1][0]
    slow = s + series(t + 0.006, t + 0.12, 100_000.0, start_bytes=s[-1][1] + 600)
    verdict, why = judge_start(slow, started=0.0, now=slow[-1][0], rtt_s=RTT,
                               access_Bps=ACCESS_4M, s=S)
    assert verdict == "release" and "carries 0." in why


def test_a_pause_in_a_flow_that_was_short_before_it_still_releases():
    before = series(0.0, 0.1, 100_000.0, start_bytes=2_000)  # 0.8 of 4 Mbit/s
    s = [*before, (0.3, before[-1][1] + 1448), (0.306, before[-1][1] + 2 * 1448)]
    verdict, _ = judge_start(s, started=0.0, now=0.306, rtt_s=RTT, access_Bps=ACCESS_4M, s=S)
    assert verdict == "release"


def test_max_wait_counts_from_the_first_byte_not_from_the_recovery():
    s = _filled_then_paused(0.15)
    # at 2.1 s after the first byte, with the flow silent since the recovery: release
    verdict, _ = judge_start(s, started=0.0, now=2.1, rtt_s=RTT, access_Bps=ACCESS_4M, s=S)
    assert verdict == "release"


def test_a_flow_that_keeps_pausing_is_judged_with_its_pauses():
    s = _filled_then_paused(0.15)
    t = s[-1][0]
    again = [*s, *series(t + 0.006, t + 0.05, 490_000.0, start_bytes=s[-1][1] + 2_900)]
    t = again[-1][0] + 0.15  # a second pause of 0.15 s, then data again
    again += series(t, t + 0.012, 490_000.0, start_bytes=again[-1][1] + 2_900)
    verdict, _ = judge_start(again, started=0.0, now=again[-1][0], rtt_s=RTT,
                             access_Bps=ACCESS_4M, s=S)
    assert verdict == "release"


@pytest.mark.parametrize(
    ("flows", "access_bps", "expected"),
    [
        (4, 4e6, True),  # slow access: 3 lane ends cost ~0.4 s of the link
        (8, 40e6, True),  # paper 004's table 1: 7 ends, ~90 ms
        (4, 1e9, False),  # 3 ends at 1 Gbit/s: 1.6 ms, less than the 10 ms wait
        (24, 1e9, True),  # ...unless there are many of them
        (1, 4e6, False),  # nobody to stand by
        (4, 0.0, False),
    ],
)
def test_a_lead_start_only_where_the_lane_ends_it_saves_outweigh_its_wait(
    flows: int, access_bps: float, expected: bool
):
    assert pays_off(flows, access_bps / 8, S) is expected


def test_pays_off_weighs_the_cut_waste_against_the_verdict_window():
    # at the break-even link rate, and just above it
    even = 3 * S.cut_waste_bytes / S.min_window_s
    assert pays_off(4, even, S)
    assert not pays_off(4, even * 1.01, S)
    assert pays_off(4, even * 1.01, S._replace(cut_waste_bytes=2 * S.cut_waste_bytes))


# ---- the coordinated top-up's round (engine._top_up): RateMeter samples, 0.1 s apart


def meter_series(phases: list[tuple[float, float]], step: float = 0.1) -> list[tuple[float, int]]:
    """(time, bytes) a sample per ``step`` while data comes; (seconds, rate) phases,
    a rate of 0 being a pause (no samples)."""
    out, t, total = [(0.5, 0)], 0.5, 0.0
    for seconds, rate in phases:
        end = t + seconds
        while t + step <= end + 1e-9:
            t += step
            total += rate * step
            if rate > 0:
                out.append((round(t, 6), int(total)))
        t = end
    return out


def test_a_full_link_with_one_recovery_pause_reads_full_after_it():
    # 3.9 Mbit/s, a 0.3 s retransmission timeout, 3.9 again: the round's mean is
    # 0.83 of the link, what came after the pause 0.97
    s = meter_series([(0.4, 0.97 * ACCESS_4M), (0.3, 0.0), (0.6, 0.97 * ACCESS_4M)])
    mean = (s[-1][1] - s[0][1]) / (s[-1][0] - s[0][0])
    assert mean < 0.85 * ACCESS_4M
    after = rate_after_recovery(s, rtt_s=0.02, access_Bps=ACCESS_4M, s=S, step_s=0.1)
    assert after == pytest.approx(0.97 * ACCESS_4M, rel=0.05)
    # read as arrivals, each 0.1 s step would be a pause of 4 round trips
    assert rate_after_recovery(s, rtt_s=0.02, access_Bps=ACCESS_4M, s=S) == 0.0


@pytest.mark.parametrize(
    "phases",
    [
        [(1.3, 0.7 * ACCESS_4M)],  # short all along: no pause to set aside
        [(0.4, 0.3 * ACCESS_4M), (0.3, 0.0), (0.6, 0.97 * ACCESS_4M)],  # short before it
        [(0.3, 0.97 * ACCESS_4M), (0.2, 0.0), (0.3, 0.97 * ACCESS_4M), (0.2, 0.0),
         (0.3, 0.97 * ACCESS_4M)],  # keeps pausing: does not fill the link
        [(0.9, 0.97 * ACCESS_4M), (0.3, 0.0), (0.1, 0.97 * ACCESS_4M)],  # too little after
    ],
)
def test_no_rate_after_recovery_without_one_clear_recovery(phases):
    s = meter_series(phases)
    assert rate_after_recovery(s, rtt_s=0.02, access_Bps=ACCESS_4M, s=S, step_s=0.1) == 0.0



# ---- the budget: a leader that does not carry the link holds the others no longer
# than a lead start could save (lead.budget_s)

ACCESS_80M = 80e6 / 8


def test_the_budget_is_the_lane_ends_an_even_start_would_waste():
    assert budget_s(4, ACCESS_4M, S) == pytest.approx(3 * S.cut_waste_bytes / ACCESS_4M)
    assert budget_s(4, ACCESS_80M, S) == pytest.approx(budget_s(4, ACCESS_4M, S) / 20)
    assert budget_s(1, ACCESS_4M, S) == 0.0 and budget_s(4, 0.0, S) == 0.0


def test_a_leader_with_no_data_is_released_once_the_budget_is_spent():
    """A first mirror that is down or hung (no byte at all): released after the
    budget (~20 ms behind 80 Mbit/s), not after max_wait_s (2 s)."""
    budget = budget_s(4, ACCESS_80M, S)
    kw = {"rtt_s": RTT, "access_Bps": ACCESS_80M, "s": S, "budget": budget}
    assert judge_start([], started=0.0, now=0.9 * budget, **kw)[0] == "wait"
    verdict, why = judge_start([], started=0.0, now=budget, **kw)
    assert verdict == "release" and "could save" in why
    # without a budget, the old rule: only after max_wait_s
    assert judge_start([], started=0.0, now=budget, rtt_s=RTT, access_Bps=ACCESS_80M,
                       s=S)[0] == "wait"


def slow_start(t_first: float, rtt: float, rounds: int, first_bytes: int = 14_480
               ) -> list[tuple[float, int]]:
    """A far flow's arrivals: its window doubling every round trip."""
    out, total, w = [], 0, first_bytes
    for i in range(rounds):
        total += w
        out.append((round(t_first + i * rtt, 6), total))
        w *= 2
    return out


def test_a_far_leader_in_slow_start_is_released_on_the_budget():
    """A first mirror at 200 ms: its first byte ~0.8 s after its connect, then a
    window doubling each 200 ms. Its 6-round-trip window alone would hold the
    others 1.2 s more (far-first behind 80 Mbit/s: 1.27x)."""
    s = slow_start(0.8, 0.2, 3)
    kw = {"rtt_s": 0.2, "access_Bps": ACCESS_80M, "s": S}
    assert judge_start(s, started=0.0, now=1.25, **kw)[0] == "wait"
    verdict, why = judge_start(s, started=0.0, now=1.25, budget=budget_s(4, ACCESS_80M, S), **kw)
    assert verdict == "release" and "could save" in why


def test_a_leader_that_carries_the_link_is_not_released_by_the_budget():
    """Past the budget, a leader carrying the link is judged as before: full on a
    steady link rate, and left to recover from a stall after a burst that
    carried the link (lab 4 Mbit/s: slow start's overshoot)."""
    budget = budget_s(4, ACCESS_4M, S)
    steady = series(0.01, 0.6, 0.97 * ACCESS_4M, start_bytes=14_480)
    verdict, _ = judge_start(steady, started=0.0, now=0.6, rtt_s=RTT, access_Bps=ACCESS_4M,
                             s=S, budget=budget)
    assert verdict == "full"
    burst = [(0.0, 28_960), (0.04, 50_680), (0.07, 65_536)]  # stalled since 0.07
    assert judge_start(burst, started=-0.002, now=0.22, rtt_s=RTT, access_Bps=ACCESS_4M,
                       s=S, budget=0.1)[0] == "wait"
    assert carrying(burst, now=0.22, rtt_s=RTT, access_Bps=ACCESS_4M, s=S)
    assert not carrying(burst[:1], now=0.22, rtt_s=RTT, access_Bps=ACCESS_4M, s=S)
    assert not carrying([], now=1.0, rtt_s=RTT, access_Bps=ACCESS_4M, s=S)
