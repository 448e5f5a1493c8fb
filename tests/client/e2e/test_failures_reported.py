"""What an audit of the client from the outside found (session 17): a mirror that
keeps dropping the connection while making progress, answers for a file of another
size, and failed coordinated downloads that told the coordinator nothing."""

from __future__ import annotations

import errno
import hashlib
import http.server
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pftp_client import EngineConfig, NoMirrorCouldServe, VerificationFailed, download
from pftp_client.part_file import PartFile, part_path
from pftp_wire import DownloadReport

FAST = EngineConfig(
    timeout=10.0, stall_timeout=5.0, backoff_s=(0.05, 0.1, 0.2), monitor_interval_s=0.5
)


class _Scripted(http.server.BaseHTTPRequestHandler):
    """HEAD and GET both answered by ``_serve``; quiet."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_HEAD(self) -> None:
        self._serve(body=False)

    def do_GET(self) -> None:
        self._serve(body=True)

    def _serve(self, body: bool) -> None:
        raise NotImplementedError


class _DropsEvery(_Scripted):
    """Serves Range requests but cuts every response after ``limit`` body bytes
    (a flaky path or proxy)."""

    limit = 256 * 1024
    data = b""

    def _serve(self, body: bool) -> None:
        size, start = len(self.data), 0
        m = re.fullmatch(r"bytes=(\d+)-\d*", self.headers.get("Range", ""))
        if m:
            start = int(m.group(1))
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{size - 1}/{size}")
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(size - start))
        self.end_headers()
        if body:
            self.wfile.write(self.data[start : start + self.limit])
            self.close_connection = True


def test_a_lone_mirror_that_keeps_dropping_but_makes_progress_finishes(
    tmp_path: Path, http_servers: Any
) -> None:
    # Eight cuts: more than the engine allows failures that fetch nothing. Each cut
    # came after progress, so it is a flaky path (wget and curl --retry go on),
    # not a mirror that cannot serve.
    data = os.urandom(8 * _DropsEvery.limit + 12345)
    base = http_servers(type("Drops", (_DropsEvery,), {"data": data}))
    target = tmp_path / "f.bin"
    s = download(mirrors=[f"{base}/f.bin"], output=target, config=FAST,
                 sha256=hashlib.sha256(data).hexdigest())
    assert target.read_bytes() == data and s.sha256_verified
    assert s.mirrors[0].failures >= 8


class _ErrorPage(_Scripted):
    """Answers every request with a small HTML page and 200, whatever was asked."""

    def _serve(self, body: bool) -> None:
        page = b"<html><body>mirror under maintenance</body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(page)))
        self.end_headers()
        if body:
            self.wfile.write(page)


def test_an_error_page_of_another_size_is_refused_before_a_byte_is_written(
    tmp_path: Path, http_servers: Any, http_mirror: Any, canned_coordinator: Any,
    equal_plan: Any,
) -> None:
    data = os.urandom(1_500_000)
    root = tmp_path / "www"
    root.mkdir()
    (root / "f.bin").write_bytes(data)
    bad = http_servers(_ErrorPage)
    good = http_mirror(root)
    coord = canned_coordinator(200, equal_plan(data, [f"{bad}/f.bin", f"{good}f.bin"]))
    target = tmp_path / "f.bin"
    s = download("f.bin", coordinator=coord.url, output=target, config=FAST,
                 access_bandwidth_bps=None)
    assert target.read_bytes() == data
    stats = {m.name: m for m in s.mirrors}
    # Refused on the size the plan gave: no byte of the page was written, so no
    # whole-file repair was needed either.
    assert stats["m0"].bytes == 0 and "failed" in stats["m0"].events
    assert s.refetched_bytes == 0
    assert any("expected 1500000" in e.detail for e in s.events if e.mirror == "m0")


def test_a_download_that_fails_verification_is_reported(
    tmp_path: Path, ftp_mirrors: Any, canned_coordinator: Any, equal_plan: Any
) -> None:
    data = os.urandom(600_000)
    m = ftp_mirrors({"f.bin": data}, 2)
    coord = canned_coordinator(200, equal_plan(data, [x.url("f.bin") for x in m], sha256="0" * 64,
                                                request_id="req-9"))
    with pytest.raises(VerificationFailed):
        download("f.bin", coordinator=coord.url, output=tmp_path / "f.bin", config=FAST,
                 access_bandwidth_bps=None)
    assert not (tmp_path / "f.bin").exists()
    assert len(coord.reports) == 1
    report = DownloadReport.model_validate(coord.reports[0])
    assert not report.sha256_ok and report.request_id == "req-9"
    assert sum(r.bytes for r in report.mirrors) == len(data)


def test_a_download_no_mirror_could_serve_is_reported(
    tmp_path: Path, ftp_mirrors: Any, canned_coordinator: Any, closed_port_url: str,
    equal_plan: Any,
) -> None:
    data = os.urandom(300_000)
    dead = closed_port_url.replace("http", "ftp") + "/f"
    coord = canned_coordinator(200, equal_plan(data, [dead]))
    with pytest.raises(NoMirrorCouldServe):
        download("f.bin", coordinator=coord.url, output=tmp_path / "f.bin", config=FAST,
                 access_bandwidth_bps=None)
    assert len(coord.reports) == 1
    report = DownloadReport.model_validate(coord.reports[0])
    assert not report.sha256_ok
    assert [(r.mirror, r.bytes) for r in report.mirrors] == [("m0", 0)]
    assert report.mirrors[0].failures >= 1


def test_a_part_file_beyond_off_t_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(OSError) as info:
        PartFile(part_path(tmp_path / "f"), 2**70, reuse=False)
    assert info.value.errno == errno.EFBIG
    assert "beyond the largest possible file" in str(info.value)


class _BigHeadNoBody(http.server.BaseHTTPRequestHandler):
    """HEAD claims a file twice the real size; every GET fails with 503."""

    protocol_version = "HTTP/1.1"
    size = 0

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_HEAD(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(2 * self.size))
        self.end_headers()

    def do_GET(self) -> None:
        self.send_response(503)
        self.send_header("Content-Length", "0")
        self.end_headers()


def test_when_the_size_that_won_cannot_be_served_the_other_size_is_tried(
    tmp_path: Path, http_servers: Any, http_mirror: Any
) -> None:
    # One mirror against one: the larger size wins the tie. Its mirror then serves
    # nothing; with a SHA-256 to check, the other size's mirror is asked.
    data = os.urandom(400_000)
    root = tmp_path / "www"
    root.mkdir()
    (root / "f.bin").write_bytes(data)
    liar = http_servers(type("Big", (_BigHeadNoBody,), {"size": len(data)}))
    good = http_mirror(root)
    target = tmp_path / "f.bin"
    s = download(mirrors=[f"{liar}/f.bin", f"{good}f.bin"], output=target, config=FAST,
                 sha256=hashlib.sha256(data).hexdigest())
    assert target.read_bytes() == data and s.sha256_verified
    # Without a hash too: one against one, the larger size was only a guess
    s = download(mirrors=[f"{liar}/f.bin", f"{good}f.bin"], output=tmp_path / "g.bin",
                 config=FAST)
    assert (tmp_path / "g.bin").read_bytes() == data and not s.sha256_verified
    assert any("which size is right is not known" in n for n in s.notes), s.notes


def test_an_untrusted_https_mirror_is_refused_at_once_with_a_hint(
    tmp_path: Path, start_nginx: Any
) -> None:
    """The real entry point (its head start asks before httpx loads): a self-signed
    certificate is not asked again a second later, and the message says how to
    trust a private CA; with SSL_CERT_FILE the same mirror serves."""
    server = start_nginx(tls=True)
    data = os.urandom(300_000)
    server.put("f.bin", data)
    out = tmp_path / "out.bin"
    argv = ["get", "--mirror", server.url("f.bin"), "--sha256", hashlib.sha256(data).hexdigest(),
            "-o", str(out), "--quiet", "--json", "--no-discovery"]
    env = dict(os.environ, PFTP_CLIENT_CONFIG=str(tmp_path / "none.toml"))
    env.pop("PFTP_COORDINATOR", None)
    env.pop("SSL_CERT_FILE", None)
    pftp = Path(sys.executable).with_name("pftp")
    proc = subprocess.run([str(pftp), *argv], capture_output=True, text=True, timeout=120,
                          env=env)
    assert proc.returncode == 4, proc.stderr[-2000:]
    assert "not trusted" in proc.stderr and "SSL_CERT_FILE" in proc.stderr
    assert "asking again" not in proc.stderr
    assert not out.exists()
    env["SSL_CERT_FILE"] = str(server.ca_file)
    proc = subprocess.run([str(pftp), *argv], capture_output=True, text=True, timeout=120,
                          env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout)["sha256_verified"] is True and out.read_bytes() == data


def test_a_mirror_that_never_sends_a_byte_does_not_hold_the_last_piece(
    tmp_path: Path, ftp_mirrors: Any, silent_server: int
) -> None:
    """The real entry point, a mirror that accepts and never answers first (the
    even start gives it the first block) beside a slow good one (3 MB at 1 MB/s).
    The good mirror took everything but the mute one's last piece, then waited for
    its reply timeout, twice (~60 s). Now a range with no first byte past the stall
    timeout counts as rate 0, and the idle flow races it."""
    import time

    data = os.urandom(3_000_017)
    good = ftp_mirrors({"f.bin": data}, throttle={0: 1_000_000})[0].url("f.bin")
    out = tmp_path / "out.bin"
    env = dict(os.environ, PFTP_CLIENT_CONFIG=str(tmp_path / "none.toml"))
    env.pop("PFTP_COORDINATOR", None)
    pftp = Path(sys.executable).with_name("pftp")
    started = time.monotonic()
    proc = subprocess.run(
        [str(pftp), "get", "--mirror", f"ftp://127.0.0.1:{silent_server}/f.bin", "--mirror", good,
         "--sha256", hashlib.sha256(data).hexdigest(), "--stall-timeout", "3", "-o", str(out),
         "--quiet", "--json", "--no-discovery"],
        capture_output=True, text=True, timeout=180, env=env,
    )
    took = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert out.read_bytes() == data
    # 3 s of transfer; the mute mirror's reply timeout alone is 30 s
    assert took < 25, (took, json.loads(proc.stdout)["events"])


def test_a_mirror_whose_size_is_too_small_never_gives_a_cut_file(
    tmp_path: Path, start_pyftpd: Any
) -> None:
    """SIZE 1000 bytes short (a 32-bit SIZE of a file past 4 GiB, a file still
    growing): the bytes past it are caught before the block that ends at the
    reported size is handed over, and the file is not put in place as complete."""
    from pyftpdlib.handlers import FTPHandler

    class ShortSize(FTPHandler):
        def ftp_SIZE(self, path: str) -> str:
            self.respond(f"213 {os.path.getsize(path) - 1000}")
            return path

    data = os.urandom(300_001)
    server = start_pyftpd(handler=ShortSize)
    server.put("f.bin", data)
    target = tmp_path / "f.bin"
    with pytest.raises(NoMirrorCouldServe, match="more than the 299001 bytes its SIZE reported"):
        download(mirrors=[server.url("f.bin")], output=target, config=FAST)
    assert not target.exists()


def test_passwords_stay_out_of_the_summary_and_messages(tmp_path: Path, start_pyftpd: Any) -> None:
    data = os.urandom(50_000)
    server = start_pyftpd(users={"bob": "s3cret"}, anonymous=False)
    server.put("f.bin", data)
    host = server.url("f.bin").split("://", 1)[1]
    good = f"ftp://bob:s3cret@{host}"
    bad = f"ftp://bob:wr0ng@{host}"
    s = download(mirrors=[good, bad], output=tmp_path / "f.bin", config=FAST)
    assert (tmp_path / "f.bin").read_bytes() == data
    text = json.dumps(s.to_json_dict())
    assert "s3cret" not in text and "wr0ng" not in text
    assert "bob:***@" in text


def test_a_download_from_this_hosts_loopback_is_not_taken_for_the_access_link(
    tmp_path: Path, ftp_mirrors: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The history of achieved rates stands in for the access link's bandwidth in
    later requests; bytes from 127.0.0.1 never crossed that link."""
    from pftp_client.access_bandwidth import load_state, state_path

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    data = os.urandom(3 * 1024 * 1024)
    m = ftp_mirrors({"f.bin": data}, throttle={0: 256 * 1024})[0]  # long enough to count
    s = download(mirrors=[m.url("f.bin")], output=tmp_path / "f.bin", config=FAST,
                 sha256=hashlib.sha256(data).hexdigest(), access_bandwidth_bps=None)
    assert s.sha256_verified and s.seconds >= 0.5
    assert load_state(state_path())["history"] == []
