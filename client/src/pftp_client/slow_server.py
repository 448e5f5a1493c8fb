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
    portion: int  # F_m: bytes still to fetch at the start of the interval


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
    t = {p.flow_id: p.received / p.portion for p in progress if p.portion > 0}
    if len(t) < 2:
        return []
    t_mean = sum(t.values()) / len(t)
    if t_mean <= 0:
        return []  # nobody moves: a stall, handled by the stall timeout instead
    return [SlowVerdict(f, tm, t_mean) for f, tm in t.items() if tm < slow_ratio * t_mean]


def reduced_portion(remaining: int, verdict: SlowVerdict) -> int:
    """F_m' = (T_m / T_mean) * F_temp (paper 001, line 35), in bytes."""
    return int(remaining * verdict.keep_fraction)


# --------------------------------------------------------------------------
# Confirmation over several short intervals (noise guard, our addition).
#
# One interval's T_m is noisy (a server or the shared CPU stalls for a moment),
# so a single slow interval never cuts. Instead of "slow in 2 consecutive 1 s
# intervals" (~2.5 s to react) the monitor checks every SHORT interval and keeps
# each flow's T_m series. A flow is confirmed slow when, over its last `window`
# intervals (5 x 0.4 s), the MEDIAN of T_m is below slow_ratio x the median of T_mean (paper
# 001's test on a robust statistic: one stalled interval, or one burst, does not
# move a median of 5), and also when it fell below slow_ratio x its OWN earlier
# median while being below the mean (a mirror that slows down abruptly; its own
# history says this is a drop, not its normal pace).


def _median(xs: Sequence[float]) -> float:
    s = sorted(xs)
    n = len(s)
    if n == 0:
        raise ValueError("median of nothing")
    mid = n // 2
    return s[mid] if n % 2 else (s[mid - 1] + s[mid]) / 2


def confirm_slow(
    t_series: Sequence[float],
    mean_series: Sequence[float],
    *,
    window: int = 5,
    slow_ratio: float = SLOW_RATIO,
) -> bool:
    """True when the flow's last ``window`` intervals say it is slow (see above).

    ``t_series[i]`` is the flow's T_m and ``mean_series[i]`` the T_mean of the same
    interval, oldest first, for consecutive intervals of one lane only.
    """
    if window < 1 or not 0 < slow_ratio < 1:
        raise ValueError("window must be >= 1 and slow_ratio in (0, 1)")
    if len(t_series) != len(mean_series):
        raise ValueError("t_series and mean_series must have the same length")
    if len(t_series) < window:
        return False
    recent = _median(t_series[-window:])
    recent_mean = _median(mean_series[-window:])
    if recent_mean <= 0:
        return False  # nobody moves: a stall, the stall timeout handles it
    if recent < slow_ratio * recent_mean:
        return True
    earlier = t_series[:-window]
    if len(earlier) >= window and recent < recent_mean:
        own = _median(earlier)
        # every recent interval below half its own pace: a drop, not noise
        return own > 0 and max(t_series[-window:]) < slow_ratio * own
    return False
