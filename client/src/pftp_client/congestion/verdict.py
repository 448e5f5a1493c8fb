"""What a pairwise shared-congestion test returns.

Every verdict says how sure it is and on how many packets it rests, so the
caller (``SharedCongestionMonitor``) never acts on a guess: a test that has not
seen enough packets answers ``UNDECIDED`` with confidence 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum


class Sharing(StrEnum):
    SHARED = "shared"
    INDEPENDENT = "independent"
    UNDECIDED = "undecided"


@dataclass(frozen=True)
class PairVerdict:
    """Outcome of one pair test.

    ``statistic`` is the detector's own score (entropy difference in bits, a
    correlation coefficient, ...); ``confidence`` is in [0, 1]; ``packets`` is
    the number of packets per flow the test used (the smaller of the two).
    """

    detector: str
    sharing: Sharing
    confidence: float
    packets: int
    statistic: float
    span_ns: int = 0
    reason: str = ""

    @property
    def shared(self) -> bool:
        return self.sharing is Sharing.SHARED

    @property
    def decided(self) -> bool:
        return self.sharing is not Sharing.UNDECIDED


def undecided(detector: str, packets: int, reason: str, statistic: float = math.nan) -> PairVerdict:
    return PairVerdict(detector, Sharing.UNDECIDED, 0.0, packets, statistic, 0, reason)


def normal_confidence(z: float) -> float:
    """Two-sided confidence that a standard-normal score ``z`` is not noise."""
    if not math.isfinite(z):
        return 0.0
    return math.erf(abs(z) / math.sqrt(2.0))
