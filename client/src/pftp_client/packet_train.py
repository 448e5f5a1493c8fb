"""Available bandwidth toward the first hop by ICMP echo packet-train dispersion
(paper 004, 3.3: "A P-FTP client measures the available bandwidth to its Internet
Gateway ... Ping messages ... [34]").

A train of MTU-sized echo requests is sent back to back to the gateway. The echo
replies come back through the access link toward the client (the download
direction), spaced by its per-packet transmission time, so
rate ~= reply_bytes * 8 / gap. The gap is estimated robustly (``estimate_rate``):

- only replies that *queued* at the bottleneck count (round trip clearly above the
  train's base): a token-bucket shaper (tc tbf, ISP policers) lets its burst
  through at line rate, and a scheduler pause of our sender lets the bucket refill;
  those replies were not spaced by the link. The train must be well over the burst
  (the lab's tbf bursts are 32 kB, or 10 ms worth at high rates: 100 kB, ~70
  packets, at 80 Mbit/s; hence 120 packets);
- the gap is the median over sliding windows of ``window`` consecutive gaps: the
  window smooths receive batching (NAPI, interrupt coalescing), the median a stray
  pause;
- replies dropped before the bottleneck or by its full queue do not matter: they
  never used the link, so the remaining arrivals are still one transmission apart;
- when the replies come as fast as we sent them, or no queue built up, the path is
  faster than this train can see: no figure rather than a wrong one.

Arrival times are kernel receive timestamps (SO_TIMESTAMPNS). Sockets: raw ICMP as
root (CAP_NET_RAW), else an unprivileged ICMP datagram socket when the group is in
net.ipv4.ping_group_range. IPv4 only. Cost: 120 x 1500 bytes each way per train.
"""

from __future__ import annotations

import errno
import os
import select
import socket
import statistics
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass

SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)
IP_ICMP_HEADERS = 28  # IPv4 header without options + ICMP echo header

DEFAULT_COUNT = 120
DEFAULT_WINDOW = 4  # a multiple of 2: receive batching in pairs averages out exactly
MIN_GAPS = 8
MIN_QUEUE_PACKETS = 4  # the backlog must reach a few packets' transmission times
FLOOR_BPS = 64_000.0  # below this the "link" is a lossy/rate-limited ICMP responder
SENDER_LIMITED = 0.8  # replies at >= 80% of our send rate: the sender set the pace


class ProbeUnavailable(OSError):
    """No ICMP socket can be opened (not root and not in net.ipv4.ping_group_range)."""


Reply = tuple[int, float]  # (sequence number, kernel receive time)


@dataclass(frozen=True)
class TrainSample:
    """What one train gave on the wire (times in seconds, epoch)."""

    target: str
    socket_kind: str  # "raw" or "dgram"
    sent: int
    send_times: tuple[float, ...]  # by sequence number
    replies: tuple[Reply, ...]  # in arrival order
    reply_bytes: int  # IP length of one reply
    seconds: float  # wall time the probe took


@dataclass(frozen=True)
class TrainEstimate:
    rate_bps: float | None
    detail: str  # "ok" or why there is no figure
    replies: int
    gaps: int = 0  # gaps between queued replies the median was taken over
    send_rate_bps: float | None = None

    @property
    def ok(self) -> bool:
        return self.rate_bps is not None


# ------------------------------------------------------------------ pure estimator


def windowed_gaps(times: Sequence[float], window: int) -> list[float]:
    """Mean gap over each run of ``window`` consecutive gaps of the sorted times."""
    ts = sorted(times)
    w = max(1, window)
    return [(ts[i + w] - ts[i]) / w for i in range(len(ts) - w)]


def queued_runs(
    send_times: Sequence[float], replies: Sequence[Reply]
) -> tuple[list[list[float]], float]:
    """Arrival times of the replies that waited at the bottleneck, as runs of
    consecutive arrivals, and the largest queuing delay (seconds).

    A reply's queuing delay is its round trip minus the train's base (its 10th
    percentile round trip, the unqueued ones). Only
    replies that queued were spaced by the link: those a token bucket let through
    on its burst, or that followed a pause of our sender long enough to refill it,
    were not (in the lab, a 6 ms scheduler pause at 80 Mbit/s refilled a 100 kB
    bucket and the rest of the train read 6x too fast). We keep the replies whose
    delay is at least half the largest one: the backlogged stretch of the train.
    Negative delays (a late send stamp, see below) never count.
    """
    timed = sorted((t, t - send_times[seq]) for seq, t in replies if 0 <= seq < len(send_times))
    if not timed:
        return [], 0.0
    # The base is a low quantile, not the minimum: when the scheduler pauses us
    # between sendto() and reading the clock, that request's send time is late and
    # its round trip reads short, even negative (seen: -70 ms under load).
    rtts = sorted(rtt for _t, rtt in timed)
    base = rtts[len(rtts) // 10]
    top = rtts[-1] - base
    runs: list[list[float]] = []
    current: list[float] = []
    for t, rtt in timed:
        if top > 0 and rtt - base >= top / 2:
            current.append(t)
        elif current:
            runs.append(current)
            current = []
    if current:
        runs.append(current)
    return runs, top


def estimate_rate(
    send_times: Sequence[float],
    replies: Sequence[Reply],
    packet_bytes: int,
    *,
    window: int = DEFAULT_WINDOW,
    floor_bps: float = FLOOR_BPS,
    cap_bps: float | None = None,
) -> TrainEstimate:
    """Dispersion -> rate: packet_bytes * 8 / median gap between queued replies.

    ``send_times[seq]`` is when request ``seq`` left; ``replies`` are (seq, kernel
    arrival time). The gap is the median over windows of ``window`` consecutive
    gaps inside the queued runs (see ``queued_runs``): the window smooths receive
    batching, the median a stray pause. No figure (``rate_bps`` None, ``detail``
    says why) with too few queued replies, a queue that never built up, a rate
    below ``floor_bps``, or replies that came as fast as we sent (sender-limited:
    the link is faster than we can measure). ``cap_bps`` (the interface's nominal
    speed) bounds the result: receive batching can make a fast link read faster.
    """
    if packet_bytes <= 0:
        raise ValueError(f"packet_bytes must be > 0, got {packet_bytes}")
    n = len(replies)
    if n == 0:
        return TrainEstimate(None, "no echo reply (the hop drops or ignores ICMP echo)", 0)
    send_gaps = [g for g in windowed_gaps(send_times, window) if g > 0]
    send_rate = packet_bytes * 8 / statistics.median(send_gaps) if send_gaps else None
    runs, top = queued_runs(send_times, replies)
    gaps = [g for run in runs for g in windowed_gaps(run, window) if g > 0]
    if len(gaps) < MIN_GAPS:
        return TrainEstimate(
            None,
            f"too few queued replies ({len(gaps)} gaps among {n} replies, queue peaked at "
            f"{top * 1e3:.2f} ms): the train did not fill the bottleneck",
            n,
            len(gaps),
            send_rate,
        )
    gap = statistics.median(gaps)
    rate = packet_bytes * 8 / gap
    if top < MIN_QUEUE_PACKETS * gap:
        return TrainEstimate(
            None, f"no queue built up ({top * 1e3:.2f} ms): the train passed unshaped", n,
            len(gaps), send_rate,
        )  # fmt: skip
    if send_rate is not None and rate >= SENDER_LIMITED * send_rate:
        return TrainEstimate(
            None,
            f"sender-limited (replies as fast as sent: link >= {rate / 1e6:.0f} Mbit/s)",
            n,
            len(gaps),
            send_rate,
        )
    if rate < floor_bps:
        return TrainEstimate(None, f"implausibly low ({rate:.0f} bit/s)", n, len(gaps), send_rate)
    if cap_bps is not None and rate > cap_bps:
        return TrainEstimate(cap_bps, "capped at the link speed", n, len(gaps), send_rate)
    return TrainEstimate(rate, "ok", n, len(gaps), send_rate)


# ------------------------------------------------------------------ the wire


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\x00"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    total = (total >> 16) + (total & 0xFFFF)
    total += total >> 16
    return ~total & 0xFFFF


def _echo_request(ident: int, seq: int, payload: bytes) -> bytes:
    header = struct.pack("!BBHHH", 8, 0, 0, ident, seq)
    csum = _checksum(header + payload)
    return struct.pack("!BBHHH", 8, 0, csum, ident, seq) + payload


def open_icmp_socket(kind: str = "auto") -> tuple[socket.socket, str]:
    """Raw ICMP socket (root), else an unprivileged ICMP datagram ("ping") socket."""
    kinds = ["raw", "dgram"] if kind == "auto" else [kind]
    errors = []
    for k in kinds:
        stype = socket.SOCK_RAW if k == "raw" else socket.SOCK_DGRAM
        try:
            return socket.socket(socket.AF_INET, stype, socket.IPPROTO_ICMP), k
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.EACCES, errno.EPROTONOSUPPORT):
                raise
            errors.append(f"{k}: {exc.strerror}")
    raise ProbeUnavailable(
        errno.EPERM,
        "no ICMP socket (" + "; ".join(errors) + "): run as root or add the group to "
        "net.ipv4.ping_group_range",
    )


def _kernel_time(ancdata: list[tuple[int, int, bytes]], fallback: float) -> float:
    for level, kind, raw in ancdata:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(raw) >= 16:
            sec, nsec = struct.unpack("qq", raw[:16])
            return sec + nsec / 1e9
    return fallback


def send_train(
    target: str,
    *,
    count: int = DEFAULT_COUNT,
    payload_bytes: int = 1472,
    budget_s: float = 0.45,
    first_reply_s: float = 0.25,
    idle_s: float = 0.05,
    socket_kind: str = "auto",
) -> TrainSample:
    """Send ``count`` echo requests back to back to ``target`` (a tight sendto loop:
    per-packet overhead must stay far below the gaps we want to see) and collect the
    replies' kernel receive times until all came back, nothing came for ``idle_s``
    (the shaper dropped the rest), none came in ``first_reply_s``, or ``budget_s``
    is spent. Raises ProbeUnavailable, or OSError when sending fails (no route)."""
    if not 1 <= count <= 0xFFFF:
        raise ValueError(f"count must be 1..65535, got {count}")
    if not 8 <= payload_bytes <= 65000:
        raise ValueError(f"payload_bytes must be 8..65000, got {payload_bytes}")
    t0 = time.monotonic()
    sock, kind = open_icmp_socket(socket_kind)
    with sock:
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        want = 4 * count * (payload_bytes + 512)  # replies queue while we still send
        try:
            sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, want)
        except PermissionError:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, want)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, want)
        # Distinguish our train from other pings: raw sockets see every echo reply
        # (match ident and a per-run cookie); ping sockets get only their own, the
        # kernel rewriting ident to the socket's port.
        ident = (os.getpid() ^ int.from_bytes(os.urandom(2), "big")) & 0xFFFF
        cookie = os.urandom(8)
        payload = cookie + bytes(payload_bytes - len(cookie))
        packets = [_echo_request(ident, seq, payload) for seq in range(count)]
        sends: list[float] = []
        for pkt in packets:
            sock.sendto(pkt, (target, 0))
            sends.append(time.time())
        replies: list[Reply] = []
        seen: set[int] = set()
        reply_bytes = payload_bytes + IP_ICMP_HEADERS
        deadline = t0 + budget_s
        wait_until = time.monotonic() + first_reply_s
        while len(seen) < count:
            now = time.monotonic()
            limit = min(deadline, wait_until)
            if now >= limit:
                break
            ready, _, _ = select.select([sock], [], [], limit - now)
            if not ready:
                break
            data, anc, _flags, _addr = sock.recvmsg(65535, 256)
            off = (data[0] & 0x0F) * 4 if kind == "raw" else 0
            if len(data) < off + 8 + len(cookie):
                continue
            typ, _code, _c, rid, seq = struct.unpack("!BBHHH", data[off : off + 8])
            if typ != 0 or seq in seen or data[off + 8 : off + 8 + len(cookie)] != cookie:
                continue
            if kind == "raw" and rid != ident:
                continue
            seen.add(seq)
            reply_bytes = len(data) - off + IP_ICMP_HEADERS - 8  # as an IP packet
            replies.append((seq, _kernel_time(anc, time.time())))
            wait_until = time.monotonic() + idle_s
    return TrainSample(
        target=target,
        socket_kind=kind,
        sent=count,
        send_times=tuple(sends),
        replies=tuple(replies),
        reply_bytes=reply_bytes,
        seconds=time.monotonic() - t0,
    )


@dataclass(frozen=True)
class Measurement:
    """The outcome of ``measure``: the last train's estimate and what it cost."""

    target: str
    socket_kind: str
    estimate: TrainEstimate
    trains: int
    sent: int
    replies: int
    seconds: float

    def describe(self) -> str:
        head = (
            f"packet train to {self.target} ({self.socket_kind} ICMP socket, {self.trains} "
            f"train(s), {self.sent} sent, {self.replies} replies, {self.seconds:.2f} s)"
        )
        est = self.estimate
        if est.rate_bps is None:
            return f"{head}: no figure, {est.detail}"
        return f"{head}: {est.rate_bps / 1e6:.1f} Mbit/s over {est.gaps} gaps"


def measure(
    target: str,
    *,
    mtu: int = 1500,
    cap_bps: float | None = None,
    count: int = DEFAULT_COUNT,
    socket_kind: str = "auto",
    budget_s: float = 0.5,
    attempts: int = 3,
) -> Measurement:
    """Packet trains of MTU-sized echo requests to ``target``, up to ``attempts``
    and within ``budget_s`` seconds in all, until two give a figure (or one does
    and the budget has no room for another as long): the lower one is taken. A
    train that got no reply at all is not repeated (the target drops ICMP).

    A scheduler pause while sending spoils a train (the bucket refills, see
    ``queued_runs``), and so does a receiver that takes the replies in late
    batches (their kernel times bunch up): both read too fast, never too slow.
    Seen in the lab: 219 Mbit/s for an 80 Mbit/s tbf, once in ~30 trains, the
    train right before and after it reading 80. Fast links read in tens of ms
    (two trains), slow ones need most of the budget once."""
    payload = max(64, min(mtu, 1500) - IP_ICMP_HEADERS)  # jumbo frames: cost, not precision
    t0 = time.monotonic()
    sent = replies = trains = 0
    kind = socket_kind
    est = TrainEstimate(None, "not measured", 0)
    figures: list[TrainEstimate] = []
    while trains < max(1, attempts):
        started = time.monotonic()
        left = budget_s - (started - t0)
        if trains and left < 0.1:
            break
        sample = send_train(
            target, count=count, payload_bytes=payload, socket_kind=socket_kind, budget_s=left
        )
        trains += 1
        sent += sample.sent
        replies += len(sample.replies)
        kind = sample.socket_kind
        est = estimate_rate(sample.send_times, sample.replies, sample.reply_bytes, cap_bps=cap_bps)
        if not sample.replies:
            break
        if est.ok:
            figures.append(est)
            took = time.monotonic() - started
            if len(figures) >= 2 or budget_s - (time.monotonic() - t0) < max(0.1, took):
                break
    if figures:
        est = min(figures, key=lambda e: e.rate_bps or 0.0)
    return Measurement(target, kind, est, trains, sent, replies, time.monotonic() - t0)


__all__ = [
    "Measurement",
    "ProbeUnavailable",
    "TrainEstimate",
    "TrainSample",
    "estimate_rate",
    "measure",
    "open_icmp_socket",
    "queued_runs",
    "send_train",
    "windowed_gaps",
]
