"""No idle tail: what a flow that ran out of work does next (paper 000, III).

Paper 000 keeps every server busy with small blocks and, at the end, lets idle
servers re-request blocks still in flight elsewhere ("termination idle time").
Our flows stream long ranges instead of blocks (no inter-block idle time at
all), so the same goal is reached by splitting: an idle flow takes the end of
the range that will finish last, cutting that flow's ``RangeEnd``.

Where to cut: both flows should finish together. With victim rate r_v, thief
rate r_t and the thief's request latency L (time to first byte), the victim
keeps k bytes of its remaining R such that k / r_v = L + (R - k) / r_t, i.e.
    k = r_v (R + r_t L) / (r_v + r_t).
Without rate estimates this is the paper's (and the brief's) half split. Cuts
are rounded up to a piece boundary so pieces stay whole.

The pair is not the whole download, though, when other flows are going to run
out of work too and come for the same victims. Then the victim keeps at least its
share of all the work left (``share_until_s``): what it fetches by the time every
flow, the thief included once its latency has passed, would finish together; and
the thief takes no more than it fetches by then, leaving the rest of the victim's
excess in one piece for the next flow to run dry. Split by the pair alone on the
wide-area paths (`--mirror`), the far 40 Mbit/s flow took most of the 160 ms
mirror's range, a near flow then took the rest, and that far mirror sat idle for
the last 0.5 s. With no such flow to come (the end of a coordinated download, every
other flow busy to the end), the pair's split stands: held to its share, the
victim left other victims' excess to the thief, which came back for it at the
cost of one more switch (wide-area coordinated 1.14 -> 1.16x).

Only when nothing worth splitting is left (the remainder is below one piece)
may an idle flow fetch bytes that another flow is also fetching: a duplicate
race over the victim's last bytes, allowed only if it is expected to finish in
less than half the victim's time and fits in the duplicate budget (1 % of the
file), so duplicates are bounded and counted.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from pftp_wire.tcp_model import slow_start_s

from pftp_client.pieces import PieceGrid

# A split must shorten the expected finish by at least this factor to be worth
# a new request.
MIN_GAIN = 0.95
# A steal smaller than this many times the thief's rate over its latency (what
# its switch costs it) is outweighed by a larger one from another lane, if that
# is BULK_GAIN times as large (_bulkier_steal).
BULK_STEAL = 1.0
BULK_GAIN = 1.5
# A duplicate must be expected to take less than this share of the victim's time.
DUPLICATE_ADVANTAGE = 0.5
# Switch costs (engine._switch_cost: request round trips and the new connection's
# slow start) this far apart, the dearer at least DEAR_SWITCH_S: the two flows'
# switches are not alike, and the cheap one makes the corrections (plan_steal).
SWITCH_RATIO = 4.0
DEAR_SWITCH_S = 1.0
# What a cheap victim keeps from a dear thief: this long of its own work, while
# its next range is planned (and begun ahead on a far path).
CHEAP_KEEPS_S = 1.0
# A cheap thief takes at most this long of its own work from a dear victim's top
# at a time, or CHUNK_SWITCHES of its own switches, whichever is longer.
CHUNK_S = 2.0
CHUNK_SWITCHES = 10.0


@dataclass(frozen=True)
class LaneView:
    lane_id: int
    reserved: int  # first byte the lane's flow has not yet committed to write
    end: int
    rate: float | None  # bytes/s of the flow fetching it; None = not measured yet
    shadowed: bool = False  # a duplicate already races it
    # No split below this: the server is already sending up to here (engine._cut_floor).
    floor: int = 0
    # The flow fetching it ("" = a flow of its own): a flow's range begun ahead and
    # its running one are two lanes but one rate.
    owner: str = ""
    # A connection on trial (engine._start_trial): taken from only when no other
    # lane gives a steal (plan_tail_move).
    on_trial: bool = False
    # What a new range costs its flow, seconds (engine._switch_cost); None: unknown.
    switch_s: float | None = None


@dataclass(frozen=True)
class Steal:
    lane_id: int
    split: int  # victim keeps [reserved, split); thief takes [split, end)
    end: int


@dataclass(frozen=True)
class Duplicate:
    lane_id: int
    start: int
    end: int


def expected_seconds(remaining: int, rate: float | None) -> float | None:
    if remaining <= 0:
        return 0.0
    if rate is None:
        return None
    return math.inf if rate <= 0 else remaining / rate


def choose_victim(lanes: Sequence[LaneView]) -> LaneView | None:
    """The lane expected to finish last; by size when rates are unknown."""
    live = [v for v in lanes if v.end > v.reserved and not v.shadowed]
    if not live:
        return None
    known = [v.rate for v in live if v.rate is not None and v.rate > 0]
    fallback = sum(known) / len(known) if known else None

    def key(v: LaneView) -> tuple[float, int]:
        t = expected_seconds(v.end - v.reserved, v.rate if v.rate is not None else fallback)
        return (t if t is not None else 0.0, v.end - v.reserved)

    return max(live, key=key)


def _flow_key(v: LaneView) -> object:
    return v.owner or ("lane", v.lane_id)


def _by_flow(lanes: Sequence[LaneView]) -> dict[object, tuple[int, float | None]]:
    """Flow -> (bytes its lanes have left, its rate): a flow's range begun ahead and
    its running one are two lanes, one rate."""
    flows: dict[object, tuple[int, float | None]] = {}
    for v in lanes:
        left, _ = flows.get(_flow_key(v), (0, None))
        flows[_flow_key(v)] = (left + max(0, v.end - v.reserved), v.rate)
    return flows


def finish_together_s(work: int, others_rate: float, rate: float, latency_s: float) -> float:
    """Seconds until ``work`` bytes are done by flows carrying ``others_rate`` from
    now and one more carrying ``rate`` after ``latency_s``, all finishing together
    (one that could not join before the others are done adds nothing)."""
    together = (work + rate * latency_s) / (others_rate + rate)
    if together > latency_s or others_rate <= 0:
        return together
    return work / others_rate


def share_until_s(
    lanes: Sequence[LaneView], thief_rate: float | None, thief_latency_s: float
) -> float | None:
    """Seconds from now until the work left in ``lanes`` is done when their flows
    carry it at their rates and a thief joins after its latency, all finishing
    together (finish_together_s). None when a rate is unknown."""
    if thief_rate is None or thief_rate <= 0:
        return None
    flows = _by_flow(lanes)
    if any(r is None and left > 0 for left, r in flows.values()):
        return None
    work = sum(left for left, _ in flows.values())
    others = sum(max(0.0, r) for _, r in flows.values() if r is not None)
    return finish_together_s(work, others, thief_rate, thief_latency_s)


def others_run_dry(
    lanes: Sequence[LaneView], victim: LaneView, share_s: float, thief_latency_s: float
) -> bool:
    """Whether a flow other than the victim's has its own work done more than a
    switch (the thief's latency) before the common finish ``share_s``: it will come
    for the victims' excess too."""
    mine = _flow_key(victim)
    return any(
        key != mine and r is not None and r > 0 and left / r < share_s - thief_latency_s
        for key, (left, r) in _by_flow(lanes).items()
    )


def victim_keeps(
    remaining: int,
    victim_rate: float | None,
    thief_rate: float | None,
    thief_latency_s: float,
    share_s: float | None = None,
) -> int:
    """Bytes the victim keeps so both finish together (module docstring), and at
    least its share of all the work left when ``share_s`` (share_until_s) is
    known."""
    if victim_rate is None or thief_rate is None or thief_rate <= 0:
        return remaining // 2
    if victim_rate <= 0:
        return 0
    k = victim_rate * (remaining + thief_rate * thief_latency_s) / (victim_rate + thief_rate)
    if share_s is not None:
        k = max(k, victim_rate * share_s)
    return min(remaining, math.ceil(k))


def plan_steal(
    victim: LaneView,
    thief_rate: float | None,
    thief_latency_s: float,
    grid: PieceGrid,
    share_s: float | None = None,
    thief_switch_s: float | None = None,
) -> Steal | None:
    """The steal of ``victim``'s end that has both flows finish together
    (module docstring), when it gains; then moved where the flows' switches are
    not alike (uneven_split). ``thief_switch_s``: what a new range costs the
    thief (default ``thief_latency_s``; planned ahead, the latency is when it
    is free)."""
    remaining = victim.end - victim.reserved
    if remaining <= 0:
        return None
    keep = victim_keeps(remaining, victim.rate, thief_rate, thief_latency_s, share_s)
    split = max(victim.reserved + max(1, keep), victim.floor)
    if share_s is not None and thief_rate is not None and thief_rate > 0:
        # (nor more than the thief fetches by then: the rest of the victim's excess
        # is for the flows that run out of work after it, in one piece)
        takes = math.floor(thief_rate * max(0.0, share_s - thief_latency_s))
        split = max(split, victim.end - takes)
    split = grid.align_up(split)
    if split >= victim.end:
        return None
    if victim.rate is not None and victim.rate <= 0:
        # A stalled flow (no byte within the rate window, or none since its request
        # past the stall timeout: engine._lane_rate): any split gains, for a thief
        # that is not stalled itself. The check below would compare two infinite
        # times and never steal.
        if thief_rate is not None and thief_rate <= 0:
            return None
        return Steal(victim.lane_id, split, victim.end)
    if victim.rate is not None and thief_rate is not None and thief_rate > 0:
        before = expected_seconds(remaining, victim.rate)
        kept = expected_seconds(split - victim.reserved, victim.rate)
        after = max(kept or 0.0, thief_latency_s + (victim.end - split) / thief_rate)
        # The gain must also outweigh one more latency: a new request costs the
        # thief more than its time to first byte (its data connection starts in
        # slow start), and at long RTTs marginal steals ping-ponged between flows.
        if before is not None and not (
            after < MIN_GAIN * before and before - after >= thief_latency_s
        ):
            return None
    split = uneven_split(
        victim, split, thief_rate,
        thief_latency_s if thief_switch_s is None else thief_switch_s, grid,
    )
    return Steal(victim.lane_id, split, victim.end)


def dearer(a: float | None, b: float | None) -> bool:
    """Is a switch costing ``a`` seconds dear beside one costing ``b``?"""
    return a is not None and b is not None and a >= DEAR_SWITCH_S and a >= SWITCH_RATIO * b


def uneven_split(
    victim: LaneView, split: int, thief_rate: float | None, thief_switch_s: float,
    grid: PieceGrid,
) -> int:
    """Where to cut ``victim`` when its flow's switches and the thief's are not
    alike (a far fast mirror's new connection spends seconds in slow start; a near
    one's is up to speed in a few milliseconds): the cheap flow makes the
    corrections, so that the dear one runs on to the end on the range it has.
    - A dear thief at least as fast takes all of a cheap victim's range but
      CHEAP_KEEPS_S of its work: the victim, soon dry, takes its share back from
      the top of the thief's new range, which then only ever ends early. (Split to
      finish together, a wrong rate, a ramp read slow, had the far flow run dry
      first and switch again: r17, a 57.9 Mbit/s mirror 250 ms away switched four
      times.)
    - A cheap thief takes from a dear victim's top at most CHUNK_S of its own
      work at a time (or CHUNK_SWITCHES of its switches): it comes back for more
      when the victim's rate is known better, rather than leave a victim read slow
      in its ramp so little that it runs dry before the thief and switches.
    ``split`` (the even finish's cut) otherwise."""
    mine = victim.switch_s
    if (
        mine is None or thief_rate is None or thief_rate <= 0
        or victim.rate is None or victim.rate <= 0
    ):
        return split
    if dearer(thief_switch_s, mine) and thief_rate >= victim.rate:
        keep = grid.align_up(max(victim.reserved + math.ceil(victim.rate * CHEAP_KEEPS_S),
                                 victim.floor))
        return min(split, keep)
    if dearer(mine, thief_switch_s):
        chunk = math.floor(thief_rate * max(CHUNK_S, CHUNK_SWITCHES * thief_switch_s))
        capped = grid.align_up(victim.end - chunk)
        if capped < victim.end:
            return max(split, capped)
    return split


def plan_duplicate(
    victim: LaneView, thief_rate: float | None, thief_latency_s: float, budget_left: int
) -> Duplicate | None:
    remaining = victim.end - victim.reserved
    if remaining <= 0 or remaining > budget_left:
        return None
    if victim.rate is not None and victim.rate <= 0:
        # (no byte for long, engine._lane_rate: any flow that is not stalled itself
        # beats it, as in plan_steal)
        if thief_rate is not None and thief_rate <= 0:
            return None
        return Duplicate(victim.lane_id, victim.reserved, victim.end)
    if thief_rate is None or thief_rate <= 0 or victim.rate is None:
        return None
    t_victim = expected_seconds(remaining, victim.rate)
    t_dup = thief_latency_s + remaining / thief_rate
    if t_victim is None or not t_dup < DUPLICATE_ADVANTAGE * t_victim:
        return None
    return Duplicate(victim.lane_id, victim.reserved, victim.end)


def plan_tail_move(
    lanes: Sequence[LaneView],
    *,
    thief_rate: float | None,
    thief_latency_s: float,
    grid: PieceGrid,
    duplicate_budget_left: int,
    thief_switch_s: float | None = None,
) -> Steal | Duplicate | None:
    """Steal from the lane that finishes last; failing that, maybe race its end.
    Lanes of connections on trial are left out while another lane gives a steal:
    a trial's new connection reads slow in its ramp and so looks like the lane to
    finish last, and taking its range leaves nothing to judge it by (r41: a 38.4
    Mbit/s mirror 250 ms away that holds each connection to 9.6; its first
    connection took 2.4 of its trial's 2.6 MB before the trial's slow start was
    over, and the trial was judged "no gain")."""
    if any(v.on_trial for v in lanes):
        steal = _plan_steal_among(
            [v for v in lanes if not v.on_trial], lanes, thief_rate, thief_latency_s, grid,
            thief_switch_s,
        )
        if steal is not None:
            return steal
    steal = _plan_steal_among(lanes, lanes, thief_rate, thief_latency_s, grid, thief_switch_s)
    if steal is not None:
        return steal
    victim = choose_victim(lanes)
    if victim is None:
        return None
    if thief_rate is not None:
        victim = _rated(victim, lanes)
    return plan_duplicate(victim, thief_rate, thief_latency_s, duplicate_budget_left)


def _plan_steal_among(
    victims: Sequence[LaneView], lanes: Sequence[LaneView], thief_rate: float | None,
    thief_latency_s: float, grid: PieceGrid, thief_switch_s: float | None = None,
) -> Steal | None:
    """plan_tail_move's steal with the victim one of ``victims``; shares of the work
    left still count every lane."""
    victim = choose_victim(victims)
    if victim is None:
        return None
    if thief_rate is not None:
        victim = _rated(victim, lanes)
    share_s = share_until_s(lanes, thief_rate, thief_latency_s)
    steal = _steal_from(lanes, victim, thief_rate, thief_latency_s, grid, share_s,
                        thief_switch_s)
    if steal is None:
        return None
    return _bulkier_steal(victims, lanes, steal, thief_rate, thief_latency_s, grid, share_s,
                          thief_switch_s)


def _rated(victim: LaneView, lanes: Sequence[LaneView]) -> LaneView:
    """``victim``, at the mean of the known rates when its own is not known yet."""
    if victim.rate is not None:
        return victim
    known = [v.rate for v in lanes if v.rate is not None and v.rate > 0]
    if not known:
        return victim
    return replace(victim, rate=sum(known) / len(known))


def _steal_from(
    lanes: Sequence[LaneView], victim: LaneView, thief_rate: float | None,
    thief_latency_s: float, grid: PieceGrid, share_s: float | None,
    thief_switch_s: float | None = None,
) -> Steal | None:
    """plan_steal with the victim held to its share of all the work left only
    when other flows will run dry before the common finish (others_run_dry)."""
    if share_s is not None and not others_run_dry(lanes, victim, share_s, thief_latency_s):
        share_s = None
    return plan_steal(victim, thief_rate, thief_latency_s, grid, share_s, thief_switch_s)


def _bulkier_steal(
    victims: Sequence[LaneView], lanes: Sequence[LaneView], steal: Steal,
    thief_rate: float | None, thief_latency_s: float, grid: PieceGrid,
    share_s: float | None, thief_switch_s: float | None = None,
) -> Steal:
    """``steal`` (from the lane that finishes last), or a larger one from another
    lane when ``steal`` is small against what the switch costs the thief (its rate
    over its latency: a far fast flow's new data connection is in slow start for
    about a bandwidth-delay product, BULK_STEAL). r17: a 57.9 Mbit/s mirror 250 ms
    away took 1.9 MB at a time from six connections of a 9.7 Mbit/s mirror, each
    steal a slow start of its own, while a far 23.2 Mbit/s mirror's long range ran
    to the end."""
    if not thief_rate or thief_rate <= 0 or thief_latency_s <= 0:
        return steal
    size = steal.end - steal.split
    if size >= BULK_STEAL * thief_rate * thief_latency_s:
        return steal
    best = steal
    for v in victims:
        if v.lane_id == steal.lane_id or v.shadowed or v.end <= v.reserved:
            continue
        v = _rated(v, lanes)
        if v.rate is None:
            continue
        other = _steal_from(lanes, v, thief_rate, thief_latency_s, grid, share_s,
                            thief_switch_s)
        if other is not None and other.end - other.split > BULK_GAIN * (best.end - best.split):
            best = other
    return best


def pool_share(
    first: tuple[int, int],
    pool_bytes: int,
    rate: float | None,
    others: Sequence[tuple[int, float | None]],
    grid: PieceGrid,
) -> int | None:
    """Where a flow that ran out of work should stop in the pool's ``first`` range
    (work given up by a slow or failed mirror): at what it would fetch by the time
    all the work left, the pool's ``pool_bytes`` and the ``others``' (bytes left,
    rate), is done, every flow sharing it by rate so that all finish together. None:
    take the range whole, when a rate is unknown or the rest would be a sliver of
    less than a second of this flow. Taken whole, a slow mirror's remainder made the
    first free flow the long pole, and the steals that undid it cost ~4 RTT each on
    long paths (1.33x against 1.20x with shares, a far mirror slowing to 1/20)."""
    if rate is None or rate <= 0 or any(r is None or r <= 0 for _, r in others):
        return None
    work = pool_bytes + sum(left for left, _ in others)
    others_rate = sum(r for _, r in others if r is not None)
    split = grid.align_up(
        first[0] + math.ceil(rate * finish_together_s(work, others_rate, rate, 0.0))
    )
    if split >= first[1] - rate:
        return None
    return split


def begun_ahead_latency_s(left: int, rate: float | None, rtt_s: float) -> float | None:
    """When a range begun ahead of a flow's running one (engine._queue_next) is up
    to speed: once the running one's ``left`` bytes are in, but never sooner than
    its own request's round trip and slow start, however soon that is. (Planned
    with the time left alone, a far flow whose range had been cut short by steals
    looked free at once, took the file's last bytes from a near flow and finished
    last.) None without a rate."""
    if not rate or rate <= 0:
        return None
    return max(left / rate, rtt_s + slow_start_s(rate, rtt_s))


# A recent rate this far above the window's: the connection is still in slow start.
RAMPING = 1.5


def ramp_rate(window: float | None, recent: float | None) -> float | None:
    """A flow's rate for timing what must begin before its range ends (its spare
    connection, its next range begun ahead): ``window``, its meter's rate, or, while
    ``recent`` (its last two round trips) is well above that, twice the recent one.
    In slow start the rate doubles each round trip: the window's average lags it by
    seconds on a long path, and the recent one by at least the doubling to come."""
    if recent is None or (window is not None and recent <= window):
        return window
    if window is not None and recent < RAMPING * window:
        return recent
    return 2 * recent


def victim_rate(window: float | None, recent: float | None, long: bool) -> float | None:
    """A flow's rate as a victim of tail planning: its meter's ``window`` rate, or,
    on a ``long`` ramp (tail.long_ramp) while ``recent`` (its last two round trips)
    is above that, the recent one: in slow start on a long path the window's
    average lags what the flow carries by seconds (r17: two far mirrors at 3 s,
    each read as the one to finish last, took each other's ends, two switches of
    ~2 s). Not ramp_rate's doubling: a victim's rate sets what it keeps."""
    if long and window is not None and recent is not None and recent > window:
        return recent
    return window


def time_left_s(
    left: int, window: float | None, recent: float | None, rtt_s: float
) -> float | None:
    """Seconds until a flow has ``left`` bytes in: at the higher of its meter's
    ``window`` rate and its ``recent`` one; while the recent one runs well ahead
    (RAMPING: slow start), with the rate doubling every round trip from the recent
    one, as if no link capped it (the optimistic side: what this times, a spare
    asked for early, costs an idle connection, one asked for late a slow start).
    None with no rate."""
    ramping = recent is not None and (window is None or recent >= RAMPING * window)
    if ramping and recent is not None and recent > 0 and rtt_s > 0:
        return rtt_s * math.log2(left / (recent * rtt_s) + 1)
    rates = [r for r in (window, recent) if r is not None and r > 0]
    if not rates:
        return None
    return left / max(rates)


def long_ramp(rate: float | None, rtt_s: float | None, min_s: float) -> bool:
    """Does a new connection over a path of ``rtt_s`` take ``min_s`` or more for
    its first round trip and its slow start to ``rate`` (bytes/s)? On such paths
    (50 Mbit/s at 250 ms: 2 s) what begins before a range ends must be timed on the
    ramp; at 10 ms, however fast, it is gone within a monitoring round."""
    if not rtt_s or rtt_s <= 0:
        return False
    return rtt_s + slow_start_s(rate, rtt_s) >= min_s


def measures_a_request(latency_s: float, rtt_s: float | None) -> bool:
    """Is a range's first byte ``latency_s`` after its request a measure of the
    request's latency? Not when it came sooner than half the path's round trip
    (``rtt_s``, None: unknown): no request brings a byte that soon, so it was on
    its way before the range was asked for (a head start's buffered bytes). (An
    HTTP head start read as 30-50 us; with that as its switch cost a mirror
    160 ms away stole a range's last 32 KB from a 5 Mbit/s one 20 ms away and
    ended 0.3 s after it would have: lab, wide-area over nginx.)"""
    return rtt_s is None or latency_s >= 0.5 * rtt_s


def switch_latency_s(
    measured_s: float | None, rtt_s: float, round_trips: int, default_s: float
) -> float:
    """Seconds a new range's request costs a flow before its first byte: what its
    switches measured, else ``round_trips`` of its path's ``rtt_s`` (the
    transport's count for a request: every range so far came from a head start or
    was begun ahead), else ``default_s`` on a path with no RTT known."""
    if measured_s is not None:
        return measured_s
    return rtt_s * round_trips if rtt_s > 0 else default_s


def overlap_lead_bytes(
    rate: float, rtt_s: float, margin: float = 1.0, round_trips: int = 1
) -> int:
    """Bytes of a running range left when the next range's transfer should begin
    on a second connection to the same mirror: ``margin`` x the rate over the
    request's ``round_trips`` to its first byte (the transport's
    ``ahead_round_trips``: one on a connection made ready ahead) and the slow
    start. With 1.0 the link stays full and the two transfers barely share it:
    the old one runs alone while the request travels, then carries what the new
    one leaves while its window doubles (about one bandwidth-delay product in
    log2(BDP / IW) round trips, tcp_model.slow_start_s). See
    engine.EngineConfig.overlap_margin for what a longer share costs."""
    return int(rate * margin * (round_trips * rtt_s + slow_start_s(rate, rtt_s)))
