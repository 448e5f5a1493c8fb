"""What a new TCP connection costs before it carries a path's rate, as both the
coordinator (portions.start_delay_s: far mirrors start later) and the client
(tail.plan_steal: a new range's cost) plan with it. Standard library only: the
client imports it on its way to the first byte's engine."""

from __future__ import annotations

import math

# Linux's initial congestion window (RFC 6928: 10 segments of a 1448-byte MSS).
INITIAL_WINDOW_BYTES = 10 * 1448


def slow_start_s(rate: float | None, rtt_s: float | None, connections: int = 1) -> float:
    """Time a new connection loses to slow start before it carries ``rate``
    (bytes/s) over a path of ``rtt_s``: its window doubles each round trip from
    the initial window, n = log2(rate x RTT / IW) round trips, and carries about
    one bandwidth-delay product in them, so it loses n - 1 round trips: ~0.3 s at
    40 Mbit/s and 80 ms, nothing on a LAN. ``connections`` opened together begin
    with that many initial windows between them: log2(connections) round trips
    fewer."""
    if not rate or not rtt_s or rate <= 0 or rtt_s <= 0:
        return 0.0
    windows = rate * rtt_s / (INITIAL_WINDOW_BYTES * max(1, connections))
    if windows <= 2:
        return 0.0
    return rtt_s * (math.log2(windows) - 1)


# Slow start worth cutting with one more doubling of the connections: each saves a
# round trip of the path's rate, but connections of one mirror end unevenly (BBR
# shares unevenly, and takes a finished sibling's share back only slowly on a long
# path), which costs about as much where the ramp is short. Lab, coordinated
# (notes/ramp-connections.md): 50.9 Mbit/s at 250 ms ramps 1.45 s with one
# connection, 0.95 s with four, and r15 went from 1.57x to 1.49-1.52x; 20 Mbit/s at
# 160 ms (0.61 s) with two lost 0.015x in wide-area; 40 Mbit/s at 80 ms (0.3 s) with
# four measured no gain (notes/wide-area-floor.md).
RAMP_WORTH_S = 1.0
# At most this many for the ramp alone: two round trips saved, and a server's
# per-address connection limit (vsftpd max_per_ip, pure-ftpd -C) is rarely below.
RAMP_MAX_CONNECTIONS = 4


def ramp_connections(
    rate: float | None, rtt_s: float | None, max_connections: int = RAMP_MAX_CONNECTIONS
) -> int:
    """Connections to open at once to a mirror expected at ``rate`` (bytes/s) over
    ``rtt_s`` so that its slow start is short (GridFTP's parallel streams on long
    fat paths): doubled while the slow start left is at least RAMP_WORTH_S, up to
    ``max_connections``. 1 on short or slow paths."""
    return ramp(rate, rtt_s, max_connections)[0]


def ramp(rate: float | None, rtt_s: float | None, max_connections: int) -> tuple[int, float]:
    """(ramp_connections, slow_start_s over that many at once): one slow-start
    evaluation for a path that needs no more (the coordinator's planner asks this
    of every ranked mirror on every request)."""
    k, left = 1, slow_start_s(rate, rtt_s)
    while 2 * k <= max_connections and left >= RAMP_WORTH_S:
        k *= 2
        left = slow_start_s(rate, rtt_s, k)
    return k, left
