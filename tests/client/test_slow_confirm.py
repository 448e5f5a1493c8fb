"""slow_server.confirm_slow: short-interval slow-server rule on noisy rate series."""

from __future__ import annotations

import random

import pytest
from pftp_client.slow_server import confirm_slow


def _t_series(rates: list[float], remaining: float, dt: float = 0.4) -> list[float]:
    """T_m = D_m / F_m per interval for a flow with these rates (bytes/s)."""
    out = []
    for r in rates:
        d = r * dt
        out.append(d / remaining if remaining > 0 else 0.0)
        remaining = max(remaining - d, 1.0)
    return out


def _noisy(rate: float, n: int, rng: random.Random, stall_p: float = 0.1) -> list[float]:
    # +-40 % jitter and, now and then, a whole interval with nothing (CPU/server stall)
    return [0.0 if rng.random() < stall_p else rate * rng.uniform(0.6, 1.4) for _ in range(n)]


def _judge(flows: dict[str, list[float]], remaining: float, window: int = 3) -> dict[str, int]:
    """Feed the series interval by interval; first interval index each flow is confirmed."""
    ts = {f: _t_series(r, remaining) for f, r in flows.items()}
    n = len(next(iter(ts.values())))
    means = [sum(t[i] for t in ts.values()) / len(ts) for i in range(n)]
    first: dict[str, int] = {}
    for i in range(1, n + 1):
        for f, t in ts.items():
            if f not in first and confirm_slow(t[:i], means[:i], window=window):
                first[f] = i
    return first


@pytest.mark.parametrize("seed", range(40))
def test_healthy_noisy_flows_are_never_cut(seed: int) -> None:
    rng = random.Random(seed)
    flows = {f"m{i}": _noisy(2.5e6, 30, rng, stall_p=0.05) for i in range(4)}
    assert _judge(flows, remaining=30e6) == {}


@pytest.mark.parametrize("seed", range(20))
def test_abrupt_slowdown_is_cut_within_the_window(seed: int) -> None:
    rng = random.Random(seed)
    flows = {f"m{i}": _noisy(2.5e6, 20, rng, stall_p=0.05) for i in range(3)}
    fast = _noisy(3.75e6, 20, rng, stall_p=0.05)
    flows["m3"] = fast[:8] + [r / 20 for r in fast[8:]]  # 30 -> 1.5 Mbit/s at interval 8
    first = _judge(flows, remaining=30e6)
    assert set(first) == {"m3"}
    assert first["m3"] <= 8 + 5  # confirmed after at most `window` slow intervals


def test_single_stalled_interval_does_not_cut() -> None:
    t = [0.1, 0.1, 0.0, 0.1, 0.1]
    mean = [0.1] * 5
    assert not any(confirm_slow(t[:i], mean[:i]) for i in range(1, 6))


def test_drop_against_own_history_while_below_the_mean() -> None:
    # 0.6 of the mean is no cut by the mean rule; a drop from 2x the mean to it is
    t = [0.2, 0.2, 0.2, 0.06, 0.06, 0.06]
    mean = [0.1] * 6
    assert confirm_slow(t, mean)
    assert not confirm_slow([0.06] * 6, mean)  # its normal pace: not a drop


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        confirm_slow([0.1], [0.1, 0.2])
    with pytest.raises(ValueError):
        confirm_slow([0.1], [0.1], window=0)
    with pytest.raises(ValueError):
        confirm_slow([0.1], [0.1], slow_ratio=1.0)
