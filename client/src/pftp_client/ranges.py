"""Byte-range bookkeeping: sets of half-open intervals [start, end).

Everything the engine knows about a download is a few of these sets (done,
unassigned, verified); they stay small because neighbouring ranges coalesce,
so their size depends on the number of flows, not on the file size.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator


class RangeSet:
    """Sorted, disjoint, coalesced half-open intervals. Not thread-safe."""

    __slots__ = ("_ends", "_starts")

    def __init__(self, ranges: Iterable[tuple[int, int]] = ()) -> None:
        self._starts: list[int] = []
        self._ends: list[int] = []
        for s, e in ranges:
            self.add(s, e)

    # --- queries -------------------------------------------------------------------

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return iter(list(zip(self._starts, self._ends, strict=True)))

    def __len__(self) -> int:
        return len(self._starts)

    def __bool__(self) -> bool:
        return bool(self._starts)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RangeSet) and list(self) == list(other)

    def __repr__(self) -> str:
        return f"RangeSet({list(self)!r})"

    def total(self) -> int:
        return sum(e - s for s, e in zip(self._starts, self._ends, strict=True))

    def covers(self, start: int, end: int) -> bool:
        """True when every byte of [start, end) is in the set (empty range: True)."""
        if end <= start:
            return True
        i = bisect.bisect_right(self._starts, start) - 1
        return i >= 0 and self._ends[i] >= end

    def overlaps(self, start: int, end: int) -> bool:
        if end <= start:
            return False
        i = bisect.bisect_left(self._ends, start + 1)
        return i < len(self._starts) and self._starts[i] < end

    def contiguous_end(self, start: int) -> int:
        """End of the run that contains ``start`` (``start`` itself if not inside one)."""
        i = bisect.bisect_right(self._starts, start) - 1
        if i >= 0 and self._ends[i] > start:
            return self._ends[i]
        return start

    def first(self) -> tuple[int, int] | None:
        return (self._starts[0], self._ends[0]) if self._starts else None

    def intersection(self, start: int, end: int) -> RangeSet:
        out = RangeSet()
        for s, e in self:
            lo, hi = max(s, start), min(e, end)
            if lo < hi:
                out._starts.append(lo)
                out._ends.append(hi)
        return out

    def complement(self, start: int, end: int) -> RangeSet:
        """Bytes of [start, end) that are NOT in the set."""
        out = RangeSet()
        pos = start
        for s, e in self:
            if e <= pos:
                continue
            if s >= end:
                break
            if s > pos:
                out.add(pos, min(s, end))
            pos = max(pos, e)
        if pos < end:
            out.add(pos, end)
        return out

    def copy(self) -> RangeSet:
        out = RangeSet()
        out._starts = list(self._starts)
        out._ends = list(self._ends)
        return out

    # --- updates -------------------------------------------------------------------

    def add(self, start: int, end: int) -> None:
        if end <= start:
            return
        # Every interval that touches or overlaps [start, end) merges with it.
        lo = bisect.bisect_left(self._ends, start)
        hi = bisect.bisect_right(self._starts, end)
        if lo < hi:
            start = min(start, self._starts[lo])
            end = max(end, self._ends[hi - 1])
        self._starts[lo:hi] = [start]
        self._ends[lo:hi] = [end]

    def remove(self, start: int, end: int) -> None:
        if end <= start:
            return
        lo = bisect.bisect_right(self._ends, start)
        hi = bisect.bisect_left(self._starts, end)
        if lo >= hi:
            return
        new_s: list[int] = []
        new_e: list[int] = []
        if self._starts[lo] < start:
            new_s.append(self._starts[lo])
            new_e.append(start)
        if self._ends[hi - 1] > end:
            new_s.append(end)
            new_e.append(self._ends[hi - 1])
        self._starts[lo:hi] = new_s
        self._ends[lo:hi] = new_e

    def pop_first(self) -> tuple[int, int] | None:
        if not self._starts:
            return None
        return self._starts.pop(0), self._ends.pop(0)


def split_evenly(todo: RangeSet, parts: int) -> list[RangeSet]:
    """Cut the bytes of ``todo`` into ``parts`` consecutive groups of nearly equal
    size (the initial equal blocks of dynamic parallel access, paper 000 III)."""
    if parts < 1:
        raise ValueError("parts must be >= 1")
    total = todo.total()
    groups = [RangeSet() for _ in range(parts)]
    # Group i gets the bytes whose rank in todo lies in [i*total//parts, (i+1)*total//parts).
    bounds = [(i * total) // parts for i in range(parts + 1)]
    rank = 0
    i = 0
    for s, e in todo:
        pos = s
        while pos < e:
            while rank >= bounds[i + 1]:
                i += 1
            take = min(e - pos, bounds[i + 1] - rank)
            groups[i].add(pos, pos + take)
            pos += take
            rank += take
    return groups


# The engine's defaults for deal_in_rounds (EngineConfig.round_block_bytes, max_rounds).
ROUND_BLOCK_BYTES = 256 << 20
MAX_ROUNDS = 8


def first_offsets(size: int, parts: int) -> list[int | None]:
    """Where each flow's first block starts when a whole file is dealt with the
    engine's defaults (None: no block). The entry point's head start begins each
    mirror's transfer there (early.py)."""
    groups = deal_in_rounds(RangeSet([(0, size)]), parts, ROUND_BLOCK_BYTES, MAX_ROUNDS)
    return [next(iter(g))[0] if g else None for g in groups]


def deal_in_rounds(
    todo: RangeSet, parts: int, block_bytes: int, max_rounds: int
) -> list[RangeSet]:
    """Equal blocks for ``parts`` flows, dealt in rounds: ``todo`` is cut into
    consecutive regions, each split evenly among the flows, so every flow's work is
    one block per region, in file order. As many rounds as keep blocks of at
    least ``block_bytes`` (one round, i.e. ``split_evenly``, for smaller files),
    at most ``max_rounds``."""
    if parts < 1 or block_bytes < 1 or max_rounds < 1:
        raise ValueError("parts, block_bytes and max_rounds must be >= 1")
    rounds = max(1, min(max_rounds, todo.total() // (parts * block_bytes)))
    out = [RangeSet() for _ in range(parts)]
    for region in split_evenly(todo, rounds):
        for mine, block in zip(out, split_evenly(region, parts), strict=True):
            for s, e in block:
                mine.add(s, e)
    return out


class RangeOwners:
    """Which mirror wrote which bytes: coalesced runs (start, end, owner).

    Used to blame a mirror when a hash does not match. Later writes replace
    earlier ones (a repaired piece belongs to the mirror that repaired it).
    """

    __slots__ = ("_ends", "_owners", "_starts")

    def __init__(self, runs: Iterable[tuple[int, int, str]] = ()) -> None:
        self._starts: list[int] = []
        self._ends: list[int] = []
        self._owners: list[str] = []
        for s, e, o in runs:
            self.set(s, e, o)

    def runs(self) -> list[tuple[int, int, str]]:
        return list(zip(self._starts, self._ends, self._owners, strict=True))

    def set(self, start: int, end: int, owner: str) -> None:
        if end <= start:
            return
        lo = bisect.bisect_right(self._ends, start)
        hi = bisect.bisect_left(self._starts, end)
        s_new: list[int] = []
        e_new: list[int] = []
        o_new: list[str] = []
        if lo < hi and self._starts[lo] < start:
            s_new.append(self._starts[lo])
            e_new.append(start)
            o_new.append(self._owners[lo])
        s_new.append(start)
        e_new.append(end)
        o_new.append(owner)
        if lo < hi and self._ends[hi - 1] > end:
            s_new.append(end)
            e_new.append(self._ends[hi - 1])
            o_new.append(self._owners[hi - 1])
        self._starts[lo:hi] = s_new
        self._ends[lo:hi] = e_new
        self._owners[lo:hi] = o_new
        # Coalesce with same-owner neighbours that touch.
        i = max(0, lo - 1)
        while i < len(self._starts) - 1 and i <= lo + len(s_new):
            if self._ends[i] == self._starts[i + 1] and self._owners[i] == self._owners[i + 1]:
                self._ends[i] = self._ends[i + 1]
                del self._starts[i + 1], self._ends[i + 1], self._owners[i + 1]
            else:
                i += 1

    def query(self, start: int, end: int) -> list[tuple[int, int, str]]:
        """Runs clipped to [start, end), in order."""
        out = []
        i = bisect.bisect_right(self._ends, start)
        while i < len(self._starts) and self._starts[i] < end:
            out.append((max(start, self._starts[i]), min(end, self._ends[i]), self._owners[i]))
            i += 1
        return out
