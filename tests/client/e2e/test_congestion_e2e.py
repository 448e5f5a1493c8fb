"""Shared-congestion detection wired into real downloads (loopback servers)."""

from __future__ import annotations

import hashlib
import os
import threading
import time

import pytest
from pftp_client import EngineConfig, UsageError, download
from pftp_client.downloader import _report
from pftp_client.summary import DownloadSummary, MirrorStats
from pftp_client.transports.base import RangeEnd
from pftp_client.transports.ftp import FtpFetcher
from pftp_wire import DownloadReport

FAST = EngineConfig(
    timeout=10.0, stall_timeout=5.0, backoff_s=(0.2, 0.4, 0.8), monitor_interval_s=0.5
)


def _collect(fetcher: FtpFetcher, size: int) -> tuple[bytes, list[int], int, int]:
    got = bytearray()
    times: list[int] = []

    def sink(offset: int, block: memoryview, arrival_ns: int) -> None:
        assert offset == len(got)
        got.extend(block)
        times.append(arrival_ns)

    before = time.monotonic_ns()
    fetcher.fetch(0, RangeEnd(size), sink, threading.Event())
    return bytes(got), times, before, time.monotonic_ns()


def test_ftp_kernel_timestamps_are_on_the_monotonic_scale(ftp_mirrors):
    data = os.urandom(3 * 1024 * 1024 + 7)
    (m,) = ftp_mirrors({"f.bin": data}, 1)
    with FtpFetcher(m.url("f.bin"), timeout=10, stall_timeout=5) as plain:
        got, times, before, after = _collect(plain, len(data))
        assert got == data and all(before <= t <= after for t in times)
    with FtpFetcher(m.url("f.bin"), timeout=10, stall_timeout=5) as kernel:
        kernel.kernel_timestamps = True
        got, times, before, after = _collect(kernel, len(data))
    assert got == data and len(times) >= 2
    # kernel receive times (CLOCK_REALTIME) converted to time.monotonic_ns(): inside
    # the transfer (allowing 5 ms of clock-read noise), never after our own reading
    assert all(before - 5_000_000 <= t <= after for t in times)


def test_detection_source_in_summary_and_json(tmp_path, ftp_mirrors):
    data = os.urandom(2 * 1024 * 1024 + 3)
    ms = ftp_mirrors({"f.bin": data}, 3)
    urls = [m.url("f.bin") for m in ms]
    sha = hashlib.sha256(data).hexdigest()
    s = download(
        mirrors=urls[:2],
        backups=urls[2:],
        sha256=sha,
        output=tmp_path / "a.bin",
        config=FAST,
        congestion="kernel",
        access_bandwidth_bps=None,
    )
    assert s.sha256_verified and (tmp_path / "a.bin").read_bytes() == data
    assert s.congestion["mode"] == "kernel" and s.congestion["source"] == "app-kernel"
    assert s.congestion["detector"] == "entropy" and isinstance(s.congestion["events"], list)
    assert sum(m.role == "active" for m in s.mirrors) == 2
    assert "congestion" in s.to_json_dict()
    off = download(
        mirrors=urls[:2],
        sha256=sha,
        output=tmp_path / "b.bin",
        config=FAST,
        congestion="off",
        access_bandwidth_bps=None,
    )
    assert off.sha256_verified and off.congestion["source"] is None
    # loopback FTP mirrors share one address: a capture cannot tell their data apart
    with pytest.raises(UsageError, match="--congestion packet"):
        download(
            mirrors=urls[:2],
            output=tmp_path / "c.bin",
            config=FAST,
            congestion="packet",
            access_bandwidth_bps=None,
        )
    with pytest.raises(UsageError, match="unknown congestion mode"):
        download(mirrors=urls[:2], output=tmp_path / "d.bin", congestion="maybe")
    single = download(
        mirrors=urls[:1],
        sha256=sha,
        output=tmp_path / "e.bin",
        config=FAST,
        access_bandwidth_bps=None,
    )
    assert single.congestion["source"] is None  # one flow: nothing to compare


def test_backup_mirror_only_starts_when_needed(tmp_path, ftp_mirrors):
    data = os.urandom(1024 * 1024)
    ms = ftp_mirrors({"f.bin": data}, 3)
    urls = [m.url("f.bin") for m in ms]
    s = download(
        mirrors=urls[:2],
        backups=urls[2:],
        output=tmp_path / "f.bin",
        config=FAST,
        congestion="off",
        access_bandwidth_bps=None,
    )
    assert (tmp_path / "f.bin").read_bytes() == data
    assert len(s.mirrors) == 2 and all(m.role == "active" for m in s.mirrors)


def test_report_carries_congested_and_congested_with(canned_coordinator):
    coord = canned_coordinator(200, {})
    mirrors = [
        MirrorStats("m0", "http://a/f", bytes=10, seconds=1.0, congested_with=["m1"],
                    connections=4),
        MirrorStats(
            "m1",
            "http://b/f",
            state="congested",
            bytes=5,
            seconds=1.0,
            events=["congested"],
            congested_with=["m0"],
        ),
        MirrorStats("b0", "http://c/f", role="backup", bytes=5, seconds=1.0),
        # parked on a verdict that did not hold (its pair not reported): not congested
        MirrorStats("m2", "http://d/f", bytes=5, seconds=1.0,
                    events=["congested", "resumed"]),
    ]
    summary = DownloadSummary(
        name="f",
        path="/tmp/f",
        size=20,
        seconds=1.0,
        mode="coordinated",
        sha256=None,
        expected_sha256=None,
        sha256_verified=False,
        mirrors=mirrors,
        request_id="r1",
        congestion={"mode": "auto", "events": [], "refuted": ["m2"]},
    )
    notes: list[str] = []
    _report(coord.url, summary, notes.append)
    assert not notes
    rep = DownloadReport.model_validate(coord.reports[0])
    by = {m.mirror: m for m in rep.mirrors}
    assert by["m1"].congested and by["m1"].congested_with == ["m0"]
    assert not by["m0"].congested and by["m0"].congested_with == ["m1"]
    assert not by["b0"].congested and by["b0"].congested_with == []
    assert not by["m2"].congested and by["m2"].congested_with == []
    # (the connections its own trials kept; None for a mirror none was tried on)
    assert by["m0"].connections == 4 and by["m1"].connections is None
