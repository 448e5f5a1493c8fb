"""How far past what it has read is the server already sending? (FTP cuts)

An FTP ``RETR`` sends from the offset to the end of the file; the client stops
it when its range is done. Whatever the server sent beyond that point is still
in the network then (in a bottleneck's queue, say) and is thrown away: behind a
4 Mbit/s access link, 30-80 KB per cut. When the engine cuts a lane (parks its
flow, steals its end), it can place the cut where nothing is thrown away: past
the bytes the kernel has queued and those in flight (engine._cut_floor).

In flight is bounded by the advertised receive window, but with receive
autotuning that window grows to megabytes on a path whose bottleneck queue
inflates the round trip, while a window- or cwnd-bound sender has only about
one round trip of its rate out. So the estimate is the queue plus the smaller
of the window and rate x receive RTT (with a margin).

Bounding the transfer itself with ``TCP_WINDOW_CLAMP`` was tried and removed:
on Linux 6.18 the window grew past the clamp in the first round trips, and
windows held below a segment stalled short ranges on loopback (notes/cut-waste.md).
"""

from __future__ import annotations

import fcntl
import socket
import struct
import termios

__all__ = [
    "committed_bytes",
    "out_of_order_counts",
    "queued_bytes",
    "received_bytes",
    "smoothed_rtt",
]

# struct tcp_info: tcpi_rcv_rtt (microseconds, the receiver's own RTT estimate) and
# tcpi_rcv_wnd (Linux >= 6.2, after tcpi_snd_wnd at offset 228).
_TCPI_RTT_OFFSET = 68  # tcpi_rtt: the smoothed RTT of what we sent (microseconds)
_TCPI_RCV_RTT_OFFSET = 92
_TCPI_BYTES_RECEIVED_OFFSET = 128  # u64, Linux >= 4.1
_TCPI_DATA_SEGS_IN_OFFSET = 152  # u32, Linux >= 4.6
_TCPI_RCV_OOOPACK_OFFSET = 224  # u32, Linux >= 5.4
_TCPI_RCV_WND_OFFSET = 232
_TCP_INFO_LEN = 240
# In flight = rate x RTT when the sender is window- or cwnd-bound; the margin
# covers a rate measured over a longer window than the last round trip.
_IN_FLIGHT_MARGIN = 1.5


def queued_bytes(sock: socket.socket) -> int:
    """Bytes received in order by the kernel and not yet read (SIOCINQ)."""
    return struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0"))[0]


def _tcp_info(sock: socket.socket) -> bytes:
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO_LEN)


def _field(info: bytes, offset: int, fmt: str) -> int | None:
    """A ``struct tcp_info`` field, None where this kernel's struct is too short."""
    if len(info) < offset + struct.calcsize(fmt):
        return None
    return int(struct.unpack_from(fmt, info, offset)[0])


def received_bytes(sock: socket.socket) -> int | None:
    """Bytes the kernel has received in order on this connection, read or not
    (``tcpi_bytes_received``); None where the kernel does not report it. Unlike
    what the application has read, it does not lag when the reading thread waits
    for the CPU. Raises OSError on a closed socket."""
    return _field(_tcp_info(sock), _TCPI_BYTES_RECEIVED_OFFSET, "Q")


def out_of_order_counts(sock: socket.socket) -> tuple[int, int] | None:
    """(data segments that arrived out of order, data segments received) on this
    connection so far (``tcpi_rcv_ooopack``, ``tcpi_data_segs_in``); None where the
    kernel does not report them. A segment arrives out of order after a loss (it
    waits in the queue until the retransmission fills the hole), so their share is
    the receiver's view of the path's loss. Raises OSError on a closed socket."""
    info = _tcp_info(sock)
    ooo = _field(info, _TCPI_RCV_OOOPACK_OFFSET, "I")
    segs = _field(info, _TCPI_DATA_SEGS_IN_OFFSET, "I")
    return None if ooo is None or segs is None else (ooo, segs)


def smoothed_rtt(sock: socket.socket) -> float | None:
    """The kernel's smoothed RTT of the connection in seconds (``tcpi_rtt``), None
    before it has one. On an FTP control connection every command's reply
    refines it. Raises OSError on a closed socket."""
    rtt_us = _field(_tcp_info(sock), _TCPI_RTT_OFFSET, "I")
    return rtt_us / 1e6 if rtt_us else None


def _window_and_rtt(sock: socket.socket) -> tuple[int, float | None]:
    """The window last advertised (``tcpi_rcv_wnd`` where the kernel reports it,
    otherwise the receive buffer's size, which bounds it) and the receive RTT
    in seconds (None before the kernel has measured one)."""
    info = _tcp_info(sock)
    rtt_us = _field(info, _TCPI_RCV_RTT_OFFSET, "I")
    window = _field(info, _TCPI_RCV_WND_OFFSET, "I")
    if window is None:
        window = sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
    return window, (rtt_us / 1e6 if rtt_us else None)


def committed_bytes(sock: socket.socket, rate: float | None = None) -> int:
    """Bytes past what the application has read that the sender has most likely
    sent already: those queued in the kernel plus what is in flight, that is the
    advertised window, or, given the flow's ``rate`` (bytes/s) and a measured
    RTT, rate x RTT with a margin when that is smaller. Raises OSError on a
    closed socket."""
    window, rtt = _window_and_rtt(sock)
    if rate is not None and rate > 0 and rtt is not None:
        window = min(window, int(rate * rtt * _IN_FLIGHT_MARGIN))
    return queued_bytes(sock) + window
