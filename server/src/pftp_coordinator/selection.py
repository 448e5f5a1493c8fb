"""Mirror selection for one request (paper 004, 3.2.2; paper 001, 2.2.3).

* Ranked mode: mirrors are taken in rank order until their expected rates cover
  the client's access bandwidth, so the aggregate P-FTP flow does not congest the
  client's own link; a client on a slow link gets one mirror. At most
  ``max_mirrors``; with an unknown access bandwidth, exactly up to ``max_mirrors``.
* Balanced mode (request rate above a threshold): the same bound, but the order
  is a suitability-weighted random permutation of *all* candidates
  (Efraimidis-Spirakis keys u ** (1 / w)), so load spreads over every suitable
  mirror instead of always hitting the top ones. Stateless, so it works the same
  in every uvicorn worker and coordinator replica; the rng is passed in.
* Shared congestion (paper 001, Shared-Con-Algo): pairs of mirrors reported behind
  one congested link are never both selected; the one skipped becomes a backup
  (after the unpenalised backups).
* Backups: the best-ranked mirrors not selected, ``backup_count`` of them.

Unknown expected rate: a mirror with no rate estimate is assumed to deliver the
median of the known estimates among the candidates, else ``DEFAULT_UNKNOWN_RATE_BPS``
(10 Mbit/s, a typical mirror-to-campus rate: a client slower than that still gets
one mirror, a fast client gets several until rates are measured).
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from pftp_coordinator.ranking import MirrorRank

DEFAULT_UNKNOWN_RATE_BPS = 10e6
# Expected rates are goodput (TCP payload: ~95 % of an Ethernet link's rate), and a
# mirror measured by a client that was already filling its access link reports that
# link, not the mirror. So the access bandwidth counts as covered at 90 % of it;
# asking for 100 % added a second mirror behind a link the first one already filled.
ACCESS_COVERED_SHARE = 0.9


@dataclass(slots=True)  # not frozen: frozen __init__ is slow on the hot path
class Selection:
    selected: list[MirrorRank]  # in rank (or balanced-draw) order
    backups: list[MirrorRank]
    mode: str  # "ranked" | "balanced"


def assumed_rates(ranked: Sequence[MirrorRank]) -> dict[int, float]:
    """Expected rate per mirror key, with unknown rates filled in (see module doc)."""
    known = [r.expected_bps for r in ranked if r.expected_bps and r.expected_bps > 0]
    fill = statistics.median(known) if known else DEFAULT_UNKNOWN_RATE_BPS
    return {
        r.key: (r.expected_bps if r.expected_bps and r.expected_bps > 0 else fill) for r in ranked
    }


def _balanced_order(ranked: Sequence[MirrorRank], rng: random.Random) -> list[MirrorRank]:
    """Weighted random permutation without replacement (Efraimidis-Spirakis)."""
    keyed = []
    for r in ranked:
        w = r.suitability if r.suitability > 0 and math.isfinite(r.suitability) else 1e-12
        u = rng.random() or 1e-300
        keyed.append((u ** (1.0 / w), r))
    keyed.sort(key=lambda t: -t[0])
    return [r for _, r in keyed]


def _penalised(key: int, chosen: Sequence[MirrorRank], pairs: Collection[frozenset[int]]) -> bool:
    return any(frozenset((key, c.key)) in pairs for c in chosen)


def select_mirrors(
    ranked: Sequence[MirrorRank],
    *,
    access_bandwidth_bps: float | None,
    max_mirrors: int,
    backup_count: int,
    balanced: bool = False,
    rng: random.Random | None = None,
    congested_pairs: Collection[frozenset[int]] = (),
    start_delay_s: Mapping[int, float] | None = None,
) -> Selection:
    """Choose the mirrors to download from and the backups.

    ``ranked`` is best first (rank_mirrors' output). Raises ValueError on nonsense
    bounds; an empty ``ranked`` gives an empty selection (the caller reports why).
    ``start_delay_s`` (mirror key -> seconds before its first byte, from its RTT):
    when one mirror covers the access link, a faster one cannot make the download
    faster, but a nearer one starts sooner: of the mirrors that cover it alone, the
    one that starts first is taken (the best ranked among equals).
    """
    if max_mirrors < 1:
        raise ValueError("max_mirrors must be at least 1")
    if backup_count < 0:
        raise ValueError("backup_count must not be negative")
    if access_bandwidth_bps is not None and not access_bandwidth_bps > 0:
        raise ValueError("access_bandwidth_bps must be positive or None")
    mode = "balanced" if balanced else "ranked"
    if not ranked:
        return Selection([], [], mode)
    if balanced:
        order = _balanced_order(ranked, rng if rng is not None else random.Random())
    else:
        order = list(ranked)
    rates = assumed_rates(ranked)

    if (start_delay_s and not balanced and access_bandwidth_bps is not None
            and rates[order[0].key] >= ACCESS_COVERED_SHARE * access_bandwidth_bps):
        covering = [r for r in order
                    if rates[r.key] >= ACCESS_COVERED_SHARE * access_bandwidth_bps]
        nearest = min(covering, key=lambda r: start_delay_s.get(r.key, 0.0))  # (stable)
        order = [nearest, *(r for r in order if r is not nearest)]
    selected: list[MirrorRank] = []
    skipped: list[MirrorRank] = []
    covered = 0.0
    for r in order:
        if len(selected) >= max_mirrors:
            break
        if (
            access_bandwidth_bps is not None
            and covered >= ACCESS_COVERED_SHARE * access_bandwidth_bps
        ):
            break
        if congested_pairs and _penalised(r.key, selected, congested_pairs):
            skipped.append(r)
            continue
        selected.append(r)
        covered += rates[r.key]

    chosen = {r.key for r in selected}
    skipped_keys = {r.key for r in skipped}
    rest = [r for r in ranked if r.key not in chosen and r.key not in skipped_keys]
    backups = (rest + sorted(skipped, key=lambda r: (-r.suitability, r.key)))[:backup_count]
    return Selection(selected, backups, mode)
