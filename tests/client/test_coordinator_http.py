"""The client's two coordinator calls (coordinator.py) over real HTTP(S) servers on
loopback: retries and back-off, 4xx/5xx handling, proxies ignored, TLS verified,
and no httpx/pydantic on the way (start-up cost, notes/client-coordinated-path.md)."""

from __future__ import annotations

import http.server
import json
import ssl
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pftp_client.coordinator import (
    CoordinatorAnswerError,
    CoordinatorRefused,
    CoordinatorUnavailable,
    _tls_context,
    request_plan,
    send_report,
)
from pftp_wire import models
from pftp_wire.plain import AssignmentRequest, DownloadReport, MirrorReport

LOOPBACK = "127.0.0.1"
ANSWER = {
    "request_id": "req-9",
    "file": {"name": "f.bin", "size": 10, "sha256": "a" * 64},
    "assignments": [
        {"mirror": "m0", "url": "ftp://127.0.0.1:21/f", "offset": 0, "length": 6, "suitability": 1},
        {"mirror": "m1", "url": "http://127.0.0.1/f", "offset": 6, "length": 4, "suitability": 0.5},
    ],
    "backups": [{"mirror": "b0", "url": "ftp://127.0.0.1:2121/f", "suitability": 0.1}],
    "mode": "ranked",
}


@dataclass
class Scripted:
    """An HTTP(S) server answering POSTs from a script of (status, body); the last
    entry repeats. Records (path, headers, body) of every request."""

    url: str
    script: list[tuple[int, bytes]]
    seen: list[tuple[str, dict[str, str], bytes]] = field(default_factory=list)


@pytest.fixture
def scripted(http_servers: Callable[..., str]) -> Callable[..., Scripted]:
    def start(script: list[tuple[int, Any]], tls: ssl.SSLContext | None = None) -> Scripted:
        raw = [(s, b if isinstance(b, bytes) else json.dumps(b).encode()) for s, b in script]
        rec = Scripted("", raw)

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                rec.seen.append((self.path, dict(self.headers), body))
                status, out = rec.script[min(len(rec.seen), len(rec.script)) - 1]
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

        rec.url = http_servers(Handler, tls)
        return rec

    return start


def test_request_body_and_plan(scripted) -> None:
    coord = scripted([(200, ANSWER)])
    base, plan = request_plan(
        [coord.url], AssignmentRequest(file="f.bin", access_bandwidth_bps=50_000_000)
    )
    assert base == coord.url and plan.request_id == "req-9"
    assert [(p.mirror.name, p.start, p.end) for p in plan.portions] == [("m0", 0, 6), ("m1", 6, 10)]
    assert [b.name for b in plan.backups] == ["b0"]
    path, headers, body = coord.seen[0]
    assert path == "/api/v1/assignments"
    assert headers["Content-Type"] == "application/json"
    # the body the coordinator's model reads, byte for byte as httpx sent it before
    assert body == b'{"file":"f.bin","access_bandwidth_bps":50000000,"protocols":["ftp","http"]}'
    assert models.AssignmentRequest.model_validate_json(body).file == "f.bin"


def test_5xx_and_dead_coordinators_are_retried_with_back_off(scripted, closed_port_url) -> None:
    coord = scripted([(503, {"detail": "busy"}), (500, b"oops"), (200, ANSWER)])
    sleeps: list[float] = []
    base, _ = request_plan(
        [closed_port_url, coord.url], AssignmentRequest(file="f"), sleep=sleeps.append
    )
    assert base == coord.url and len(coord.seen) == 3
    assert sleeps == [0.5, 1.0, 0.5, 1.0]  # 3 attempts per coordinator (paper 001)


def test_unavailable_after_three_attempts_says_why(scripted, closed_port_url) -> None:
    coord = scripted([(502, {"detail": "bad gateway"})])
    with pytest.raises(CoordinatorUnavailable, match="after 3 attempts") as err:
        request_plan([coord.url], AssignmentRequest(file="f"), sleep=lambda s: None)
    assert "HTTP 502 bad gateway" in str(err.value) and len(coord.seen) == 3
    with pytest.raises(CoordinatorUnavailable, match="ConnectionRefusedError"):
        request_plan([closed_port_url], AssignmentRequest(file="f"), sleep=lambda s: None)
    with pytest.raises(CoordinatorUnavailable, match="not an http"):
        request_plan(["ftp://127.0.0.1/"], AssignmentRequest(file="f"), sleep=lambda s: None)


def test_each_failed_attempt_is_told_before_the_next(scripted, closed_port_url) -> None:
    """A coordinator that hangs costs a timeout per attempt: the user hears of each."""
    heard: list[str] = []
    with pytest.raises(CoordinatorUnavailable):
        request_plan([closed_port_url], AssignmentRequest(file="f"), sleep=lambda s: None,
                     on_retry=heard.append, earlier=["early: TimeoutError: timed out"])
    assert len(heard) == 2
    assert heard[0].startswith("coordinator: early: TimeoutError") and "attempt 2 of 3" in heard[0]
    assert "ConnectionRefusedError" in heard[1] and "attempt 3 of 3" in heard[1]


def test_an_attempt_made_elsewhere_counts_as_the_first(scripted) -> None:
    """``earlier`` (the entry point's failed attempt, early.EarlyPlan): two more
    attempts, the first after the first back-off, and its error is in the message."""
    coord = scripted([(503, {"detail": "busy"})])
    sleeps: list[float] = []
    with pytest.raises(CoordinatorUnavailable, match="after 3 attempts") as err:
        request_plan([coord.url], AssignmentRequest(file="f"), sleep=sleeps.append,
                     earlier=["early: ConnectionResetError"])
    assert len(coord.seen) == 2 and sleeps == [0.5, 1.0]
    assert "early: ConnectionResetError" in str(err.value)
    coord = scripted([(200, ANSWER)])
    base, _ = request_plan([coord.url], AssignmentRequest(file="f"), sleep=sleeps.append,
                           earlier=["e1", "e2", "e3"])  # (at least one more, always)
    assert base == coord.url and len(coord.seen) == 1


def test_4xx_is_refused_with_the_coordinators_detail(scripted) -> None:
    coord = scripted([(404, {"detail": "unknown file 'f'"})])
    with pytest.raises(CoordinatorRefused, match="HTTP 404 unknown file 'f'"):
        request_plan([coord.url], AssignmentRequest(file="f"))
    assert len(coord.seen) == 1  # not retried


def test_malformed_answer(scripted) -> None:
    bad = json.loads(json.dumps(ANSWER))
    del bad["file"]["size"]
    with pytest.raises(
        CoordinatorAnswerError, match=r"malformed answer .*file\.size: Field required"
    ):
        request_plan([scripted([(200, bad)]).url], AssignmentRequest(file="f"))


def test_bad_request_fails_before_any_io(scripted) -> None:
    coord = scripted([(200, ANSWER)])
    with pytest.raises(ValueError, match="file: String should have at least 1 character"):
        request_plan([coord.url], AssignmentRequest(file=""))
    assert coord.seen == []


def test_report_is_sent_and_acknowledged(scripted) -> None:
    coord = scripted([(503, b""), (200, {"accepted": True, "download_id": 4})])
    report = DownloadReport(
        request_id="req-9",
        file="f.bin",
        size=10,
        seconds=0.5,
        sha256_ok=True,
        mirrors=[MirrorReport(mirror="m0", bytes=10, seconds=0.5, throughput_bps=160)],
    )
    ack = send_report(coord.url, report, sleep=lambda s: None)
    assert ack.accepted and ack.download_id == 4
    path, _, body = coord.seen[-1]
    assert path == "/api/v1/reports"
    assert models.DownloadReport.model_validate_json(body).mirrors[0].bytes == 10


def test_proxy_variables_are_ignored(scripted, closed_port_url, monkeypatch) -> None:
    for var in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY"):
        monkeypatch.setenv(var, closed_port_url)
    coord = scripted([(200, ANSWER)])
    assert request_plan([coord.url], AssignmentRequest(file="f"))[0] == coord.url


def _self_signed(tmp_path: Path) -> tuple[Path, Path]:
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=localhost",
         "-addext", f"subjectAltName=IP:{LOOPBACK}"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return key, cert


def test_https_checks_the_certificate(scripted, tmp_path, monkeypatch) -> None:
    key, cert = _self_signed(tmp_path)
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(cert, key)
    coord = scripted([(200, ANSWER)], tls=server_ctx)
    _tls_context.cache_clear()
    try:
        with pytest.raises(CoordinatorUnavailable, match="CERTIFICATE_VERIFY_FAILED"):
            request_plan([coord.url], AssignmentRequest(file="f"), sleep=lambda s: None)
        assert coord.seen == []
        # trusted through the usual OpenSSL variable: the same server now answers
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))
        _tls_context.cache_clear()
        base, plan = request_plan([coord.url], AssignmentRequest(file="f"))
        assert base == coord.url and plan.request_id == "req-9"
    finally:
        _tls_context.cache_clear()


def test_coordinated_calls_load_neither_httpx_nor_pydantic(scripted) -> None:
    coord = scripted([(200, ANSWER), (200, {"accepted": True})])
    code = f"""
import sys
import pftp_client.cli
from pftp_client.coordinator import request_plan, send_report
from pftp_wire.plain import AssignmentRequest, DownloadReport
base, plan = request_plan([{coord.url!r}], AssignmentRequest(file="f.bin"))
send_report(base, DownloadReport(file="f.bin", size=10, seconds=1.0, sha256_ok=True, mirrors=[]))
print(sorted(m for m in ("httpx", "pydantic", "pydantic_core") if m in sys.modules))
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "[]"
    assert [p for p, _, _ in coord.seen] == ["/api/v1/assignments", "/api/v1/reports"]
