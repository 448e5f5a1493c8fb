"""Connections the coordinator advises for a mirror (Assignment.connections): how
many the client opens with the mirror's first, and where each begins.

Shared by the engine (which splits the mirror's work so) and the entry point's
early plan (early.EarlyPlan, which starts those transfers while the engine's
modules load): both cut with split_work, or a transfer started early would not
be the one a connection asks for. Light to import (the standard library, and
pftp_client.ranges when a portion is cut): the entry point loads it early.
"""

from __future__ import annotations

import itertools
import math

TYPE_CHECKING = False  # (typing.TYPE_CHECKING without importing typing)
if TYPE_CHECKING:
    from pftp_client.ranges import RangeSet

# Each advised connection gets at least this much of the mirror's portion: less is
# over before its set-up (a few round trips) has paid.
MIN_PART_BYTES = 1 << 20


def advised_count(
    connections: int, max_connections: int, work_bytes: int,
    min_part_bytes: int = MIN_PART_BYTES, access_bps: float | None = None,
    expected_bps: float | None = None,
) -> int:
    """How many connections to open to a mirror the coordinator advised
    ``connections`` for, with ``work_bytes`` of its portion to fetch: at most
    ``max_connections``, each with at least ``min_part_bytes``; behind an access
    link slower than the mirror's expected rate, the share of them that link
    takes. At least 1."""
    n = min(connections, max_connections, work_bytes // max(min_part_bytes, 1))
    if n > 1 and access_bps and expected_bps and access_bps < expected_bps:
        n = min(n, math.ceil(connections * access_bps / expected_bps))
    return max(1, n)


def part_starts(start: int, end: int, parts: int, piece_size: int, size: int) -> list[int]:
    """Where each of ``parts`` connections begins in a whole portion [start, end) of
    a file of ``size`` bytes (split_work's groups: the engine cuts it so). The
    first is ``start``; parts a piece boundary swallows are left out."""
    from pftp_client.ranges import RangeSet

    groups = split_work(RangeSet([(start, end)]), parts, piece_size, size)
    return [first[0] for g in groups if (first := g.first()) is not None]


# (the engine's default for connections per mirror: EngineConfig.max_streams)
DEFAULT_MAX_CONNECTIONS = 8

# (url, portion start, portion end, connections advised, expected bits/s or None)
Portion = tuple[str, int, int, int, float | None]


def transfer_starts(
    portions: list[Portion], size: int, piece_size: int, max_connections: int,
    min_part_bytes: int = MIN_PART_BYTES, access_bps: float | None = None,
) -> list[tuple[str, int]]:
    """(url, offset) of every transfer a coordinator's plan begins with: each
    portion's start, and for a mirror advised several connections where each of
    the others begins (as the engine will cut the whole portion)."""
    out: list[tuple[str, int]] = []
    for url, start, end, connections, expected in portions:
        if end <= start:
            continue
        n = advised_count(connections, max_connections, end - start, min_part_bytes,
                          access_bps, expected)
        out += [(url, at) for at in part_starts(start, end, n, piece_size, size)]
    return out


def split_work(work: RangeSet, parts: int, piece_size: int, size: int) -> list[RangeSet]:
    """``work`` (what is left of a mirror's portion) in up to ``parts`` groups of
    about equal bytes, each cut moved up to a piece boundary (empty groups left
    out). For a whole portion the groups begin at part_starts."""
    from pftp_client.ranges import split_evenly

    first = work.first()
    if first is None:
        return []
    last = max(e for _s, e in work)
    p = max(piece_size, 1)
    cuts = set()
    for g in split_evenly(work, parts)[1:]:
        head = g.first()
        if head is not None:
            cut = min(size, -(-head[0] // p) * p)
            if first[0] < cut < last:
                cuts.add(cut)
    bounds = [first[0], *sorted(cuts), last]
    groups = [work.intersection(lo, hi) for lo, hi in itertools.pairwise(bounds)]
    return [g for g in groups if g]
