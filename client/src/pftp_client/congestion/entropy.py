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
With packet sizes (a packet capture), each inter-arrival time is divided by the
size of the packet that ended it: a busy link spaces packets by their own
transmission time, size / rate, so time per byte is what stays on its lattice.
This matters when the capture sees segmentation-offload super-packets (GSO on
the path, GRO on the receiver: one "packet" of 2-40 segments): raw gaps then
follow the burst sizes, and independent flows of equal rate looked shared
(5 of 33 independent pairs in the lab, none with sizes; notes/congestion.md).
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

from pftp_client.congestion.overlap import (
    Timestamps,
    as_timestamps,
    common_window,
)
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


Sizes = np.ndarray


def _gaps(times: Timestamps, sizes: Sizes | None) -> np.ndarray:
    """Inter-arrival times, per byte of the later packet when sizes are known."""
    g = np.diff(times)
    return g if sizes is None else g / sizes[1:]


def _merge(flows: Sequence[Timestamps], sizes: Sequence[Sizes] | None
           ) -> tuple[Timestamps, Sizes | None]:
    times = np.concatenate(flows)
    order = np.argsort(times, kind="stable")
    return times[order], None if sizes is None else np.concatenate(sizes)[order]


def entropy_difference(
    flows: Sequence[Timestamps], bin_width: float, sizes: Sequence[Sizes] | None = None
) -> float:
    """D = H(merged) - mean H(flow) over the given packets (bits)."""
    per = sizes if sizes is not None else [None] * len(flows)
    singles = [histogram_entropy(_gaps(f, s), bin_width) for f, s in zip(flows, per, strict=True)]
    together = histogram_entropy(_gaps(*_merge(flows, sizes)), bin_width)
    return together - float(np.mean(singles))


def _clip(flows: list[Timestamps], sizes: list[Sizes] | None
          ) -> tuple[list[Timestamps], list[Sizes] | None]:
    """Packets (and their sizes) inside the window every flow covers."""
    start, end = common_window(flows)
    keep = [(f >= start) & (f <= end) for f in flows]
    clipped = [f[k] for f, k in zip(flows, keep, strict=True)]
    return clipped, None if sizes is None else [s[k] for s, k in zip(sizes, keep, strict=True)]


def _as_sizes(sizes: Sequence[Sequence[int] | np.ndarray], flows: list[Timestamps]
              ) -> list[Sizes]:
    out = []
    for i, (s, f) in enumerate(zip(sizes, flows, strict=True)):
        arr = np.asarray(s, dtype=np.float64)
        if arr.shape != f.shape:
            raise ValueError(f"flow {i}: {arr.size} sizes for {f.size} timestamps")
        out.append(np.maximum(arr, 1.0))
    return out


def entropy_set_test(
    flows: Sequence[Sequence[int] | np.ndarray],
    params: EntropyParams = DEFAULT_PARAMS,
    sizes: Sequence[Sequence[int] | np.ndarray] | None = None,
) -> PairVerdict:
    """Do all these flows share one congested link? (pairs or larger sets)
    ``sizes``: each packet's payload bytes, parallel to ``flows`` (packet captures)."""
    if len(flows) < 2:
        raise ValueError("need at least two flows to test for shared congestion")
    raw = [as_timestamps(f, f"flow {i}") for i, f in enumerate(flows)]
    arrs, szs = _clip(raw, None if sizes is None else _as_sizes(sizes, raw))
    packets = min(int(a.size) for a in arrs)
    if packets < params.min_packets:
        return undecided(NAME, packets, f"{packets} < {params.min_packets} packets per flow")
    width = float(np.mean(_gaps(*_merge(arrs, szs)))) / BINS_PER_MEAN_GAP
    if not width > 0:
        return undecided(NAME, packets, "all packets have the same timestamp")
    d = entropy_difference(arrs, width, szs)
    start, end = int(min(a[0] for a in arrs)), int(max(a[-1] for a in arrs))
    edges = np.linspace(start, end + 1, params.blocks + 1)
    block_d = []
    for lo, hi in itertools.pairwise(edges):
        keep = [(a >= lo) & (a < hi) for a in arrs]
        part = [a[k] for a, k in zip(arrs, keep, strict=True)]
        if min(p.size for p in part) >= 8:
            psz = None if szs is None else [s[k] for s, k in zip(szs, keep, strict=True)]
            block_d.append(entropy_difference(part, width, psz))
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
    sizes: tuple[Sequence[int] | np.ndarray, Sequence[int] | np.ndarray] | None = None,
) -> PairVerdict:
    return entropy_set_test([a, b], params, sizes)
