"""Packet-level arrival timestamps of the client's own flows.

An AF_PACKET socket (stdlib, needs root or CAP_NET_RAW) with a classic BPF
filter that passes only TCP segments whose *source* port is one of the
mirrors' ports, so the kernel hands us just the data packets of our flows,
each with its kernel receive time (SO_TIMESTAMPNS, CLOCK_REALTIME).
Packets are keyed by (remote ip, remote port, local port); segments without
payload (pure ACKs) are ignored. ``scapy_capture_available`` reports whether
the scapy sniffer could be used instead; the stdlib socket is preferred
because it is lighter and gives the same kernel timestamps.
"""

from __future__ import annotations

import functools
import ipaddress
import select
import socket
import struct
import threading
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from pftp_client.afpacket import ETH_P_ALL, afpacket_capture_available
from pftp_client.congestion.timestamps import SCM_TIMESTAMPNS, SO_TIMESTAMPNS, TimestampSource

if TYPE_CHECKING:
    import numpy as np

SO_ATTACH_FILTER = 26
PACKET_OUTGOING = 4
SNAPLEN = 128
_BATCH = 256  # frames read per call at most
_PAUSE_S = 0.01  # between wake-ups: the frames queue meanwhile (~150 at 160 Mbit/s)
_CMSG_SPACE = socket.CMSG_SPACE(16)
_TIMESPEC = struct.Struct("qq")

FlowKey = tuple[str, int, int]  # (remote ip, remote port, local port)

# classic BPF opcodes (linux/filter.h)
_LD_ABS, _LDH_ABS, _LDB_ABS, _LDH_IND, _LDXB_MSH = 0x20, 0x28, 0x30, 0x48, 0xB1
_JEQ_K, _JSET_K, _RET_K = 0x15, 0x45, 0x06


def source_port_filter(
    ports: Iterable[int], snaplen: int = SNAPLEN
) -> list[tuple[int, int, int, int]]:
    """cBPF program: accept IPv4/IPv6 TCP frames whose source port is in ``ports``.

    Returns (code, jt, jf, k) instructions for SO_ATTACH_FILTER.
    """
    plist = sorted({int(p) for p in ports})
    if not plist or len(plist) > 100 or any(not 0 < p < 65536 for p in plist):
        raise ValueError("need 1-100 TCP ports in 1..65535")
    # Layout: [0] ldh ethertype, [1] jeq v4, [2] jeq v6, v4 block, v6 block, accept, reject
    v4 = [
        (_LDB_ABS, 0, 0, 23),  # ip proto
        (_JEQ_K, 0, None, 6),  # tcp? else reject
        (_LDH_ABS, 0, 0, 20),  # flags+fragment offset
        (_JSET_K, None, 0, 0x1FFF),  # fragment -> reject
        (_LDXB_MSH, 0, 0, 14),  # x = ip header length
        (_LDH_IND, 0, 0, 14),  # tcp source port
    ] + [(_JEQ_K, "A", 0, p) for p in plist] + [(_RET_K, 0, 0, 0)]
    v6 = [
        (_LDB_ABS, 0, 0, 20),  # next header
        (_JEQ_K, 0, None, 6),
        (_LDH_ABS, 0, 0, 54),  # tcp source port (no extension headers)
    ] + [(_JEQ_K, "A", 0, p) for p in plist]
    head = [(_LDH_ABS, 0, 0, 12), (_JEQ_K, 1, 0, 0x0800), (_JEQ_K, len(v4), None, 0x86DD)]
    prog: list = head + v4 + v6 + [(_RET_K, 0, 0, snaplen), (_RET_K, 0, 0, 0)]
    accept, reject = len(prog) - 2, len(prog) - 1
    out = []
    for i, (code, jt, jf, k) in enumerate(prog):
        def resolve(target, i=i):
            if target == "A":
                return accept - i - 1
            if target is None:
                return reject - i - 1
            return target

        out.append((code, resolve(jt), resolve(jf), k))
    if any(not 0 <= jt <= 255 or not 0 <= jf <= 255 for _, jt, jf, _ in out):
        raise ValueError("BPF program too long")
    return out


def source_address_filter(
    addresses: Iterable[str], snaplen: int = SNAPLEN
) -> list[tuple[int, int, int, int]]:
    """cBPF program: accept IPv4 TCP frames (not fragments) whose *source address*
    is one of ``addresses``. Used for FTP, whose passive data ports are not known
    in advance; the flows are then told apart by address in Python."""
    ips = sorted({int(ipaddress.IPv4Address(a)) for a in addresses})
    if not ips or len(ips) > 100:
        raise ValueError("need 1-100 IPv4 source addresses")
    n = len(ips)
    # [0] ldh ethertype, [1] jeq v4, [2] ldb proto, [3] jeq tcp, [4] ldh frag,
    # [5] jset frag, [6] ld src, [7..7+n) jeq ip, accept, reject
    accept, reject = 7 + n, 8 + n
    prog = [
        (_LDH_ABS, 0, 0, 12),
        (_JEQ_K, 0, reject - 2, 0x0800),
        (_LDB_ABS, 0, 0, 23),
        (_JEQ_K, 0, reject - 4, 6),
        (_LDH_ABS, 0, 0, 20),
        (_JSET_K, reject - 6, 0, 0x1FFF),
        (_LD_ABS, 0, 0, 26),
    ]
    for i, ip in enumerate(ips):
        at = 7 + i
        prog.append((_JEQ_K, accept - at - 1, 0 if i < n - 1 else reject - at - 1, ip))
    prog += [(_RET_K, 0, 0, snaplen), (_RET_K, 0, 0, 0)]
    if any(not 0 <= jt <= 255 or not 0 <= jf <= 255 for _, jt, jf, _ in prog):
        raise ValueError("BPF program too long")
    return prog


def attach_filter(sock: socket.socket, prog: list[tuple[int, int, int, int]]) -> None:
    import ctypes

    raw = b"".join(struct.pack("HBBI", *ins) for ins in prog)
    buf = ctypes.create_string_buffer(raw)
    fprog = struct.pack("HL", len(prog), ctypes.addressof(buf))
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)
    # the kernel copies the program; buf only has to live through setsockopt
    del buf


def parse_tcp_segment(frame: bytes, wire_len: int) -> tuple[str, int, int, int] | None:
    """(src ip, src port, dst port, payload bytes) of an Ethernet TCP frame."""
    if len(frame) < 14:
        return None
    ethertype = struct.unpack_from("!H", frame, 12)[0]
    if ethertype == 0x0800 and len(frame) >= 34:
        ihl = (frame[14] & 0x0F) * 4
        if frame[23] != 6 or len(frame) < 14 + ihl + 14:
            return None
        total = struct.unpack_from("!H", frame, 16)[0]
        src = socket.inet_ntop(socket.AF_INET, frame[26:30])
        tcp = 14 + ihl
        ip_payload = total - ihl
    elif ethertype == 0x86DD and len(frame) >= 68:
        if frame[20] != 6:
            return None
        src = socket.inet_ntop(socket.AF_INET6, frame[22:38])
        tcp = 54
        ip_payload = struct.unpack_from("!H", frame, 18)[0]
    else:
        return None
    sport, dport = struct.unpack_from("!HH", frame, tcp)
    doff = (frame[tcp + 12] >> 4) * 4
    return src, sport, dport, max(ip_payload - doff, 0)


def scapy_capture_available() -> bool:
    try:
        import scapy.all  # noqa: F401
    except Exception:  # scapy missing or broken: fall back to the stdlib socket
        return False
    return afpacket_capture_available()


class PacketCapture:
    """Background AF_PACKET capture of data packets from the given server ports.

    Use as a context manager, or start()/stop(). ``timestamps(key)`` returns
    the kernel arrival times (ns) of the payload-carrying packets of one flow.
    """

    source = TimestampSource.PACKET_AF_PACKET

    def __init__(self, server_ports: Iterable[int] = (), *, interface: str | None = None,
                 rcvbuf: int = 8 << 20, source_addresses: Iterable[str] = (),
                 max_per_flow: int | None = None) -> None:
        """Filter on the servers' source ports, or (``source_addresses``, IPv4 only)
        on their addresses. ``max_per_flow`` bounds the packets kept per flow key
        (the newest are kept); None keeps all (the recorder)."""
        self.ports = sorted({int(p) for p in server_ports})
        self.addresses = sorted(set(source_addresses))
        if not self.ports and not self.addresses:
            raise ValueError("give the servers' ports or their addresses")
        self.interface = interface
        self.rcvbuf = rcvbuf
        self.max_per_flow = max_per_flow
        self._lock = threading.Lock()
        self._times: dict[FlowKey, deque[int]] = {}
        self._sizes: dict[FlowKey, deque[int]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._discard = False  # stop(wait=False): skip the final drain
        self._close_on_exit = False  # stop(wait=False): the thread closes the socket
        self._thread_done = False
        self._sock: socket.socket | None = None
        self.packets_seen = 0

    def start(self) -> PacketCapture:
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.rcvbuf)
            sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            attach_filter(sock, source_address_filter(self.addresses) if self.addresses
                          else source_port_filter(self.ports))
            if self.interface:
                sock.bind((self.interface, 0))
        except BaseException:
            sock.close()
            raise
        # Drain what arrived before the filter was attached.
        sock.setblocking(False)
        while True:
            try:
                sock.recv(SNAPLEN)
            except BlockingIOError:
                break
        sock.setblocking(True)
        self._sock = sock
        self._thread = threading.Thread(target=self._run, name="pftp-capture", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        assert self._sock is not None
        sock = self._sock
        # (non-blocking: select waits, then every queued frame is read in one go)
        sock.setblocking(False)
        try:
            while not self._stop.is_set():
                ready, _, _ = select.select([sock], [], [], 0.1)
                if not ready:
                    continue
                if not self._read_queued(sock):
                    return  # (the socket was closed)
                # The kernel stamped each frame on arrival: read later, it loses no
                # precision, and a wake-up per few frames (thousands a second) took
                # the flows' reader threads' interpreter time.
                self._stop.wait(_PAUSE_S)
            if self._discard:
                return
            # stop() was called: take what the kernel already queued, then quit
            self._read_queued(sock)
        finally:
            with self._lock:
                self._thread_done = True
                close = self._close_on_exit
            if close:
                sock.close()
                self._sock = None

    def _read_queued(self, sock: socket.socket) -> bool:
        """Read and record every frame queued, a batch at a time; False when the
        socket was closed."""
        while (n := self._read_batch(sock)) == _BATCH:
            pass
        return n >= 0

    def _read_batch(self, sock: socket.socket) -> int:
        """Read and record up to _BATCH queued frames; how many were read, -1 when
        the socket was closed. At a few thousand packets a second per flow, one
        select, one lock and one address lookup per packet cost the flows' reader
        threads their interpreter time (lab, 16 connections at 160 Mbit/s: ~20 %
        of a core)."""
        got: list[tuple[FlowKey, int, int]] = []
        recvmsg = sock.recvmsg
        space = _CMSG_SPACE
        n = 0
        for n in range(1, _BATCH + 1):
            try:
                data, ancdata, _flags, addr = recvmsg(SNAPLEN, space, socket.MSG_TRUNC)
            except BlockingIOError:
                n -= 1
                break
            except OSError:
                n = -1
                break
            if addr[2] == PACKET_OUTGOING:
                continue
            ts = None
            for level, kind, cdata in ancdata:
                if level == socket.SOL_SOCKET and kind == SCM_TIMESTAMPNS:
                    sec, nsec = _TIMESPEC.unpack_from(cdata)
                    ts = sec * 1_000_000_000 + nsec
            seg = parse_tcp_segment(data, len(data))
            if ts is None or seg is None or seg[3] == 0:
                continue
            got.append(((_canonical_ip(seg[0]), seg[1], seg[2]), ts, seg[3]))
        if got:
            with self._lock:
                self.packets_seen += len(got)
                for key, ts, size in got:
                    times = self._times.get(key)
                    if times is None:
                        times = self._times[key] = deque(maxlen=self.max_per_flow)
                        self._sizes[key] = deque(maxlen=self.max_per_flow)
                    times.append(ts)
                    self._sizes[key].append(size)
        return n

    def stop(self, wait: bool = True) -> None:
        """Stop capturing. ``wait=False``: do not drain what the kernel queued nor
        wait for the thread (it may sit in select for up to 0.1 s); the thread closes
        the socket itself when it ends."""
        with self._lock:
            if not wait:
                self._discard = True
            self._stop.set()
            if not wait and self._thread is not None and not self._thread_done:
                self._close_on_exit = True
                return
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self) -> PacketCapture:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def keys(self) -> list[FlowKey]:
        with self._lock:
            return list(self._times)

    def timestamps(self, key: FlowKey) -> np.ndarray:
        return self.packets(key)[0]

    def timestamps_from(self, remote_ip: str, remote_port: int | None,
                        exclude_port: int | None = None) -> np.ndarray:
        return self.packets_from(remote_ip, remote_port, exclude_port)[0]

    def packets(self, key: FlowKey) -> tuple[np.ndarray, np.ndarray]:
        """(arrival ns, payload bytes) of one flow key, in arrival order."""
        key = (_canonical_ip(key[0]), int(key[1]), int(key[2]))
        return self._gather(lambda k: k == key)

    def packets_from(self, remote_ip: str, remote_port: int | None,
                     exclude_port: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """All data packets from one remote endpoint (any local port), as (arrival
        ns, payload bytes) in arrival order; with ``remote_port`` None, from any
        port of that address but ``exclude_port`` (an FTP server: its passive data
        ports change with every transfer, the control port only carries replies)."""
        ip = _canonical_ip(remote_ip)
        return self._gather(lambda k: k[0] == ip and (
            k[1] == remote_port if remote_port is not None else k[1] != exclude_port))

    def _gather(self, wanted: Callable[[FlowKey], bool]) -> tuple[np.ndarray, np.ndarray]:
        import numpy as np  # lazy: numpy (~0.1 s) stays off the start-up path

        with self._lock:
            keys = [k for k in self._times if wanted(k)]
            times = [np.fromiter(self._times[k], dtype=np.int64) for k in keys]
            sizes = [np.fromiter(self._sizes[k], dtype=np.int64) for k in keys]
        if not times:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        t, z = np.concatenate(times), np.concatenate(sizes)
        order = np.argsort(t, kind="stable")
        return t[order], z[order]

    def sizes(self, key: FlowKey) -> np.ndarray:
        import numpy as np  # lazy: numpy (~0.1 s) stays off the start-up path

        key = (_canonical_ip(key[0]), int(key[1]), int(key[2]))
        with self._lock:
            return np.fromiter(self._sizes.get(key, ()), dtype=np.int64)


@functools.lru_cache(maxsize=1024)
def _canonical_ip(ip: str) -> str:
    addr = ipaddress.ip_address(ip)
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped:
        return str(addr.ipv4_mapped)
    return str(addr)
