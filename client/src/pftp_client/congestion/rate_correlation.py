"""Shared-bottleneck test by the correlation of the flows' throughput.

The comparison idea of Rubenstein, Kurose and Towsley ("Detecting shared
congestion of flows via end-to-end measurement", IEEE/ACM ToN 2002) applied
to the only signal the receiver has for free, the arrival times: flows through
one saturated link split a fixed capacity, so in short time bins the rate one
gains the other loses (a_k + b_k ~ C*dt), and the first differences of their
per-bin packet counts are strongly negatively correlated; flows through
separate bottlenecks are uncorrelated. Differencing removes the common
slow-start ramp and slow trends.

Statistic: Pearson r of the differenced per-bin counts, with the Fisher z
score sqrt(n-3)*atanh(r) for confidence.
  r < -shared_below -> shared;  r > -independent_above -> independent.
Bin width: the common window is cut into ``packets / PACKETS_PER_BIN`` bins
(so each bin holds a few packets of the slower flow whatever the rate).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pftp_client.congestion.overlap import Timestamps, as_timestamps, clip_to_common_window
from pftp_client.congestion.verdict import PairVerdict, Sharing, normal_confidence, undecided

NAME = "rate-correlation"


@dataclass(frozen=True)
class RateCorrelationParams:
    min_packets: int = 60
    packets_per_bin: float = 4.0
    shared_below: float = 0.35  # r < -0.35 -> shared
    independent_above: float = 0.15  # r > -0.15 -> independent
    min_confidence: float = 0.95
    min_bins: int = 12


DEFAULT_PARAMS = RateCorrelationParams()


def binned_counts(flows: Sequence[Timestamps], n_bins: int) -> np.ndarray:
    start = min(int(f[0]) for f in flows)
    end = max(int(f[-1]) for f in flows) + 1
    edges = np.linspace(start, end, n_bins + 1)
    return np.stack([np.histogram(f, bins=edges)[0].astype(float) for f in flows])


def differenced_correlation(counts: np.ndarray) -> float:
    d = np.diff(counts, axis=1)
    if d.shape[1] < 3 or np.any(d.std(axis=1) == 0):
        return math.nan
    return float(np.corrcoef(d)[0, 1])


def rate_correlation_pair_test(
    a: Sequence[int] | np.ndarray,
    b: Sequence[int] | np.ndarray,
    params: RateCorrelationParams = DEFAULT_PARAMS,
) -> PairVerdict:
    fa, fb = clip_to_common_window([as_timestamps(a, "flow a"), as_timestamps(b, "flow b")])
    packets = min(int(fa.size), int(fb.size))
    if packets < params.min_packets:
        return undecided(NAME, packets, f"{packets} < {params.min_packets} packets per flow")
    n_bins = int(packets / params.packets_per_bin)
    if n_bins < params.min_bins:
        return undecided(NAME, packets, f"only {n_bins} bins")
    r = differenced_correlation(binned_counts([fa, fb], n_bins))
    if not math.isfinite(r):
        return undecided(NAME, packets, "constant rate series")
    n = n_bins - 1
    z = math.atanh(max(min(r, 0.999999), -0.999999)) * math.sqrt(max(n - 3, 1))
    span = int(max(fa[-1], fb[-1]) - min(fa[0], fb[0]))
    if r < -params.shared_below:
        # confidence that r is really below zero
        conf = normal_confidence(z)
        if conf >= params.min_confidence:
            return PairVerdict(NAME, Sharing.SHARED, conf, packets, r, span)
        return PairVerdict(NAME, Sharing.UNDECIDED, conf, packets, r, span, "weak evidence")
    if r > -params.independent_above:
        # confidence that r is above the shared threshold
        zt = (math.atanh(max(min(r, 0.999999), -0.999999)) + math.atanh(params.shared_below))
        conf = normal_confidence(zt * math.sqrt(max(n - 3, 1)))
        if conf >= params.min_confidence:
            return PairVerdict(NAME, Sharing.INDEPENDENT, conf, packets, r, span)
        return PairVerdict(NAME, Sharing.UNDECIDED, conf, packets, r, span, "weak evidence")
    return PairVerdict(NAME, Sharing.UNDECIDED, 0.0, packets, r, span, "between thresholds")
