"""Aging of measurements: half-life decay, and the per-mirror path summary.

Shared with the ranking: ``decayed_mean`` is what every time series (probes,
utilization samples, client throughput history) should be averaged with, so a
measurement ``half_life`` seconds old counts half as much as a fresh one.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from pftp_coordinator.models import PathProbe


def decay_weight(age_s: float, half_life_s: float) -> float:
    """2^(-age/half_life); ages below zero (clock skew) count as fresh."""
    if half_life_s <= 0:
        raise ValueError(f"half_life must be > 0, got {half_life_s}")
    return math.pow(2.0, -max(age_s, 0.0) / half_life_s)


def decayed_mean(
    values: Sequence[float | None],
    ages: Sequence[float],
    half_life: float,
    counts: Sequence[int] | None = None,
) -> float | None:
    """Mean of ``values`` weighted by 2^(-age/half_life) (and by ``counts``, the
    number of raw samples an aggregated row stands for). None values are skipped;
    returns None when nothing is left."""
    if len(values) != len(ages) or (counts is not None and len(counts) != len(values)):
        raise ValueError("values, ages (and counts) must have the same length")
    num = 0.0
    den = 0.0
    for i, (v, age) in enumerate(zip(values, ages, strict=True)):
        if v is None or (isinstance(v, float) and math.isnan(v)):
            continue
        w = decay_weight(age, half_life) * (counts[i] if counts is not None else 1)
        num += w * v
        den += w
    return num / den if den > 0 else None


@dataclass(frozen=True)
class PathSummary:
    """Decayed view of one mirror's recent probes, as the ranking and the eq. 3
    predictor see it. ``bandwidth_bps`` is the path bandwidth used by eq. 3:
    the ranged-read throughput when known (it best predicts download speed),
    else the packet-train capacity."""

    rtt_s: float | None
    loss: float | None
    capacity_bps: float | None
    throughput_bps: float | None
    n_probes: int

    @property
    def bandwidth_bps(self) -> float | None:
        return self.throughput_bps if self.throughput_bps else self.capacity_bps


def summarize_probes(probes: Iterable[PathProbe], now: datetime, half_life_s: float) -> PathSummary:
    """Pure: decayed means over successful probe rows (failed rows carry no values)."""
    rows = [p for p in probes if p.ok and p.ts <= now]
    ages = [(now - p.ts).total_seconds() for p in rows]
    counts = [max(p.samples, 1) for p in rows]

    def mean(attr: str) -> float | None:
        return decayed_mean([getattr(p, attr) for p in rows], ages, half_life_s, counts)

    return PathSummary(
        rtt_s=mean("rtt_s"),
        loss=mean("loss"),
        capacity_bps=mean("capacity_bps"),
        throughput_bps=mean("throughput_bps"),
        n_probes=len(rows),
    )


def load_path_summary(
    session: Session,
    mirror_id: int,
    *,
    now: datetime,
    half_life_s: float,
    window_s: float,
) -> PathSummary:
    """Path summary of one mirror from probes in (now - window, now]."""
    probes = session.scalars(
        select(PathProbe).where(
            PathProbe.mirror_id == mirror_id,
            PathProbe.ts > now - timedelta(seconds=window_s),
            PathProbe.ts <= now,
        )
    ).all()
    return summarize_probes(probes, now, half_life_s)
