"""Extra connections to one mirror whose single connection cannot fill its path.

A TCP sender that halves its window on every loss (CUBIC, Reno: most servers)
carries about MSS / (RTT x sqrt(p)) on a path that drops a share p of its packets
(Mathis et al.), whatever the path's rate: 1 % loss at 30 ms leaves ~4.5 of a
20 Mbit/s link, and 4 connections carry ~14, 8 carry ~18 (notes/multi-stream.md).
GridFTP's parallel streams and aria2's ``-x`` exist for this. A sender that does
not back off on random loss (BBR) carries the link with one connection, and more
connections then only split it.

So the engine tries: when the client's access link has room and a running flow's
data connection sees segments arriving out of order (the receiver's view of loss),
a second connection to that mirror takes the second half of the flow's range. Once
it has run past its start, the mirror's flows together must carry ``gain`` times
what the one did before; otherwise the extra connection finishes its range and
takes no more work, and that mirror gets no other. These are the pure parts of that
decision; the engine (engine._try_stream, _judge_stream) holds the state.
"""

from __future__ import annotations

from dataclasses import dataclass

from pftp_client.summary import MirrorStats


@dataclass
class StreamTrial:
    """An extra connection on probation: did the mirror's flows gain by it?"""

    mirror: str  # the mirror's name (its first flow's id)
    stream: str  # the extra flow's id
    at: float  # when it was started (engine clock)
    before_Bps: float  # the mirror's flows' rate over the monitor round before
    received: dict[str, int]  # bytes each of the mirror's flows had received then


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


def gained(before_Bps: float, after_Bps: float, gain: float) -> bool:
    """Did the extra connection pay: the mirror's flows carry ``gain`` times more?"""
    return after_Bps >= gain * before_Bps


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
    if extra.steady_bps is not None:
        into.steady_bps = (into.steady_bps or 0.0) + extra.steady_bps
    for kind in extra.events:
        if kind not in into.events:
            into.events.append(kind)
