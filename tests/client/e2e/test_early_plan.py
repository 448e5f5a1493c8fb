"""The entry point's early plan (pftp_client.early.EarlyPlan): for `pftp get NAME`,
the coordinator is asked and the mirrors' transfers started while the CLI loads;
download() takes the answer over instead of asking again. Real FTP mirrors
(pyftpdlib) and a real HTTP coordinator stand-in (canned answers)."""

from __future__ import annotations

import http.server
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from pftp_client import early
from pftp_client.advice import part_starts
from pftp_client.downloader import download
from pftp_client.pieces import choose_piece_size


@pytest.fixture
def clean_early(monkeypatch, tmp_path: Path):
    early.discard_all()
    monkeypatch.setenv("PFTP_CLIENT_CONFIG", str(tmp_path / "no-config.toml"))
    monkeypatch.setenv("PFTP_ACCESS_BANDWIDTH", "50M")
    monkeypatch.delenv("PFTP_COORDINATOR", raising=False)
    yield
    early.discard_all()


def _cli_download(name: str, coordinator: str, target: Path) -> Any:
    """download() as the CLI calls it without a config file (cli.get)."""
    return download(name, coordinator=[coordinator], output=target, timeout=30.0,
                    access_bandwidth_setting=None, congestion="off")


def test_the_plan_asked_early_is_used_once_and_its_transfers_taken_over(
    tmp_path: Path, ftp_mirrors, canned_coordinator, clean_early, equal_plan
) -> None:
    data = os.urandom(3 * 1024 * 1024 + 7)
    m = ftp_mirrors({"f.bin": data}, 3)
    coord = canned_coordinator(200, equal_plan(data, [x.url("f.bin") for x in m]))
    early.start(["get", "f.bin", "--coordinator", coord.url, "-o", str(tmp_path / "f.bin")])
    plan = early._plan
    assert plan is not None
    plan._done.wait(30)
    assert plan.answer is not None and plan.answer[1] == 200
    heads = [p.result()[1] for p in plan.probes]
    assert sorted(f._head.offset for f in heads) == [a["offset"] for a in
                                                     equal_plan(data, ["x"] * 3)["assignments"]]
    s = _cli_download("f.bin", coord.url, tmp_path / "f.bin")
    assert s.sha256_verified and (tmp_path / "f.bin").read_bytes() == data
    assert s.mode == "coordinated" and s.request_id == "req-1"
    # one request, the one download() would have sent; one report
    assert coord.requests == [
        {"file": "f.bin", "access_bandwidth_bps": 50_000_000,
         "protocols": ["ftp", "http", "https"]}
    ]
    assert len(coord.reports) == 1
    assert all(f.head_history is not None for f in heads)  # each transfer was taken over
    # nothing fetched twice but the end's race (a starved connection's last piece
    # raced by the other mirror: CI, 16 KiB), within the 1 % bound
    dups = [e for e in s.events if e.kind == "duplicate"]
    assert all(e.detail.startswith("races ") for e in dups), dups
    assert s.duplicate_bytes <= len(data) // 100


def test_a_refused_early_plan_is_reported_as_download_would(
    tmp_path: Path, canned_coordinator, clean_early
) -> None:
    """The coordinator's 404 for an unknown file reaches the caller as
    CoordinatorRefused, from the early answer (no second request)."""
    from pftp_client.coordinator import CoordinatorRefused

    coord = canned_coordinator(404, {"detail": "no such file"})
    early.start(["get", "nope.bin", "--coordinator", coord.url])
    with pytest.raises(CoordinatorRefused, match="no such file"):
        _cli_download("nope.bin", coord.url, tmp_path / "nope.bin")
    assert len(coord.requests) == 1


def test_a_config_file_or_another_request_leaves_the_plan_to_download(
    tmp_path: Path, ftp_mirrors, canned_coordinator, clean_early, monkeypatch, equal_plan
) -> None:
    """With a config file (it may name coordinators and timeouts) nothing is asked
    early; a download() asking with other arguments does not take an early plan
    (and the coordinator then hears the question twice: only a library caller
    mixing `early.start` with other arguments gets there)."""
    data = os.urandom(100_000)
    m = ftp_mirrors({"f.bin": data}, 1)
    coord = canned_coordinator(200, equal_plan(data, [m[0].url("f.bin")]))
    config = tmp_path / "client.toml"
    config.write_text("timeout = 20\n")
    monkeypatch.setenv("PFTP_CLIENT_CONFIG", str(config))
    early.start(["get", "f.bin", "--coordinator", coord.url])
    plan = early._plan
    assert plan is not None
    plan._done.wait(30)
    assert plan.key is None and plan.answer is None and not coord.requests
    early.discard_all()

    monkeypatch.setenv("PFTP_CLIENT_CONFIG", str(tmp_path / "none.toml"))
    early.start(["get", "f.bin", "--coordinator", coord.url])
    early._plan._done.wait(30)
    s = download("f.bin", coordinator=[coord.url], output=tmp_path / "f.bin", timeout=20.0,
                 access_bandwidth_setting=None, congestion="off")
    assert s.sha256_verified and len(coord.requests) == 2


def test_the_early_request_is_the_one_download_sends() -> None:
    """EarlyPlan writes the request body and path itself (no pftp_wire, no
    settings on its way): they must stay download()'s."""
    from pftp_client.settings import ClientSettings
    from pftp_wire.constants import API_PREFIX
    from pftp_wire.plain import AssignmentRequest, dump

    assert early._API_PREFIX == API_PREFIX
    assert ClientSettings().timeout == early._DEFAULT_TIMEOUT_S
    for name, bw in (("dir/f.iso", 50_000_000), ("f", None), ("é.bin", 1)):
        expected = dump(AssignmentRequest(file=name, access_bandwidth_bps=bw,
                                          protocols=list(early.CLIENT_PROTOCOLS)))
        assert early.assignment_payload(name, bw) == expected


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_the_light_http_post(chunked: bool) -> None:
    """early._http_post against the standard library's HTTP server: status, body,
    Content-Length or chunked."""
    seen: list[tuple[str, bytes, str]] = []
    REPLY = b'{"ok": true, "pad": "' + os.urandom(35_000).hex().encode() + b'"}'

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            seen.append((self.path, body, self.headers["Content-Type"]))
            out = REPLY
            self.send_response(201)
            if chunked:
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for i in range(0, len(out), 30_000):
                    part = out[i : i + 30_000]
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                self.wfile.write(b"0\r\n\r\n")
            else:
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)
            self.close_connection = True

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/base/api/v1/assignments"
        status, content = early._http_post(url, b'{"file":"f"}', 10.0)
    finally:
        server.shutdown()
        server.server_close()
    assert status == 201 and content == REPLY
    assert seen == [("/base/api/v1/assignments", b'{"file":"f"}', "application/json")]
    with pytest.raises(ValueError, match="plain http"):
        early._http_post("https://127.0.0.1/x", b"{}", 1.0)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["get", "f.iso"], ("f.iso", [], [], None)),
        (["get", "f.iso", "--coordinator", "http://c:8000", "-o", "x"],
         ("f.iso", [], [], "http://c:8000")),
        (["get", "--coordinator=http://c", "f.iso", "-m", "ftp://m/f"],
         ("f.iso", ["ftp://m/f"], [], "http://c")),
        (["get", "a", "b"], None),  # two NAMEs: argparse's error
        (["get", "f.iso", "--bogus"], None),
    ],
)
def test_parse_get(argv: list[str], expected: Any) -> None:
    assert early.parse_get(argv) == expected


def test_an_unreachable_coordinator_delays_nothing_and_download_asks_again(
    tmp_path: Path, clean_early, closed_port_url: str
) -> None:
    """start() waits for the early request only until it is out (or failed), at
    most _PLAN_HEAD_START_S; nothing answered, download() makes the other two of
    the three attempts and says the coordinator is unavailable."""
    import time

    from pftp_client.coordinator import CoordinatorUnavailable

    t0 = time.monotonic()
    early.start(["get", "f.bin", "--coordinator", closed_port_url])
    assert time.monotonic() - t0 < 5.0  # (bounded: 0.05 s plus a loaded machine)
    plan = early._plan
    plan._done.wait(30)
    assert plan.answer is None and isinstance(plan.error, OSError)
    assert plan.failures and "ConnectionRefusedError" in plan.failures[0]
    with pytest.raises(CoordinatorUnavailable, match="after 3 attempts"):
        _cli_download("f.bin", closed_port_url, tmp_path / "f.bin")


def test_a_busy_coordinator_gets_three_attempts_in_all(
    tmp_path: Path, canned_coordinator, clean_early
) -> None:
    """A 503 to the early request is the first of the three attempts (paper 001),
    not a fourth."""
    from pftp_client.coordinator import CoordinatorUnavailable

    coord = canned_coordinator(503, {"detail": "busy"})
    early.start(["get", "f.bin", "--coordinator", coord.url])
    with pytest.raises(CoordinatorUnavailable, match="after 3 attempts"):
        _cli_download("f.bin", coord.url, tmp_path / "f.bin")
    assert len(coord.requests) == 3


def test_advised_connections_start_early_too_each_taken_by_its_own(
    tmp_path: Path, ftp_mirrors, canned_coordinator, clean_early, equal_plan
) -> None:
    """The coordinator advises 3 connections to m0: the early plan starts their
    transfers where the engine will cut m0's portion (advice.part_starts), and each
    connection takes over the one begun at its own offset."""
    data = os.urandom(6 * 1024 * 1024 + 5)
    m = ftp_mirrors({"f.bin": data}, 2)
    answer = equal_plan(data, [x.url("f.bin") for x in m])
    answer["assignments"][0]["connections"] = 3
    answer["assignments"][0]["expected_bps"] = 3e7  # (below the 50M access: all 3)
    coord = canned_coordinator(200, answer)
    early.start(["get", "f.bin", "--coordinator", coord.url, "-o", str(tmp_path / "f.bin")])
    plan = early._plan
    assert plan is not None
    plan._done.wait(30)
    heads = [p.result()[1] for p in plan.probes]
    # m0's 3 MiB in 3 parts cut at pieces (128 KiB for 6 MiB over 2 mirrors)
    m0_len, m1_at = answer["assignments"][0]["length"], answer["assignments"][1]["offset"]
    starts = part_starts(0, m0_len, 3, choose_piece_size(len(data), 2), len(data))
    assert len(starts) == 3
    assert sorted(f._head.offset for f in heads) == [*starts, m1_at]
    s = _cli_download("f.bin", coord.url, tmp_path / "f.bin")
    assert s.sha256_verified and (tmp_path / "f.bin").read_bytes() == data
    advised = [e for e in s.events if e.kind == "stream" and "coordinator advised" in e.detail]
    assert len(advised) == 2
    assert all(f.head_history is not None for f in heads)  # each transfer was taken over
    # nothing fetched twice but the end's race (a starved connection's last piece
    # raced by the other mirror: CI, 16 KiB), within the 1 % bound
    dups = [e for e in s.events if e.kind == "duplicate"]
    assert all(e.detail.startswith("races ") for e in dups), dups
    assert s.duplicate_bytes <= len(data) // 100
