"""Fields of Linux's ``struct tcp_info`` (getsockopt TCP_INFO), shared by the
client's transports and the coordinator's probes. Offsets are the kernel's ABI;
a field the running kernel's struct is too short for reads as None."""

from __future__ import annotations

import socket
import struct

__all__ = [
    "BYTES_RECEIVED_OFFSET",
    "DATA_SEGS_IN_OFFSET",
    "RCV_OOOPACK_OFFSET",
    "RCV_RTT_OFFSET",
    "RCV_WND_OFFSET",
    "RTT_OFFSET",
    "field",
    "read",
    "received_bytes",
]

RTT_OFFSET = 68  # tcpi_rtt: the smoothed RTT of what we sent (microseconds)
RCV_RTT_OFFSET = 92  # tcpi_rcv_rtt: the receiver's own RTT estimate (microseconds)
BYTES_RECEIVED_OFFSET = 128  # tcpi_bytes_received, u64, Linux >= 4.1
DATA_SEGS_IN_OFFSET = 152  # tcpi_data_segs_in, u32, Linux >= 4.6
RCV_OOOPACK_OFFSET = 224  # tcpi_rcv_ooopack, u32, Linux >= 5.4
RCV_WND_OFFSET = 232  # tcpi_rcv_wnd, u32, Linux >= 6.2 (after tcpi_snd_wnd at 228)
_LEN = 240


def read(sock: socket.socket) -> bytes:
    """The connection's ``struct tcp_info`` as the kernel returns it (possibly
    shorter than _LEN on an older kernel). Raises OSError on a closed socket."""
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _LEN)


def field(info: bytes, offset: int, fmt: str) -> int | None:
    """A ``struct tcp_info`` field, None where this kernel's struct is too short."""
    if len(info) < offset + struct.calcsize(fmt):
        return None
    return int(struct.unpack_from(fmt, info, offset)[0])


def received_bytes(sock: socket.socket) -> int | None:
    """Bytes the kernel has received in order on this connection, read or not
    (``tcpi_bytes_received``); None where the kernel does not report it. Unlike
    what the application has read, it does not lag when the reading thread waits
    for the CPU. Raises OSError on a closed socket."""
    return field(read(sock), BYTES_RECEIVED_OFFSET, "Q")
