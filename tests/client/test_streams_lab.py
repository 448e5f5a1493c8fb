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

import pytest
from pftp_client.streams import gained, loss_share, merge_stream_stats
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


def _download(lab: Lab, tmp_path: Path, digest: str) -> dict:
    out = tmp_path / "out" / "data.bin"
    out.parent.mkdir()
    out.parent.chmod(0o777)
    argv = [sys.executable, "-m", "pftp_client.cli", "get",
            "--mirror", lab.mirror(0).ftp_url("data.bin"),
            "--no-discovery", "--sha256", digest, "-o", str(out), "--quiet", "--json"]
    env = {**os.environ, "PFTP_ACCESS_BANDWIDTH": "1G", "XDG_CACHE_HOME": str(out.parent)}
    proc = lab.popen_in("client", argv, env=env, stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE, text=True)
    stdout, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 0, stderr[-2000:]
    summary = json.loads(stdout)
    assert summary["sha256_verified"] and out.stat().st_size == SIZE
    return summary


def _run_lossy(tmp_path: Path, cc: str) -> dict:
    """The download from one 20 Mbit/s mirror 30 ms away, 1 % loss, its TCP ``cc``."""
    src = tmp_path / "data.bin"
    digest = make_file(src, SIZE, seed=5)
    spec = MirrorSpec(rate_bps=20 * MBIT, rtt_ms=30, loss=0.01, name="lossy")
    with Lab([spec], files={"data.bin": src}) as lab:
        lab.run_in(lab.mirror(0), ["sysctl", "-qw", f"net.ipv4.tcp_congestion_control={cc}"],
                   check=True)
        return _download(lab, tmp_path, digest)


def _stream_events(summary: dict) -> tuple[list[str], list[str]]:
    details = [e["detail"] for e in summary["events"] if e["kind"] == "stream"]
    started = [d for d in details if d.startswith("another connection")]
    ended = [d for d in details if d.startswith("no gain")]
    return started, ended


@pytest.mark.lab
def test_a_loss_limited_cubic_mirror_gets_more_connections(
    tmp_path: Path, cubic_allowed: None
) -> None:
    summary = _run_lossy(tmp_path, "cubic")
    started, ended = _stream_events(summary)
    print(summary["seconds"], started, ended)
    # one mirror in the summary and the report: its connections' bytes together
    assert len(summary["mirrors"]) == 1
    assert summary["mirrors"][0]["bytes"] == SIZE
    assert started, "no extra connection to a mirror carrying a fifth of its path"
    # one at least paid (a second trial follows only a kept one; CUBIC at 1 % loss
    # carries about twice as much over two connections as over one)
    assert len(started) > len(ended)


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
