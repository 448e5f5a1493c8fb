"""Shared-bottleneck test by the entropy of packet inter-arrival times.

Katabi, Bazzi and Yang, "A Passive Approach for Detecting Shared Bottlenecks"
(ICCCN 2001), as used by P-FTP (paper 001 section 2.3.1, paper 004 section
3.3.1): packets that leave one congested link are spaced by that link's
per-packet transmission time, so the inter-arrival times of the *merged*
flows of a shared set stay on that lattice, while merging flows that come
through different bottlenecks interleaves unrelated lattices and spreads the
distribution. Paper 001: "If the aggregate flow packet inter-arrival time
exhibits less entropy than that of independent flows then those flows share
common congested link."

Statistic (bits):  D = H(merged) - mean_i H(flow_i)
  D < -shared_threshold -> shared;  D > +threshold -> independent;  else undecided.
(the shared threshold is stricter for app-recv timestamps, see detectors.py)
All entropies use the same bins: width = mean inter-arrival time of the merged
flows / ``BINS_PER_MEAN_GAP`` (so the test does not depend on the link rate),
``N_BINS`` bins plus one overflow bin, with the Miller-Madow bias correction.
Confidence: D is also computed on ``BLOCKS`` consecutive time blocks; the
t-score of the block values against 0 gives a normal confidence. The
thresholds are the values measured in bench/congestion_bench.py (see
notes/congestion.md for the calibration runs).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pftp_client.congestion.overlap import Timestamps, as_timestamps, clip_to_common_window
from pftp_client.congestion.verdict import PairVerdict, Sharing, normal_confidence, undecided

NAME = "entropy"
BINS_PER_MEAN_GAP = 4
N_BINS = 32


@dataclass(frozen=True)
class EntropyParams:
    min_packets: int = 60  # per flow, in the common window
    threshold_bits: float = 0.25  # D > +threshold -> independent
    shared_threshold_bits: float | None = None  # D < -this -> shared (None: threshold_bits)
    min_confidence: float = 0.8
    blocks: int = 4


DEFAULT_PARAMS = EntropyParams()


def histogram_entropy(gaps_ns: np.ndarray, bin_width_ns: float, n_bins: int = N_BINS) -> float:
    """Entropy (bits) of inter-arrival times binned at ``bin_width_ns``, with
    an overflow bin for idle gaps, Miller-Madow corrected."""
    if gaps_ns.size == 0:
        return math.nan
    if bin_width_ns <= 0:
        raise ValueError("bin width must be positive")
    idx = np.minimum((gaps_ns / bin_width_ns).astype(np.int64), n_bins)
    counts = np.bincount(idx, minlength=n_bins + 1)
    counts = counts[counts > 0]
    p = counts / gaps_ns.size
    h = float(-(p * np.log2(p)).sum())
    return h + (counts.size - 1) / (2.0 * gaps_ns.size * math.log(2.0))


def merged(flows: Sequence[Timestamps]) -> Timestamps:
    return np.sort(np.concatenate(flows), kind="stable")


def mean_gap_ns(flows: Sequence[Timestamps]) -> float:
    m = merged(flows)
    if m.size < 2:
        return math.nan
    return float(m[-1] - m[0]) / (m.size - 1)


def entropy_difference(flows: Sequence[Timestamps], bin_width_ns: float) -> float:
    """D = H(merged) - mean H(flow) over the given packets (bits)."""
    singles = [histogram_entropy(np.diff(f), bin_width_ns) for f in flows]
    together = histogram_entropy(np.diff(merged(flows)), bin_width_ns)
    return together - float(np.mean(singles))


def entropy_set_test(
    flows: Sequence[Sequence[int] | np.ndarray], params: EntropyParams = DEFAULT_PARAMS
) -> PairVerdict:
    """Do all these flows share one congested link? (pairs or larger sets)."""
    if len(flows) < 2:
        raise ValueError("need at least two flows to test for shared congestion")
    arrs = clip_to_common_window([as_timestamps(f, f"flow {i}") for i, f in enumerate(flows)])
    packets = min(int(a.size) for a in arrs)
    if packets < params.min_packets:
        return undecided(NAME, packets, f"{packets} < {params.min_packets} packets per flow")
    width = mean_gap_ns(arrs) / BINS_PER_MEAN_GAP
    if not width > 0:
        return undecided(NAME, packets, "all packets have the same timestamp")
    d = entropy_difference(arrs, width)
    start, end = int(min(a[0] for a in arrs)), int(max(a[-1] for a in arrs))
    edges = np.linspace(start, end + 1, params.blocks + 1)
    block_d = []
    for lo, hi in itertools.pairwise(edges):
        part = [a[(a >= lo) & (a < hi)] for a in arrs]
        if min(p.size for p in part) >= 8:
            block_d.append(entropy_difference(part, width))
    if len(block_d) >= 2 and np.std(block_d, ddof=1) > 0:
        t = float(np.mean(block_d)) / (float(np.std(block_d, ddof=1)) / math.sqrt(len(block_d)))
        conf = normal_confidence(t) if np.sign(t) == np.sign(d) else 0.0
    else:
        conf = 1.0 if block_d and abs(d) > 0 else 0.0
    span = end - start
    shared_at = params.threshold_bits if params.shared_threshold_bits is None \
        else params.shared_threshold_bits
    if -shared_at < d < params.threshold_bits or conf < params.min_confidence:
        return PairVerdict(NAME, Sharing.UNDECIDED, conf, packets, d, span, "weak evidence")
    sharing = Sharing.SHARED if d < 0 else Sharing.INDEPENDENT
    return PairVerdict(NAME, sharing, conf, packets, d, span)


def entropy_pair_test(
    a: Sequence[int] | np.ndarray,
    b: Sequence[int] | np.ndarray,
    params: EntropyParams = DEFAULT_PARAMS,
) -> PairVerdict:
    return entropy_set_test([a, b], params)
