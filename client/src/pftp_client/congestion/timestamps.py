"""Where arrival timestamps come from, and per-flow buffers for them.

Sources, best first:
  packet-afpacket   kernel receive time of every data packet, from an AF_PACKET
                    socket filtered on the flows' ports (root / CAP_NET_RAW);
  packet-scapy      the same through scapy's sniffer (when scapy is installed);
  app-kernel        SO_TIMESTAMPNS on the TCP socket: the kernel time of the last
                    segment in each receive call (unprivileged);
  app-recv          the clock read right after each receive call returned (what
                    the engine's flow-observer hook delivers; always available).
Application-level sources see one event per receive call, not per packet: a
receive that returns several segments yields one timestamp.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections import deque
from collections.abc import Hashable
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np


SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux value
SCM_TIMESTAMPNS = SO_TIMESTAMPNS
TYPICAL_MSS = 1448


class TimestampSource(StrEnum):
    PACKET_AF_PACKET = "packet-afpacket"
    PACKET_SCAPY = "packet-scapy"
    APP_KERNEL = "app-kernel"
    APP_RECV = "app-recv"

    @property
    def packet_level(self) -> bool:
        return self in (TimestampSource.PACKET_AF_PACKET, TimestampSource.PACKET_SCAPY)


class ArrivalBuffer:
    """Thread-safe per-flow ring buffers of (arrival_ns, nbytes)."""

    def __init__(self, capacity: int = 4096) -> None:
        if capacity < 2:
            raise ValueError("capacity must be at least 2")
        self.capacity = capacity
        self._lock = threading.Lock()
        self._times: dict[Hashable, deque[int]] = {}
        self._sizes: dict[Hashable, deque[int]] = {}
        self._total_bytes: dict[Hashable, int] = {}

    def add(self, flow: Hashable, arrival_ns: int, nbytes: int) -> None:
        with self._lock:
            times = self._times.get(flow)
            if times is None:
                times = self._times[flow] = deque(maxlen=self.capacity)
                self._sizes[flow] = deque(maxlen=self.capacity)
                self._total_bytes[flow] = 0
            if times and arrival_ns < times[-1]:
                arrival_ns = times[-1]  # clocks from several threads: keep order
            times.append(arrival_ns)
            self._sizes[flow].append(nbytes)
            self._total_bytes[flow] += nbytes

    def forget(self, flow: Hashable) -> None:
        with self._lock:
            self._times.pop(flow, None)
            self._sizes.pop(flow, None)
            self._total_bytes.pop(flow, None)

    def flows(self) -> list[Hashable]:
        with self._lock:
            return list(self._times)

    def timestamps(self, flow: Hashable) -> np.ndarray:
        import numpy as np  # lazy: numpy (~0.1 s) stays off the start-up path

        with self._lock:
            return np.fromiter(self._times.get(flow, ()), dtype=np.int64)

    def sizes(self, flow: Hashable) -> np.ndarray:
        import numpy as np  # lazy: numpy (~0.1 s) stays off the start-up path

        with self._lock:
            return np.fromiter(self._sizes.get(flow, ()), dtype=np.int64)

    def total_bytes(self, flow: Hashable) -> int:
        with self._lock:
            return self._total_bytes.get(flow, 0)


def enable_kernel_timestamps(sock: socket.socket) -> bool:
    """Ask the kernel to attach receive timestamps (SO_TIMESTAMPNS) to ``sock``."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    except OSError:
        return False
    return True


def recv_into_timestamped(
    sock: socket.socket, buf: memoryview | bytearray, clock_ns: int
) -> tuple[int, int, TimestampSource]:
    """``recv_into`` that also returns the kernel receive time when the socket
    has SO_TIMESTAMPNS enabled (CLOCK_REALTIME ns), else ``clock_ns`` (the
    caller's own clock reading, taken just after this call is fine)."""
    nbytes, ancdata, _flags, _addr = sock.recvmsg_into([buf], socket.CMSG_SPACE(16))
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == SCM_TIMESTAMPNS and len(data) >= 16:
            sec, nsec = struct.unpack("qq", data[:16])
            return nbytes, sec * 1_000_000_000 + nsec, TimestampSource.APP_KERNEL
    return nbytes, clock_ns, TimestampSource.APP_RECV


def clean_app_timestamps(
    times_ns: np.ndarray, nbytes: np.ndarray, mss: int = TYPICAL_MSS, max_segments: float = 1.5
) -> np.ndarray:
    """Application-level arrival times with the late receives removed.

    A receive that returns more than ``max_segments`` segments means the
    process was not waiting when the data came (GIL, disk, scheduler): its
    timestamp is the time of the read, not of any arrival, and such stalls hit
    all flows of the process at once, which makes independent flows look alike.
    Keeping only single-segment receives leaves the times that track arrivals.
    """
    import numpy as np  # lazy: numpy (~0.1 s) stays off the start-up path

    times_ns = np.asarray(times_ns, dtype=np.int64)
    nbytes = np.asarray(nbytes)
    if times_ns.shape != nbytes.shape:
        raise ValueError("times and sizes must have the same length")
    return times_ns[nbytes <= max_segments * mss]
