"""Bounding a stream transfer at the receiver with TCP's receive window.

An FTP ``RETR`` sends from the offset to the end of the file; the client stops
it when its range is done. Whatever the server sent beyond that point is still
in the network then (in a bottleneck's queue, say) and is thrown away: behind a
4 Mbit/s access link, 30-70 KB per cut, 7-9 % of the link over a download. The
receiver decides how far the sender may go, though: the advertised window's
right edge. ``TCP_WINDOW_CLAMP`` caps the window, so clamping it to the bytes
the range still lacks (minus those already queued in the kernel) keeps the
right edge at the range's end, and the server sends nothing the cut discards.

Linux never moves an advertised right edge back (RFC 7323 2.4; unless the
``tcp_shrink_window`` sysctl allows it), so the clamp must be in place before
the edge passes the end: it is set before connecting (to the range's length),
and the receive loop tightens it, once the end is near, after every receive.
The kernel's receive-buffer autotuning may raise the clamp between two
receives; the next receive sets it back. What slips through is bounded by what
arrives during one receive, plus one segment: the clamp is rounded up to whole
segments so the sender is never held to a sliver (Nagle would then wait for
an ACK).

``committed_bytes`` answers the converse question for the engine: how far
past what it has read is the server already sending? A cut placed there or
later wastes nothing. The advertised window only bounds that: with receive
autotuning it grows to megabytes on a path whose bottleneck queue inflates the
round trip, while the sender has only about one round trip of its rate in
flight. So the estimate is the kernel's queue plus the smaller of the window
and rate x receive RTT (with a margin).
"""

from __future__ import annotations

import fcntl
import socket
import struct
import termios

__all__ = ["WindowBound", "committed_bytes", "queued_bytes", "set_clamp"]

_TCP_WINDOW_CLAMP = getattr(socket, "TCP_WINDOW_CLAMP", 10)
# struct tcp_info: tcpi_rcv_wnd (Linux >= 6.2) follows tcpi_snd_wnd at offset 228.
_TCPI_RCV_WND_OFFSET = 232
_TCPI_RCV_RTT_OFFSET = 92  # microseconds, the receiver's own RTT estimate
# In flight = rate x RTT when the sender is window- or cwnd-bound; the margin
# covers a rate measured over a longer window than the last round trip.
_IN_FLIGHT_MARGIN = 1.5
_TCP_INFO_LEN = 240
_FALLBACK_MSS = 1448
_INT_MAX = (1 << 31) - 1


def queued_bytes(sock: socket.socket) -> int:
    """Bytes received in order by the kernel and not yet read (SIOCINQ)."""
    return struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0"))[0]


def set_clamp(sock: socket.socket, nbytes: int) -> None:
    """Cap the advertised receive window (the kernel raises tiny values to ~1 KiB)."""
    sock.setsockopt(socket.IPPROTO_TCP, _TCP_WINDOW_CLAMP, max(1, min(nbytes, _INT_MAX)))


def _window_and_rtt(sock: socket.socket) -> tuple[int, float | None]:
    """The window last advertised (``tcpi_rcv_wnd`` where the kernel reports it,
    otherwise the receive buffer's size, which bounds it) and the receive RTT
    in seconds (None before the kernel has measured one)."""
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO_LEN)
    rtt_us = struct.unpack_from("I", info, _TCPI_RCV_RTT_OFFSET)[0] if len(info) >= 96 else 0
    if len(info) >= _TCPI_RCV_WND_OFFSET + 4:
        window = struct.unpack_from("I", info, _TCPI_RCV_WND_OFFSET)[0]
    else:
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


class WindowBound:
    """Per-transfer state of the clamp (one data connection)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        try:
            self.mss = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG) or _FALLBACK_MSS
        except OSError:
            self.mss = _FALLBACK_MSS
        self._horizon = 0
        self._calls = 0
        self._refresh_horizon()
        self.enabled = True

    def _refresh_horizon(self) -> None:
        # The right edge is at most the queue's end plus the window, and both are
        # below the receive buffer; autotuning may double the buffer per round
        # trip, hence the margin.
        self._horizon = 4 * self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)

    @staticmethod
    def preconnect(sock: socket.socket, length: int) -> None:
        """Before ``connect``: the first window (and the window scale) are chosen
        then, so a short range is bounded from its first byte."""
        set_clamp(sock, length)

    def update(self, left: int) -> None:
        """After a receive: ``left`` = range end minus bytes read so far."""
        if not self.enabled:
            return
        self._calls += 1
        try:
            if left > self._horizon:
                if self._calls % 8 == 0:  # the buffer grows while the transfer runs
                    self._refresh_horizon()
                return
            want = left - queued_bytes(self.sock)
            segments = -(-max(want, 1) // self.mss)  # round up to whole segments
            set_clamp(self.sock, segments * self.mss)
            self._refresh_horizon()
        except OSError:
            self.enabled = False  # a socket that refuses it: transfer as before
