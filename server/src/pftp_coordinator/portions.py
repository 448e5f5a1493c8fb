"""Split a file into byte ranges over the selected mirrors (paper 004, 3.2.2).

"The server with the highest suitability transfers the largest file portion":
portions are proportional to a weight per mirror. The planner passes the
expected rates when every selected mirror has one (portions proportional to rate
is what makes all mirrors finish together, which is the point of the rule; paper
004 section 5 does exactly that by using the suitability of predicted download
time, which is proportional to rate), and the suitabilities otherwise.

Guarantees (property-tested): whole bytes, disjoint, contiguous, cover [0, size)
exactly, in the order of the weights given (best mirror at offset 0). Every
portion is at least ``min_portion`` bytes unless a single mirror takes the whole
file: when a portion would be smaller, the lowest-weight mirror is dropped and
the split is redone (fewer mirrors rather than tiny pieces). With ``piece_size``,
every boundary falls on a multiple of it, so piece hashes verify per portion.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from pftp_wire.tcp_model import ramp, slow_start_s

# Round trips a mirror starts behind one next door, before its slow start: the
# client's first byte from an FTP mirror comes 4 round trips after its connect
# began (connect; greeting with the pipelined login's replies; the data
# connection with REST+RETR; the first data: notes/ftp-pipelining.md), and a real
# sender's window grows slower than slow_start_s's doubling by about one more
# (notes/wide-area-floor.md). Fitted in the lab: four 20 Mbit/s mirrors 5-300 ms
# away started 0, 0.43, 1.3 and 2.8 s late in effect (5 gives 0.03, 0.36, 1.30,
# 2.91); 6, the count before the pipelined login, left the far ones idle at the
# end (1.29x against 1.24x; wide-area 1.136x against 1.128x; 4: 1.246x, 1.142x).
SETUP_ROUND_TRIPS = 5
# Over HTTP the first byte comes two round trips sooner (connect, then the GET:
# no login, no data connection); TLS adds one (1.3's handshake).
HTTP_SETUP_ROUND_TRIPS = SETUP_ROUND_TRIPS - 2


def setup_round_trips(url: str) -> int:
    """Set-up round trips to the first byte from a mirror at ``url`` (by scheme)."""
    scheme = url.partition(":")[0].lower()
    if scheme == "http":
        return HTTP_SETUP_ROUND_TRIPS
    if scheme == "https":
        return HTTP_SETUP_ROUND_TRIPS + 1
    return SETUP_ROUND_TRIPS


def start_delay_s(
    rate_bps: float, rtt_s: float | None, round_trips: int = SETUP_ROUND_TRIPS,
    connections: int = 1,
) -> float:
    """Seconds a mirror at ``rtt_s`` starts behind one next door: its set-up
    ``round_trips`` (setup_round_trips), then slow start over ``connections``
    opened together (pftp_wire.tcp_model, which the client's steals use too)."""
    return opening(rate_bps, rtt_s, round_trips, connections)[1]


def opening(
    rate_bps: float, rtt_s: float | None, round_trips: int = SETUP_ROUND_TRIPS,
    held: int = 1, ramp_max: int = 1,
) -> tuple[int, float]:
    """(connections, start_delay_s over them) for a mirror at ``rate_bps`` over
    ``rtt_s``: the ``held`` count its probe or its clients found, or more for a long
    slow start (tcp_model.ramp_connections, up to ``ramp_max``), whichever is more."""
    if not rtt_s or rtt_s <= 0:
        return max(1, held), 0.0
    k, ramp_s = ramp(rate_bps / 8, rtt_s, ramp_max)
    if held > k:
        k, ramp_s = held, slow_start_s(rate_bps / 8, rtt_s, held)
    return k, round_trips * rtt_s + ramp_s


def finish_together_weights(
    size: int, rates_bps: Sequence[float], starts_s: Sequence[float]
) -> list[float]:
    """Portion weights so that mirrors starting ``starts_s`` late all finish
    together: portion_i = r_i (T - s_i), T from the portions covering ``size``.
    A mirror that would finish after T with no bytes at all gets weight 0 (the
    split then drops it). Without start delays this is plain rate weighting."""
    rates = [max(0.0, r) / 8 for r in rates_bps]
    active = [i for i, r in enumerate(rates) if r > 0]
    while active:
        total_rate = math.fsum(rates[i] for i in active)
        finish = (size + math.fsum(rates[i] * starts_s[i] for i in active)) / total_rate
        late = [i for i in active if starts_s[i] >= finish]
        if not late:
            return [rates[i] * (finish - starts_s[i]) if i in active else 0.0
                    for i in range(len(rates))]
        active = [i for i in active if i not in late]
    return [float(r) for r in rates_bps]


@dataclass(slots=True)  # not frozen: frozen __init__ is slow on the hot path
class Portion:
    index: int  # position in the weights given
    offset: int
    length: int


def _largest_remainder(units: int, weights: Sequence[float]) -> list[int]:
    """Integer shares of ``units`` proportional to ``weights`` (Hamilton's method)."""
    total = math.fsum(weights)
    ideal = [units * w / total for w in weights]
    shares = [math.floor(x) for x in ideal]
    left = units - sum(shares)
    # Ties go to the earlier (better-ranked) mirror.
    by_remainder = sorted(range(len(weights)), key=lambda i: (-(ideal[i] - shares[i]), i))
    for i in by_remainder[:left]:
        shares[i] += 1
    return shares


def _clean_weights(weights: Sequence[float]) -> list[float]:
    out = []
    for w in weights:
        if math.isnan(w) or w < 0:
            raise ValueError(f"portion weights must be non-negative numbers, got {w!r}")
        out.append(w)
    if not any(math.isfinite(w) and w > 0 for w in out):
        return [1.0] * len(out)  # no information: equal portions
    if any(math.isinf(w) for w in out):
        return [1.0 if math.isinf(w) else 0.0 for w in out]
    return out


def split_portions(
    size: int,
    weights: Sequence[float],
    *,
    min_portion: int = 1,
    piece_size: int | None = None,
) -> list[Portion]:
    """Byte ranges for ``size`` bytes over mirrors with ``weights`` (best first).

    Returns one Portion per mirror kept, in input order; mirrors dropped for the
    minimum size do not appear (the caller makes them backups). ``size`` 0 gives
    one empty portion for the first mirror.
    """
    if size < 0:
        raise ValueError("size must not be negative")
    if not weights:
        raise ValueError("at least one mirror is needed to split a file")
    if min_portion < 1:
        raise ValueError("min_portion must be at least 1 byte")
    if piece_size is not None and piece_size < 1:
        raise ValueError("piece_size must be positive")
    w = _clean_weights(weights)
    unit = piece_size or 1
    n_units = -(-size // unit)  # last unit may be short
    if n_units <= 1:
        return [Portion(0, 0, size)]

    # Keep the heaviest mirrors (stable: ties keep the better-ranked one).
    keep = sorted(range(len(w)), key=lambda i: (-w[i], i))
    keep = keep[: min(len(keep), n_units)]
    while True:
        idx = sorted(keep)
        kw = [w[i] for i in idx]
        if math.fsum(kw) <= 0:
            kw = [1.0] * len(kw)
        shares = _largest_remainder(n_units, kw)
        portions: list[Portion] = []
        offset = 0
        for i, units in zip(idx, shares, strict=True):
            length = min(units * unit, size - offset)
            portions.append(Portion(i, offset, length))
            offset += length
        too_small = any(p.length < min_portion for p in portions)
        if not too_small or len(keep) == 1:
            return portions
        keep = keep[:-1]  # drop the lightest mirror and split again
