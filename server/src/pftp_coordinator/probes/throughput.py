"""Throughput probe: a short ranged read over the mirror's own protocol.

FTP: ``REST offset`` + ``RETR`` and hang up after ``size`` bytes; HTTP(S): a
``Range: bytes=offset-(offset+size-1)`` GET. What this measures is what a client
will get (server, path, TCP), so it is the best single predictor of download
speed; it costs ``size`` bytes per probe (see notes/data.md for the fraction of
traffic). Deliberately independent of pftp_client: the coordinator must not
depend on the client package.

Many mirrors hold each TCP connection below their path's rate (vsftpd
``anon_max_rate``, nginx ``limit_rate``, pure-ftpd bandwidth limits, pyftpdlib's
ThrottledDTPHandler): one read then sees one connection's worth. ``held_reason``
says when a read looks held that way (the path's packet-train capacity well above
the read's rate, or a sender that writes even bursts and sleeps between them:
``paused_share``), and ``parallel_ranged_read`` then measures what several
connections carry together, each reading its own range of the file at the same
time. So a probe of such a mirror may open up to ``probe_max_connections``
connections at once (see probes/service.py).
"""

from __future__ import annotations

import bisect
import ftplib
import itertools
import logging
import math
import socket
import statistics
import struct
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from urllib.parse import unquote, urljoin, urlsplit

import httpx

from pftp_coordinator.ftp_control import finish_transfer, read_reply, reset_close, url_path

CHUNK = 64 * 1024
log = logging.getLogger(__name__)

_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # (Linux; 35 on every arch)
_TS_SPACE = socket.CMSG_SPACE(16) if hasattr(socket, "CMSG_SPACE") else 0


class ArrivalClock:
    """Reads a TCP socket with the kernel's arrival time of the data (SO_TIMESTAMPNS:
    when the last segment read came in), on time.perf_counter()'s scale. A probe
    thread that is late to read (a busy coordinator: other probes, the scheduler)
    then still sees when the bytes came: timed by its reads, a backlog read at once
    looks like a burst, and the read's last quarter (steady_rate_bps) had rated an
    8 Mbit/s mirror at 14.6 (bench table 1, session 13). Falls back to the read's
    own time where the kernel gives none."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.kernel = self.stamp(sock)
        # Did the last recv wait for its data (it arrived after the call)? Then the
        # time since the previous arrival was the sender's pause, not a late reader.
        self.last_waited: bool | None = None
        # one offset per read: a clock step mid-read would shift all its times alike
        self._realtime_minus_perf = time.time() - time.perf_counter()
        # (time.perf_counter(), bytes the kernel had received by then) after the last
        # recv; None where TCP_INFO does not say (see _Reading.wire)
        self.last_wire: tuple[float, int] | None = None
        self._wire = True

    @staticmethod
    def stamp(sock: socket.socket) -> bool:
        """Ask for arrival times on ``sock``. The kernel stamps incoming segments only
        while some socket asks, so asking on the control connection first has the
        data connection's first segments stamped too (they may come before its
        ArrivalClock exists: ftplib returns it after the 150 reply)."""
        if not _TS_SPACE:
            return False
        try:
            sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
        except OSError as exc:
            log.debug("no SO_TIMESTAMPNS (%s): read times used", exc)
            return False
        return True

    def recv(self, n: int) -> tuple[bytes, float]:
        """Up to ``n`` bytes and when the last of them arrived."""
        data, arrived = self._recv(n)
        self._note_wire()
        return data, arrived

    def _note_wire(self) -> None:
        if self._wire:
            self.last_wire = _wire_now(self.sock)
            self._wire = self.last_wire is not None  # (not there: not asked again)

    def _recv(self, n: int) -> tuple[bytes, float]:
        if not self.kernel:
            data = self.sock.recv(n)
            self.last_waited = None
            return data, time.perf_counter()
        t_call = time.perf_counter()
        data, ancdata, _flags, _addr = self.sock.recvmsg(n, _TS_SPACE)
        now = time.perf_counter()
        for level, kind, cdata in ancdata:
            if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS and len(cdata) >= 16:
                sec, nsec = struct.unpack("qq", cdata[:16])
                arrived = min(now, sec + nsec / 1e9 - self._realtime_minus_perf)
                self.last_waited = arrived > t_call
                return data, arrived
        # No arrival time (the kernel turns its stamping on a moment after the
        # first socket asks, from a work queue that a loaded machine runs late):
        # the rest of this read is timed by its reads. Read times, then arrival
        # times earlier than them, packed a late reader's backlog into one instant
        # and rated it as a burst (the likely cause of a 20 Mbit/s mirror read at
        # 159 Mbit/s, and a 1 MB/s-per-connection one at 2x, in a lab test under CI).
        self.kernel = False
        self.last_waited = None
        return data, now


@dataclass(frozen=True)
class ThroughputResult:
    method: str  # "ftp-range" | "http-range"
    nbytes: int
    seconds: float  # request sent -> last byte
    first_byte_s: float  # request sent -> first byte (includes one RTT + server time)
    bps: float  # bits/s over the data phase (first byte -> last byte)
    # (time.perf_counter() scale, bytes so far) per receive, the first chunk first;
    # kernel arrival times where the socket gave them (ArrivalClock)
    samples: tuple[tuple[float, int], ...] = field(default=(), repr=False, compare=False)
    # per sample: did its receive wait for the data (None: not known)
    waited: tuple[bool | None, ...] = field(default=(), repr=False, compare=False)
    rtt_s: float | None = None  # the path's round trip as the read saw it, if known
    # (time.perf_counter(), bytes the kernel had received) after each receive, where
    # TCP_INFO says, up to the one that found the whole read in (_Reading.result);
    # empty, or at least three: the rate's own series then (rate_samples)
    wire: tuple[tuple[float, int], ...] = field(default=(), repr=False, compare=False)

    @property
    def rate_samples(self) -> tuple[tuple[float, int], ...]:
        """The series a rate is read from: the kernel's byte counts when known."""
        return self.wire or self.samples


class ProbeError(Exception):
    """A probe that could not be made; the message says why."""


def join_url(base_url: str, path: str) -> str:
    """Replica path (relative to the mirror's base URL) -> absolute URL."""
    base = base_url if base_url.endswith("/") else base_url + "/"
    return urljoin(base, path.lstrip("/"))


def data_phase_bps(nbytes: int, first_chunk: int, t_first: float, t_last: float) -> float:
    """Pure: rate over the bytes after the first chunk, which arrived with the
    first-byte latency; falls back to the whole transfer when it was one chunk."""
    span = t_last - t_first
    if span <= 0 or nbytes <= first_chunk:
        return float("inf") if span <= 0 else nbytes * 8 / span
    return (nbytes - first_chunk) * 8 / span


# A read past its size goes on while the rate of the last two round trips is still
# this much above the two before: the connection is in slow start.
GROWING = 1.25


def _rate_since(
    samples: Sequence[tuple[float, int]], window_s: float, last: int = -1
) -> float | None:
    """bits/s over the ``window_s`` of ``samples`` [(time, bytes so far)] that end at
    index ``last``; None when they span less than that."""
    last %= len(samples)
    t_end, b_end = samples[last]
    i = bisect.bisect_right(samples, (t_end - window_s, math.inf), 0, last + 1) - 1
    if i < 0 or t_end - samples[i][0] <= 0:
        return None
    t, b = samples[i]
    return (b_end - b) * 8 / (t_end - t)


# A gap in delivery this many typical gaps long (and at least HICCUP_MIN_S) is
# followed by its backlog at once; a window that starts within HICCUP_CATCHUP gap
# lengths after it takes it from the gap's start instead.
HICCUP_FACTOR = 10.0
HICCUP_MIN_S = 0.02
HICCUP_CATCHUP = 2.0


def steady_rate_bps(samples: Sequence[tuple[float, int]], rtt_s: float | None) -> float | None:
    """The rate at the end of a read (bits/s): over its last quarter, and at least two
    round trips. A short read over a long path is mostly slow start (at 80 ms, 512 kB
    of a 40 Mbit/s path take ~5 round trips and read as 10 Mbit/s over the whole);
    its end is what a long download will see. ``samples`` are (time, bytes so far)
    after the first chunk. None when there are too few to tell.

    A window never starts inside the catch-up after a gap in delivery (the gap's
    backlog arriving at once, faster than the path): it then starts at the gap.
    On a busy machine the kernel itself delivers a path's packets late (the lab's
    namespaces, eight probes on two cores: 100 ms without a byte, then 30 Mbit/s
    through a 12 Mbit/s link), and a last quarter that began in that burst read a
    12 Mbit/s mirror at 20 (session 46)."""
    if len(samples) < 3:
        return None
    t_end = samples[-1][0]
    span = t_end - samples[0][0]
    window = max(2 * (rtt_s or 0.0), span / 4)
    if span <= 0 or window >= span:
        return None
    start = t_end - window
    gaps = [samples[j + 1][0] - samples[j][0] for j in range(len(samples) - 1)]
    long_gap = max(HICCUP_MIN_S, HICCUP_FACTOR * statistics.median(gaps))
    long_gaps = [j for j, g in enumerate(gaps) if g >= long_gap]
    hiccup: int | None = None  # the earliest gap the window was taken back to
    for j in reversed(long_gaps):
        if samples[j + 1][0] + HICCUP_CATCHUP * gaps[j] > start:
            start, hiccup = min(start, samples[j][0]), j
    i = max(0, bisect.bisect_right(samples, (start, math.inf)) - 1)
    rate = (samples[-1][1] - samples[i][1]) * 8 / (t_end - samples[i][0])
    if hiccup is None:
        return rate
    last = long_gaps[-1]
    if len(long_gaps) >= 2 and last > i and samples[last][0] - samples[i][0] >= window / 2:
        # (several gaps, a pacing server's sleeps say: from one gap's start to the
        # last's, whole periods. To the end, the window ends on a burst: one burst
        # more than periods, a pyftpdlib held to 1 MB/s read at 1.5x)
        rate = (samples[last][1] - samples[i][1]) * 8 / (samples[last][0] - samples[i][0])
    # A gap near the end leaves part of its backlog still to come, and the window
    # from it reads low. The whole read is a floor; so is the read before the gap
    # when that gap is the read's only one. (Not with several: a pacing server's
    # pauses look the same, and before its first came its first burst at the
    # path's rate, four times the connection's on vsftpd.)
    floor = (samples[-1][1] - samples[0][1]) * 8 / span
    if len(long_gaps) == 1:
        before = _rate_since(samples, window, hiccup)
        floor = max(floor, before or 0.0)
    return max(rate, floor)


def still_growing(samples: Sequence[tuple[float, int]], rtt_s: float | None) -> bool:
    """Is the read still speeding up (slow start)? Compares the last two round trips'
    rate with the two before. False without an RTT or with too little to compare."""
    if not rtt_s or rtt_s <= 0 or len(samples) < 3:
        return False
    window = 2 * rtt_s
    t_end = samples[-1][0]
    if t_end - samples[0][0] < 2 * window:
        return True  # not two windows yet: too early to call it steady
    last = _rate_since(samples, window)
    j = bisect.bisect_right(samples, (t_end - window, math.inf)) - 1
    before = _rate_since(samples, window, j) if j >= 1 else None  # (no copy: per read)
    if last is None or not before:
        return False
    return last > GROWING * before


# --- a connection held below the path's rate ----------------------------------------

# A pause: a gap between arrivals this many typical (median) gaps long, and at least
# PAUSE_MIN_S (a shaper's timer tick, a reader thread waiting for the interpreter).
PAUSE_FACTOR = 10.0
PAUSE_MIN_S = 0.005
MIN_PAUSES = 5
MAX_BURST_SPREAD = 0.5  # coefficient of variation of the bursts between pauses
# A throttling server writes a buffer (vsftpd 64 KiB, pyftpdlib 64 KiB) and sleeps;
# smaller "bursts" are single segments of a slow path, read as they come.
MIN_BURST_BYTES = 8 * 1024
HELD_PAUSED_SHARE = 0.6
HELD_CAPACITY_FACTOR = 1.5
# A read that shows a pacing sender's pauses, too few of them yet to tell
# (``pacing_undecided``), goes on until this long after its first byte (up to its
# max_size): 512 kB of a 1 MB/s vsftpd behind a 50 Mbit/s link 30 ms away end after
# ~0.4 s, of which slow start takes half, with 3 of the 5 pauses needed.
HELD_READ_MAX_S = 1.5
# Leading pauses a reading may leave out (``settled_paused_share``).
START_PAUSES = 3


def paused_share(
    samples: Sequence[tuple[float, int]],
    waited: Sequence[bool | None] = (),
    *,
    min_pauses: int = MIN_PAUSES,
    max_spread: float = MAX_BURST_SPREAD,
) -> float | None:
    """Pure: share of a read's time (``samples``: (arrival time, bytes so far)) that
    its sender spent in pauses between even bursts; None unless there were at least
    ``min_pauses`` pauses and the bursts between them were of about one size
    (coefficient of variation at most ``max_spread``) and at least MIN_BURST_BYTES.

    A pause is a gap of at least PAUSE_MIN_S that is PAUSE_FACTOR typical gaps long
    (a burst that arrives over several receives), or one after which the receive
    had waited for its data (``waited``, from ArrivalClock): a burst that arrives
    in one receive (loopback, a big segment after GRO) makes every gap alike, and
    a reader that waited was not late, so the gap was the sender's. A server that
    holds each connection to a rate writes a buffer and sleeps: equal bursts at a
    steady pace (vsftpd at 1.25 MB/s: 64 KiB every 50 ms). A sender that overran a
    shaper's queue in slow start pauses a few times, unevenly: not this."""
    reading = _paused_reading(samples, _pause_indices(samples, waited), PAUSE_MIN_S,
                              min_pauses=min_pauses, max_spread=max_spread)
    return reading[0] if reading is not None else None


def _pause_indices(samples: Sequence[tuple[float, int]],
                   waited: Sequence[bool | None] = ()) -> list[int]:
    """Pure: indices ``i`` of the gaps (samples[i] -> samples[i + 1]) that are
    pauses by paused_share's rule."""
    if len(samples) < 3:
        return []
    t = [x[0] for x in samples]
    gaps = [b - a for a, b in itertools.pairwise(t)]
    typical = statistics.median(gaps)
    one_receive = len(waited) == len(samples)
    return [i for i, g in enumerate(gaps)
            if g >= PAUSE_MIN_S and (g > PAUSE_FACTOR * typical or (one_receive and waited[i + 1]))]


def _gap(samples: Sequence[tuple[float, int]], i: int) -> float:
    return samples[i + 1][0] - samples[i][0]


def _long_floor(samples: Sequence[tuple[float, int]], pauses: Sequence[int]) -> float:
    """Half the median pause: a shorter one split a burst (the link, or the
    server's write), and the burst is still one."""
    return statistics.median(_gap(samples, i) for i in pauses) / 2


def _paused_reading(
    samples: Sequence[tuple[float, int]],
    pauses: Sequence[int],
    min_pause_s: float,
    *,
    min_pauses: int = MIN_PAUSES,
    max_spread: float = MAX_BURST_SPREAD,
) -> tuple[float, list[int]] | None:
    """paused_share over ``pauses`` (_pause_indices of ``samples``) of at least
    ``min_pause_s``: (share, the pauses counted), or None."""
    if len(samples) < min_pauses + 2:
        return None
    counted = [i for i in pauses if _gap(samples, i) >= min_pause_s]
    if len(counted) < min_pauses:
        return None
    bursts = [samples[j][1] - samples[i][1] for i, j in itertools.pairwise(counted)]
    mean = statistics.fmean(bursts)
    if mean < MIN_BURST_BYTES or statistics.pstdev(bursts) > max_spread * mean:
        return None
    span = samples[-1][0] - samples[0][0]
    if span <= 0:
        return None
    return math.fsum(_gap(samples, i) for i in counted) / span, counted


def settled_paused_share(
    samples: Sequence[tuple[float, int]], waited: Sequence[bool | None] = ()
) -> float | None:
    """Pure: ``paused_share`` of the read, or of its part after its first one to
    START_PAUSES pauses, whichever is the largest (None when none has even bursts);
    each also with only its long pauses (``_long_floor``). A connection's start
    (slow start, a shaper's queue overrun) pauses unevenly before a throttling
    server's even bursts set in: 512 kB of a 1 MB/s vsftpd behind a 50 Mbit/s link
    30 ms away arrived with gaps of 31, 12, 4, 16, 39 ms, then 60, 60, 60, and the
    whole read's bursts were too uneven to count."""
    best = _settled_reading(samples, waited)
    return best[0] if best is not None else None


def _settled_reading(
    samples: Sequence[tuple[float, int]], waited: Sequence[bool | None] = ()
) -> tuple[float, Sequence[tuple[float, int]], list[int]] | None:
    """settled_paused_share's largest reading: (share, the part read, its pauses)."""
    pauses = _pause_indices(samples, waited)
    one_receive = len(waited) == len(samples)
    best: tuple[float, Sequence[tuple[float, int]], list[int]] | None = None
    for start in [0, *(i + 1 for i in pauses[:START_PAUSES])]:
        part = samples[start:]
        part_pauses = _pause_indices(part, waited[start:] if one_receive else ())
        floors = [PAUSE_MIN_S]
        if part_pauses:
            floors.append(_long_floor(part, part_pauses))
        for floor in floors:
            reading = _paused_reading(part, part_pauses, floor)
            if reading is not None and (best is None or reading[0] > best[0]):
                best = (reading[0], part, reading[1])
    return best


def paced_bps(
    samples: Sequence[tuple[float, int]], waited: Sequence[bool | None] = ()
) -> float | None:
    """Pure: the rate a pacing sender holds the read to (bits/s): the bytes of the
    whole periods (burst and pause) of ``settled_paused_share``'s reading over their
    time; None when that finds no pacing. Unlike the read's rate it leaves out the
    start (slow start; a shaper's bucket lets the first bytes through at the
    link's rate: 12.7 Mbit/s for a 10 Mbit/s limit) and the last, unfinished
    period."""
    best = _settled_reading(samples, waited)
    if best is None or best[0] < HELD_PAUSED_SHARE:
        return None
    _, part, pauses = best
    first, last = pauses[0], pauses[-1]
    span = part[last + 1][0] - part[first + 1][0]
    if span <= 0:
        return None
    return (part[last][1] - part[first][1]) * 8 / span


def pacing_undecided(
    samples: Sequence[tuple[float, int]], waited: Sequence[bool | None] = ()
) -> bool:
    """Pure: do the read's last pauses look like a pacing sender's, with too few
    yet for ``settled_paused_share`` to tell? Its last three pauses lie within
    three of their spacings of its end, the two bursts between them are of
    about one size (within 1.3x) and at least MIN_BURST_BYTES, and the pauses took
    HELD_PAUSED_SHARE of those two periods or more. Slow start pauses
    too, but its flights double: a link-limited read is not kept going (reading
    on past its ramp changed a far mirror's estimate, and the plans built on it:
    wide-area coordinated 1.144 -> 1.161x over 9-12 runs)."""
    pauses = _pause_indices(samples, waited)
    if len(pauses) < 3:
        return False
    floor = _long_floor(samples, pauses)
    pauses = [i for i in pauses if _gap(samples, i) >= floor]
    if len(pauses) < 3:
        return False
    a, b, c = pauses[-3:]
    first, second = samples[b][1] - samples[a][1], samples[c][1] - samples[b][1]
    if min(first, second) < MIN_BURST_BYTES or max(first, second) > 1.3 * min(first, second):
        return False
    if samples[-1][0] - samples[c][0] > 3 * (samples[c][0] - samples[b][0]):
        return False
    # ... and they took most of those two periods, as a pacing sender's do
    span = samples[c + 1][0] - samples[a + 1][0]
    paused = (samples[b + 1][0] - samples[b][0]) + (samples[c + 1][0] - samples[c][0])
    if span <= 0 or paused < HELD_PAUSED_SHARE * span:
        return False
    # (a share, even a low one, is an answer: a link-limited path whose shaper
    # paces its last flights read 16 % and was otherwise kept going)
    return settled_paused_share(samples, waited) is None


def held_reason(
    bps: float,
    samples: Sequence[tuple[float, int]] = (),
    waited: Sequence[bool | None] = (),
    capacity_bps: float | None = None,
) -> str | None:
    """Pure: why one read at ``bps`` looks held below its path's rate by the server
    (a per-connection limit), or None. Either signal suffices: the path's
    packet-train capacity at least HELD_CAPACITY_FACTOR times the read's rate, or
    a sender that paused between even bursts at least HELD_PAUSED_SHARE of the
    time (``settled_paused_share``). Either may also fire on a path that is simply busy
    (capacity is not available bandwidth); that only costs a parallel read, which
    must then carry more (probes/service.py) before clients are told to open more
    connections."""
    if capacity_bps and bps > 0 and capacity_bps >= HELD_CAPACITY_FACTOR * bps:
        return (
            f"path capacity {capacity_bps / 1e6:.1f} Mbit/s is "
            f"{capacity_bps / bps:.1f}x the read's {bps / 1e6:.1f} Mbit/s"
        )
    share = settled_paused_share(samples, waited)
    if share is not None and share >= HELD_PAUSED_SHARE:
        return f"the sender paused {share:.0%} of the read between even bursts"
    return None


class _Reading:
    """Arrival samples of one ranged read, and when to stop it."""

    def __init__(self, size: int, max_size: int, rtt_s: float | None) -> None:
        self.size = size
        self.max_size = max(size, max_size)
        self.rtt_s = rtt_s
        self.nbytes = self.first_chunk = 0
        self.t_first: float | None = None
        self.t_last = 0.0
        self.samples: list[tuple[float, int]] = []
        self.waited: list[bool | None] = []
        # (read time, bytes the kernel had received then) per receive: immune to
        # the kernel's stamps, which give a late reader's backlog the time of its
        # last segment. With eight probes' readers on two busy cores, a 12 Mbit/s
        # mirror's last quarter read 15-20 Mbit/s by those stamps (lab, 100 ms
        # late reads), and the plan gave it 4 connections alone (session 46).
        self.wire: list[tuple[float, int]] = []
        # pacing_undecided of the samples, read again after each new long gap
        self._undecided = False
        self._gap_seen = True  # (read at the first call)

    def add(
        self, n: int, now: float, waited: bool | None = None,
        wire: tuple[float, int] | None = None,
    ) -> None:
        if wire is not None and (not self.wire or wire[0] > self.wire[-1][0]):
            self.wire.append(wire)
        now = max(now, self.t_last)  # (a read timed by itself, then kernel times)
        if self.t_first is not None and now - self.t_last >= PAUSE_MIN_S:
            self._gap_seen = True
        self.t_last = now
        if self.t_first is None:
            self.t_first, self.first_chunk = now, n
        self.nbytes += n
        if self.nbytes > self.first_chunk or not self.samples:
            self.samples.append((now, self.nbytes))
            self.waited.append(waited)

    def want(self) -> int:
        """Bytes to read next; 0 when done: ``size`` read, and the connection out of
        slow start and not showing a pacing sender's first pauses, or ``max_size``
        reached."""
        if self.nbytes < self.size:
            return self.size - self.nbytes
        if self.nbytes >= self.max_size:
            return 0
        if still_growing(self.samples, self.rtt_s) or self._pacing_undecided():
            return self.max_size - self.nbytes
        return 0

    def _pacing_undecided(self) -> bool:
        """Go on reading to tell a pacing sender (``pacing_undecided``), until
        HELD_READ_MAX_S after the first byte."""
        if self.t_first is None or self.t_last - self.t_first >= HELD_READ_MAX_S:
            return False
        if self._gap_seen:  # (only a new pause can change the answer)
            self._gap_seen = False
            self._undecided = pacing_undecided(self.samples, self.waited)
        return self._undecided

    def result(self, method: str, t0: float) -> ThroughputResult:
        if self.t_first is None or self.nbytes == 0:
            raise ProbeError(f"{method}: no data received")
        bps = data_phase_bps(self.nbytes, self.first_chunk, self.t_first, self.t_last)
        if bps == float("inf"):
            bps = self.nbytes * 8 / max(self.t_last - t0, 1e-6)
        # (from the first receive that found all the read's bytes in the kernel on,
        # they came before: a reader slower than the path, loopback say, sees a
        # flat count there. Those receives say nothing of the path)
        arrived = next((k for k, (_, b) in enumerate(self.wire) if b >= self.nbytes),
                       len(self.wire) - 1)
        wire = tuple(self.wire[: arrived + 1]) if arrived >= 2 else ()
        steady = steady_rate_bps(wire or self.samples, self.rtt_s)
        if steady is not None:
            bps = max(bps, steady) if not wire else steady
        return ThroughputResult(
            method, self.nbytes, self.t_last - t0, self.t_first - t0, bps,
            tuple(self.samples), tuple(self.waited), self.rtt_s, wire,
        )


def ftp_ranged_read(
    url: str, size: int, *, offset: int = 0, timeout_s: float = 10.0, max_size: int = 0
) -> ThroughputResult:
    """REST+RETR of exactly ``size`` bytes at ``offset`` from
    ftp://[user[:pass]@]host[:port]/path (fewer only when the file ends first).
    With ``max_size`` above ``size``, the read goes on up to that while the
    connection is still in slow start (``still_growing``), so that a far path's
    rate is measured after its ramp (``steady_rate_bps``).

    The data connection is reset as soon as ``size`` bytes are in; the server's
    reply to that hang-up is awaited, then the session is ended with QUIT (see
    ``ftp_control.finish_transfer``: vsftpd, pure-ftpd and pyftpdlib each answer
    a hang-up differently). When the server ends the data first, its final reply
    to RETR must be a 2xx, else the read failed.
    """
    parts = urlsplit(url)
    if parts.scheme != "ftp" or not parts.hostname:
        raise ProbeError(f"not an ftp URL: {url!r}")
    if size <= 0:
        raise ProbeError(f"ftp-range: size must be positive, got {size}")
    ftp = ftplib.FTP(timeout=timeout_s)
    deadline = time.monotonic() + timeout_s
    try:
        ftp.connect(parts.hostname, parts.port or 21)
        ArrivalClock.stamp(ftp.sock)  # (see ArrivalClock.stamp)
        ftp.login(unquote(parts.username or "anonymous"), unquote(parts.password or "pftp@"))
        t_type = time.perf_counter()
        ftp.voidcmd("TYPE I")  # (one round trip: the path's RTT for still_growing)
        t0 = time.perf_counter()
        reading = _Reading(size, max_size, t0 - t_type)
        conn = ftp.transfercmd(f"RETR {url_path(parts.path)}", rest=offset or None)
        server_ended = False
        try:
            conn.settimeout(timeout_s)
            clock = ArrivalClock(conn)  # (set once connected: the first segment counts)
            while want := reading.want():
                if time.monotonic() > deadline:
                    raise ProbeError(f"ftp-range: timed out after {reading.nbytes} bytes")
                data, arrived = clock.recv(min(CHUNK, want))
                if not data:
                    server_ended = True
                    break
                reading.add(len(data), arrived, clock.last_waited, clock.last_wire)
        finally:
            reset_close(conn)
        nbytes = reading.nbytes
        result = reading.result("ftp-range", t0)
        # Closing the session gets a few seconds beyond the probe's own budget:
        # the measurement is already taken, and a slow goodbye is not a failure.
        end_by = max(deadline, time.monotonic() + min(5.0, timeout_s))
        if server_ended:
            final = _final_reply(ftp, end_by)
            if not final.startswith("2"):
                raise ProbeError(f"ftp-range: transfer failed after {nbytes} bytes: {final}")
        try:
            replies = finish_transfer(ftp, deadline=end_by, transfer_open=not server_ended)
            log.debug("ftp-range %s: session ended: %s", parts.hostname, replies)
        except (OSError, EOFError, ftplib.Error) as exc:
            log.info("ftp-range %s: no clean QUIT after the read: %s", parts.hostname, exc)
        return result
    except (OSError, EOFError, ftplib.Error) as exc:
        raise ProbeError(f"ftp-range {parts.hostname}: {exc}") from exc
    finally:
        ftp.close()


def _final_reply(ftp: ftplib.FTP, deadline: float) -> str:
    """The completion reply of a transfer the server ended: the first non-1xx
    reply (pure-ftpd may send more 150 lines after the data)."""
    for _ in range(10):
        reply = read_reply(ftp, deadline)
        if not reply:
            raise EOFError("server closed the control connection after the transfer")
        if not reply.startswith("1"):
            return reply
    raise ftplib.error_proto("too many preliminary replies after the transfer")


def http_ranged_read(
    url: str, size: int, *, offset: int = 0, timeout_s: float = 10.0, verify: bool = True,
    max_size: int = 0,
) -> ThroughputResult:
    """GET with ``Range`` of ``size`` bytes at ``offset``; a server without range
    support (200) is read for ``size`` bytes only. ``max_size``: as for FTP (the
    range asked is then up to ``max_size``, and the read may stop before its end)."""
    headers = {
        "Range": f"bytes={offset}-{offset + max(size, max_size) - 1}",
        "User-Agent": "pftp-coordinator-probe",
    }
    deadline = time.monotonic() + timeout_s
    try:
        with httpx.Client(timeout=timeout_s, verify=verify, follow_redirects=True) as client:
            t0 = time.perf_counter()
            with client.stream("GET", url, headers=headers) as resp:
                if resp.status_code not in (200, 206):
                    raise ProbeError(f"http-range {url}: HTTP {resp.status_code}")
                # the request's round trip (on a new connection, after its handshake)
                rtt = time.perf_counter() - t0 if resp.status_code == 206 else None
                reading = _Reading(size, max_size if rtt else size, rtt)
                sock = _response_socket(resp)
                # (each receive as it comes, not CHUNK-sized pieces: a rate needs
                # more than the eight points of a 512 kB read)
                for data in resp.iter_raw():
                    if time.monotonic() > deadline:
                        raise ProbeError(f"http-range: timed out after {reading.nbytes} bytes")
                    now = time.perf_counter()
                    wire = _wire_now(sock)
                    reading.add(min(len(data), reading.want()), now, wire=wire)
                    if not reading.want():
                        break
        return reading.result("http-range", t0)
    except (TimeoutError, httpx.HTTPError, OSError) as exc:
        raise ProbeError(f"http-range {url}: {exc}") from exc


def _response_socket(resp: httpx.Response) -> socket.socket | None:
    """The TCP socket under an httpx response (httpcore's network stream), if any."""
    stream = resp.extensions.get("network_stream")
    sock = stream.get_extra_info("socket") if stream is not None else None
    return sock if isinstance(sock, socket.socket) else None


# struct tcp_info's tcpi_bytes_received (u64, Linux >= 4.1). (The client reads it
# too, in its transports/window.py; not shared through pftp_wire, which the
# client's start-up path keeps out until its first transfers are under way.)
_TCPI_BYTES_RECEIVED = 128
_TCP_INFO_LEN = _TCPI_BYTES_RECEIVED + 8


def _wire_now(sock: socket.socket | None) -> tuple[float, int] | None:
    """(time.perf_counter(), bytes the kernel has received on ``sock`` so far, read
    or not), or None where the kernel does not say."""
    if sock is None:
        return None
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO_LEN)
    except OSError:
        return None
    if len(info) < _TCP_INFO_LEN:
        return None
    return time.perf_counter(), struct.unpack_from("Q", info, _TCPI_BYTES_RECEIVED)[0]


def ranged_read(
    url: str, size: int, *, offset: int = 0, timeout_s: float = 10.0, max_size: int = 0
) -> ThroughputResult:
    scheme = urlsplit(url).scheme
    if scheme == "ftp":
        return ftp_ranged_read(url, size, offset=offset, timeout_s=timeout_s, max_size=max_size)
    if scheme in ("http", "https"):
        return http_ranged_read(url, size, offset=offset, timeout_s=timeout_s, max_size=max_size)
    raise ProbeError(f"unsupported protocol {scheme!r} in {url!r}")


# --- several connections at once ------------------------------------------------------


@dataclass(frozen=True)
class ParallelResult:
    method: str
    bps: float  # aggregate bits/s of the reads while all of them were transferring
    window_s: float  # how long that was; 0 when they never overlapped (bps: lower bound)
    reads: tuple[ThroughputResult, ...]  # the reads that succeeded
    errors: tuple[str, ...] = ()  # why the others failed

    @property
    def connections(self) -> int:
        return len(self.reads)


def _bytes_at(samples: Sequence[tuple[float, int]], t: float) -> float:
    """Bytes so far at time ``t``, linear between samples (a burst's bytes are spread
    over the gap before it: unbiased for a window edge that falls anywhere)."""
    i = bisect.bisect_right(samples, (t, math.inf))
    if i == 0:
        return float(samples[0][1])
    if i == len(samples):
        return float(samples[-1][1])
    (t0, b0), (t1, b1) = samples[i - 1], samples[i]
    return b0 + (b1 - b0) * (t - t0) / (t1 - t0) if t1 > t0 else float(b1)


def aggregate_bps(reads: Sequence[ThroughputResult]) -> tuple[float, float]:
    """Pure: (bits/s, window seconds) of reads made at the same time.

    The window is the time all of them were transferring: from the latest first
    byte (so no read's first-byte latency, i.e. its connection and login, counts)
    plus two round trips when known (the last connection's first window of slow
    start) to the earliest last byte. The rate is the bytes that arrived in it,
    over all reads, per second: what the connections carried together. Summing
    each read's own rate instead would count reads that barely overlapped as if
    they had run together. When the reads never overlapped, the rate over the whole
    (all data-phase bytes from the first first byte to the last last byte) is
    returned with window 0: a lower bound. Each read's kernel byte counts are used
    where it has them (ThroughputResult.rate_samples)."""
    timed = [r.rate_samples for r in reads if r.samples]
    if not timed:
        raise ProbeError("parallel read: no arrival samples")
    start = max(r[0][0] for r in timed)
    end = min(r[-1][0] for r in timed)
    rtts = [r.rtt_s for r in reads if r.samples and r.rtt_s]
    if rtts and end - (start + 2 * max(rtts)) >= (end - start) / 2:
        start += 2 * max(rtts)
    if end > start:
        carried = math.fsum(_bytes_at(r, end) - _bytes_at(r, start) for r in timed)
        return carried * 8 / (end - start), end - start
    first = min(r[0][0] for r in timed)
    last = max(r[-1][0] for r in timed)
    data = sum(r[-1][1] - r[0][1] for r in timed)
    return (data * 8 / (last - first) if last > first else 0.0), 0.0


def read_offsets(n: int, size: int, max_size: int = 0, file_size: int | None = None) -> list[int]:
    """Pure: where each of ``n`` parallel reads starts: each its own range
    (``i * max(size, max_size)``), spread evenly over the file instead when it is
    too small for that (ranges then overlap; the mirror reads them from cache)."""
    span = max(size, max_size)
    if not file_size or n * span <= file_size or n < 2:
        return [i * span for i in range(n)]
    room = max(0, file_size - span)
    return [room * i // (n - 1) for i in range(n)]


def parallel_ranged_read(
    url: str,
    size: int,
    n: int,
    *,
    timeout_s: float = 10.0,
    max_size: int = 0,
    file_size: int | None = None,
    read: Callable[..., ThroughputResult] | None = None,
) -> ParallelResult:
    """``n`` ranged reads of ``url`` at the same time, one thread and connection
    each, at their own offsets (``read_offsets``), and what they carried together
    (``aggregate_bps``). Reads that fail are left out (a mirror may refuse more
    sessions per address: their errors are in the result); fewer than two
    successes raise ProbeError. ``read`` defaults to ``ranged_read``."""
    if n < 2:
        raise ProbeError(f"parallel read: needs at least 2 connections, got {n}")
    do_read = read or ranged_read
    offsets = read_offsets(n, size, max_size, file_size)
    results: list[ThroughputResult | None] = [None] * n
    errors: list[str | None] = [None] * n

    def run(i: int) -> None:
        try:
            results[i] = do_read(
                url, size, offset=offsets[i], timeout_s=timeout_s, max_size=max_size
            )
        except ProbeError as exc:
            errors[i] = str(exc)
        except Exception as exc:  # (a thread must report, not die silently)
            errors[i] = f"{type(exc).__name__}: {exc}"

    threads = [
        threading.Thread(target=run, args=(i,), name=f"probe-read-{i}", daemon=True)
        for i in range(n)
    ]
    for t in threads:
        t.start()
    # Each read has its own deadline; closing its session may take a few seconds more.
    join_by = time.monotonic() + timeout_s + 10.0
    for t in threads:
        t.join(max(0.0, join_by - time.monotonic()))
    done = tuple(r for r in results if r is not None)
    failed = tuple(e for e in errors if e)
    failed += tuple("did not finish" for t in threads if t.is_alive())
    if len(done) < 2:
        raise ProbeError(
            f"parallel read over {n} connections: {len(done)} succeeded"
            + (f" ({'; '.join(failed)})" if failed else "")
        )
    bps, window = aggregate_bps(done)
    return ParallelResult(done[0].method, bps, window, done, failed)
