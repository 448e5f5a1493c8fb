"""Synthetic arrival timestamps with known sharing structure (seeded numpy).

A congested link of rate C sends one packet every T = size/C (plus small
timer jitter); which flow owns each departure slot is drawn in short bursts,
as TCP windows arrive in bursts. Flows behind different links get their own
lattice with their own period and phase, and occasional idle gaps.
"""

from __future__ import annotations

import numpy as np

MS = 1_000_000


def shared_link(rng: np.random.Generator, n_flows: int, period_ns: float, packets: int,
                jitter: float = 0.05, burst: float = 3.0, start_ns: int = 0) -> list[np.ndarray]:
    slots = start_ns + np.arange(packets) * period_ns
    slots = slots + rng.normal(0, jitter * period_ns, size=packets)
    owners = np.empty(packets, dtype=int)
    i = 0
    while i < packets:
        run = max(1, int(rng.exponential(burst)))
        owners[i:i + run] = rng.integers(n_flows)
        i += run
    slots = np.sort(slots).astype(np.int64)
    return [slots[owners == k] for k in range(n_flows)]


def own_link(rng: np.random.Generator, period_ns: float, packets: int, jitter: float = 0.05,
             start_ns: int = 0) -> np.ndarray:
    gaps = np.full(packets, period_ns) + rng.normal(0, jitter * period_ns, size=packets)
    idle = rng.random(packets) < 0.03  # the queue runs empty now and then
    gaps[idle] += rng.exponential(3 * period_ns, size=idle.sum())
    t = start_ns + rng.uniform(0, period_ns) + np.cumsum(np.abs(gaps))
    return np.sort(t).astype(np.int64)
