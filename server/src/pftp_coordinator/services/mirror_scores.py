"""Current ranking scores of all mirrors, for `mirror list` and the admin API.

The score is the suitability a mirror gets when every enabled mirror competes
(as if one file were on all of them), from the same snapshot and ranking the
assignments use; disabled or down mirrors show their inputs but no suitability.
"""

from __future__ import annotations

import dataclasses
import math

from pftp_coordinator.config import Settings
from pftp_coordinator.ranking import params_from_settings, rank_mirrors
from pftp_coordinator.ranking_inputs import RankingSnapshot
from pftp_coordinator.schemas import MirrorScore

_INPUT_FIELDS = (
    "bandwidth_bps",
    "rtt_s",
    "loss",
    "probe_throughput_bps",
    "probe_connections",  # (>1: what clients are told to open, Assignment.connections)
    "cpu_percent",
    "memory_percent",
    "throughput_bps",
    "demand",
)


def _finite(v: float | None) -> float | None:
    return float(v) if v is not None and math.isfinite(v) else None


def current_scores(snapshot: RankingSnapshot, *, settings: Settings) -> dict[str, MirrorScore]:
    params = params_from_settings(settings, snapshot.predictor)
    # The same candidates the planner considers: enabled and not known to be down.
    enabled = [m for m in snapshot.mirrors.values() if m.enabled and m.state != "down"]
    ranks = {
        r.key: r
        for r in rank_mirrors([m.metrics for m in enabled], params=params, now=snapshot.taken_at)
    }
    out: dict[str, MirrorScore] = {}
    for m in snapshot.mirrors.values():
        values = dataclasses.asdict(m.metrics)
        inputs = {k: _finite(values.get(k)) for k in _INPUT_FIELDS}
        rank = ranks.get(m.id)
        out[m.name] = MirrorScore(
            suitability=rank.suitability if rank is not None else None,
            per_variable=dict(rank.explain) if rank is not None else {},
            inputs=inputs,
            expected_bps=_finite(rank.expected_bps) if rank is not None else None,
        )
    return out
