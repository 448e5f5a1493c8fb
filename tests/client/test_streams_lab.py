"""Extra connections to a mirror whose one connection cannot fill its path
(pftp_client.streams), in the network lab: a 20 Mbit/s mirror 30 ms away whose
path drops 1 % of its packets (the lab's delay line), its server's TCP set to
CUBIC (halves its window at each loss: one connection carries ~4.5 Mbit/s there)
or BBR (carries the link alone). The host's default is BBR; CUBIC is allowed for
the test's duration and the allowed list restored after it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pftp_client.streams import (
    _pauses,
    burst_bytes,
    burst_path_rate,
    bursts_outpace,
    connections_for,
    first_pause,
    gained,
    idle_share,
    kept_streams,
    loss_share,
    merge_stream_stats,
    needed_gain,
    others_kept,
    paced_rate,
    paused_share,
    rate_since,
    scales,
    steady,
    streams_to_add,
    trial_cuts,
    without_crumbs,
)
from pftp_client.summary import MirrorStats
from pftp_lab import Lab, MirrorSpec, make_file

MBIT = 1_000_000
SIZE = 16 * 1024 * 1024 + 777
ALLOWED = Path("/proc/sys/net/ipv4/tcp_allowed_congestion_control")
AVAILABLE = Path("/proc/sys/net/ipv4/tcp_available_congestion_control")


# --- the pure parts ---------------------------------------------------------------------


def test_loss_share_between_two_readings_of_one_connection() -> None:
    assert loss_share((10, 1000), (60, 2000)) == pytest.approx(0.05)
    assert loss_share(None, (30, 1000)) == pytest.approx(0.03)
    assert loss_share((10, 1000), (10, 1050)) is None  # too few segments to say


def test_loss_share_restarts_on_a_new_data_connection() -> None:
    # the counters of the next range's connection start again from 0
    assert loss_share((500, 90_000), (4, 400)) == pytest.approx(0.01)


def test_an_extra_connection_pays_only_with_the_gain_asked_for() -> None:
    assert gained(4.5e6 / 8, 9e6 / 8, 1.25)
    assert not gained(18e6 / 8, 18.1e6 / 8, 1.25)


def _arrivals(times_s: list[float] | np.ndarray, size: int = 1448) -> tuple[np.ndarray, np.ndarray]:
    t = (np.asarray(times_s) * 1e9).astype(np.int64)
    return t, np.full(t.size, size, dtype=np.int64)


def test_a_connection_at_its_bottlenecks_pace_is_never_idle() -> None:
    # 20 Mbit/s: a segment every 0.58 ms for a second, with a little jitter
    rng = np.random.default_rng(1)
    gaps = np.full(1700, 1448 * 8 / 20e6) * rng.uniform(0.5, 1.5, 1700)
    t, n = _arrivals(np.cumsum(gaps))
    assert idle_share(t, n, 0) == pytest.approx(0.0, abs=0.02)
    # 1 Mbit/s: a segment every 11.6 ms (bins widen with the gaps)
    t, n = _arrivals(np.arange(100) * 1448 * 8 / 1e6)
    assert idle_share(t, n, 0) == pytest.approx(0.0, abs=0.02)


def test_a_connection_whose_server_pauses_between_bursts_is_idle_most_of_the_time() -> None:
    # 64 KiB bursts at 1 Gbit/s (45 segments, 12 us apart) every 64 ms: a
    # server holding the connection to 1 MB/s
    bursts = [k * 0.064 + i * 12e-6 for k in range(16) for i in range(45)]
    t, n = _arrivals(bursts)
    idle = idle_share(t, n, 0)
    assert idle is not None and idle > 0.6  # 20 ms bins, one in three holds a burst
    # only the arrivals since the round's start count
    assert idle_share(t, n, int(0.9 * 1e9)) is None  # too few left to say
    later = idle_share(t, n, int(0.3 * 1e9))
    assert later is not None and later > 0.6


def test_one_long_stop_is_not_a_sender_that_pauses() -> None:
    # at a link's pace, with one 250 ms stop (a retransmission timeout) in a second
    smooth = np.arange(600) * 0.0012
    t, n = _arrivals(np.concatenate([smooth[:300], smooth[300:] + 0.25]))
    assert idle_share(t, n, 0) is None


def test_regular_pauses_as_long_as_a_stop_are_still_a_senders() -> None:
    # vsftpd held to 0.55 MB/s behind 13.1 Mbit/s: a 64 KiB burst (45 segments,
    # 0.9 ms apart) every 120 ms, pauses of ~80 ms, read over 0.7 s: each pause is
    # over 0.15 of the window, but there are five of them alike
    bursts = [k * 0.12 + i * 0.0009 for k in range(6) for i in range(45)]
    t, n = _arrivals(bursts)
    idle = idle_share(t, n, 0)
    assert idle is not None and idle > 0.5
    # two such stops in the window are still no sender's pauses
    smooth = np.arange(600) * 0.0012
    two = np.concatenate([smooth[:200], smooth[200:400] + 0.25, smooth[400:] + 0.5])
    t, n = _arrivals(two)
    assert idle_share(t, n, 0) is None


def test_even_bursts_with_long_pauses_between_are_a_servers_limit() -> None:
    # vsftpd at 1.25 MB/s behind 40 Mbit/s: 64 KiB (45 segments at the link's
    # pace, 0.29 ms apart) every 52 ms, for 0.4 s
    bursts = [k * 0.052 + i * 0.29e-3 for k in range(8) for i in range(45)]
    t, n = _arrivals(bursts)
    share = paused_share(t, n, 0)
    assert share is not None and 0.7 < share < 0.8  # 13 ms of every 52 carry data
    # the same behind 1 Gbit/s: paused nearly all the time
    t, n = _arrivals([k * 0.052 + i * 12e-6 for k in range(8) for i in range(45)])
    share = paused_share(t, n, 0)
    assert share is not None and share > 0.95
    # only the arrivals since ``since`` count: three bursts are too few to say
    assert paused_share(t, n, int(0.26 * 1e9)) is None


def test_a_far_paths_start_is_read_past_for_its_even_bursts() -> None:
    # lab, mixed-limit (session 33): vsftpd at 1 MB/s per connection, 30 ms away,
    # with the head start: 14 KiB, slow start's 28 KiB, then the server's first
    # allowance (213 KiB over 82 ms) before its 64 KiB every 65 ms. Read from
    # 50 ms after the first arrival, that start stays in every reading: never
    # paused the 85 % the early look asks (stream_early_share); read from after
    # it (the engine's first block, when a head start came first:
    # engine._early_starts), three pauses say it.
    times = [0.0] + [0.026 + i * 0.0018 for i in range(11)]
    times += [0.056 + i * 0.0021 for i in range(40)]
    times += [0.193 + k * 0.065 + i * 0.0007 for k in range(6) for i in range(9)]
    sizes = [14 * 1024] + [28 * 1024 // 11] * 11 + [213 * 1024 // 40] * 40
    sizes += [64 * 1024 // 9] * 54
    t = (np.asarray(times) * 1e9).astype(np.int64)
    n = np.asarray(sizes, dtype=np.int64)

    def read(since_s: float) -> float | None:
        return paused_share(t, n, int(since_s * 1e9), min_pauses=3, max_spread=0.35,
                            min_arrivals=10)

    assert (read(0.05) or 0.0) < 0.85
    share = read(0.15)
    assert share is not None and share > 0.85


def test_whole_bursts_per_receive_are_read_with_a_pause_the_path_sets() -> None:
    # pure-ftpd behind a fast link: each 48 KiB burst in one or two receives, one
    # burst split by a 6 ms gap, every 37-68 ms; the median gap is itself a pause
    starts = [0.0, 0.038, 0.106, 0.144, 0.212, 0.250]
    times: list[float] = []
    sizes: list[int] = []
    for k, s in enumerate(starts):
        parts = [24 * 1024, 24 * 1024] if k != 2 else [36 * 1024, 12 * 1024]
        times += [s, s + (0.006 if k == 2 else 0.0004)]
        sizes += parts
    t = (np.asarray(times) * 1e9).astype(np.int64)
    n = np.asarray(sizes, dtype=np.int64)
    assert paused_share(t, n, 0, min_pauses=4, min_arrivals=10) is None  # (median)
    share = paused_share(t, n, 0, min_pauses=4, min_arrivals=10, pause_s=0.01,
                         min_burst=16 * 1024)
    assert share is not None and share > 0.9
    # a 5 ms floor cuts the split burst in two (a 12 KiB burst), but the reading
    # with only the long gaps as pauses sees it whole
    assert paused_share(t, n, 0, min_pauses=4, min_arrivals=10, pause_s=0.005,
                        min_burst=16 * 1024) == pytest.approx(share)
    # bursts too small for a server's write (a shaper's bucket after slow start)
    assert paused_share(t, n // 4, 0, min_pauses=4, min_arrivals=10, pause_s=0.01,
                        min_burst=16 * 1024) is None


def test_a_burst_that_stalls_halfway_is_still_one_burst() -> None:
    # vsftpd at 1.25 MB/s behind 40 Mbit/s (lab, session 25): 64 KiB every 52 ms
    # at the link's pace; two bursts stop 12 ms after 50 KiB (the link's queue)
    times: list[float] = []
    for k in range(8):
        times += [k * 0.052 + i * 0.29e-3 for i in range(45)]
        if k in (2, 5):
            times[-10:] = [x + 0.012 for x in times[-10:]]
    t, n = _arrivals(times)
    share = paused_share(t, n, 0, min_pauses=4, min_arrivals=10, max_spread=0.35)
    assert share is not None and 0.6 < share < 0.75  # 13 ms of every 52 carry data
    # read with every gap over 5 ms as a pause, the stalls cut bursts of 50 and
    # 14 KiB: too uneven
    found = _pauses(t, n, 0, 10, None)
    assert found is not None and found[3].size == 9
    bursts = np.diff(np.cumsum(found[1])[found[3]])
    assert bursts.std() > 0.35 * bursts.mean()
    # a link-limited flow that a queue stalls now and then: busy most of the time
    rng = np.random.default_rng(3)
    smooth = np.cumsum(np.full(1500, 0.29e-3) * rng.uniform(0.5, 1.5, 1500))
    for at in (200, 500, 900, 1200):
        smooth[at:] += rng.uniform(0.006, 0.03)
    t, n = _arrivals(smooth)
    stalled = paused_share(t, n, 0, min_pauses=4, min_arrivals=10)
    assert stalled is not None and stalled < 0.3


def test_the_paced_rate_leaves_the_starts_double_burst_out() -> None:
    # vsftpd at 1.25 MB/s: 128 KiB at once, then 64 KiB every 52 ms
    times = [i * 0.29e-3 for i in range(90)]
    times += [0.052 * k + i * 0.29e-3 for k in range(1, 8) for i in range(45)]
    t, n = _arrivals(times)
    mean = int(n.sum()) / ((int(t[-1]) - int(t[0])) / 1e9)
    paced = paced_rate(t, n, 0)
    assert paced is not None
    assert paced == pytest.approx(45 * 1448 / 0.052, rel=0.02)  # one burst a period
    assert mean > 1.2 * paced  # what the mean since the first data says
    assert paced_rate(t[:60], n[:60], 0) is None  # no pause yet


def test_the_paced_rate_is_not_slowed_by_one_late_read() -> None:
    # vsftpd at 1 MB/s (64 KiB every 65.5 ms); the client, busy opening
    # connections, reads the 5th burst 50 ms late, 15 ms before the 6th
    period = 65536 / 1e6
    times = [period * k + i * 0.29e-3 for k in range(8) for i in range(45)]
    times[5 * 45:6 * 45] = [times[5 * 45] + 0.05 + i * 1e-6 for i in range(45)]
    t, n = _arrivals(times)
    paced = paced_rate(t, n, 0)
    assert paced is not None and paced == pytest.approx(45 * 1448 / period, rel=0.05)
    # read from the end of the first pause to the late read (the end of the
    # longest pause), the pace seems slower by the read's 50 ms
    first, late = int(t[45]), int(t[5 * 45])
    assert int(n[45:5 * 45].sum()) / ((late - first) / 1e9) < 0.85 * paced


def test_the_paced_rate_of_a_server_that_stops_inside_its_bursts() -> None:
    # pure-ftpd at 1.25 MB/s (lab arrivals, session 27): every 110 ms 48 KiB,
    # 40 ms later 40 KiB, then after a ~7 ms stop 48 KiB more
    def burst(at: float, kib: int) -> list[float]:
        return [at + i * 1e-4 for i in range(kib * 1024 // 1448)]

    times: list[float] = []
    for c in range(6):
        s = 0.11 * c
        times += burst(s, 48) + burst(s + 0.04, 40) + burst(s + 0.0506, 48)
    t, n = _arrivals(times)
    limit = 136 * 1024 // 1448 * 1448 / 0.11
    # read after 0.2 s, as the early look does: the 7 ms stops cut 10 ms
    # periods at ~4x the limit between the 60 ms ones, and with every gap over
    # 5 ms a pause the median of the four periods was ~2x the limit
    found = _pauses(t, n, 0, 3, None)
    assert found is not None and found[3].size > found[4].size  # the stops: pauses
    for upto in (0.2, 0.25, 0.35, 0.6):
        keep = t <= int(upto * 1e9)
        paced = paced_rate(t[keep], n[keep], 0)
        assert paced is not None and paced == pytest.approx(limit, rel=0.06), upto


def _late_reader_bursts(periods: int, late_kib: int, *, period: float = 0.052,
                        gap: float = 0.29e-3) -> tuple[np.ndarray, np.ndarray]:
    """vsftpd's 64 KiB bursts every ``period`` crossing a path a segment every
    ``gap`` (0.29 ms: 40 Mbit/s), read by a client that wakes ``late_kib`` into
    each burst: one receive of what waited, one more 0.1 ms later catching up,
    then a segment per receive (lab arrivals, session 30)."""
    times: list[float] = []
    sizes: list[int] = []
    segs = 65536 // 1448
    late = late_kib * 1024 // 1448
    for k in range(periods):
        at = k * period
        first = late // 2
        times += [at + first * gap, at + late * gap + 1e-4]
        sizes += [first * 1448, (late - first) * 1448]
        for i in range(late + 1, segs):
            times.append(at + i * gap)
            sizes.append(1448)
    return (np.asarray(times) * 1e9).astype(np.int64), np.asarray(sizes, dtype=np.int64)


def test_the_paths_rate_is_read_inside_a_paused_senders_bursts() -> None:
    path = 1448 / 0.29e-3  # 40 Mbit/s of segments
    for late_kib in (0, 16, 48):
        t, n = _late_reader_bursts(6, late_kib)
        rate = burst_path_rate(t, n, 0)
        assert rate is not None and rate == pytest.approx(path, rel=0.05), late_kib
        # what the first receive and the catching up alone would say
        assert int(n[1:2].sum()) / 1e-4 > 5 * path or late_kib == 0
    # a receive after a 4 ms stall inside a burst (under the 5 ms pause) and a
    # few clumped ones do not move the median
    t, n = _late_reader_bursts(6, 16)
    t = t.copy()
    t[30:] += int(4e-3 * 1e9)
    rate = burst_path_rate(t, n, 0)
    assert rate is not None and rate == pytest.approx(path, rel=0.05)
    # only the bursts since ``since`` count: one burst is too few
    t, n = _late_reader_bursts(6, 16)
    assert burst_path_rate(t, n, int(5 * 0.052 * 1e9) - 1000) is None


def test_bursts_read_whole_say_nothing_of_the_path() -> None:
    # behind a fast path each 64 KiB burst arrives in one or two receives
    times = [k * 0.052 + d for k in range(8) for d in (0.0, 2e-4)]
    t = (np.asarray(times) * 1e9).astype(np.int64)
    n = np.full(t.size, 32768, dtype=np.int64)
    assert burst_path_rate(t, n, 0) is None
    # a link's pace, no pauses: one "burst", no reading
    t, n = _arrivals(np.arange(700) * 0.58e-3)
    assert burst_path_rate(t, n, 0) is None


def test_a_slow_links_stalls_are_not_a_servers_sleeps() -> None:
    # lab, selection-table1 --mirror (session 30): a 2 Mbit/s mirror recovering
    # from losses, read from 0.28 s after its first data with 10 ms pauses (the
    # reading for whole bursts per receive) to 0.6 s; it read as even bursts
    # paused 86 % of the time, and 7 more connections brought nothing
    at_ms = [411.45, 417.29, 419.31, 433.58, 436.62, 438.83, 439.23, 445.25, 465.26,
             469.54, 546.75, 586.22]
    sizes = [5792, 1448, 1448, 2896, 1448, 1448, 9064, 8688, 1448, 15928, 24616, 8688]
    t = (np.asarray(at_ms) * 1e6).astype(np.int64)
    n = np.asarray(sizes, dtype=np.int64)
    since = int(0.4 * 1e9)
    share = paused_share(t, n, since, min_pauses=4, max_spread=0.35, min_arrivals=10,
                         pause_s=0.01, min_burst=16 * 1024)
    assert share is not None and share > 0.85
    path = burst_path_rate(t, n, since, 0.01)
    paced = paced_rate(t, n, since, 0.01)
    assert path is not None and paced is not None
    assert path < 2 * paced  # its bursts at about its mean's pace
    assert not bursts_outpace(path, paced, 2.0)
    # a server's limit: vsftpd at 10 Mbit/s behind 40, its bursts at the link's rate
    t, n = _late_reader_bursts(6, 16)
    path = burst_path_rate(t, n, 0)
    paced = paced_rate(t, n, 0)
    assert path is not None and paced is not None and path > 3 * paced
    assert bursts_outpace(path, paced, 2.0)
    assert bursts_outpace(None, paced, 2.0)  # unknown: as before


def _whole_second_limit(crumb: int = 1158) -> tuple[np.ndarray, np.ndarray]:
    """nginx limit_rate 1 MB/s behind 40 Mbit/s: each second's ~1 MB at the link's
    rate (a segment every 0.29 ms), then nothing for the rest of the second but
    what was left of its allowance, ``crumb`` bytes on their own mid-pause."""
    times: list[float] = []
    sizes: list[int] = []
    seg = 1448 * 8 / 40e6
    for second in range(4):
        start = second * 1.0
        for i in range(700):
            times.append(start + i * seg)
            sizes.append(1448)
        if crumb:
            times.append(start + 0.6)
            sizes.append(crumb)
    return (np.asarray(times) * 1e9).astype(np.int64), np.asarray(sizes, dtype=np.int64)


def test_a_seconds_leftover_between_two_pauses_is_part_of_the_pause() -> None:
    t, n = _whole_second_limit()
    # the leftovers read as bursts of their own: uneven, no evidence
    assert paused_share(t, n, 0, min_pauses=3, max_spread=0.35, pause_s=0.1,
                        min_burst=64 * 1024) is None
    kept_t, kept_n = without_crumbs(t, n, 0.1, 64 * 1024)
    assert kept_n.size == n.size - 4  # the last too: it would end its pause early
    share = paused_share(kept_t, kept_n, 0, min_pauses=3, max_spread=0.35, pause_s=0.1,
                         min_burst=64 * 1024)
    assert share is not None and 0.7 < share < 0.85
    # a server without leftovers loses nothing
    t2, n2 = _whole_second_limit(crumb=0)
    assert without_crumbs(t2, n2, 0.1, 64 * 1024)[0].size == t2.size


def test_a_leftover_at_the_windows_end_does_not_cut_the_paced_period() -> None:
    # read 0.05 s after the third second's leftover: the period 2.0 -> 2.6 s
    # (1 MB in 0.6 s) would read 1.7 MB/s, and the median of two periods 1.35
    t, n = _whole_second_limit()
    window = t <= int(2.65 * 1e9)
    kept_t, kept_n = without_crumbs(t[window], n[window], 0.1, 64 * 1024)
    assert int(kept_t[-1]) < int(2.25 * 1e9)  # (the third burst, 0.2 s long)
    paced = paced_rate(kept_t, kept_n, 0, 0.1)
    assert paced == pytest.approx(700 * 1448 / 1.0, rel=0.02)


def test_two_long_pauses_around_one_burst_say_a_whole_second_limit() -> None:
    t, n = _whole_second_limit()
    window = t <= int(2.05 * 1e9)  # the third second's burst has just begun
    kept_t, kept_n = without_crumbs(t[window], n[window], 0.1, 64 * 1024)
    # two pauses: too few for the even-burst reading
    assert paused_share(kept_t, kept_n, 0, min_pauses=3, max_spread=0.35, pause_s=0.1,
                        min_burst=64 * 1024) is None
    share = paused_share(kept_t, kept_n, 0, min_pauses=2, max_spread=0.35, pause_s=0.25,
                         min_burst=256 * 1024)
    assert share is not None and 0.7 < share < 0.85
    assert paced_rate(kept_t, kept_n, 0, 0.25) == pytest.approx(700 * 1448, rel=0.02)
    # one pause is not enough, nor two around a burst smaller than asked
    first = kept_t <= int(1.05 * 1e9)
    assert paused_share(kept_t[first], kept_n[first], 0, min_pauses=2, pause_s=0.25,
                        min_burst=256 * 1024) is None
    assert paused_share(kept_t, kept_n, 0, min_pauses=2, pause_s=0.25,
                        min_burst=2 * 1024 * 1024) is None


def test_a_ranges_first_burst_and_pause_are_a_whole_second_limits_period() -> None:
    t, n = _whole_second_limit(crumb=0)
    seg = 1448 * 8 / 40e6
    # 20 ms after the second burst began (100 kB): one pause, ended, 1 MB before it
    window = t <= int(1.02 * 1e9)
    found = first_pause(t[window], n[window], 0, 0.25, 512 * 1024, 64 * 1024)
    assert found is not None
    share, paced, resumed = found
    assert resumed == int(1.0 * 1e9)
    assert share == pytest.approx(1 - 700 * seg, rel=0.02)  # (0.8 s of 1 paused)
    assert paced == pytest.approx(700 * 1448, rel=0.02)
    # the burst after it crosses at the path's rate, 4x the rate held
    after = burst_path_rate(t[window], n[window], resumed, 0.25, min_reads=3, min_bursts=1)
    assert after is not None and bursts_outpace(after, paced, 2.5)
    # not yet resumed, or resumed with too little to read
    assert first_pause(t[t <= int(0.99 * 1e9)], n[t <= int(0.99 * 1e9)], 0, 0.25,
                       512 * 1024, 64 * 1024) is None
    assert first_pause(t[window], n[window], 0, 0.25, 512 * 1024, 128 * 1024) is None
    # a first burst smaller than asked, or a pause shorter than asked
    assert first_pause(t[window], n[window], 0, 0.25, 2 * 1024 * 1024, 64 * 1024) is None
    assert first_pause(t[window], n[window], 0, 0.9, 512 * 1024, 64 * 1024) is None


def test_a_connection_whose_link_slowed_resumes_at_the_new_rate() -> None:
    # 1.5 MB at 30 Mbit/s, a 1.2 s stall (the shaper's queue dropped, a timeout),
    # then a segment every 7.7 ms (1.5 Mbit/s): a pause, but no server's
    seg = 1448 * 8 / 30e6
    times = [i * seg for i in range(1040)]
    stall = times[-1] + 1.2
    times += [stall + i * 1448 * 8 / 1.5e6 for i in range(60)]
    t, n = _arrivals(times)
    found = first_pause(t, n, 0, 0.25, 512 * 1024, 64 * 1024)
    assert found is not None
    _share, paced, resumed = found
    after = burst_path_rate(t, n, resumed, 0.25, min_reads=3, min_bursts=1)
    assert after is not None and not bursts_outpace(after, paced, 2.5)


def test_only_small_runs_between_two_pauses_are_left_out() -> None:
    # runs of 40 kB (the window's first), 40 kB, 120 kB, 40 kB (its last, after
    # a pause: a leftover, or a burst's start the next look sees whole)
    at = [0.0, 0.5, 1.0, 1.001, 1.002, 1.5]
    t, n = _arrivals(at, size=40_000)
    kept, _ = without_crumbs(t, n, 0.1, 64 * 1024)
    assert list(kept) == [int(x * 1e9) for x in (0.0, 1.0, 1.001, 1.002)]
    # shorter gaps are no pauses: one run, nothing left out
    assert without_crumbs(t, n, 0.6, 64 * 1024)[0].size == t.size


def test_connections_that_fill_the_path() -> None:
    mbit = 1e6 / 8
    # 38.3 Mbit/s of path at 10 Mbit/s each: 4 in all, 3 more
    assert connections_for(38.3 * mbit, 9.97 * mbit, 1, 8) == 3
    # a tenth of a connection over is not worth one more
    assert connections_for(40.5 * mbit, 10 * mbit, 1, 8) == 3
    assert connections_for(42 * mbit, 10 * mbit, 1, 8) == 4
    # never more than the most, never none
    assert connections_for(940 * mbit, 8 * mbit, 1, 8) == 7
    assert connections_for(12 * mbit, 10 * mbit, 2, 8) == 1
    assert connections_for(None, 10 * mbit, 1, 8) is None
    assert connections_for(40 * mbit, 0.0, 1, 8) is None


def test_a_start_that_overran_a_shapers_queue_is_not_a_servers_limit() -> None:
    # at a 20 Mbit/s link's pace, with two 90 ms stops (slow start's losses)
    smooth = np.arange(300) * 0.58e-3
    t, n = _arrivals(np.concatenate([smooth, smooth + 0.265, smooth + 0.53]))
    assert paused_share(t, n, 0) is None  # two pauses: too few
    # slow start on a long path: a window per round trip, doubling
    times: list[float] = []
    for k in range(8):
        times += [k * 0.05 + i * 0.1e-3 for i in range(10 * 2**k)]
    t, n = _arrivals(times)
    assert paused_share(t, n, 0) is None  # bursts of every size
    # a link's pace, never paused
    t, n = _arrivals(np.arange(700) * 0.58e-3)
    assert paused_share(t, n, 0) is None


def test_a_rate_that_grew_with_the_connections_asks_for_the_rest() -> None:
    # 1 -> 2 connections, 1.25 -> 2.4 MB/s: each carries what the first did
    assert scales(1, 1, 1.25e6, 2.4e6)
    assert not scales(1, 1, 1.25e6, 1.6e6)  # a share of a path nearly full
    assert scales(2, 2, 2.5e6, 4.5e6)
    assert not scales(0, 1, 0.0, 1e6)


def test_more_connections_than_the_path_takes_keep_those_it_needs() -> None:
    # 1 connection at 1 MB/s, 7 more: 2.5 MB/s in all, the link's rate
    assert kept_streams(1, 7, 1e6, 2.5e6) == 2
    assert gained(1e6, 2.5e6, needed_gain(1, 2, 1.25))
    assert not gained(1e6, 2.5e6, needed_gain(1, 7, 1.25))  # all 7 did not pay
    assert kept_streams(1, 7, 1e6, 1.02e6) == 1  # (then judged on that one: no gain)
    assert kept_streams(1, 7, 1e6, 0.9e6) == 0  # they brought nothing
    assert kept_streams(2, 3, 2e6, 9e6) == 2  # never all of them: those did not pay


def test_what_a_receive_that_waited_returned() -> None:
    # 16 receives waited and returned 64 KiB each: a server's bursts
    assert burst_bytes((4, 4 * 1448), (20, 4 * 1448 + 16 * 65536)) == 65536
    assert burst_bytes((4, 100), (6, 200)) is None  # too few to say
    assert burst_bytes((900, 10**6), (10, 14480)) == 1448  # a new fetcher's counters
    assert burst_bytes(None, (4, 4 * 65536), min_waits=5) is None  # the early look's 5


def test_the_rate_of_the_arrivals_since_a_moment() -> None:
    t, n = _arrivals(np.arange(100) * 0.01, size=1000)  # 100 kB/s for a second
    assert rate_since(t, n, 0.5, 1.0) == pytest.approx(100_000, rel=0.03)
    assert rate_since(t, n, 1.0, 1.0) == 0.0


def test_a_rate_that_changed_is_not_steady() -> None:
    t, n = _arrivals(np.arange(200) * 0.005)  # 1448 B every 5 ms for a second
    assert steady(t, n, 0)
    slowed = np.concatenate([np.arange(150) * 0.002, 0.3 + np.arange(50) * 0.015])
    t, n = _arrivals(slowed)  # 0.3 s at 5.8 Mbit/s, then 0.75 s at 0.77
    assert not steady(t, n, 0)
    assert not steady(t[:2], n[:2], 0)  # nothing to compare


def test_how_many_connections_to_try_at_once() -> None:
    assert streams_to_add(None, 1, 4) == 1  # loss alone: one at a time
    assert streams_to_add(0.35, 1, 4) == 1
    assert streams_to_add(0.6, 1, 4) == 1  # busy 40 %: about 2.5 times
    assert streams_to_add(0.8, 1, 4) == 3  # busy a fifth: 5 times, 4 in all at most
    assert streams_to_add(0.8, 3, 4) == 1
    assert streams_to_add(0.9, 4, 4) == 0
    assert streams_to_add(None, 1, 8, burst=True) == 7  # whole bursts at once: the limit
    assert streams_to_add(None, 6, 8, burst=True) == 2


def test_a_flow_keeps_what_it_fetches_while_its_trial_starts() -> None:
    # no lead (a LAN): even parts, as before
    assert trial_cuts(0, 900, 2, 0) == [300, 600]
    # 1.2 MB/s over a new connection's 1.8 s start (250 ms): the flow keeps that
    # and a third of the rest, each new connection a third of the rest
    cuts = trial_cuts(1000, 6_000_000, 2, 2_160_000)
    assert cuts == [1000 + 2_160_000 + 1_280_000, 1000 + 2_160_000 + 2_560_000]
    # a lead of at most half, whatever the start costs: the trial keeps a quarter
    assert trial_cuts(0, 1000, 1, 10_000) == [750]


def test_the_gain_asked_for_shrinks_as_connections_add_less() -> None:
    assert needed_gain(1, 1, 1.25) == pytest.approx(1.25)
    assert needed_gain(1, 3, 1.25) == pytest.approx(1.75)
    assert needed_gain(2, 1, 1.25) == pytest.approx(1.125)
    assert needed_gain(4, 1, 1.25) == pytest.approx(1.1)  # never under noise


def test_a_gain_taken_from_the_other_mirrors_does_not_count() -> None:
    # access link full at 10 MB/s: the mirror went 2 -> 4, the others 8 -> 6
    assert not others_kept(8e6, 6e6, 2e6)
    # the others held (noise aside): the gain was the path's
    assert others_kept(8e6, 7.8e6, 2e6)


def test_an_extra_connections_figures_count_for_its_mirror() -> None:
    first = MirrorStats(name="m1", url="ftp://m1/f", bytes=100, received=120, seconds=5.0,
                        steady_bps=4e6, failures=1, ranges=2, events=["stolen"])
    extra = MirrorStats(name="m1", url="ftp://m1/f", bytes=50, received=50, seconds=3.0,
                        steady_bps=5e6, ranges=1, events=["stream", "stolen"])
    merge_stream_stats(first, extra)
    assert (first.bytes, first.received, first.ranges, first.failures) == (150, 170, 3, 1)
    assert first.seconds == 5.0  # the two ran at once
    assert first.steady_bps == pytest.approx(9e6)
    assert first.events == ["stolen", "stream"]


# --- in the lab -------------------------------------------------------------------------


@pytest.fixture
def cubic_allowed() -> Iterator[None]:
    if "cubic" not in AVAILABLE.read_text().split():
        subprocess.run(["modprobe", "tcp_cubic"], check=False, capture_output=True)
    if "cubic" not in AVAILABLE.read_text().split():
        pytest.skip("this kernel has no CUBIC congestion control")
    before = ALLOWED.read_text().strip()
    ALLOWED.write_text(" ".join(dict.fromkeys([*before.split(), "cubic"])))
    try:
        yield
    finally:
        ALLOWED.write_text(before)


def _download(lab: Lab, tmp_path: Path, digest: str, *, http: bool = False,
              access: str | None = "1G", extra: tuple[str, ...] = ()) -> dict:
    out = tmp_path / "out" / "data.bin"
    out.parent.mkdir()
    out.parent.chmod(0o777)
    m = lab.mirror(0)
    argv = [sys.executable, "-m", "pftp_client.cli", "get",
            "--mirror", m.http_url("data.bin") if http else m.ftp_url("data.bin"),
            "--no-discovery", "--sha256", digest, "-o", str(out), "--quiet", "--json", *extra]
    env = {**os.environ, "XDG_CACHE_HOME": str(out.parent)}
    env.pop("PFTP_ACCESS_BANDWIDTH", None)
    if access:
        env["PFTP_ACCESS_BANDWIDTH"] = access
    proc = lab.popen_in("client", argv, env=env, stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE, text=True)
    stdout, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 0, stderr[-2000:]
    summary = json.loads(stdout)
    assert summary["sha256_verified"]
    assert out.stat().st_size == (tmp_path / "data.bin").stat().st_size
    return summary


def _run_lossy(tmp_path: Path, cc: str, http: bool = False) -> dict:
    """The download from one 20 Mbit/s mirror 30 ms away, 1 % loss, its TCP ``cc``
    (over FTP, or HTTP from the same host's nginx)."""
    src = tmp_path / "data.bin"
    digest = make_file(src, SIZE, seed=5)
    spec = MirrorSpec(rate_bps=20 * MBIT, rtt_ms=30, loss=0.01, name="lossy", http=http)
    with Lab([spec], files={"data.bin": src}) as lab:
        lab.run_in(lab.mirror(0), ["sysctl", "-qw", f"net.ipv4.tcp_congestion_control={cc}"],
                   check=True)
        return _download(lab, tmp_path, digest, http=http)


def _events(summary: dict, kind: str, starting: str = "") -> list[str]:
    return [e["detail"] for e in summary["events"]
            if e["kind"] == kind and e["detail"].startswith(starting)]


def _stream_events(summary: dict) -> tuple[list[str], list[str]]:
    details = [e["detail"] for e in summary["events"] if e["kind"] == "stream"]
    started = [d for d in details if d.startswith("another connection")]
    # (a trial still opening or warming up when the rest was in: the download's end
    # closes it, as good as a verdict; seen in CI once, 1 in 40 or so)
    ended = [d for d in details if d.startswith(("no gain", "not judged"))]
    return started, ended


@pytest.mark.lab
@pytest.mark.parametrize("http", [False, True], ids=["ftp", "http"])
def test_a_loss_limited_cubic_mirror_gets_more_connections(
    tmp_path: Path, cubic_allowed: None, http: bool
) -> None:
    # The loss is random: a trial's gain is measured over a second or so, and two
    # CUBIC connections' rate varies around twice one's (x1.23 against the x1.25
    # asked for, twice in a row in session 21). Up to 3 downloads; one must keep a connection.
    tries = []
    for attempt in range(3):
        attempt_dir = tmp_path / f"try{attempt}"
        attempt_dir.mkdir()
        summary = _run_lossy(attempt_dir, "cubic", http)
        started, ended = _stream_events(summary)
        print(summary["seconds"], started, ended)
        # one mirror in the summary and the report: its connections' bytes together
        assert len(summary["mirrors"]) == 1
        assert summary["mirrors"][0]["bytes"] == SIZE
        assert started, "no extra connection to a mirror carrying a fifth of its path"
        tries.append((started, ended))
        # one at least paid (a second trial follows only a kept one; CUBIC at 1 %
        # loss carries about twice as much over two connections as over one)
        if len(started) > len(ended):
            return
    pytest.fail(f"no extra connection kept in 3 downloads: {tries}")


@pytest.mark.lab
def test_an_extra_connection_that_does_not_pay_takes_no_more_work(tmp_path: Path) -> None:
    """BBR carries the link with one connection despite the loss: an extra
    connection, if one is tried, only splits it, and ends with its range."""
    summary = _run_lossy(tmp_path, "bbr")
    started, ended = _stream_events(summary)
    print(summary["seconds"], started, ended)
    assert len(summary["mirrors"]) == 1
    assert summary["mirrors"][0]["bytes"] == SIZE
    assert len(started) <= 1  # no second trial after one that did not pay
    assert len(ended) == len(started)


def _api_download(lab: Lab, out: Path, digest: str, config: str, options: str,
                  http: bool = False) -> tuple[dict, str]:
    """The library's download() from the lab's first mirror (over FTP, or ``http``)
    into ``out``, run in the client namespace with ``EngineConfig(config)`` and
    ``options`` (keyword arguments, as source text), its log on stderr: (the
    summary, the log)."""
    m = lab.mirror(0)
    url = m.http_url("data.bin") if http else m.ftp_url("data.bin")
    code = (
        "import json, logging, sys\n"
        "logging.basicConfig(level=logging.INFO, stream=sys.stderr,"
        " format='%(created).3f %(message)s')\n"
        "from pftp_client import download\n"
        "from pftp_client.engine import EngineConfig\n"
        f"cfg = EngineConfig({config})\n"
        f"s = download(mirrors=[{url!r}], output={str(out)!r},"
        f" sha256={digest!r}, config=cfg, report=False, {options})\n"
        "print(json.dumps(s.to_json_dict()))\n"
    )
    env = {**os.environ, "XDG_CACHE_HOME": str(out.parent)}
    env.pop("PFTP_ACCESS_BANDWIDTH", None)
    proc = lab.popen_in("client", [sys.executable, "-c", code], env=env,
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stdout, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 0, stderr[-2000:]
    summary = json.loads(stdout.strip().splitlines()[-1])
    assert summary["sha256_verified"]
    return summary, stderr


@pytest.mark.lab
def test_a_trial_the_download_outruns_is_accounted_for(tmp_path: Path) -> None:
    """The lossy BBR mirror with trials judged only after a minute: the download
    ends first; the trial's connection carried its range, and its event says it
    was not judged (every trial started ends in the summary)."""
    src = tmp_path / "data.bin"
    digest = make_file(src, SIZE, seed=5)
    out = tmp_path / "out" / "data.bin"
    out.parent.mkdir()
    out.parent.chmod(0o777)
    spec = MirrorSpec(rate_bps=20 * MBIT, rtt_ms=30, loss=0.01, name="lossy")
    with Lab([spec], files={"data.bin": src}) as lab:
        lab.run_in(lab.mirror(0), ["sysctl", "-qw", "net.ipv4.tcp_congestion_control=bbr"],
                   check=True)
        summary, _log = _api_download(lab, out, digest, "stream_judge_s=60.0",
                                      "access_bandwidth_bps=10**9")
    started, ended = _stream_events(summary)
    print(summary["seconds"], started, ended)
    assert len(started) == 1
    assert len(ended) == 1 and ended[0].startswith("not judged: the download ended first")
    assert int(ended[0].split("(")[1].split()[0]) > 0  # it carried bytes of its range


# --- a server that holds each connection to a rate ---------------------------------------

LIMIT = 1_000_000  # bytes/s per connection


def _run_limited(tmp_path: Path, kind: str, *, http: bool = False,
                 max_per_ip: int | None = None, extra: tuple[str, ...] = (),
                 size: int = SIZE, link_mbit: int = 100, limit: int = LIMIT,
                 config: str | None = None) -> dict:
    """One mirror on a ``link_mbit`` link whose server holds each connection to
    LIMIT (vsftpd anon_max_rate, pure-ftpd --anonymousbandwidth, nginx
    limit_rate); the access link unknown (a mirror-only download, no setting).
    With ``config`` (EngineConfig keywords, as source text), through the library."""
    src = tmp_path / "data.bin"
    digest = make_file(src, size, seed=6)
    spec = MirrorSpec(rate_bps=link_mbit * MBIT, kind=kind, http=http, conn_rate_Bps=limit,
                      max_per_ip=max_per_ip, name="limited")
    with Lab([spec], files={"data.bin": src}) as lab:
        if config is None:
            return _download(lab, tmp_path, digest, http=http, access=None, extra=extra)
        out = tmp_path / "out" / "data.bin"
        out.parent.mkdir()
        out.parent.chmod(0o777)
        return _api_download(lab, out, digest, config, "access_bandwidth_bps=None",
                             http=http)[0]


def _found_within(tmp_path: Path, within_s: float, evidence: tuple[str, ...], *,
                  tries: int = 2, **kw: Any) -> dict:
    """The first of up to ``tries`` downloads from a vsftpd/nginx mirror held as
    ``kw`` says (_run_limited) whose first extra connection came within
    ``within_s`` on ``evidence`` (phrases of its reason). The lab's timing varies:
    in whole CI runs such a limit was found late, on a later reading, twice (one
    of these tests each, sessions 35 and 36); alone, or beside two CPU hogs, every
    one of ~20 runs found it in time. The rule has to work, not to win every
    race; a rule that does not work misses every time."""
    misses = []
    for k in range(tries):
        where = tmp_path / f"try{k}"
        where.mkdir()
        summary = _run_limited(where, "vsftpd", **kw)
        first = [e for e in summary["events"] if e["kind"] == "stream"]
        print(summary["seconds"], first[:1])
        if (first and first[0]["at_s"] < within_s
                and all(phrase in first[0]["detail"] for phrase in evidence)):
            return summary
        misses.append(first[:1])
    pytest.fail(f"no extra connection within {within_s} s for {evidence} in {tries} "
                f"downloads: {misses}")


@pytest.mark.lab
@pytest.mark.parametrize(("kind", "http"), [("vsftpd", False), ("pure-ftpd", False),
                                            ("vsftpd", True)], ids=["vsftpd", "pure-ftpd",
                                                                    "nginx"])
def test_a_mirror_that_limits_each_connection_gets_more_connections(
    tmp_path: Path, kind: str, http: bool
) -> None:
    summary = _run_limited(tmp_path, kind, http=http)
    started, ended = _stream_events(summary)
    print(summary["seconds"], started, ended)
    assert started and not ended
    # (a sender's pauses, whichever look read them: even bursts, the time idle, or
    # a whole-second limit's first period)
    assert any(k in d for d in started for k in ("bursts", "idle", "then nothing for"))
    assert summary["mirrors"][0]["bytes"] == SIZE
    # one connection cannot carry more than LIMIT: the others did
    assert SIZE / summary["seconds"] > 1.5 * LIMIT


@pytest.mark.lab
def test_a_limit_counted_in_whole_seconds_is_seen_over_a_longer_look(tmp_path: Path) -> None:
    """nginx's limit_rate counts in whole seconds: behind a 40 Mbit/s link each
    second's 1 MB leaves at its start, then nothing for ~0.8 s. No early look (4
    pauses within 1 s) and no 1 s round (one burst, one long stop) sees it, and one
    connection took the whole file at 1 MB/s (16.4 s, session 30). The long look
    (engine._long_look: the last 4 s or the range's first ones, 3 pauses of 0.1 s
    or more, or 2 of 0.25 s or more around a burst of 256 KiB, bursts at 2.5x the
    paced rate) gives the mirror the connections its path takes as soon as the
    second long pause has ended (it looked only from 4 s on in session 30, and
    waited for a third pause in session 31), and no more once they carry the
    path's rate."""
    # (the second pause ends at the third whole second of the range at the latest)
    summary = _found_within(tmp_path, 2.6, ("pauses of 0.25 s or more", "within a burst"),
                            http=True, link_mbit=40,
                            config="stream_silence_s=0.0, stream_one_min_burst=0")
    started, ended = _stream_events(summary)
    assert started and not ended
    assert 3 <= len([d for d in started if "pauses of" in d]) <= 5  # 38 of 8 Mbit/s
    assert summary["mirrors"][0]["bytes"] == SIZE
    # one connection cannot carry more than LIMIT: the others did
    assert SIZE / summary["seconds"] > 1.5 * LIMIT


@pytest.mark.lab
def test_a_whole_second_limits_first_pause_is_its_evidence(tmp_path: Path) -> None:
    """nginx at 1.25 MB/s behind 40 Mbit/s: the range's first second's allowance
    (~0.9 MB after the head start's first 50 ms) at the link's rate, a pause to
    the next second, then the next burst at the link's rate again. That first
    period is the evidence (streams.first_pause), and the mirror gets the
    connections its path takes about a second before a second pause would end.
    (The silence's own evidence, sooner, is off here: the next test.)"""
    # (the first pause ends at the range's second whole second at the latest)
    summary = _found_within(tmp_path, 1.7, ("then nothing for", "then again at"), http=True,
                            link_mbit=40, limit=1_250_000, size=24 * 1024 * 1024,
                            config="stream_silence_s=0.0")
    started, ended = _stream_events(summary)
    assert started and not ended
    assert 2 <= len(started) <= 4  # 38 of 10 Mbit/s: 4 or 5 in all
    # what the report tells the coordinator: the connections kept
    closed = _events(summary, "stream", "not needed")
    assert summary["mirrors"][0]["connections"] == 1 + len(started) - len(closed)
    assert summary["mirrors"][0]["bytes"] == 24 * 1024 * 1024
    assert 24 * 1024 * 1024 / summary["seconds"] > 2.5 * 1_250_000


@pytest.mark.lab
def test_a_whole_second_limits_first_pause_gets_connections_while_it_lasts(
    tmp_path: Path,
) -> None:
    """The same nginx mirror with the defaults: 0.25 s into the silence after the
    first allowance its path check finds the server taking a new connection at
    once, and the mirror gets its connections then (engine._silence_trial), each
    with an allowance of its own, instead of when the pause has ended (~0.6 s
    later). The count is read as if the pause lasted as long again (38 of ~10
    Mbit/s: 4 or 5 in all; up to 7 when the silence came after a shorter first
    burst); the trial pays."""
    # (a silence no longer than a gap before it, the head start's hand-over to
    # the engine, is left to the first-pause rule: 1 download in 7 here)
    summary = _found_within(tmp_path, 1.2, ("then nothing for", "server took a new connection"),
                            tries=3, http=True, link_mbit=40, limit=1_250_000,
                            size=24 * 1024 * 1024)
    started, ended = _stream_events(summary)
    assert started and not ended
    assert not _events(summary, "stream", "no gain")
    first = [d for d in started if "server took a new connection" in d]
    assert 2 <= len(first) <= 6
    assert summary["mirrors"][0]["bytes"] == 24 * 1024 * 1024
    assert 24 * 1024 * 1024 / summary["seconds"] > 2.5 * 1_250_000


@pytest.mark.lab
def test_a_server_limit_is_seen_in_the_first_second(tmp_path: Path) -> None:
    """vsftpd's 64 KiB bursts at 1 MB/s over a 100 Mbit/s link, each read at once
    from its start: the mirror gets its connections before the first monitor
    round (1 s) has ended, and they pay."""
    summary = _run_limited(tmp_path, "vsftpd")
    first = [e for e in summary["events"] if e["kind"] == "stream"]
    started, ended = _stream_events(summary)
    print(summary["seconds"], first[:1])
    assert first and "bursts of" in first[0]["detail"]
    assert first[0]["at_s"] < 1.0
    assert len(started) == 7 and not ended


@pytest.mark.lab
def test_a_limited_server_behind_a_slower_link_keeps_what_the_link_takes(
    tmp_path: Path,
) -> None:
    """vsftpd at 1 MB/s per connection behind a 20 Mbit/s link (2.5 MB/s): more
    connections pay up to the link's rate, not 8 of them. Those tried beyond
    what the link takes are closed ("not needed" when some of a trial's pay, "no
    gain" when none of them does); the mirror keeps 2-4 in all."""
    summary = _run_limited(tmp_path, "vsftpd", link_mbit=20)
    started, ended = _stream_events(summary)
    closed = _events(summary, "stream", "not needed")
    print(summary["seconds"], started, ended, closed)
    assert started
    kept = len(started) - len(closed) - len(ended)
    assert 1 <= kept <= 3
    assert SIZE / summary["seconds"] > 1.6 * LIMIT


@pytest.mark.lab
def test_a_limited_server_gets_the_connections_its_path_takes(tmp_path: Path) -> None:
    """vsftpd at 1 MB/s per connection behind a 40 Mbit/s link (5 MB/s): the early
    look reads the link's rate inside the server's bursts and opens as many more
    connections as fill it at 1 MB/s each (about 5 in all), not the 7 more a
    blind trial opens (streams.burst_path_rate); the trial reaches the path's
    rate, so it is not doubled, and none is closed as not needed."""
    summary = _run_limited(tmp_path, "vsftpd", link_mbit=40)
    started, ended = _stream_events(summary)
    closed = _events(summary, "stream", "not needed")
    print(summary["seconds"], started, ended, closed)
    assert started and not ended
    first = started[0]
    assert "within a burst" in first
    path_mbit = float(first.split(" Mbit/s within a burst")[0].rsplit(" ", 1)[1])
    assert 34 < path_mbit < 44  # the link's 38.3 Mbit/s of data
    in_first = [d for d in started if d.split("; takes")[0] == first.split("; takes")[0]]
    assert 3 <= len(in_first) <= 5
    assert 3 <= len(started) - len(closed) <= 6
    assert summary["mirrors"][0]["bytes"] == SIZE
    assert SIZE / summary["seconds"] > 2.5 * LIMIT


def _idle_trial_download(
    tmp_path: Path, spec: MirrorSpec, config: str, options: str
) -> tuple[dict, str, list[float]]:
    """_api_download of SIZE bytes from the one mirror ``spec``: (summary, log,
    times of the extra connections opened on the monitor round's idle signal)."""
    src = tmp_path / "data.bin"
    digest = make_file(src, SIZE, seed=6)
    out = tmp_path / "out" / "data.bin"
    out.parent.mkdir()
    out.parent.chmod(0o777)
    with Lab([spec], files={"data.bin": src}) as lab:
        summary, stderr = _api_download(lab, out, digest, config, options)
    started = [float(ln.split()[0]) for ln in stderr.splitlines()
               if ": stream: another connection: its connection idle" in ln]
    return summary, stderr, started


@pytest.mark.lab
def test_a_trial_that_scaled_is_kept_without_waiting_for_the_round(tmp_path: Path) -> None:
    """vsftpd at 1 MB/s per connection behind 40 Mbit/s, the early look off (as
    when it missed), 2 connections at most: the monitor round's idle signal tries
    the second; it carries what the first did, so it is kept as soon as it can be
    judged (here 0.3 s past its first data), not at the next round (1 s after the
    trial), and a mirror with room left would get the next ones then
    (engine._judge_trial clear_only, _double_now)."""
    spec = MirrorSpec(rate_bps=40 * MBIT, kind="vsftpd", conn_rate_Bps=LIMIT, name="limited")
    summary, stderr, started = _idle_trial_download(
        tmp_path, spec, "stream_early_first_s=60.0, stream_early_s=60.0, stream_judge_s=0.3",
        "max_connections=2, access_bandwidth_bps=None")
    kept = [float(ln.split()[0]) for ln in stderr.splitlines() if ": kept (" in ln]
    print(summary["seconds"], started, kept)
    assert len(started) == 1 and len(kept) == 1
    assert 0.3 < kept[0] - started[0] < 0.8
    # one connection cannot carry more than LIMIT: the second carried its share
    assert SIZE / summary["seconds"] > 1.3 * LIMIT


@pytest.mark.lab
def test_connections_a_mirror_refuses_cost_nothing_but_their_attempt(tmp_path: Path) -> None:
    """vsftpd takes 2 connections from one address and answers "421 too many" to
    the rest: those go at once, without retries, their ranges back to the
    others; the mirror is not counted as failing."""
    summary = _run_limited(tmp_path, "vsftpd", max_per_ip=2)
    refused = _events(summary, "stream", "not taken")
    print(summary["seconds"], refused)
    assert refused and all("421" in d for d in refused)
    assert not _events(summary, "failed") and not _events(summary, "retry")
    assert summary["mirrors"][0]["bytes"] == SIZE
    assert SIZE / summary["seconds"] > 1.3 * LIMIT  # the second connection carried its share


@pytest.mark.lab
def test_requests_an_http_mirror_refuses_cost_nothing_but_their_attempt(
    tmp_path: Path,
) -> None:
    """nginx with limit_conn 2 per address answers "503" to a third request at once:
    that connection goes without retries, its range back to the others; the
    mirror is not counted as failing, and its two connections carry the file.
    (limit_conn counts requests in flight: the first connection's range begun
    ahead may meet the cap too, and is asked again after a pause.)
    Whether the second connection is kept is the trial's judgement on a few
    seconds' rates: once in a whole CI run its "before" read 16.6 Mbit/s (twice
    the limit) and it was closed for no gain. That gets a second download; the
    refusals must be clean in every one."""
    for k in range(2):
        where = tmp_path / f"try{k}"
        where.mkdir()
        summary = _run_limited(where, "vsftpd", http=True, max_per_ip=2)
        refused = _events(summary, "stream", "not taken")
        print(summary["seconds"], refused, summary["events"])
        assert refused and all("503" in d for d in refused)
        assert not _events(summary, "failed")
        assert all("503" in d for d in _events(summary, "retry"))
        assert summary["mirrors"][0]["bytes"] == SIZE
        if SIZE / summary["seconds"] > 1.3 * LIMIT or not _events(summary, "stream", "no gain"):
            break
    assert SIZE / summary["seconds"] > 1.3 * LIMIT  # the second connection carried its share


@pytest.mark.lab
def test_one_connection_per_mirror_when_asked(tmp_path: Path) -> None:
    # (6 MiB at 1 MB/s: time for a trial, which would take 3 more)
    summary = _run_limited(tmp_path, "vsftpd", extra=("--max-connections", "1"),
                           size=6 * 1024 * 1024)
    assert not _events(summary, "stream")
    assert summary["mirrors"][0]["bytes"] == 6 * 1024 * 1024


@pytest.mark.lab
def test_a_connection_that_fills_its_link_gets_no_other(tmp_path: Path) -> None:
    """A 20 Mbit/s shaped link and a server with no limit: the one connection's
    data arrive at the link's pace, never idle; no extra connection is tried."""
    src = tmp_path / "data.bin"
    digest = make_file(src, SIZE // 2, seed=7)
    with Lab([MirrorSpec(rate_bps=20 * MBIT, name="full")], files={"data.bin": src}) as lab:
        out = tmp_path / "out" / "data.bin"
        out.parent.mkdir()
        out.parent.chmod(0o777)
        argv = [sys.executable, "-m", "pftp_client.cli", "get", "--mirror",
                lab.mirror(0).ftp_url("data.bin"), "--no-discovery", "--sha256", digest,
                "-o", str(out), "--quiet", "--json"]
        env = {k: v for k, v in os.environ.items() if k != "PFTP_ACCESS_BANDWIDTH"}
        proc = lab.popen_in("client", argv, env={**env, "XDG_CACHE_HOME": str(out.parent)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr[-2000:]
    summary = json.loads(stdout)
    assert summary["sha256_verified"]
    assert not _events(summary, "stream")


@pytest.mark.lab
def test_the_coordinator_advises_connections_to_a_mirror_that_limits_each(
    tmp_path: Path,
) -> None:
    """A real coordinator in the lab probes two mirrors: vsftpd holding each
    connection to LIMIT on a 100 Mbit/s link, and one limited by its 20 Mbit/s
    link only. Its answer gives the first several connections (its probe found
    them to carry more together) and the second one; the client opens them with
    the mirror's first connection, before any monitor round."""
    repo = str(Path(__file__).resolve().parents[2])
    if repo not in sys.path:
        sys.path.insert(0, repo)
    from bench import coordinator

    src = tmp_path / "data.bin"
    digest = make_file(src, SIZE, seed=9)
    specs = [MirrorSpec(rate_bps=100 * MBIT, conn_rate_Bps=LIMIT, name="held"),
             MirrorSpec(rate_bps=20 * MBIT, name="plain")]
    with Lab(specs, files={"data.bin": src}, coordinator=True) as lab:
        run = coordinator.start(lab, src, "data.bin")
        try:
            assert run.url, run.reason
            print(run.probes)
            out = tmp_path / "out" / "data.bin"
            out.parent.mkdir()
            out.parent.chmod(0o777)
            argv = [sys.executable, "-m", "pftp_client.cli", "get", "data.bin",
                    "--coordinator", run.url, "--no-discovery", "-o", str(out),
                    "--quiet", "--json"]
            env = {**os.environ, "XDG_CACHE_HOME": str(out.parent),
                   "PFTP_ACCESS_BANDWIDTH": "1G"}
            proc = lab.popen_in("client", argv, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
            stdout, stderr = proc.communicate(timeout=180)
        finally:
            coordinator.drop_db(run.database)
    assert proc.returncode == 0, stderr[-2000:]
    summary = json.loads(stdout)
    assert summary["sha256_verified"] and summary["sha256"] == digest
    advised = [e for e in summary["events"]
               if e["kind"] == "stream" and "coordinator advised" in e["detail"]]
    print(summary["seconds"], [(e["mirror"], e["at_s"]) for e in advised])
    assert advised and {e["mirror"] for e in advised} == {"held"}
    assert all(e["at_s"] < 0.5 for e in advised)
    held = next(m for m in summary["mirrors"] if m["name"] == "held")
    # one connection cannot carry more than LIMIT: the advised ones did
    assert held["bytes"] / held["seconds"] > 1.5 * LIMIT


@pytest.mark.lab
def test_on_a_long_path_a_trial_tries_four_times_the_connections_at_once(
    tmp_path: Path,
) -> None:
    """vsftpd at 1 MB/s per connection behind a 20 Mbit/s link (2.5 MB/s), 120 ms
    away, the early and long looks off (as when they missed): the monitor round's
    idle signal (busy ~40 % of the time: one more, streams.streams_to_add) tries three
    more at once, as a trial round there costs seconds (connect, login, request, slow
    start, ten round trips of warm-up before the judgement: lab r41, a second
    connection 4 s in and no third before an outage at 7 s). The judgement keeps
    those that paid (engine._judge_trial, streams.kept_streams)."""
    spec = MirrorSpec(rate_bps=20 * MBIT, kind="vsftpd", conn_rate_Bps=LIMIT, rtt_ms=120,
                      name="limited")
    summary, _stderr, started = _idle_trial_download(
        tmp_path, spec, "stream_early_first_s=60.0, stream_early_s=60.0, stream_long_every_s=0.0",
        "access_bandwidth_bps=None")
    print(summary["seconds"], started,
          [e["detail"] for e in summary["events"] if e["kind"] == "stream"])
    assert len(started) >= 3
    assert max(started[:3]) - min(started[:3]) < 0.05  # one trial, three connections
    assert summary["mirrors"][0]["bytes"] == SIZE
    # one connection carries LIMIT: the others paid
    assert SIZE / summary["seconds"] > 1.4 * LIMIT
