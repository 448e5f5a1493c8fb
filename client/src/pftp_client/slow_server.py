"""Slow-Server-Algo (paper 001, section 2.3, Algorithm P-FTP Client lines 25-38).

Every monitoring interval, for each active flow m:
    D_m = bytes received in the interval                       (line 27)
    F_m = the portion the flow still had to fetch at the start (its "allocated
          file portion"; we use what is left of it, so a flow that has already
          fetched most of its portion is not punished for the part it finished)
    T_m = D_m / F_m                                              (line 28)
T_m is the fraction of its remaining work a flow does per interval, i.e. the
inverse of the time it still needs: flows that will finish together have equal
T_m. A flow with T_m << T_mean (line 32) will finish long after the others.

A flow that finishes its portion within the interval has T_m >= 1; it is counted
as 1 (its portion done), not more: at the end of a download a flow with a sliver
left (T_m = 8) lifted the mean so far that every other flow looked slow, and the
160 ms mirror of the wide-area paths was cut 0.8 s before the end.

"<<" is not quantified in the paper. We use T_m < SLOW_RATIO * T_mean with
SLOW_RATIO = 0.5: the flow would need more than twice the mean time to finish,
a gap no later rebalancing at the tail can hide cheaply. The paper's "normally
distribute T_m" only serves to compute the mean, which is what we compare to.

Its portion is then cut to F_m' = (T_m / T_mean) * F_temp (line 35), the rest
F_temp - F_m' goes to a new connection with a backup mirror (line 36) or, with
no backup left, back to the pool the fastest flows take from (line 37).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

SLOW_RATIO = 0.5


@dataclass(frozen=True)
class FlowProgress:
    flow_id: str
    received: int  # D_m: bytes received during the interval
    # F_m: bytes still to fetch at the start of the interval (less what a steal
    # took from it meanwhile: the flow is judged on the work it was left)
    portion: int


@dataclass(frozen=True)
class SlowVerdict:
    flow_id: str
    t_m: float
    t_mean: float

    @property
    def keep_fraction(self) -> float:
        """T_m / T_mean: the share of its remaining portion the slow flow keeps."""
        return self.t_m / self.t_mean if self.t_mean > 0 else 0.0


def find_slow_flows(
    progress: Sequence[FlowProgress], slow_ratio: float = SLOW_RATIO
) -> list[SlowVerdict]:
    """Flows whose T_m is below ``slow_ratio`` times the mean T_m.

    Flows with nothing left (F_m = 0) take no part. Fewer than two flows: no
    comparison is possible and nothing is slow.
    """
    if not 0 < slow_ratio < 1:
        raise ValueError("slow_ratio must be in (0, 1)")
    t = {p.flow_id: min(1.0, p.received / p.portion) for p in progress if p.portion > 0}
    if len(t) < 2:
        return []
    t_mean = sum(t.values()) / len(t)
    if t_mean <= 0:
        return []  # nobody moves: a stall, handled by the stall timeout instead
    return [SlowVerdict(f, tm, t_mean) for f, tm in t.items() if tm < slow_ratio * t_mean]


def reduced_portion(remaining: int, verdict: SlowVerdict) -> int:
    """F_m' = (T_m / T_mean) * F_temp (paper 001, line 35), in bytes."""
    return int(remaining * verdict.keep_fraction)
