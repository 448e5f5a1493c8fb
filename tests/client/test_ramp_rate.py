"""A flow's rate while its connection leaves slow start (session 43).

On a long fat path (50 Mbit/s at 250 ms) a new data connection needs ~2 s to reach
its rate. The meter's 3 s window averaged that ramp in: the spare connection came
too late to begin the next range ahead, and after the warm-up a 5 Mbit/s mirror
stole the end of the far one's range because the far one read at a third of its
rate. These tests drive the meter and a flow with a made-up ramp (the clock is
passed in)."""

from __future__ import annotations

import pytest
from pftp_client.engine import Flow
from pftp_client.plan import MirrorSource
from pftp_client.rate import RateMeter
from pftp_client.summary import MirrorStats
from pftp_client.tail import long_ramp

RTT = 0.25
FULL = 6_000_000  # bytes/s once out of slow start


def ramp(meter: RateMeter, t_req: float, until: float, t: float | None = None) -> float:
    """Feed ``meter`` from ``t`` (default: the request at ``t_req``) to ``until``: one
    round trip of nothing, then a rate doubling each round trip from 64 KB/s up to
    FULL. Returns the clock at ``until``."""
    t = t_req if t is None else t
    step = 0.01
    while t < until:
        t += step
        since = t - t_req - RTT
        if since >= 0:
            meter.add(int(min(FULL, 64_000 * 2 ** int(since / RTT)) * step), t)
    return t


def test_recent_rate_follows_a_ramp_that_the_window_average_lags() -> None:
    m = RateMeter(window_s=3.0, step_s=0.1)
    m.start(0.0)
    t = ramp(m, 0.0, 2.6)
    window = m.rate(t)
    recent = m.recent(t, 2 * RTT)
    assert window is not None and recent is not None
    assert recent == pytest.approx(FULL, rel=0.1)
    assert window < 0.6 * FULL  # the request and the ramp averaged in
    # younger than the span: nothing to say
    m2 = RateMeter(window_s=3.0, step_s=0.1)
    m2.start(0.0)
    m2.add(1000, 0.1)
    assert m2.recent(0.2, 0.5) is None


def test_since_measures_from_then_on_and_changes_nothing() -> None:
    m = RateMeter(window_s=3.0, step_s=0.1)
    m.start(0.0)
    t = ramp(m, 0.0, 2.0)
    while t < 2.5:
        t += 0.01
        m.add(int(FULL * 0.01), t)
    window = m.rate(t)
    assert m.since(2.0, t) == pytest.approx(FULL, rel=0.1)
    assert window is not None and window < 0.6 * FULL and m.rate(t) == window  # unchanged
    assert m.since(t - 0.1, t) is None  # no reading of its own yet (min_span_s)
    # a time before every sample: the window's start
    assert m.since(-5.0, t) == pytest.approx(window)
    m.stop(t)
    assert not m.active and m.since(2.0, t + 1) is None


def test_a_flow_past_its_warm_up_reads_what_it_carries_now() -> None:
    """The flow held its rate before while its new range ramped (warm_up); once the
    hold is over, its estimate is the rate since, not the window with the ramp."""
    flow = Flow("far", MirrorSource("far", "ftp://far/f"), MirrorStats("far", "ftp://far/f"))
    flow.rate.start(0.0)
    t = 0.0
    while t < 3.0:  # its first range, at full rate
        t += 0.01
        flow.rate.add(int(FULL * 0.01), t)
    flow.rate.stop(t)
    flow.warm_up(t, hold_s=2.0, long_ramp=True)  # a new range, requested at t
    flow.rate.start(t)
    start = t
    t = ramp(flow.rate, start, start + 2.0)
    assert flow.rate_estimate(t) == pytest.approx(FULL, rel=0.05)  # held
    t = ramp(flow.rate, start, start + 2.6, t)  # hold over: measured from its end
    est = flow.rate_estimate(t)
    assert est is not None and est == pytest.approx(FULL, rel=0.1)
    # what the meter's window says (and every other reader of it) still has the ramp
    window = flow.rate.rate(t)
    assert window is not None and window < 0.7 * FULL
    # just past the hold, before a reading of its own: still held
    flow.warm_up(t, hold_s=1.0, long_ramp=True)
    flow.rate.start(t)
    assert flow.rate_estimate(t + 1.05) == pytest.approx(est, rel=0.01)


def test_a_flow_without_a_warm_up_keeps_its_window() -> None:
    flow = Flow("m", MirrorSource("m", "ftp://m/f"), MirrorStats("m", "ftp://m/f"))
    flow.rate.start(0.0)
    t = ramp(flow.rate, 0.0, 2.6)
    assert flow.rate_estimate(t) == pytest.approx(flow.rate.rate(t))


def test_ramp_rate_projects_a_doubling_while_the_recent_rate_runs_ahead() -> None:
    from pftp_client.tail import RAMPING, ramp_rate

    assert ramp_rate(None, None) is None
    assert ramp_rate(1e6, None) == 1e6
    assert ramp_rate(None, 2e6) == 4e6  # in its first span: nothing to compare with
    assert ramp_rate(1e6, 0.9e6) == 1e6  # steady or slowing: the window's
    assert ramp_rate(1e6, 1.2e6) == 1.2e6  # a little above: what it carries now
    assert ramp_rate(1e6, RAMPING * 1e6 + 1) == 2 * (RAMPING * 1e6 + 1)  # slow start


def test_a_ramping_flow_is_timed_on_more_than_its_window() -> None:
    """Mid-ramp, the rate used to time the spare is above what it carries now."""
    from pftp_client.engine import Ramp

    flow = Flow("far", MirrorSource("far", "ftp://far/f"), MirrorStats("far", "ftp://far/f"))
    flow.rate.start(0.0)
    t = ramp(flow.rate, 0.0, 1.6)
    carried = flow.rate.recent(t, 2 * RTT)
    # (the readings Engine._ramp takes, on a long ramp)
    timed = Ramp(flow.rate_estimate(t), flow.rate.recent(t, max(0.3, 2 * RTT)), True).rate
    assert Ramp(flow.rate_estimate(t), carried, False).rate == flow.rate_estimate(t)
    assert carried is not None and timed is not None
    assert timed >= 2 * carried > 2 * (flow.rate_estimate(t) or 0.0)


def test_time_left_while_ramping_assumes_the_doubling_goes_on() -> None:
    from pftp_client.tail import time_left_s

    # steady: bytes over the higher rate
    assert time_left_s(10_000_000, 5e6, 4.8e6, RTT) == pytest.approx(2.0)
    assert time_left_s(10_000_000, None, None, RTT) is None
    # ramping at 1 MB/s (250 KB a round trip), doubling: 10 MB in log2(41) round trips
    ramping = time_left_s(10_000_000, 0.3e6, 1e6, RTT)
    assert ramping == pytest.approx(RTT * 5.358, rel=0.01)
    assert ramping < 10_000_000 / 1e6 / 5  # far sooner than at the recent rate


def test_only_a_long_fat_path_counts_as_a_long_ramp() -> None:
    """The ramp timing is for paths whose round trip and slow start last a
    monitoring quarter or more: not a LAN path whose RTT a queue lifted to 10 ms."""
    mbit = 1_000_000 / 8
    assert long_ramp(50 * mbit, 0.25, 0.25)  # r15's far mirror
    assert long_ramp(40 * mbit, 0.08, 0.25)  # 80 ms, 0.3 s of slow start
    assert long_ramp(None, 0.3, 0.25)  # no rate yet: the round trip alone
    assert not long_ramp(100 * mbit, 0.01, 0.25)  # a queued LAN path
    assert not long_ramp(5 * mbit, 0.04, 0.25)
    assert not long_ramp(50 * mbit, None, 0.25)
    assert not long_ramp(50 * mbit, 0.0, 0.25)


def test_a_victim_in_slow_start_on_a_long_path_counts_at_what_it_carries_now() -> None:
    """r17: two far mirrors at 3 s, their windows' averages half what they carried,
    each read as the one to finish last and took the other's end."""
    from pftp_client.tail import victim_rate

    assert victim_rate(3e6, 6.5e6, True) == 6.5e6  # ramping on a long path
    assert victim_rate(3e6, 6.5e6, False) == 3e6  # a short path: the window
    assert victim_rate(6.5e6, 3e6, True) == 6.5e6  # slowing down: the window
    assert victim_rate(None, 6.5e6, True) is None  # nothing measured: no figure
    assert victim_rate(3e6, None, True) == 3e6
