"""What a new TCP connection costs before it carries a path's rate, as both the
coordinator (portions.start_delay_s: far mirrors start later) and the client
(tail.plan_steal: a new range's cost) plan with it. Standard library only: the
client imports it on its way to the first byte's engine."""

from __future__ import annotations

import math

# Linux's initial congestion window (RFC 6928: 10 segments of a 1448-byte MSS).
INITIAL_WINDOW_BYTES = 10 * 1448


def slow_start_s(rate: float | None, rtt_s: float | None) -> float:
    """Time a new connection loses to slow start before it carries ``rate``
    (bytes/s) over a path of ``rtt_s``: its window doubles each round trip from
    the initial window, n = log2(rate x RTT / IW) round trips, and carries about
    one bandwidth-delay product in them, so it loses n - 1 round trips: ~0.3 s at
    40 Mbit/s and 80 ms, nothing on a LAN."""
    if not rate or not rtt_s or rate <= 0 or rtt_s <= 0:
        return 0.0
    windows = rate * rtt_s / INITIAL_WINDOW_BYTES
    if windows <= 2:
        return 0.0
    return rtt_s * (math.log2(windows) - 1)
