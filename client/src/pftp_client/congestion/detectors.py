"""The pair tests by name, and the default one (chosen by measurement, see
notes/congestion.md)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from pftp_client.congestion.entropy import entropy_pair_test
from pftp_client.congestion.rate_correlation import rate_correlation_pair_test
from pftp_client.congestion.verdict import PairVerdict

PairTest = Callable[[np.ndarray, np.ndarray], PairVerdict]

DETECTORS: dict[str, PairTest] = {
    "entropy": entropy_pair_test,
    "rate-correlation": rate_correlation_pair_test,
}
DEFAULT_DETECTOR = "entropy"
