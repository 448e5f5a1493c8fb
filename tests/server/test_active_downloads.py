"""The probes leave a mirror's throughput unread while downloads this coordinator
assigned to it run (active_downloads.py): the registry alone, then a real app, a
real FTP mirror and a real probe round."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from coordinator_testkit import running_app, wait_until
from pftp_coordinator.active_downloads import ActiveDownloads, expected_seconds
from pftp_coordinator.config import Settings
from pftp_coordinator.db import session_scope
from pftp_coordinator.models import PathProbe
from pftp_coordinator.probes.service import probe_mirror
from probe_db import add_mirror, tree_root
from probe_servers import ftp_server, make_tree
from sqlalchemy import select

SIZE = 2 * 1024 * 1024


class _Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_a_download_counts_until_its_report_or_its_time() -> None:
    clock = _Clock()
    active = ActiveDownloads(clock)
    active.begin("r1", ["a", "b"], for_s=30)
    active.begin("r2", ["b"], for_s=60)
    assert (active.busy("a"), active.busy("b"), active.busy("c")) == (1, 2, 0)
    active.end("r1")  # its report
    assert (active.busy("a"), active.busy("b")) == (0, 1)
    active.end("r1")  # twice, or another replica's id: nothing happens
    active.end(None)
    clock.t += 61  # r2 never reported: it stops counting at its time
    assert active.busy("b") == 0
    # waiting for an idle mirror: at once when idle, bounded when not
    assert active.wait_idle("b", timeout_s=5) is None
    active.begin("r3", ["b"], for_s=30)
    assert "1 download(s)" in (active.wait_idle("b", timeout_s=0) or "")


def test_a_mirror_is_idle_for_a_probe_once_quiet_for_a_while() -> None:
    # downloads that follow one another leave the mirror idle for a moment only
    clock = _Clock()
    active = ActiveDownloads(clock)
    assert active.wait_idle("m", timeout_s=0, quiet_s=10) is None  # never used
    active.begin("r1", ["m"], for_s=30)
    clock.t += 5
    active.end("r1")
    assert active.busy("m") == 0
    assert "ended 0 s ago" in (active.wait_idle("m", timeout_s=0, quiet_s=10) or "")
    clock.t += 9
    assert active.wait_idle("m", timeout_s=0, quiet_s=10) is not None
    clock.t += 1.5
    assert active.wait_idle("m", timeout_s=0, quiet_s=10) is None
    # what the probe compares around its read
    before = active.begun("m")
    active.begin("r2", ["m", "n"], for_s=30)
    assert active.begun("m") == before + 1 and active.begun("n") == 1


def test_waiting_for_a_mirror_ends_when_its_report_comes() -> None:
    active = ActiveDownloads()
    active.begin("r1", ["m"], for_s=60)
    threading.Timer(0.2, active.end, args=("r1",)).start()
    t0 = time.monotonic()
    assert active.wait_idle("m", timeout_s=10, poll_s=5) is None
    assert time.monotonic() - t0 < 2  # woken by the report, not by the poll
    assert active.wait_idle("m", timeout_s=0) is None


def test_expected_seconds_from_the_assigned_rates() -> None:
    assert expected_seconds(10_000_000, [40e6, 40e6]) == 1.0
    assert expected_seconds(10_000_000, [None, 80e6, 0]) == 1.0
    assert expected_seconds(10_000_000, [None]) is None


def _probe_settings(**overrides) -> Settings:
    return Settings(
        database_url=None, probe_timeout_s=10.0, throughput_probe_bytes=256 * 1024, **overrides
    )


def _assign(client) -> dict | None:
    """An answer for big.bin, None until the app's snapshot holds its mirror."""
    r = client.post("/api/v1/assignments", json={"file": "big.bin"})
    return r.json() if r.status_code == 200 else None


def _throughput_rows(factory, mirror_id: int) -> int:
    with session_scope(factory) as s:
        return len(
            s.scalars(
                select(PathProbe).where(
                    PathProbe.mirror_id == mirror_id, PathProbe.method == "ftp-range"
                )
            ).all()
        )


def test_a_probe_does_not_read_a_mirror_its_clients_are_downloading_from(
    sqlite_url: str, tmp_path: Path
) -> None:
    root = tree_root(tmp_path, "m")
    make_tree(root, {"pub/big.bin": SIZE})
    probe_settings = _probe_settings(probe_busy_wait_s=3.0, probe_quiet_s=0.5)
    with ftp_server(root) as ftp, running_app(sqlite_url, tmp_path) as client:
        factory = client.app.state.session_factory
        active = client.app.state.active_downloads
        mid = add_mirror(factory, "busy", ftp.url, {"big.bin": ("pub/big.bin", SIZE)})

        answer = wait_until(lambda: _assign(client), timeout=20, what="an answer naming the mirror")
        assert [a["mirror"] for a in answer["assignments"]] == ["busy"]
        assert active.busy("busy") == 1
        try:
            out = probe_mirror(factory, mid, probe_settings, allow_raw=False, active=active)
            # the path was measured and the service found up, the file not read
            assert out is not None and out.ok and out.state == "up"
            assert {r["method"] for r in out.rows} == {"tcp-connect"}
            assert _throughput_rows(factory, mid) == 0
            # asked for by hand (no registry: the CLI, POST .../probe), it reads
            out = probe_mirror(factory, mid, probe_settings, allow_raw=False)
            assert out is not None and "ftp-range" in {r["method"] for r in out.rows}
        finally:
            report = {
                "request_id": answer["request_id"],
                "file": "big.bin",
                "size": SIZE,
                "seconds": 1.0,
                "sha256_ok": True,
                "mirrors": [
                    {"mirror": "busy", "bytes": SIZE, "seconds": 1.0, "throughput_bps": SIZE * 8}
                ],
            }
            assert client.post("/api/v1/reports", json=report).status_code == 200
        assert active.busy("busy") == 0
        out = probe_mirror(factory, mid, probe_settings, allow_raw=False, active=active)
        assert out is not None and out.ok
        assert "ftp-range" in {r["method"] for r in out.rows}
        assert _throughput_rows(factory, mid) == 2


def test_a_flood_that_never_reports_is_held_to_the_capacity() -> None:
    clock = _Clock()
    active = ActiveDownloads(clock, capacity=100)
    for i in range(1000):
        active.begin(f"r{i}", ["m", f"x{i % 7}"], for_s=30 + i)
    assert len(active) == 100 and active.busy("m") == 100
    # the ones due to end first went: the last 100 are held
    assert active.busy("x0") == sum(1 for i in range(900, 1000) if i % 7 == 0)
    for i in range(900, 950):
        active.end(f"r{i}")
    assert active.busy("m") == 50
    clock.t += 30 + 999 + 1  # all due
    assert active.busy("m") == 0 and len(active) == 0


def test_a_read_that_a_download_began_during_is_not_kept(
    sqlite_url: str, tmp_path: Path
) -> None:
    # the server holds each connection to 256 KiB/s: the probe's 256 KiB read takes
    # about a second, and a client is sent to the mirror 0.3 s into it
    root = tree_root(tmp_path, "m")
    make_tree(root, {"pub/big.bin": SIZE})
    probe_settings = _probe_settings(
        throughput_probe_max_bytes=256 * 1024, probe_max_connections=1, probe_quiet_s=0
    )
    with ftp_server(root, write_limit=256 * 1024) as ftp, running_app(
        sqlite_url, tmp_path
    ) as client:
        factory = client.app.state.session_factory
        active = client.app.state.active_downloads
        mid = add_mirror(factory, "shared", ftp.url, {"big.bin": ("pub/big.bin", SIZE)})

        first = wait_until(lambda: _assign(client), timeout=20, what="an answer naming the mirror")
        active.end(first["request_id"])  # (the snapshot is ready; that one is over)
        answers: list[dict | None] = []
        timer = threading.Timer(0.3, lambda: answers.append(_assign(client)))
        timer.start()
        t0 = time.monotonic()
        out = probe_mirror(factory, mid, probe_settings, allow_raw=False, active=active)
        timer.join()
        assert time.monotonic() - t0 > 0.5  # (the read was under way at 0.3 s)
        assert answers and answers[0] is not None
        assert out is not None and out.ok and out.state == "up"
        assert "ftp-range" not in {r["method"] for r in out.rows}
        assert _throughput_rows(factory, mid) == 0
