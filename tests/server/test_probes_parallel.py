"""A mirror that holds each connection below its path's rate: the "held" signal on
synthetic arrivals, the parallel read's arithmetic, and probe rounds against a real
pyftpdlib whose data connections are throttled (and the same server unthrottled)."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import pytest
from pftp_coordinator.config import Settings
from pftp_coordinator.db import session_scope
from pftp_coordinator.models import PathProbe
from pftp_coordinator.probes.service import (
    connections_needed,
    gain_needed,
    parallel_connections,
    probe_mirror,
)
from pftp_coordinator.probes.throughput import (
    HELD_READ_MAX_S,
    ThroughputResult,
    _Reading,
    aggregate_bps,
    held_reason,
    paced_bps,
    pacing_undecided,
    parallel_ranged_read,
    paused_share,
    read_offsets,
    settled_paused_share,
)
from probe_db import add_mirror, migrated_factory, tree_root
from probe_servers import ftp_server, http_server, make_tree
from sqlalchemy import select

KIB = 1024
READ = 512 * KIB
LIMIT = 512 * KIB  # bytes/s per data connection of the throttled server
SERVICE_LOG = "pftp_coordinator.probes.service"


def samples_of(arrivals: list[tuple[float, int]]) -> list[tuple[float, int]]:
    """(time, bytes of that receive) -> (time, bytes so far)."""
    out, total = [], 0
    for t, n in arrivals:
        total += n
        out.append((t, total))
    return out


def even_bursts(
    n: int, period: float, burst: int, receives: int
) -> list[tuple[float, int]]:
    """A throttling sender: ``burst`` bytes every ``period``, each burst arriving
    over ``receives`` receives 0.1 ms apart."""
    return samples_of(
        [
            (k * period + j * 1e-4, burst // receives)
            for k in range(n)
            for j in range(receives)
        ]
    )


# --- the "held" signal on synthetic arrivals ------------------------------------------


def test_even_bursts_with_pauses_are_held():
    # vsftpd at 1.25 MB/s: 64 KiB every 50 ms, over 8 receives each
    s = even_bursts(12, 0.050, 64 * KIB, 8)
    share = paused_share(s)
    assert share is not None and share > 0.9
    why = held_reason(10e6, s)
    assert why is not None and "paused" in why


def test_one_receive_bursts_need_the_waited_flag():
    # Each burst in one receive (loopback): every gap alike, so no gap stands out
    # against the median; the receives waited for their data, so the gaps were the
    # sender's pauses.
    s = even_bursts(12, 0.0625, 32 * KIB, 1)
    assert paused_share(s) is None
    assert paused_share(s, [True] * len(s)) == pytest.approx(1.0)
    # A late reader (did not wait: the data was queued) is not a pausing sender.
    assert paused_share(s, [False] * len(s)) is None


def test_smooth_stream_is_not_held():
    # 8 KiB every 1 ms with some jitter: no gap of 5 ms
    s = samples_of([(i * 1e-3 + (0.3e-3 if i % 3 == 0 else 0.0), 8 * KIB) for i in range(400)])
    assert paused_share(s) is None and held_reason(65e6, s) is None
    # A slow path read as it comes: one segment every 6 ms (waited each time); the
    # "bursts" are single segments, not a server's buffer.
    slow = samples_of([(i * 6e-3, 1448) for i in range(100)])
    assert paused_share(slow, [True] * len(slow)) is None


def test_slow_start_pauses_are_not_held():
    # Slow start over a 50 ms path: flights of 2, 4, 8, 16, 32 and 64 segments, one
    # per round trip; the pauses are long but the bursts between them uneven.
    arrivals = []
    t = 0.0
    for flight in (2, 4, 8, 16, 32, 64):
        for j in range(flight):
            arrivals.append((t + j * 1e-4, 1448))
        t += 0.050
    s = samples_of(arrivals)
    assert paused_share(s) is None
    assert held_reason(2e6, s) is None
    # Few, long, uneven pauses (a shaper's queue overrun): not held either.
    few = samples_of([(i * 1e-3, 8 * KIB) for i in range(50)] + [(0.3, 64 * KIB)]
                     + [(0.3 + i * 1e-3, 8 * KIB) for i in range(1, 50)] + [(0.9, 64 * KIB)])
    assert paused_share(few) is None


def test_a_throttled_read_whose_start_was_uneven_is_held():
    # Recorded: vsftpd at 1 MB/s per connection behind a 50 Mbit/s link 30 ms away.
    # Slow start (gaps of 31, 12, 6, 15, 41 ms) before the server's 64 KiB every
    # ~60 ms: over the whole read the bursts are too uneven, and the three even
    # periods after it are too few alone; the reading after the start finds them.
    data = json.loads((Path(__file__).parent / "data" / "held-vsftpd-30ms.json").read_text())
    for read in data["reads"]:
        s = [tuple(x) for x in read["samples"]]
        waited = read["waited"]
        assert paused_share(s, waited) is None
        share = settled_paused_share(s, waited)
        assert share is not None and share >= 0.6
        why = held_reason(10e6, s, waited)
        assert why is not None and "paused" in why
        # The rate it paces one connection to (anon_max_rate 1 MB/s = 8 Mbit/s), which
        # the read's own rate overstates by its start.
        assert 7.5e6 < paced_bps(s, waited) < 8.5e6
        assert data_phase_rate(s) > 9.5e6


def test_a_burst_split_by_a_short_stop_is_one_burst():
    # Every other 64 KiB burst arrives as 56 + 8 KiB with a 14 ms stop between
    # (the link, or the server's write, split it): counted as pauses, those stops
    # make the bursts uneven; with only the long pauses they are one burst each.
    spec: list[tuple[float, int]] = []
    for k in range(10):
        if k % 2:
            spec += [(0.060 * k, 56 * KIB), (0.060 * k + 0.014, 8 * KIB)]
        else:
            spec.append((0.060 * k, 64 * KIB))
    s = samples_of([(t + j * 1e-4, n // 8) for t, n in spec for j in range(8)])
    assert paused_share(s) is None
    share = settled_paused_share(s)
    assert share is not None and share > 0.8


def test_slow_start_is_not_held_after_its_first_pauses_either():
    # The doubling flights of slow start, then the path full (8 KiB a millisecond):
    # no reading of it, from its start or after its first pauses, has even bursts.
    arrivals = []
    t = 0.0
    for flight in (10, 20, 40, 80, 160):
        arrivals += [(t + j * 1e-4, 1448) for j in range(flight)]
        t += 0.050
    arrivals += [(t + i * 1e-3, 8 * KIB) for i in range(300)]
    s = samples_of(arrivals)
    assert settled_paused_share(s) is None
    assert held_reason(60e6, s) is None
    # once the path is full there are no more pauses: the read is not kept going
    assert not pacing_undecided(s)


def data_phase_rate(samples: list[tuple[float, int]]) -> float:
    return (samples[-1][1] - samples[0][1]) * 8 / (samples[-1][0] - samples[0][0])


def _feed(reading: _Reading, arrivals: list[tuple[float, int]]) -> int:
    """Feed ``arrivals`` (time, bytes) while the reading wants more; bytes fed."""
    fed = 0
    for t, n in arrivals:
        if not reading.want():
            break
        reading.add(n, t, True)
        fed += n
    return fed


def test_a_read_goes_on_while_a_pacing_sender_is_undecided():
    # 64 KiB every 60 ms, each over 8 receives; 200 KiB asked: the read has its
    # size after 4 bursts (3 pauses), too few to tell, and goes on (up to 4 MiB,
    # at most HELD_READ_MAX_S) until it can tell.
    paced = [(0.060 * k + j * 1e-4, 8 * KIB) for k in range(60) for j in range(8)]
    reading = _Reading(200 * KIB, 4 << 20, rtt_s=None)
    fed = _feed(reading, paced)
    assert fed > 200 * KIB + 64 * KIB  # went on past its size
    assert reading.t_last - reading.t_first < HELD_READ_MAX_S + 0.1
    s = reading.samples
    share = settled_paused_share(s, reading.waited)
    assert share is not None and share >= 0.6  # ... and stopped once it could tell
    # A smooth read stops at its size.
    smooth = [(i * 1e-3, 8 * KIB) for i in range(500)]
    reading = _Reading(200 * KIB, 4 << 20, rtt_s=None)
    assert _feed(reading, smooth) == 200 * KIB


def test_capacity_well_above_the_read_is_held():
    assert held_reason(10e6, capacity_bps=15e6) is not None
    assert held_reason(10e6, capacity_bps=14e6) is None
    assert held_reason(10e6, capacity_bps=None) is None


# --- the parallel read's arithmetic -----------------------------------------------------


def _result(samples: list[tuple[float, int]], rtt_s: float | None = None) -> ThroughputResult:
    return ThroughputResult("ftp-range", samples[-1][1], samples[-1][0], 0.0, 0.0,
                            tuple(samples), (), rtt_s)


def test_aggregate_counts_only_the_time_all_reads_ran():
    # Two reads at 1 MB/s each; the second starts 0.5 s later (slow login). Over the
    # time both ran they carried 2 MB/s; total bytes / total time would say 1.33.
    a = _result([(0.0 + i * 0.01, (i + 1) * 10_000) for i in range(101)])  # 0 .. 1.0 s
    b = _result([(0.5 + i * 0.01, (i + 1) * 10_000) for i in range(101)])  # 0.5 .. 1.5 s
    bps, window = aggregate_bps([a, b])
    assert window == pytest.approx(0.5)
    assert bps == pytest.approx(2e6 * 8, rel=1e-6)
    # Reads that never overlapped: a lower bound over the whole, window 0.
    c = _result([(2.0 + i * 0.01, (i + 1) * 10_000) for i in range(101)])
    low, w0 = aggregate_bps([a, c])
    assert w0 == 0.0 and low < 1e6 * 8


def test_aggregate_skips_two_round_trips_of_the_last_start():
    # The later read ramps for 0.1 s (two 50 ms round trips) at a tenth of its rate:
    # the window starts after it.
    a = _result([(i * 0.01, (i + 1) * 10_000) for i in range(201)])  # 0 .. 2 s, 1 MB/s
    ramp = [(0.5 + i * 0.01, (i + 1) * 1_000) for i in range(11)]  # 0.5 .. 0.6 s
    steady = [(0.6 + i * 0.01, 11_000 + i * 10_000) for i in range(1, 141)]
    bps, window = aggregate_bps([a, _result(ramp + steady, rtt_s=0.05)])
    assert window == pytest.approx(2.0 - 0.6)
    assert bps == pytest.approx(2e6 * 8, rel=1e-3)


def test_offsets_connections_and_counts():
    assert read_offsets(4, 100) == [0, 100, 200, 300]
    assert read_offsets(3, 100, 400, file_size=2000) == [0, 400, 800]
    assert read_offsets(3, 100, 400, file_size=1000) == [0, 300, 600]  # spread, overlap
    assert parallel_connections(4, None, 1e6) == 4
    assert parallel_connections(8, 3.2e6, 1e6) == 4  # enough to fill the capacity
    assert parallel_connections(8, 1.2e6, 1e6) == 2  # at least two
    assert connections_needed(4.0e6, 1e6, 4) == 4
    assert connections_needed(3.7e6, 1e6, 4) == 4
    # the lab's 10 Mbit/s limit read at 12.7 alone, four filling 38 Mbit/s: 4
    assert connections_needed(38e6, 12.7e6, 4) == 4
    assert connections_needed(2.0e6, 1e6, 8) == 3  # (one to spare)
    assert connections_needed(1.6e6, 1e6, 4) == 2
    assert connections_needed(1.45e6, 1e6, 4) == 2
    assert connections_needed(20e6, 8e6, 8) == 4  # a 20 Mbit/s path, 8 Mbit/s each


def test_a_path_held_by_its_capacity_alone_must_scale_with_the_connections() -> None:
    # a sender seen pausing: x1.4 is a server's limit
    assert gain_needed(4, by_capacity=False) == 1.4
    # capacity only: 4 connections must carry 3x one (a competitor's 1 against our 4
    # on a shared link gives 1.6x, which says nothing of the mirror)
    assert gain_needed(4, by_capacity=True) == 3.0
    assert gain_needed(2, by_capacity=True) == 1.5


# --- against a real pyftpdlib ----------------------------------------------------------


def settings(**kw) -> Settings:
    base = {
        "database_url": None,
        "probe_timeout_s": 15.0,
        "throughput_probe_bytes": READ,
        "throughput_probe_max_bytes": READ,  # (no slow-start extension on loopback)
        "down_after_failures": 3,
        "probe_interval_s": 60.0,
    }
    base.update(kw)
    return Settings(**base)


def said(caplog: pytest.LogCaptureFixture, words: str) -> bool:
    """Did the probe service log ``words``?"""
    return any(r.name == SERVICE_LOG and words in r.getMessage() for r in caplog.records)


def _range_row(factory) -> PathProbe:
    with session_scope(factory) as s:
        row = s.scalar(select(PathProbe).where(PathProbe.method == "ftp-range"))
        assert row is not None
        s.expunge(row)
        return row


def test_parallel_read_of_a_throttled_server(tmp_path):
    root = tree_root(tmp_path, "slow")
    make_tree(root, {"pub/big.bin": 4 * READ})
    with ftp_server(root, write_limit=LIMIT) as ftp:
        par = parallel_ranged_read(ftp.url + "pub/big.bin", 256 * KIB, 3, timeout_s=15,
                                   file_size=4 * READ)
    assert par.connections == 3 and not par.errors
    assert [r.nbytes for r in par.reads] == [256 * KIB] * 3
    # each connection at about the limit, together about three times it
    assert 2.4 * LIMIT * 8 < par.bps < 3.6 * LIMIT * 8
    assert par.window_s > 0.2


def test_probe_of_a_throttled_server_records_several_connections(sqlite_url, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger=SERVICE_LOG)
    factory = migrated_factory(sqlite_url)
    root = tree_root(tmp_path, "slow")
    make_tree(root, {"pub/big.bin": 4 * READ})
    with ftp_server(root, write_limit=LIMIT) as ftp:
        mid = add_mirror(factory, "slow", ftp.url, {"big.bin": ("pub/big.bin", 4 * READ)})
        out = probe_mirror(factory, mid, settings(), allow_raw=False, retry_pause_s=0.05)
    assert out.ok and out.state == "up"
    row = _range_row(factory)
    assert row.ok and row.connections is not None and row.connections >= 3
    # well above one connection's rate: several connections' worth
    assert row.throughput_bps > 2.5 * LIMIT * 8
    assert said(caplog, "looks held, read alone") and said(caplog, "clients open")


def test_probe_with_the_parallel_read_turned_off(sqlite_url, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger=SERVICE_LOG)
    factory = migrated_factory(sqlite_url)
    root = tree_root(tmp_path, "slow")
    make_tree(root, {"pub/big.bin": 4 * READ})
    with ftp_server(root, write_limit=2 * LIMIT) as ftp:
        mid = add_mirror(factory, "slow", ftp.url, {"big.bin": ("pub/big.bin", 4 * READ)})
        out = probe_mirror(factory, mid, settings(probe_max_connections=1), allow_raw=False,
                           retry_pause_s=0.05)
    assert out.ok
    row = _range_row(factory)
    assert row.connections == 1
    assert row.throughput_bps < 1.5 * 2 * LIMIT * 8  # one connection's worth
    assert not said(caplog, "looks held")


def test_probe_of_an_unthrottled_server_uses_one_connection(sqlite_url, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger=SERVICE_LOG)
    factory = migrated_factory(sqlite_url)
    root = tree_root(tmp_path, "fast")
    make_tree(root, {"pub/big.bin": 4 * READ})
    with ftp_server(root) as ftp:
        mid = add_mirror(factory, "fast", ftp.url, {"big.bin": ("pub/big.bin", 4 * READ)})
        out = probe_mirror(factory, mid, settings(), allow_raw=False, retry_pause_s=0.05)
    assert out.ok
    row = _range_row(factory)
    assert row.connections == 1 and row.throughput_bps > 8 * LIMIT * 8
    # no parallel read was made
    assert not said(caplog, "looks held") and not said(caplog, "connections carried")
    assert math.isfinite(row.throughput_bps)


def test_parallel_read_over_http(tmp_path):
    root = tree_root(tmp_path, "h")
    make_tree(root, {"pub/big.bin": 4 * READ})
    with http_server(root) as http:
        par = parallel_ranged_read(http.url + "pub/big.bin", 128 * KIB, 3, timeout_s=15,
                                   file_size=4 * READ)
    assert par.method == "http-range" and par.connections == 3
    assert all(r.nbytes == 128 * KIB for r in par.reads) and par.bps > 0


def test_failed_parallel_read_keeps_the_single_read(sqlite_url, tmp_path, caplog):
    # One session per address: the parallel read's extra sessions are refused. The
    # single read stands (mirror up), its connections unknown.
    caplog.set_level(logging.INFO, logger=SERVICE_LOG)
    factory = migrated_factory(sqlite_url)
    root = tree_root(tmp_path, "one")
    make_tree(root, {"pub/big.bin": 4 * READ})
    with ftp_server(root, write_limit=LIMIT, max_cons_per_ip=1) as ftp:
        mid = add_mirror(factory, "one", ftp.url, {"big.bin": ("pub/big.bin", 4 * READ)})
        out = probe_mirror(factory, mid, settings(), allow_raw=False, retry_pause_s=0.2)
    assert out.ok and out.state == "up"
    row = _range_row(factory)
    assert row.ok and row.connections is None
    assert row.throughput_bps < 1.5 * LIMIT * 8  # the single read's rate
    assert said(caplog, "parallel read failed")
