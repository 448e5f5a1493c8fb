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
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np

from pftp_client.congestion.entropy import EntropyParams, entropy_pair_test
from pftp_client.congestion.rate_correlation import rate_correlation_pair_test
from pftp_client.congestion.timestamps import TimestampSource
from pftp_client.congestion.verdict import PairVerdict

PairTest = Callable[[np.ndarray, np.ndarray], PairVerdict]

DETECTORS: dict[str, PairTest] = {
    "entropy": entropy_pair_test,
    "rate-correlation": rate_correlation_pair_test,
}
DEFAULT_DETECTOR = "entropy"

APP_RECV_ENTROPY = EntropyParams(shared_threshold_bits=0.9)


def pair_test_for(detector: str, source: TimestampSource | str) -> PairTest:
    """The pair test to use for timestamps from ``source``."""
    if detector not in DETECTORS:
        raise ValueError(f"unknown detector {detector!r}; choose from {sorted(DETECTORS)}")
    if detector == "entropy" and TimestampSource(source) is TimestampSource.APP_RECV:
        return partial(entropy_pair_test, params=APP_RECV_ENTROPY)
    return DETECTORS[detector]
