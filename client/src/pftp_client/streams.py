"""Extra connections to one mirror whose single connection cannot fill its path.

A TCP sender that halves its window on every loss (CUBIC, Reno: most servers)
carries about MSS / (RTT x sqrt(p)) on a path that drops a share p of its packets
(Mathis et al.), whatever the path's rate: 1 % loss at 30 ms leaves ~4.5 of a
20 Mbit/s link, and 4 connections carry ~14, 8 carry ~18 (notes/multi-stream.md).
GridFTP's parallel streams and aria2's ``-x`` exist for this. A sender that does
not back off on random loss (BBR) carries the link with one connection, and more
connections then only split it.

The other case is a server that limits each connection's rate (vsftpd
``anon_max_rate``, nginx ``limit_rate``, pure-ftpd ``-t``, a pyftpdlib throttled
handler): it writes a burst and sleeps, so its data arrive in bursts with the
connection idle between them, where a connection that fills its path's bottleneck
is never idle. A loss-limited window on a long path does the same (a window's
burst per round trip). ``idle_share`` reads that from the arrival times the engine
keeps for every flow (any transport), and says how much more the path took when
the connection was busy.

So the engine tries: when a running flow's data connection sees segments arriving
out of order (the receiver's view of loss) or sits idle between bursts, another
connection to that mirror (more than one at once when the flow is idle most of the
time) takes part of the flow's range. Once it has run past its start, the mirror's
flows together must carry more than before (``needed_gain``), and, when the
client's access link is unknown, not at the other mirrors' expense; otherwise the
extra connections finish their ranges and take no more work, and that mirror gets
no other. These are the pure parts of that decision; the engine
(engine._try_stream, _judge_stream) holds the state.

A server's limit shows from its first bursts, before a monitor round has passed:
the engine's early look (engine._early_look, half a second in) reads
``paused_share`` (even bursts, the connection paused most of the time) and whole
bursts per receive (``burst_bytes``). Its bursts also carry the path's rate
(``burst_path_rate``), and the trial opens as many connections as fill it
(``connections_for``). A trial whose rate grew with its connections (``scales``)
is followed by one that doubles them; one with more connections than the path
takes keeps those the new rate needs (``kept_streams``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pftp_client.summary import MirrorStats

if TYPE_CHECKING:
    import numpy as np


def _median(x: np.ndarray) -> float:
    """The median of an array (nan when empty, as np.median's). np.median loads
    numpy.ma on its first call (~20-50 ms, under the engine's lock, in the flows'
    first second) and costs ~6x this per call."""
    import numpy as np

    n = x.size
    k = n // 2
    if not n:
        return math.nan
    if n % 2:
        return float(np.partition(x, k)[k])
    p = np.partition(x, (k - 1, k))
    return float(p[k - 1] + p[k]) / 2


@dataclass
class StreamTrial:
    """An extra connection on probation: did the mirror's flows gain by it?"""

    mirror: str  # the mirror's name (its first flow's id)
    streams: list[str]  # the extra flows' ids
    at: float  # when they were started (engine clock)
    before_Bps: float  # the mirror's flows' rate over the monitor round before
    received: dict[str, int]  # bytes each flow (this mirror's and others') had then
    connections: int  # the mirror's connections before the trial
    others_Bps: float = 0.0  # the other mirrors' flows' rate over that round
    check_others: bool = False  # access link unknown: the gain must not be theirs
    path_Bps: float | None = None  # the path's rate read inside bursts (burst_path_rate)


def loss_share(before: tuple[int, int] | None, now: tuple[int, int]) -> float | None:
    """Share of the data segments received between two readings of one
    connection's (out-of-order, received) counters that arrived out of order;
    None with too few segments to say (or counters of another connection)."""
    ooo0, segs0 = before if before is not None else (0, 0)
    ooo, segs = now
    if segs < segs0 or ooo < ooo0:  # a new data connection: counters restarted
        ooo0, segs0 = 0, 0
    got = segs - segs0
    if got < 100:
        return None
    return (ooo - ooo0) / got


def idle_share(
    times_ns: np.ndarray, nbytes: np.ndarray, since_ns: int,
    min_bin_s: float = 0.02, max_bin_s: float = 0.1,
) -> float | None:
    """Share of the time since ``since_ns`` in which one connection received
    nothing, from its arrival times (ns, ascending) and sizes; None with too few
    arrivals to say.

    Time is cut into bins four of the connection's typical (median) gaps between
    arrivals wide, at least ``min_bin_s`` (links and shapers deliver in batches a
    timer tick apart, 4 ms at 250 Hz; a reader thread waits its turn for Python's
    interpreter up to ~5 ms: a 20 Mbit/s link's data in 5 ms bins left half of
    them empty in the lab) and at most ``max_bin_s``, and the share of empty bins
    between its first and last arrival is returned. A connection that
    fills its path's bottleneck receives segment after segment at that
    bottleneck's pace: its gaps are all alike and no such bin is empty. One
    whose sender pauses (a server's per-connection rate limit; a loss-limited
    window on a long path) receives in bursts, its median gap is a burst's
    inner gap, and the pauses leave bins empty."""
    import numpy as np

    keep = times_ns >= since_ns
    t = times_ns[keep]
    if t.size < 40:
        return None
    span = (int(t[-1]) - int(t[0])) / 1e9
    if span < 0.3:
        return None
    gaps = np.diff(t) / 1e9
    longest = float(gaps.max())
    if longest >= 0.15 * span and int((gaps >= 0.5 * longest).sum()) < 3:
        # one long stop or two (a retransmission timeout after a shaper's queue
        # overflowed in slow start), not a sender's regular pauses: nothing to say.
        # (Regular pauses that long are a sender's: vsftpd held to 0.55 MB/s
        # behind 13.1 Mbit/s pauses ~0.1 s between bursts, over a first round of
        # 0.7 s; read as a stop, its trial waited for the second round, r62.)
        return None
    width = min(max(4.0 * _median(gaps), min_bin_s), max_bin_s)
    bins = int(span / width)
    if bins < 10:
        return None
    index = np.minimum(((t - t[0]) / 1e9 / width).astype(np.int64), bins - 1)
    return 1.0 - np.unique(index).size / bins


def _pauses(
    times_ns: np.ndarray, nbytes: np.ndarray, since_ns: int, min_arrivals: int,
    pause_s: float | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """The arrivals since ``since_ns`` (times, bytes), the gaps between them (s),
    the indices of those gaps that are pauses (paused_share says what a pause is)
    and of the long ones among them (at least half the typical pause: not a burst
    stalled halfway); None with fewer than ``min_arrivals`` arrivals."""
    import numpy as np

    keep = times_ns >= since_ns
    t = times_ns[keep]
    if t.size < min_arrivals:
        return None
    gaps = np.diff(t) / 1e9
    floor = max(10.0 * _median(gaps) if pause_s is None else pause_s, 0.005)
    pause = np.flatnonzero(gaps > floor)
    long = pause
    if pause.size:
        long = pause[gaps[pause] > 0.5 * _median(gaps[pause])]
    return t, nbytes[keep], gaps, pause, long


def paused_share(
    times_ns: np.ndarray, nbytes: np.ndarray, since_ns: int,
    min_pauses: int = 5, max_spread: float = 0.5, min_arrivals: int = 20,
    pause_s: float | None = None, min_burst: int = 0,
) -> float | None:
    """Share of the time since ``since_ns`` that one connection spent in pauses
    between regular bursts; None unless it received in at least ``min_pauses``
    pauses bursts of about one size (their sizes' coefficient of variation at most
    ``max_spread``), each at least ``min_burst`` bytes.

    A pause is a gap between arrivals ten of the connection's typical (median)
    gaps long, and at least 5 ms (a shaper's timer tick, a reader thread waiting
    for Python's interpreter). A server that holds each connection to a rate
    writes a buffer and sleeps: equal bursts at a steady pace from its first
    second (vsftpd at 1.25 MB/s: 64 KiB every 50 ms, 92-97 % of the time
    paused in the lab). The pauses of a sender that overran a shaper's queue
    in slow start are few, long and uneven, and the bursts between them too
    (lab, 20-40 Mbit/s links, first half second: at most 83 % paused, those
    with uneven bursts; with even ones at most 71 %). Read in a connection's
    first second, before idle_share can say.

    ``pause_s`` sets the pause instead (at least 5 ms): when a whole burst
    arrives in one or two receives, most gaps are pauses and the median says
    nothing; a gap of ten round trips on a short path is no ACK clock's either.

    A burst can itself stop for longer than that: vsftpd's 64 KiB take 13 ms
    through a 40 Mbit/s link, and a burst stalled 12 ms halfway read as two
    uneven ones (lab, session 25: 2 of 24 first connections not seen by 0.5 s).
    So the same arrivals are also read with only the long gaps as pauses, those
    at least half the typical long one's length; the larger share of the
    readings whose bursts are even is returned."""
    import numpy as np

    found = _pauses(times_ns, nbytes, since_ns, max(min_arrivals, 2), pause_s)
    if found is None:
        return None
    t, b, gaps, every, long = found
    span = (int(t[-1]) - int(t[0])) / 1e9
    upto = np.cumsum(b)
    best: float | None = None
    for pause in (every, long) if long.size < every.size else (every,):
        if pause.size < min_pauses or span <= 0:
            continue
        # bytes that arrived between one pause and the next
        bursts = np.diff(upto[pause]).astype(float)
        # (two pauses hold one burst: nothing to compare it with; the caller asks
        # for two only with pauses no sender's ACK clock or loss recovery makes)
        fewest = 1 if min_pauses <= 2 else 2
        if (bursts.size < fewest or float(bursts.mean()) <= 0
                or float(bursts.min()) < min_burst):
            continue
        if float(bursts.std()) > max_spread * float(bursts.mean()):
            continue
        share = float(gaps[pause].sum()) / span
        best = share if best is None else max(best, share)
    return best


def without_crumbs(
    times_ns: np.ndarray, nbytes: np.ndarray, pause_s: float, min_burst: int,
) -> tuple[np.ndarray, np.ndarray]:
    """The arrivals without the runs between two pauses (gaps of ``pause_s`` or
    more) that carry less than ``min_burst`` bytes in all: a server that counts
    its limit in whole seconds sends what is left of a second's allowance, a
    segment or two, on its own between two long pauses (nginx limit_rate, lab:
    1158 bytes between bursts of 0.8-1.3 MB), which would read as an uneven burst.
    The first run is kept (the window's start cuts it); the last, after a pause,
    only with ``min_burst`` bytes: a leftover there would end its pause early and
    cut the period the paced rate reads (lab: 1.25 MB in 0.51 s, a 10 Mbit/s
    limit read as 14.8 and a trial one connection short). A burst just begun is
    kept at the next look."""
    import numpy as np

    if times_ns.size < 3:
        return times_ns, nbytes
    cut = np.diff(times_ns) >= int(pause_s * 1e9)
    run = np.concatenate(([0], np.cumsum(cut)))
    carried = np.bincount(run, weights=nbytes)
    keep = carried[run] >= min_burst
    keep |= run == 0
    return times_ns[keep], nbytes[keep]


def first_pause(
    times_ns: np.ndarray, nbytes: np.ndarray, since_ns: int, pause_s: float,
    min_first: int, min_after: int,
) -> tuple[float, float, int] | None:
    """(share of the time since ``since_ns`` paused, the rate that time carried,
    when the connection resumed: ns) when its first gap of ``pause_s`` or more came
    after ``min_first`` bytes and has ended with ``min_after`` bytes since; None
    otherwise.

    A server that counts its limit in whole seconds (nginx ``limit_rate``) sends a
    second's allowance at the path's rate and then nothing until the next second:
    a range's first burst and first pause are a whole period, and the bytes over
    that time are the rate the connection is held to (lab, 1.25 MB/s behind 40
    Mbit/s: 10.0-11.5 Mbit/s read at 0.8-1.0 s, a second before a second pause
    ends). The caller asks the data after the pause to cross at the path's rate
    too: a connection that stalled because its path slowed resumes slowly."""
    import numpy as np

    keep = times_ns >= since_ns
    t = times_ns[keep]
    if t.size < 20:
        return None
    b = nbytes[keep]
    gaps = np.diff(t) / 1e9
    pauses = np.flatnonzero(gaps >= pause_s)
    if not pauses.size:
        return None
    i = int(pauses[0])
    upto = int(pauses[1]) + 1 if pauses.size > 1 else t.size
    if int(b[: i + 1].sum()) < min_first or int(b[i + 1:upto].sum()) < min_after:
        return None
    span = (int(t[i + 1]) - int(t[0])) / 1e9
    if span <= 0:
        return None
    return float(gaps[i]) / span, float(b[: i + 1].sum()) / span, int(t[i + 1])


def paced_rate(
    times_ns: np.ndarray, nbytes: np.ndarray, since_ns: int, pause_s: float | None = None
) -> float | None:
    """Bytes per second a connection paused between bursts carries: the median of
    its whole periods' rates since ``since_ns`` (a period from the end of one
    pause to the end of the next, pauses as paused_share finds them); None with
    fewer than two pauses. A mean that begins at its first data also counts the
    start's burst (vsftpd writes two at once) and reads a 10 Mbit/s limit as up
    to 15; one over all the periods takes a late read (the client stalled, a
    period's burst read with the next) as a slower pace (lab, session 25: 1 MB/s
    read as 0.7). The median of the periods' rates is neither.

    Only the long pauses (paused_share's second reading) bound a period: pure-ftpd
    stops ~6 ms inside a burst, and with every gap over 5 ms a pause its first
    0.2 s alternate 10 ms periods at ~45 Mbit/s and 60 ms ones at ~4, so that a
    median of four read a 10 Mbit/s limit as 30-35 (lab, session 27: 6 % of the
    first connections' reads at 0.2-0.7 s over 12 Mbit/s, 0.5 % with long pauses;
    two of 16 runs kept one or no extra connection to such a mirror, 1.23x)."""
    import numpy as np

    found = _pauses(times_ns, nbytes, since_ns, 3, pause_s)
    if found is None or found[4].size < 2:
        return None
    t, b, _gaps, _every, pause = found
    ends = pause + 1
    upto = np.concatenate(([0], np.cumsum(b)))
    spans = (t[ends[1:]] - t[ends[:-1]]) / 1e9
    rates = (upto[ends[1:]] - upto[ends[:-1]]) / np.maximum(spans, 1e-6)
    return _median(rates)


def burst_path_rate(
    times_ns: np.ndarray, nbytes: np.ndarray, since_ns: int, pause_s: float | None = None,
    min_reads: int = 6, min_bursts: int = 2, min_burst_reads: int = 3,
) -> float | None:
    """Bytes per second the path carries while a paused sender's burst crosses
    it: the median, over the receives inside its bursts since ``since_ns`` (split
    at every pause, as paused_share finds them) but a burst's first, of each
    receive's bytes over the time since the one before; None with fewer than
    ``min_reads`` such receives from ``min_bursts`` bursts of ``min_burst_reads``
    receives or more.

    A server that holds a connection to a rate still writes each burst as fast
    as the path takes it (vsftpd's 64 KiB cross a 40 Mbit/s link in 13 ms), so
    the burst's pace is the path's, like a packet train's (paper 004's probe),
    and the path over the held rate says how many connections fill it. A
    reader that wakes late finds part of a burst waiting and catches up over a
    few receives (lab: 33 KB, then 16 KB 0.1 ms later, then a segment each
    0.3 ms); a burst's first receive and the catching up are few among its
    receives, and the median leaves them out, as it does a receive after a
    stall. A burst read in one or two receives (a fast path) says nothing."""
    import numpy as np

    found = _pauses(times_ns, nbytes, since_ns, 3, pause_s)
    if found is None:
        return None
    t, b, gaps, every, _long = found
    starts = np.concatenate(([0], every + 1))
    ends = np.concatenate((every, [t.size - 1]))
    # (gap i leads to receive i + 1; a burst counts with 3 receives or more)
    inside = np.zeros(gaps.size, dtype=bool)
    said = 0
    for lo, hi in zip(starts.tolist(), ends.tolist(), strict=True):
        if hi - lo >= min_burst_reads - 1:
            inside[lo:hi] = True
            said += 1
    if said < min_bursts or int(inside.sum()) < min_reads:
        return None
    rates = b[1:][inside] / np.maximum(gaps[inside], 1e-6)
    return _median(rates.astype(float))


def bursts_outpace(path_Bps: float | None, paced_Bps: float | None, factor: float) -> bool:
    """Do a paused connection's bursts cross ``factor`` times faster than the rate
    it is paced to (True when either is unknown)? A server that sleeps between
    bursts writes each at its path's rate, well above its mean; a slow link whose
    connection stalls in loss recovery delivers what it has at about the mean's
    pace, and its stalls are no server's sleeps."""
    if not path_Bps or not paced_Bps:
        return True
    return path_Bps >= factor * paced_Bps


def connections_for(path_Bps: float | None, held_Bps: float, have: int, most: int,
                    tolerance: float = 0.1) -> int | None:
    """How many extra connections fill a path of ``path_Bps`` when each is held
    to ``held_Bps`` and ``have`` run already (at least one, within ``most`` in
    all); None when the path's rate is unknown. A share of a connection within
    ``tolerance`` is not worth one more (each ends raggedly at the tail)."""
    if not path_Bps or held_Bps <= 0:
        return None
    want = math.ceil(path_Bps / held_Bps - tolerance)
    return max(1, min(most - have, want - have))


def burst_bytes(
    before: tuple[int, int] | None, now: tuple[int, int], min_waits: int = 3
) -> float | None:
    """Bytes one receive that waited for data returned, on average, between two
    readings of a connection's (waited receives, their bytes) counters; None with
    fewer than ``min_waits`` such receives.

    A receive that waits returns what arrived at once when the data came. At a
    bottleneck's pace that is a few segments (the links' and the shaper's
    batching: milliseconds of the connection's rate); from a server that writes
    a burst and sleeps, the whole burst (vsftpd: 64 KiB, 65 ms of a 1 MB/s
    limit). idle_share sees bursts that arrive over several receives; this sees
    those that arrive in one. The engine asks for both a size (a shaper lets its
    bucket through at once: tens of KiB) and a duration at the mean rate."""
    w0, b0 = before if before is not None else (0, 0)
    w, b = now
    if w < w0 or b < b0:
        w0, b0 = 0, 0
    if w - w0 < min_waits:
        return None
    return (b - b0) / (w - w0)


def rate_since(times_ns: np.ndarray, nbytes: np.ndarray, since_s: float, now_s: float) -> float:
    """Bytes per second that arrived between ``since_s`` and ``now_s`` (the engine's
    clock, in which arrival times are ns), from one connection's arrivals."""
    if now_s <= since_s:
        return 0.0
    return float(nbytes[times_ns >= int(since_s * 1e9)].sum()) / (now_s - since_s)


def steady(
    times_ns: np.ndarray, nbytes: np.ndarray, since_ns: int, tolerance: float = 1.5
) -> bool:
    """Did the connection carry about as much in the second half of the time since
    ``since_ns`` as in the first (within ``tolerance`` times either way)? A server's
    limit holds a connection at one rate; a link whose rate just changed (a mirror
    slowing down, a sender's queue draining) also leaves bursts and gaps behind,
    and is no reason for more connections."""
    keep = times_ns >= since_ns
    t = times_ns[keep]
    if t.size < 4:
        return False
    b = nbytes[keep]
    mid = (int(t[0]) + int(t[-1])) // 2
    first = int(b[t < mid].sum())
    second = int(b[t >= mid].sum())
    return first > 0 and second > 0 and max(first, second) <= tolerance * min(first, second)


def streams_to_add(idle: float | None, have: int, most: int, burst: bool = False) -> int:
    """How many extra connections to try at once on a mirror that has ``have``
    (at most ``most`` in all): one, or, when its connection sat idle most of the
    time, as many as the idle share says the path took more (busy a quarter of
    the time: four times the rate), up to the limit; ``burst``: whole bursts
    arrived at once, the path's rate unknown but far above the mean: the limit."""
    room = most - have
    if room <= 0:
        return 0
    if burst:
        return room
    if idle is None or idle < 0.5:
        return 1
    more = int(1.0 / max(1.0 - idle, 1e-3)) - 1
    return max(1, min(room, more))


def trial_cuts(base: int, left: int, add: int, lead: int) -> list[int]:
    """Where a flow's ``left`` bytes from ``base`` are cut for ``add`` new
    connections (before rounding to pieces): the flow keeps ``lead`` (what it
    fetches while they start; at most half) and a share like each of theirs of
    the rest. Split evenly, the first connection of a mirror 250 ms away ran dry
    and took its trial's range back before the trial's slow start was over (r41)."""
    lead = max(0, min(lead, left // 2))
    rest = left - lead
    return [base + lead + rest * i // (add + 1) for i in range(1, add + 1)]


def needed_gain(connections: int, added: int, gain: float) -> float:
    """The factor by which a mirror's rate must grow for ``added`` connections to
    ``connections`` to be kept: ``gain`` for the second connection, then a share
    of it per connection added (each adds less to a mirror already shared among
    more), never under 1.1 (noise)."""
    step = (gain - 1.0) / max(connections, 1)
    return 1.0 + max(0.1, step * added)


def scales(connections: int, added: int, before_Bps: float, after_Bps: float,
           share: float = 0.85) -> bool:
    """Did the mirror's rate grow about in proportion to its connections (each new
    one carrying ``share`` of what an old one did)? Then each connection is held
    to a rate (a server's limit) and its path still has room: more will pay too."""
    if connections <= 0 or before_Bps <= 0:
        return False
    return after_Bps >= share * before_Bps * (connections + added) / connections


def kept_streams(connections: int, added: int, before_Bps: float, after_Bps: float) -> int:
    """Of ``added`` extra connections whose gain fell short of what all of them
    needed, how many to keep: as many as the new rate needs at the rate each
    connection carried before (a limited server behind a path that takes only a
    few of them); 0 when they brought nothing."""
    if connections <= 0 or before_Bps <= 0 or after_Bps <= before_Bps:
        return 0
    per = before_Bps / connections
    need = math.ceil(after_Bps / per - 1e-9) - connections
    return max(0, min(added - 1, need))


def gained(before_Bps: float, after_Bps: float, gain: float) -> bool:
    """Did the extra connections pay: the mirror's flows carry ``gain`` times more?"""
    return after_Bps >= gain * before_Bps


def others_kept(
    others_before_Bps: float, others_after_Bps: float, mirror_gain_Bps: float
) -> bool:
    """With the access link unknown, a mirror's gain may only be a larger share of
    a full access link, taken from the other mirrors: kept only if they lost less
    than half of what it gained."""
    return others_before_Bps - others_after_Bps < 0.5 * mirror_gain_Bps


def merge_stream_stats(into: MirrorStats, extra: MirrorStats) -> None:
    """Count an extra connection's figures as its mirror's (``into`` is a copy).
    Its time overlaps the first connection's, so the mirror's seconds are the
    longer of the two, and their steady rates add up."""
    into.bytes += extra.bytes
    into.received += extra.received
    into.seconds = max(into.seconds, extra.seconds)
    into.failures += extra.failures
    into.ranges += extra.ranges
    into.ranges_ahead += extra.ranges_ahead
    into.ahead_s += extra.ahead_s
    if extra.steady_bps is not None:
        into.steady_bps = (into.steady_bps or 0.0) + extra.steady_bps
    for kind in extra.events:
        if kind not in into.events:
            into.events.append(kind)
