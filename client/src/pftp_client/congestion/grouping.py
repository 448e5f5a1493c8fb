"""Group n flows into shared-congestion sets with at most n(n-1)/2 pair tests.

Paper 004 section 3.3.3: shared-congestion detection compares each pair of
flows, O(n^2) in the number of flows. Each pair is tested once; the sets are
then built from those verdicts alone (no further tests): pairs judged shared
are merged most-confident first, and two sets are only joined when *every*
cross pair between them was judged shared (complete linkage), so one wrong
pair verdict cannot chain unrelated flows together. Undecided pairs never
join sets.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations

import numpy as np

from pftp_client.congestion.verdict import PairVerdict, Sharing

PairTest = Callable[[np.ndarray, np.ndarray], PairVerdict]


@dataclass
class Grouping:
    """Shared sets (each sorted best-ranked first) plus every pair verdict."""

    shared_sets: list[list[Hashable]]
    verdicts: dict[tuple[Hashable, Hashable], PairVerdict] = field(default_factory=dict)
    pair_tests: int = 0

    def verdict(self, a: Hashable, b: Hashable) -> PairVerdict | None:
        return self.verdicts.get((a, b)) or self.verdicts.get((b, a))

    def set_of(self, flow: Hashable) -> list[Hashable] | None:
        for s in self.shared_sets:
            if flow in s:
                return s
        return None


def group_flows(
    flows: Mapping[Hashable, np.ndarray],
    pair_test: PairTest,
    ranks: Mapping[Hashable, float] | None = None,
) -> Grouping:
    """Partition ``flows`` into shared sets (sets of size >= 2 only).

    ``ranks``: higher is better (the coordinator's suitability); each returned
    set is ordered best first so ``set[0]`` is the flow to keep (paper 001,
    Shared-Con-Algo f'). Flows without a rank sort after ranked ones, in the
    order given.
    """
    if not isinstance(flows, Mapping):
        raise TypeError("flows must map flow id -> arrival timestamps")
    ids = list(flows)
    verdicts: dict[tuple[Hashable, Hashable], PairVerdict] = {}
    for a, b in combinations(ids, 2):
        verdicts[(a, b)] = pair_test(flows[a], flows[b])

    def is_shared(a: Hashable, b: Hashable) -> bool:
        v = verdicts.get((a, b)) or verdicts[(b, a)]
        return v.sharing is Sharing.SHARED

    cluster: dict[Hashable, int] = {f: i for i, f in enumerate(ids)}
    members: dict[int, list[Hashable]] = {i: [f] for i, f in enumerate(ids)}
    edges = sorted(
        (pair for pair, v in verdicts.items() if v.sharing is Sharing.SHARED),
        key=lambda p: -verdicts[p].confidence,
    )
    for a, b in edges:
        ca, cb = cluster[a], cluster[b]
        if ca == cb:
            continue
        if all(is_shared(x, y) for x in members[ca] for y in members[cb]):
            for f in members[cb]:
                cluster[f] = ca
            members[ca].extend(members.pop(cb))

    order = {f: i for i, f in enumerate(ids)}
    rank = ranks or {}

    def sort_key(f: Hashable) -> tuple[int, float, int]:
        return (0, -float(rank[f]), order[f]) if f in rank else (1, 0.0, order[f])

    sets = [sorted(m, key=sort_key) for m in members.values() if len(m) >= 2]
    sets.sort(key=lambda s: sort_key(s[0]))
    return Grouping(sets, verdicts, len(verdicts))


def flows_to_drop(grouping: Grouping) -> list[Hashable]:
    """All members of each shared set except its best-ranked one."""
    return [f for s in grouping.shared_sets for f in s[1:]]


def pairs_in_sets(sets: Sequence[Sequence[Hashable]]) -> set[frozenset[Hashable]]:
    """The unordered pairs that a partition calls shared (for scoring)."""
    return {frozenset(p) for s in sets for p in combinations(s, 2)}
