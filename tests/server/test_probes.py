"""Probes against real servers on loopback: RTT, ranged reads, mirror up/down."""

from __future__ import annotations

import math
import socket
import threading
import time
from datetime import timedelta

import pytest
from pftp_coordinator.config import Settings
from pftp_coordinator.db import session_scope
from pftp_coordinator.models import Mirror, PathProbe, utcnow
from pftp_coordinator.probes.aggregate import decayed_mean, summarize_probes
from pftp_coordinator.probes.capacity import capacity_from_arrivals
from pftp_coordinator.probes.rtt import measure_rtt, raw_sockets_allowed, summarize_rtts
from pftp_coordinator.probes.service import probe_mirror
from pftp_coordinator.probes.throughput import (
    ArrivalClock,
    ProbeError,
    data_phase_bps,
    ftp_ranged_read,
    http_ranged_read,
)
from probe_db import add_mirror, migrated_factory, tree_root
from probe_servers import ftp_server, http_server, make_tree
from sqlalchemy import select


def settings(**kw) -> Settings:
    base = {
        "database_url": None,
        "probe_timeout_s": 10.0,
        "throughput_probe_bytes": 256 * 1024,
        "down_after_failures": 3,
        "probe_interval_s": 60.0,
    }
    base.update(kw)
    return Settings(**base)


# --- pure parts ---------------------------------------------------------------------


def test_summarize_rtts_min_median_loss():
    r = summarize_rtts("tcp-connect", [0.010, None, 0.030, 0.020, None], refused=1)
    assert r.rtt_min_s == 0.010 and r.rtt_median_s == 0.020
    assert math.isclose(r.loss, 0.2) and r.ok
    assert not summarize_rtts("icmp", [None, None]).ok
    with pytest.raises(ValueError):
        summarize_rtts("icmp", [])


def test_decayed_mean_half_life():
    # A value one half-life old weighs half as much as a fresh one.
    assert math.isclose(decayed_mean([10.0, 40.0], [0.0, 100.0], 100.0), (10 + 0.5 * 40) / 1.5)
    assert decayed_mean([None, None], [0, 0], 10) is None
    # An hourly row of 3 samples weighs 3 raw rows.
    assert math.isclose(decayed_mean([1.0, 4.0], [0, 0], 10, counts=[3, 1]), 7 / 4)
    with pytest.raises(ValueError):
        decayed_mean([1.0], [0, 1], 10)
    with pytest.raises(ValueError):
        decayed_mean([1.0], [0], 0)


def test_summarize_probes_prefers_throughput_and_skips_failures():
    now = utcnow()
    rows = [
        PathProbe(mirror_id=1, ts=now, method="tcp-connect", ok=True, rtt_s=0.02, samples=1),
        PathProbe(
            mirror_id=1,
            ts=now - timedelta(hours=1),
            method="tcp-connect",
            ok=True,
            rtt_s=0.04,
            samples=1,
        ),
        PathProbe(mirror_id=1, ts=now, method="ftp-range", ok=True, throughput_bps=8e6, samples=1),
        PathProbe(mirror_id=1, ts=now, method="packet-train", ok=True, capacity_bps=1e7, samples=1),
        PathProbe(
            mirror_id=1, ts=now, method="ftp-range", ok=False, throughput_bps=None, samples=1
        ),
    ]
    s = summarize_probes(rows, now, half_life_s=3600)
    assert math.isclose(s.rtt_s, (0.02 + 0.5 * 0.04) / 1.5)
    assert s.bandwidth_bps == 8e6 and s.capacity_bps == 1e7 and s.n_probes == 4


def test_data_phase_and_capacity_math():
    assert math.isclose(data_phase_bps(1_000_000, 100_000, 1.0, 2.0), 900_000 * 8)
    # Replies 1 ms apart with 1250-byte packets: 10 Mbit/s; a burst at the start
    # (tbf) does not move the median.
    arrivals = [0, 1e-5, 2e-5] + [2e-5 + i * 1e-3 for i in range(1, 10)]
    assert math.isclose(capacity_from_arrivals(arrivals, 1250), 1e7, rel_tol=1e-6)
    assert capacity_from_arrivals([1.0], 1500) is None


# --- RTT on loopback ----------------------------------------------------------------


@pytest.fixture
def listener():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    try:
        yield s.getsockname()[1]
    finally:
        s.close()


def test_tcp_connect_rtt_unprivileged(listener):
    results = measure_rtt("127.0.0.1", listener, count=3, allow_raw=False)
    tcp = results[0]
    assert tcp.method == "tcp-connect" and tcp.ok and tcp.loss == 0
    assert 0 < tcp.rtt_min_s <= tcp.rtt_median_s < 1.0


def test_closed_port_is_refused_not_ok():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    tcp = measure_rtt("127.0.0.1", port, count=2, timeout_s=2, allow_raw=False)[0]
    assert not tcp.ok and tcp.refused == 2 and tcp.loss == 0


@pytest.mark.skipif(not raw_sockets_allowed(), reason="raw sockets need root/CAP_NET_RAW")
def test_scapy_syn_and_icmp_rtt(listener):
    results = {r.method: r for r in measure_rtt("127.0.0.1", listener, count=3, timeout_s=3)}
    assert set(results) == {"tcp-syn", "icmp"}
    assert results["tcp-syn"].ok and results["icmp"].ok
    assert results["tcp-syn"].rtt_median_s < 1.0


# --- ranged reads over real servers ---------------------------------------------------


def test_ftp_and_http_ranged_reads(tmp_path):
    root = tree_root(tmp_path, "m")
    make_tree(root, {"pub/big.bin": 2 * 1024 * 1024})
    with ftp_server(root) as ftp, http_server(root) as http:
        for read, base in ((ftp_ranged_read, ftp.url), (http_ranged_read, http.url)):
            r = read(base + "pub/big.bin", 300_000, timeout_s=20)
            assert r.nbytes == 300_000 and r.bps > 0 and r.seconds >= r.first_byte_s
            counts = [b for _, b in r.wire]  # (few or none on loopback: see below)
            assert counts == sorted(counts) and all(b <= r.nbytes + 1024 for b in counts[:-1])
            r2 = read(base + "pub/big.bin", 100_000, offset=2 * 1024 * 1024 - 50_000, timeout_s=20)
            assert r2.nbytes == 50_000  # past the end: what is left
        with pytest.raises(ProbeError):
            http_ranged_read(http.url + "pub/missing.bin", 1000, timeout_s=10)
        with pytest.raises(ProbeError):
            ftp_ranged_read(ftp.url + "pub/missing.bin", 1000, timeout_s=10)


# --- probe rounds: rows, state down within one interval, back up ----------------------


def test_probe_marks_down_then_up(db_url, tmp_path):
    factory = migrated_factory(db_url)
    root = tree_root(tmp_path, "m")
    make_tree(root, {"pub/a.bin": 1024 * 1024})
    st = settings(down_after_failures=3)
    with ftp_server(root) as ftp:
        port = ftp.port
        mid = add_mirror(factory, "m1", ftp.url, {"a.bin": ("pub/a.bin", 1024 * 1024)})
        out = probe_mirror(factory, mid, st, allow_raw=False, retry_pause_s=0.05)
        assert out.ok and out.state == "up" and out.attempts == 1
    with session_scope(factory) as s:
        methods = {p.method for p in s.scalars(select(PathProbe).where(PathProbe.ok))}
        assert {"tcp-connect", "ftp-range"} <= methods
        tp = s.scalar(select(PathProbe).where(PathProbe.method == "ftp-range"))
        assert tp.throughput_bps > 0

    # Server stopped: one round = a quick burst of 3 attempts, then down.
    out = probe_mirror(factory, mid, st, allow_raw=False, retry_pause_s=0.05)
    assert not out.ok and out.state == "down" and out.attempts == 3
    with session_scope(factory) as s:
        m = s.get(Mirror, mid)
        assert m.state == "down" and m.consecutive_failures == 3
        failed = s.scalars(
            select(PathProbe).where(PathProbe.ok.is_(False), PathProbe.method == "ftp-range")
        ).all()
        assert len(failed) == 3 and all(p.error for p in failed)
    # Still down: the next round tries once and stays down.
    out = probe_mirror(factory, mid, st, allow_raw=False, retry_pause_s=0.05)
    assert out.state == "down" and out.attempts == 1

    # Restarted on the same port: up again at the first successful probe.
    with ftp_server(root, port=port):
        out = probe_mirror(factory, mid, st, allow_raw=False, retry_pause_s=0.05)
    assert out.ok and out.state == "up"
    with session_scope(factory) as s:
        assert s.get(Mirror, mid).consecutive_failures == 0


def test_probe_http_mirror_without_replica_uses_tcp(sqlite_url, tmp_path):
    factory = migrated_factory(sqlite_url)
    root = tree_root(tmp_path, "h")
    with http_server(root) as http:
        mid = add_mirror(factory, "h1", http.url)
        out = probe_mirror(factory, mid, settings(), allow_raw=False, retry_pause_s=0.05)
    assert out.ok and out.state == "up"
    assert [r["method"] for r in out.rows] == ["tcp-connect"]


def slow_start_samples(rate_Bps: float, rtt: float, total: int, iw: int = 14480
                       ) -> list[tuple[float, int]]:
    """(time, bytes so far) of a transfer whose window doubles every round trip from
    ``iw`` until it carries ``rate_Bps``; each window arrives over its round trip."""
    samples: list[tuple[float, int]] = [(0.0, 0)]
    t, got, window = 0.0, 0, iw
    while got < total:
        per_rtt = min(window, rate_Bps * rtt)
        for k in range(1, 9):  # eight reads per round trip
            got = min(total, got + int(per_rtt / 8))
            samples.append((t + rtt * k / 8, got))
        t += rtt
        window *= 2
    return samples


def test_steady_rate_reads_the_end_of_a_slow_start_not_its_average():
    from pftp_coordinator.probes.throughput import steady_rate_bps, still_growing

    rate, rtt = 5_000_000.0, 0.08  # 40 Mbit/s, 80 ms away
    short = slow_start_samples(rate, rtt, 512 * 1024)
    whole = short[-1][1] * 8 / short[-1][0]
    assert whole < 0.5 * rate * 8  # the average of a short read: mostly the ramp
    assert still_growing(short, rtt)  # so a read allowed to go on does
    long = slow_start_samples(rate, rtt, 4 * 1024 * 1024)
    cut = next(i for i, (_, b) in enumerate(long) if b >= 2 * 1024 * 1024)
    assert not still_growing(long[: cut + 1], rtt)  # on the plateau by 2 MB
    assert steady_rate_bps(long[: cut + 1], rtt) == pytest.approx(rate * 8, rel=0.05)
    # a LAN path: steady from the start, the end reads as the whole
    lan = [(i * 0.001, i * 5000) for i in range(100)]
    assert not still_growing(lan, 0.0002)
    assert steady_rate_bps(lan, 0.0002) == pytest.approx(40e6, rel=0.01)
    assert steady_rate_bps(lan[:2], 0.0002) is None  # too few to tell
    assert not still_growing(long, None)  # no RTT: never extends a read


def _hiccup_samples(rate_bps: float, span_s: float, gap_at: float, gap_s: float,
                    catchup: float = 3.0) -> list[tuple[float, int]]:
    """A steady read at ``rate_bps``, one segment per receive, in which delivery
    stops for ``gap_s`` at ``gap_at`` and the backlog then comes at ``catchup`` times
    the rate (a busy machine's kernel delivering a path's packets late)."""
    seg, out, t, got, owed = 1448, [], 0.0, 0, 0.0
    step = seg * 8 / rate_bps
    while t < span_s:
        if gap_at <= t < gap_at + gap_s:
            owed += seg
            t += step
            continue
        if owed > 0:  # the backlog, faster than the path
            got += seg
            owed -= seg * (catchup - 1) / catchup
            t += step / catchup
        else:
            got += seg
            t += step
        out.append((t, got))
    return out


def test_a_delivery_hiccup_is_not_read_as_a_burst_of_rate():
    """Eight probes on two busy cores: the kernel held a 12 Mbit/s path's packets
    for 100 ms and delivered them at once; the last quarter, begun in that burst,
    read 20 Mbit/s. The window starts at the gap instead, and a gap so late that its
    backlog is still coming leaves the clean read before it."""
    from pftp_coordinator.probes.throughput import steady_rate_bps

    rate = 12e6
    span = 0.4
    at_window = _hiccup_samples(rate, span, gap_at=0.24, gap_s=0.1)  # window from ~0.3
    naive = at_window[-1][1] - next(b for t, b in at_window if t >= at_window[-1][0] - span / 4)
    assert naive * 8 / (span / 4) > 1.3 * rate  # what the last quarter alone says
    assert steady_rate_bps(at_window, 0.0001) == pytest.approx(rate, rel=0.05)
    late = _hiccup_samples(rate, span, gap_at=0.33, gap_s=0.06)  # backlog not all in
    assert steady_rate_bps(late, 0.0001) == pytest.approx(rate, rel=0.05)
    clean = _hiccup_samples(rate, span, gap_at=1.0, gap_s=0.1)  # no gap at all
    assert steady_rate_bps(clean, 0.0001) == pytest.approx(rate, rel=0.02)


def test_a_paced_read_is_rated_from_the_kernels_counts(tmp_path):
    """A server holding its data connection to 2 MB/s (pyftpdlib's throttle): the
    read's rate series is what the kernel had received at each receive, and the
    rate is the pace."""
    root = tree_root(tmp_path, "m")
    make_tree(root, {"pub/big.bin": 4 * 1024 * 1024})
    with ftp_server(root, write_limit=2_000_000) as ftp:
        r = ftp_ranged_read(ftp.url + "pub/big.bin", 1_000_000, timeout_s=20)
    assert len(r.wire) >= 3 and r.rate_samples == r.wire
    counts = [b for _, b in r.wire]
    assert counts == sorted(counts) and counts[-1] >= r.nbytes
    assert r.bps == pytest.approx(16e6, rel=0.25)


def test_receives_after_the_kernel_had_all_the_bytes_do_not_count():
    """A reader slower than the path (loopback): the kernel holds the whole read
    while the reader is still at its start, and its count stays flat after; a rate
    from that flat end read 0 (a probe CLI test saw 0 bits/s)."""
    from pftp_coordinator.probes.throughput import _Reading

    reading = _Reading(600_000, 0, None)
    for k in range(1, 7):  # 100 kB per receive, 10 ms apart
        kernel = min(600_000, k * 200_000)  # (all in by the third receive)
        reading.add(100_000, k * 0.01, wire=(k * 0.01, kernel))
    result = reading.result("ftp-range", 0.0)
    assert [b for _, b in result.wire] == [200_000, 400_000, 600_000]
    assert result.bps == pytest.approx(200_000 * 8 / 0.01, rel=0.01)


def test_arrival_clock_counts_what_the_kernel_received_not_what_was_read():
    with socket.create_server(("127.0.0.1", 0)) as listener:
        reader = socket.create_connection(listener.getsockname())
        sender, _ = listener.accept()
    with reader, sender:
        clock = ArrivalClock(reader)
        sender.sendall(b"a" * 3000)
        deadline = time.monotonic() + 5
        got = b""
        while not got and time.monotonic() < deadline:
            got, _ = clock.recv(1000)
        time.sleep(0.1)  # all 3000 are in by now
        more, _ = clock.recv(1000)
        assert len(got) == len(more) == 1000
        assert clock.last_wire is not None
        t_wire, kernel = clock.last_wire
        assert kernel == 3000  # the 1000 still unread count: the kernel has them
        assert t_wire <= time.perf_counter()


def test_arrival_clock_times_bytes_by_their_arrival_not_by_the_late_read():
    """Two sends 0.3 s apart; the second is read 0.3 s after it came (the probe's
    reads are late on a busy coordinator), yet timed when it came. (A backlog read
    at once takes its last segment's time: the kernel merges queued segments.)"""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        reader = socket.create_connection(listener.getsockname())
        sender, _ = listener.accept()
    with reader, sender:
        clock = ArrivalClock(reader)
        assert clock.kernel, "SO_TIMESTAMPNS is there on Linux"

        def send() -> None:
            sender.sendall(b"a" * 1000)
            time.sleep(0.3)
            sender.sendall(b"b" * 1000)

        sent_at = time.perf_counter()
        writer = threading.Thread(target=send)
        writer.start()
        first, t_first = clock.recv(4096)
        time.sleep(0.6)
        second, t_second = clock.recv(4096)
        read_at = time.perf_counter()
        writer.join()
    assert first == b"a" * 1000 and second == b"b" * 1000
    assert sent_at <= t_first < sent_at + 0.15
    assert 0.2 < t_second - t_first < 0.45
    assert read_at - t_second > 0.2  # the read itself came much later


class _StampedLate:
    """A real TCP socket whose first receives come without the kernel's arrival
    time, as when the kernel's stamping (turned on from a work queue once a socket
    asks) starts late on a loaded machine; the condition cannot be made on demand."""

    def __init__(self, sock: socket.socket, unstamped: int) -> None:
        self.sock, self.unstamped = sock, unstamped

    def setsockopt(self, *args) -> None:
        self.sock.setsockopt(*args)

    def recv(self, n: int) -> bytes:
        return self.sock.recv(n)

    def getsockopt(self, *args):
        return self.sock.getsockopt(*args)

    def recvmsg(self, n: int, ancsize: int):
        data, ancdata, flags, addr = self.sock.recvmsg(n, ancsize)
        if self.unstamped:
            self.unstamped -= 1
            ancdata = []
        return data, ancdata, flags, addr


def test_a_read_that_began_without_arrival_times_is_timed_by_its_reads():
    # read times first, then arrival times earlier than them, would pack the late
    # reader's backlog into one instant (a 20 Mbit/s mirror read at 159 Mbit/s)
    with socket.create_server(("127.0.0.1", 0)) as listener:
        reader = socket.create_connection(listener.getsockname())
        sender, _ = listener.accept()
    with reader, sender:
        clock = ArrivalClock(_StampedLate(reader, unstamped=1))  # type: ignore[arg-type]
        assert clock.kernel
        sender.sendall(b"a" * 1000)
        first, t_first = clock.recv(4096)
        assert first == b"a" * 1000 and not clock.kernel  # (the rest: read times)
        sender.sendall(b"b" * 1000)
        time.sleep(0.3)  # the reader is late: the bytes came 0.3 s before the read
        second, t_second = clock.recv(4096)
        read_at = time.perf_counter()
    assert second == b"b" * 1000
    assert t_second - t_first > 0.25 and read_at - t_second < 0.1

