"""Bottleneck capacity by packet train dispersion (root only: raw ICMP socket).

A train of ``count`` large ICMP echo requests is sent back to back; the echo
replies leave the mirror's side of the bottleneck spaced by its transmission
time, so capacity ~= reply_size * 8 / median(inter-arrival gap). The median of
consecutive gaps (a packet-pair estimate per pair) rather than the train span is
used because a token-bucket shaper lets its burst through at line rate.

Limits (also in notes/data.md):
- Needs raw sockets (root/CAP_NET_RAW); without them no capacity is recorded and
  the ranking uses the ranged-read throughput instead.
- Measures the path of the echo *replies*, i.e. mirror -> coordinator, which is
  the download direction, but from the coordinator, not from each client.
- Python sends at most some 10^5 packets/s: above roughly 1 Gbit/s the
  sender, not the path, spaces the train, so results near that are lower bounds
  (``sender_limited`` flags when the replies are spaced no wider than the sends).
- A token-bucket shaper (tc tbf, many ISP policers) lets its burst through at
  line rate: the train (100 x 1428 bytes = 140 kB) must be well over twice the
  burst for the median gap to be the shaped one; larger bursts read as "fast".
- Cost: 140 kB each way per probe round, on top of the ranged read.
- Cross traffic compresses or stretches gaps; the median hides some of it.
- Hosts that drop or rate-limit ICMP give no answer (``ok`` False).
- Interrupt coalescing on fast NICs bunches replies; results above ~1 Gbit/s are noise.
"""

from __future__ import annotations

import itertools
import os
import socket
import statistics
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass

PAYLOAD = 1400
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)


@dataclass(frozen=True)
class CapacityResult:
    method: str
    capacity_bps: float | None
    replies: int
    sent: int
    sender_limited: bool

    @property
    def ok(self) -> bool:
        return self.capacity_bps is not None


def capacity_from_arrivals(arrivals: Sequence[float], packet_bytes: int) -> float | None:
    """Pure: packet_bytes*8 / median gap between consecutive arrivals (sorted)."""
    ts = sorted(arrivals)
    gaps = [b - a for a, b in itertools.pairwise(ts) if b > a]
    if len(gaps) < 2:
        return None
    return packet_bytes * 8 / statistics.median(gaps)


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\x00"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    total = (total >> 16) + (total & 0xFFFF)
    total += total >> 16
    return ~total & 0xFFFF


def _echo(ident: int, seq: int, payload: bytes) -> bytes:
    header = struct.pack("!BBHHH", 8, 0, 0, ident, seq)
    csum = _checksum(header + payload)
    return struct.pack("!BBHHH", 8, 0, csum, ident, seq) + payload


def packet_train(ip: str, *, count: int = 100, timeout_s: float = 3.0) -> CapacityResult:
    """Send the train back to back on a raw ICMP socket (a tight sendto loop:
    scapy's per-packet overhead would space the train by itself) and time the
    replies with kernel receive timestamps (SO_TIMESTAMPNS)."""
    ident = (os.getpid() + 17) & 0xFFFF
    payload = b"\x00" * PAYLOAD
    pkts = [_echo(ident, i, payload) for i in range(count)]
    with socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP) as sock:
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * 1024 * 1024)
        sends: list[float] = []
        for pkt in pkts:
            sock.sendto(pkt, (ip, 0))
            sends.append(time.time())
        arrivals: list[float] = []
        size = PAYLOAD + 28
        deadline = time.monotonic() + timeout_s
        seen: set[int] = set()
        while len(seen) < count and time.monotonic() < deadline:
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                data, anc, _flags, _addr = sock.recvmsg(4096, 64)
            except TimeoutError:
                break
            ihl = (data[0] & 0x0F) * 4
            if len(data) < ihl + 8:
                continue
            typ, _code, _c, rid, seq = struct.unpack("!BBHHH", data[ihl : ihl + 8])
            if typ != 0 or rid != ident or seq in seen:
                continue
            seen.add(seq)
            size = len(data)
            ts = time.time()
            for level, kind, raw in anc:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                    sec, nsec = struct.unpack("qq", raw[:16])
                    ts = sec + nsec / 1e9
            arrivals.append(ts)
    capacity = capacity_from_arrivals(arrivals, size)
    send_rate = capacity_from_arrivals(sends, size)
    limited = capacity is not None and send_rate is not None and capacity >= 0.9 * send_rate
    return CapacityResult("packet-train", capacity, len(arrivals), count, limited)
