"""The pair tests by name, their parameters per timestamp source, and the default.

Chosen by measurement (bench/congestion_bench.py, notes/congestion.md):
- entropy is the default; rate-correlation (the Rubenstein-Kurose-Towsley style
  alternative) is kept for comparison only: it is worse on every source.
- Timestamps taken by the application after each receive (app-recv) carry the
  process's own scheduling: in a multi-threaded client one thread's wake-up
  delays the others (GIL, disk writes), a shared queue of its own, which pulls
  the entropy difference of *independent* flows below zero (down to -0.7 bits
  measured inside the real engine). A shared verdict from app-recv therefore
  needs D < -0.9 bits; packet and kernel timestamps keep the symmetric 0.25.
- Kernel timestamps (packet capture, SO_TIMESTAMPNS) need D < -0.7 bits for
  "shared". The monitor re-tests every pair every 0.1 s for the whole download,
  so a transient dip counts; in the lab, independent equal-rate tbf links dipped
  to -0.59 bits (the receiver's softirq batches packets of all flows together, a
  shared "queue" of its own) while every truly shared pair sat at -1.3 to -2.1:
  0.25 gave 9 false "shared" pairs of 54, 0.7 none, with the same 6 of 6 shared
  pairs found just as early (notes/congestion.md, "Round 2").
- Pair tests take optional per-packet ``sizes`` (packet captures, where one
  captured packet may be a GSO/GRO super-packet); entropy then works on time
  per byte (entropy.py), rate-correlation ignores them.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np

from pftp_client.congestion.entropy import EntropyParams, entropy_pair_test
from pftp_client.congestion.rate_correlation import rate_correlation_pair_test
from pftp_client.congestion.timestamps import TimestampSource
from pftp_client.congestion.verdict import PairVerdict

PairTest = Callable[..., PairVerdict]  # (a, b, sizes=(sizes_a, sizes_b) | None)


def _rate_correlation(a: np.ndarray, b: np.ndarray, sizes: object = None) -> PairVerdict:
    del sizes  # packet counts per bin: sizes do not enter this test
    return rate_correlation_pair_test(a, b)


DETECTORS: dict[str, PairTest] = {
    "entropy": entropy_pair_test,
    "rate-correlation": _rate_correlation,
}
DEFAULT_DETECTOR = "entropy"

APP_RECV_ENTROPY = EntropyParams(shared_threshold_bits=0.9)
KERNEL_ENTROPY = EntropyParams(shared_threshold_bits=0.7)
_KERNEL_SOURCES = (
    TimestampSource.PACKET_AF_PACKET,
    TimestampSource.PACKET_SCAPY,
    TimestampSource.APP_KERNEL,
)


def pair_test_for(detector: str, source: TimestampSource | str) -> PairTest:
    """The pair test to use for timestamps from ``source``."""
    if detector not in DETECTORS:
        raise ValueError(f"unknown detector {detector!r}; choose from {sorted(DETECTORS)}")
    if detector == "entropy" and TimestampSource(source) is TimestampSource.APP_RECV:
        return partial(entropy_pair_test, params=APP_RECV_ENTROPY)
    if detector == "entropy" and TimestampSource(source) in _KERNEL_SOURCES:
        return partial(entropy_pair_test, params=KERNEL_ENTROPY)
    return DETECTORS[detector]
