"""One flow first when the client's own access link may be the bottleneck.

Every lane that ends before the end of the file costs the bytes its server had
already sent past that end: 20-80 KB behind a 4 Mbit/s link (notes/slow-access-gap.md).
When the flows fill the access link, those bytes displace useful ones. Four flows
over four equal parts give three such ends at the start, and each later steal adds
one. A single flow to EOF (curl) has none.

So when the access bandwidth is configured, a dynamic download starts with one
flow over the whole file. The other mirrors are connected but stand by:

- If the leading flow clearly falls short of the access link after a few round
  trips, the others join at once with an even split of what is left.
- If it fills the link, they stay in reserve. They step in if it fails, or if the
  download later falls well below the access bandwidth, for example because the
  mirror slowed down.

This module only judges. The engine keeps the state and acts (engine.py, ``_judge_lead``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, NamedTuple

Verdict = Literal["wait", "full", "release"]
# "fell": the download fell well below the link; "above": it runs well above the
# configured figure, so that figure is wrong.
SteadyVerdict = Literal["wait", "fell", "above"]


class LeadSettings(NamedTuple):
    # (A NamedTuple, not a dataclass: the entry point's head start reads these
    # before the CLI has loaded, and dataclasses costs ~8 ms of imports there.)
    # The leading flow fills the link when it carries this share of it. Goodput on a
    # full link runs at 0.9-0.97 of its rate (headers, loss recovery).
    full: float = 0.8
    # Below this share, more flows are needed. The check runs after a few round
    # trips, when a flow in slow start may still be ramping up. A flow that is wrongly
    # judged short only costs what the standbys would have saved.
    short: float = 0.5
    far_short: float = 0.25  # for a verdict on the first arrival alone
    # The first check waits this many round trips after the first byte, and at least
    # min_window_s. On a fast link this is all the extra delay before the others start.
    window_rtts: float = 6.0
    min_window_s: float = 0.01
    # A flow that stalls is judged on what it carried before the stall, and only once
    # this long has passed since its first byte.
    stall_window_s: float = 0.1
    # "Full" is judged on the last this long, so a server's or shaper's first burst
    # does not pass for a full link.
    full_window_s: float = 0.3
    # No verdict by then (after the first byte): the others join.
    max_wait_s: float = 2.0
    # A pause this long (and at least this many round trips) in a flow that was
    # filling the link, followed by data again, is loss recovery: the flow is
    # judged on what came after it.
    recovery_gap_s: float = 0.04
    recovery_gap_rtts: float = 4.0
    # Once the link was full: after this many monitor rounds in a row with the
    # aggregate below this share of the link, the standbys join.
    release_below: float = 0.6
    release_rounds: int = 2
    # Once the link was found full: what all flows carried since that verdict,
    # over at least steady_look_s, below this share of the link lets the standbys
    # in. "Full" is read on 0.3 s and may be a lucky stretch (r59: a 2.8 Mbit/s
    # leader judged full on a 3.9 Mbit/s link, alone to the end at 71 % of it),
    # and the 2 s aggregate's release_below is for a leader that fell, not one
    # that never filled the link. A whole look of data smooths one loss recovery.
    steady_full: float = 0.75
    steady_look_s: float = 3.0
    # Once the link was full: a leader silent this long (loss recovery backing off)
    # lets the others in at once.
    stall_s: float = 1.0
    # An aggregate this far above the figure means that figure is wrong, so the
    # link is not the bottleneck and the standbys join (and the engine raises the
    # figure: Engine._raise_access). A full link carries at most ~0.96 of its rate
    # as payload; a figure measured by the client's probe is off by a few percent.
    above: float = 1.2
    # What one lane end that an even start has and a lead start avoids costs on the
    # access link, roughly: the bytes its server had sent past the end (20-80 KB
    # behind the lab's 4 Mbit/s link, notes/cut-waste.md). See pays_off.
    cut_waste_bytes: int = 64 * 1024


def budget_s(flows: int, access_Bps: float, s: LeadSettings) -> float:
    """What a lead start can save at most, in seconds of the access link: the lane
    ends of an even start (``flows`` - 1 of them at the start, each wasting about
    ``cut_waste_bytes`` of the link's time). 3 ends at 4 Mbit/s: ~0.4 s; at 1
    Gbit/s: 1.6 ms. The others' wait for a leader that does not carry the link is
    bounded by it (judge_start)."""
    if flows < 2 or access_Bps <= 0:
        return 0.0
    return (flows - 1) * s.cut_waste_bytes / access_Bps


def pays_off(flows: int, access_Bps: float, s: LeadSettings) -> bool:
    """Is a lead start worth its wait on this link? It saves budget_s, and it
    costs at least the first verdict's window, while the others wait. On a fast
    link the saving is smaller than that window (10 ms or more), so the flows
    start together, as they do when the bandwidth is unknown."""
    return flows >= 2 and budget_s(flows, access_Bps, s) >= s.min_window_s


def carrying(
    samples: Sequence[tuple[float, int]], *, now: float, rtt_s: float, access_Bps: float,
    s: LeadSettings,
) -> bool:
    """Does the leading flow carry at least the ``short`` share of the link: on
    all it has sent since its first arrival, up to now or up to any arrival two
    round trips (10 ms at least) after it (one that filled the link and is now in
    loss recovery: judge_start's own rules and max_wait_s decide), or on its last
    two round trips (50 ms at least)? A flow with no data does not."""
    if not samples:
        return False
    least = s.short * access_Bps
    first_t = samples[0][0]
    if samples[-1][1] / max(now - first_t, 1e-3) >= least:
        return True
    settled = max(0.01, 2 * rtt_s)
    if any(b / (t - first_t) >= least for t, b in samples if t - first_t >= settled):
        return True
    recent = rate_between(samples, now - max(0.05, 2 * rtt_s), now)
    return recent is not None and recent >= least


def rate_between(samples: Sequence[tuple[float, int]], t0: float, t1: float) -> float | None:
    """Bytes/s over [t0, t1] from (time, cumulative bytes) samples in time order:
    from the last sample at or before t0 to the last one at or before t1."""
    before = [s for s in samples if s[0] <= t0]
    upto = [s for s in samples if s[0] <= t1]
    if not before or not upto or upto[-1][0] <= before[-1][0]:
        return None
    a, b = before[-1], upto[-1]
    return (b[1] - a[1]) / (b[0] - a[0])


def judge_start(
    samples: Sequence[tuple[float, int]],
    *,
    started: float,
    now: float,
    rtt_s: float,
    access_Bps: float,
    s: LeadSettings,
    budget: float | None = None,
) -> tuple[Verdict, str]:
    """Does the leading flow fill the access link by itself?

    ``samples`` are (time, bytes received so far) on the leading flow. The first
    sample is its first arrival. ``started`` is when its request went out.
    Returns the verdict and why, in words for the log.

    A flow that stalls right after its first burst is not judged short. That stall
    is slow start overshooting a small bottleneck queue, followed by loss
    recovery (curl behind the lab's 4 Mbit/s link loses up to a second to it).
    A stalled flow is judged on the rate it had while data came. A leader that
    filled the link before its stall is left to recover (up to ``max_wait_s``). One
    that was short of the link before it is released after ``stall_window_s``. So is
    one that sent nothing after its first arrival.

    ``budget`` (budget_s): once that long has passed since ``started`` (when
    the others could have started) with the leader not carrying the link, the
    wait has cost what the lead start could save: released. A leader that is
    down, far (its first byte ~4 round trips after its connect, then slow
    start) or slow to answer held the others for up to ``max_wait_s`` (a first
    mirror at 200 ms behind 80 Mbit/s: 1.25x; its link down: 1.9x)."""
    if (budget is not None and now - started >= budget
            and not carrying(samples, now=now, rtt_s=rtt_s, access_Bps=access_Bps, s=s)):
        got = samples[-1][1] if samples else 0
        return "release", (
            f"the leading flow has not carried half of the {access_Bps * 8 / 1e6:.2f} Mbit/s "
            f"access link ({got} bytes in {now - started:.2f} s), past the {budget:.2f} s "
            "a lead start could save"
        )
    if not samples:
        if now - started >= s.max_wait_s:
            return "release", f"no data from the leading flow after {now - started:.2f} s"
        return "wait", ""
    waited = now - samples[0][0]
    trimmed = after_recovery(samples, rtt_s=rtt_s, access_Bps=access_Bps, s=s)
    recovering = len(trimmed) < len(samples)
    samples = trimmed
    first_t, first_b = samples[0]
    last_t, last_b = samples[-1]
    span = now - first_t
    window = max(s.min_window_s, s.window_rtts * rtt_s)
    if span < window:
        return "wait", ""
    link = f"the {access_Bps * 8 / 1e6:.2f} Mbit/s access link"
    # Every byte so far, the first burst included, over the time since the first: a
    # generous figure. Short even so: no need to wait for data to flow. On the
    # first arrival alone only when far short: it may be a few segments followed
    # by a pause of tens of milliseconds (lab, 4 Mbit/s: 7 KB, then 31 ms of nothing).
    generous = last_b / span
    limit = s.short if len(samples) >= 2 else s.far_short
    if generous < limit * access_Bps:
        return "release", (f"the leading flow carries at most {generous * 8 / 1e6:.2f} Mbit/s "
                           f"of {link}")
    # After a recovery the sender restarts from a reduced window: judged on a longer
    # stretch of data.
    least = s.stall_window_s if recovering else s.min_window_s / 2
    flowing = now - last_t <= max(4 * rtt_s, s.min_window_s) and last_t - first_t >= least
    # What it carried while data came. The first arrival is left out: it may be a
    # burst the server had queued.
    carried = (last_b - first_b) / (last_t - first_t) if last_t > first_t else 0.0
    # Silent again after a recovery: more of the same, left to recover (max_wait_s).
    silent = span >= max(s.stall_window_s, window) and not recovering
    if (flowing or silent) and carried < s.short * access_Bps:
        return "release", f"the leading flow carries {carried * 8 / 1e6:.2f} Mbit/s of {link}"
    if span < s.full_window_s:
        return "wait", ""
    recent = rate_between(samples, now - s.full_window_s, now) or 0.0
    what = f"{recent * 8 / 1e6:.2f} Mbit/s of {link}"
    if recent >= s.full * access_Bps:
        return "full", f"the leading flow carries {what}"
    if waited >= s.max_wait_s:
        return "release", f"the leading flow carries {what}"
    return "wait", ""


def after_recovery(
    samples: Sequence[tuple[float, int]], *, rtt_s: float, access_Bps: float, s: LeadSettings
) -> Sequence[tuple[float, int]]:
    """The samples after a pause that looks like the loss recovery of slow start's
    overshoot: a flow that carried at least the ``short`` share of the link went
    silent for ``recovery_gap_*`` once, then sent again. Behind a bottleneck queue
    that pause lasts a tail-loss probe or a retransmission timeout (lab, 4 Mbit/s:
    3.9 Mbit/s, then 0.15 s of nothing, read as 1.7 Mbit/s when averaged in), and
    says nothing about the path's rate. Only one such pause is set aside: a flow
    that keeps pausing does not fill the link, and a flow that was short before
    the pause is judged as it is."""
    gap = max(s.recovery_gap_s, s.recovery_gap_rtts * rtt_s)
    pauses = [i for i in range(1, len(samples)) if samples[i][0] - samples[i - 1][0] > gap]
    if len(pauses) != 1:
        return samples
    i = pauses[0]
    (t0, b0), (t_prev, b_prev) = samples[0], samples[i - 1]
    before = (b_prev - b0) / (t_prev - t0) if t_prev > t0 else 0.0
    return samples[i:] if before >= s.short * access_Bps else samples


def rate_after_recovery(
    samples: Sequence[tuple[float, int]],
    *,
    rtt_s: float,
    access_Bps: float,
    s: LeadSettings,
    step_s: float = 0.0,
) -> float:
    """The rate since the one loss-recovery pause in ``samples`` (after_recovery),
    over at least three steps of data after it; 0.0 without such a pause. Samples
    kept once per ``step_s`` while data comes (a RateMeter's) show a pause only as
    a gap well over a step."""
    if step_s > 0:
        s = s._replace(recovery_gap_s=max(s.recovery_gap_s, 1.5 * step_s))
    after = after_recovery(samples, rtt_s=rtt_s, access_Bps=access_Bps, s=s)
    if len(after) == len(samples) or len(after) < 2:
        return 0.0
    (t0, b0), (t1, b1) = after[0], after[-1]
    # (a restart's first burst alone says little)
    span = max(3 * step_s, s.stall_window_s)
    return (b1 - b0) / (t1 - t0) if t1 - t0 >= span else 0.0


def judge_steady(
    aggregate_Bps: float | None, access_Bps: float, low_rounds: int, s: LeadSettings,
    since_full: tuple[float, int] | None = None,
) -> tuple[SteadyVerdict, int, str]:
    """After the link was found full: (verdict, low rounds so far, why).
    ``since_full``: (seconds, bytes) all flows carried since that verdict."""
    if since_full is not None:
        secs, got = since_full
        if secs >= s.steady_look_s and got < s.steady_full * access_Bps * secs:
            return "fell", low_rounds, (
                f"the flows carried {got * 8 / secs / 1e6:.2f} Mbit/s of a "
                f"{access_Bps * 8 / 1e6:.2f} Mbit/s access link over the {secs:.1f} s "
                "since it was found full"
            )
    if aggregate_Bps is None:
        return "wait", low_rounds, ""
    what = (f"{aggregate_Bps * 8 / 1e6:.2f} Mbit/s on a {access_Bps * 8 / 1e6:.2f} Mbit/s "
            "access link")
    if aggregate_Bps > s.above * access_Bps:
        return "above", 0, f"{what}: the link is faster than configured"
    if aggregate_Bps >= s.release_below * access_Bps:
        return "wait", 0, ""
    low_rounds += 1
    if low_rounds >= s.release_rounds:
        return "fell", low_rounds, f"the leading flow fell to {what}"
    return "wait", low_rounds, ""
