"""Round-trip time and loss toward a mirror.

With raw sockets (root or CAP_NET_RAW; found out by trying to open one) scapy
sends ICMP echo requests and, to the mirror's service port, TCP SYNs; the
mirror's SYN-ACK (or RST) gives the RTT, the kernel then resets the half-open
connection. Without raw sockets: unprivileged ICMP datagram sockets when
net.ipv4.ping_group_range allows them, and always TCP connect time to the
service port. Every result records the method that produced it.

Loss is the fraction of unanswered samples. Like Pathchar's, ICMP loss says
little about data packets (paper 004, 5.1: routers drop ICMP first), so the
TCP-based loss is preferred when both are measured.
"""

from __future__ import annotations

import os
import socket
import statistics
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

RTT_METHODS = ("tcp-syn", "icmp", "icmp-dgram", "tcp-connect")


@dataclass(frozen=True)
class RttResult:
    method: str
    rtt_min_s: float | None
    rtt_median_s: float | None
    loss: float
    sent: int
    refused: int = 0  # TCP: answered with RST (host up, service not listening)

    @property
    def ok(self) -> bool:
        return self.rtt_min_s is not None


def summarize_rtts(method: str, rtts: Sequence[float | None], refused: int = 0) -> RttResult:
    """Pure: min/median of answered samples; loss = fraction neither answered nor
    refused. ``refused`` samples are among the None entries of ``rtts``."""
    if not rtts:
        raise ValueError("no RTT samples")
    if not 0 <= refused <= len(rtts):
        raise ValueError("refused must be between 0 and the number of samples")
    got = [r for r in rtts if r is not None]
    return RttResult(
        method=method,
        rtt_min_s=min(got) if got else None,
        rtt_median_s=statistics.median(got) if got else None,
        loss=1.0 - (len(got) + refused) / len(rtts),
        sent=len(rtts),
        refused=refused,
    )


@lru_cache(maxsize=1)
def raw_sockets_allowed() -> bool:
    """Try it: capability checks by uid miss CAP_NET_RAW and containers."""
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    except OSError:
        return False
    s.close()
    try:
        import scapy  # noqa: F401
    except ImportError:
        return False
    return True


@lru_cache(maxsize=1)
def icmp_dgram_allowed() -> bool:
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP)
    except OSError:
        return False
    s.close()
    return True


def resolve_ipv4(host: str) -> str | None:
    """First IPv4 address of ``host``; None when it has none (scapy paths are IPv4 only)."""
    try:
        infos = socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)
    except socket.gaierror:
        return None
    return str(infos[0][4][0]) if infos else None


def _scapy():
    # Imported lazily: scapy costs ~1 s and ~40 MB, and only raw-socket probes need it.
    from scapy.all import conf
    from scapy.supersocket import L3RawSocket

    # L3RawSocket routes through the kernel, which also reaches 127.0.0.0/8.
    conf.L3socket = L3RawSocket
    conf.verb = 0
    import scapy.all as sc

    return sc


def _scapy_sr(packets: list, timeout_s: float, interval_s: float) -> list[tuple[float, object]]:
    """(rtt, reply) of each answered packet."""
    sc = _scapy()
    answered, _unanswered = sc.sr(packets, timeout=timeout_s, inter=interval_s, verbose=0)
    return [(float(rcv.time) - float(snd.sent_time), rcv) for snd, rcv in answered]


def icmp_rtts(
    ip: str, count: int, timeout_s: float, interval_s: float = 0.05
) -> list[float | None]:
    sc = _scapy()
    ident = os.getpid() & 0xFFFF
    pkts = [sc.IP(dst=ip) / sc.ICMP(id=ident, seq=i) / (b"pftp" * 8) for i in range(count)]
    got: list[float | None] = [rtt for rtt, _ in _scapy_sr(pkts, timeout_s, interval_s)]
    return got + [None] * (count - len(got))


def tcp_syn_rtts(
    ip: str, port: int, count: int, timeout_s: float, interval_s: float = 0.05
) -> tuple[list[float | None], int]:
    """RTTs of SYN-ACK answers, and how many SYNs were refused with RST."""
    sc = _scapy()
    base = 40000 + (os.getpid() * 7919) % 20000
    pkts = [
        sc.IP(dst=ip) / sc.TCP(sport=base + i, dport=port, flags="S", seq=1000 + i)
        for i in range(count)
    ]
    rtts: list[float | None] = []
    refused = 0
    for rtt, rcv in _scapy_sr(pkts, timeout_s, interval_s):
        flags = int(rcv[sc.TCP].flags) if rcv.haslayer(sc.TCP) else 0
        if flags & 0x12 == 0x12:  # SYN+ACK: the service listens
            rtts.append(rtt)
        else:
            refused += 1
    return rtts + [None] * (count - len(rtts)), refused


def icmp_dgram_rtts(
    ip: str, count: int, timeout_s: float, interval_s: float = 0.05
) -> list[float | None]:
    """Unprivileged ICMP echo (Linux ping sockets: the kernel fills in the id)."""
    out: list[float | None] = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP) as s:
        s.settimeout(timeout_s)
        for seq in range(count):
            payload = b"pftp" * 8
            header = struct.pack("!BBHHH", 8, 0, 0, 0, seq)
            t0 = time.perf_counter()
            s.sendto(header + payload, (ip, 0))
            rtt: float | None = None
            deadline = t0 + timeout_s
            while time.perf_counter() < deadline:
                try:
                    data = s.recv(2048)
                except TimeoutError:
                    break
                if len(data) >= 8 and data[0] == 0 and struct.unpack("!H", data[6:8])[0] == seq:
                    rtt = time.perf_counter() - t0
                    break
            out.append(rtt)
            time.sleep(interval_s)
    return out


def tcp_connect_rtts(
    host: str, port: int, count: int, timeout_s: float, interval_s: float = 0.05
) -> tuple[list[float | None], int]:
    """Time of the TCP handshake (connect() returns after the SYN-ACK): one RTT
    plus a little kernel time. Needs no privilege; the server sees a connection
    that closes at once."""
    out: list[float | None] = []
    refused = 0
    for _ in range(count):
        t0 = time.perf_counter()
        try:
            with socket.create_connection((host, port), timeout=timeout_s):
                out.append(time.perf_counter() - t0)
        except ConnectionRefusedError:
            out.append(None)
            refused += 1
        except OSError:
            out.append(None)
        time.sleep(interval_s)
    return out, refused


def measure_rtt(
    host: str,
    port: int,
    *,
    count: int = 5,
    timeout_s: float = 3.0,
    allow_raw: bool | None = None,
) -> list[RttResult]:
    """All RTT measurements this process may make toward ``host``: TCP first
    (what data will travel as), then ICMP. ``allow_raw`` None = find out."""
    if count < 1:
        raise ValueError("count must be >= 1")
    raw = raw_sockets_allowed() if allow_raw is None else allow_raw
    ip = resolve_ipv4(host)
    results: list[RttResult] = []
    if raw and ip:
        rtts, refused = tcp_syn_rtts(ip, port, count, timeout_s)
        results.append(summarize_rtts("tcp-syn", rtts, refused))
        results.append(summarize_rtts("icmp", icmp_rtts(ip, count, timeout_s)))
    else:
        rtts, refused = tcp_connect_rtts(host, port, count, timeout_s)
        results.append(summarize_rtts("tcp-connect", rtts, refused))
        if ip and icmp_dgram_allowed():
            results.append(summarize_rtts("icmp-dgram", icmp_dgram_rtts(ip, count, timeout_s)))
    return results
