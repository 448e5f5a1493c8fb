"""Fixtures for end-to-end client tests (the engine over real servers).

- ``ftp_mirrors(data, n, ...)``: n pyftpdlib servers sharing one root, each on its
  own IOLoop and thread (pyftpdlib's default IOLoop is a process-wide singleton,
  so several servers started the usual way would race on it); per-server options:
  throttle (bytes/s), corrupt (byte ranges to flip), die_after (bytes sent, then the
  whole server is closed, as if killed mid-transfer), handler_attrs (the control
  handler's own methods, e.g. an ftp_ABOR that never answers).
- ``http_mirror(root)``: a real HTTP/1.1 server (stdlib, threaded) with Range support.
- ``canned_coordinator(status, body)``: a tiny HTTP server answering
  POST /api/v1/assignments with canned JSON and recording POST /api/v1/reports.
- ``closed_port_url``: an http URL nobody listens on.
- ``silent_server``: a TCP port that accepts connections and never says a word.
- ``equal_plan(data, urls, sha256=None)``: a coordinator's answer with equal portions.
Everything is stopped at teardown, also when the test fails.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

LOOPBACK = "127.0.0.1"


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class FtpMirror:
    port: int
    root: Path
    stop: Callable[[], None]
    sent: list[int] = field(default_factory=lambda: [0])

    def url(self, name: str) -> str:
        return f"ftp://{LOOPBACK}:{self.port}/{name}"


class _Loop:
    def __init__(self, server: Any, ioloop: Any) -> None:
        self.server = server
        self.ioloop = ioloop
        self.halt = threading.Event()
        self.killed = False
        self.thread = threading.Thread(target=self._run, name="e2e-pyftpd", daemon=True)

    def _run(self) -> None:
        try:
            while not self.halt.is_set():
                self.server.serve_forever(timeout=0.05, blocking=False)
        finally:
            if not self.killed:
                self.server.close_all()

    def kill(self) -> None:
        """From inside the server's own thread: drop everything now."""
        self.halt.set()
        self.killed = True
        self.server.close_all()

    def stop(self) -> None:
        self.halt.set()
        if threading.current_thread() is not self.thread:
            self.thread.join(timeout=15)


def _corrupting_fs(ranges: list[tuple[int, int]]) -> type:
    from pyftpdlib.filesystems import AbstractedFS

    class CorruptFile:
        """A file object that serves some byte ranges inverted (a bad mirror)."""

        def __init__(self, f: Any) -> None:
            self._f = f
            self.name = f.name
            self.closed = False

        def seek(self, pos: int, whence: int = 0) -> int:
            return self._f.seek(pos, whence)

        def tell(self) -> int:
            return self._f.tell()

        def read(self, n: int = -1) -> bytes:
            pos = self._f.tell()
            data = bytearray(self._f.read(n))
            for s, e in ranges:
                lo, hi = max(s, pos), min(e, pos + len(data))
                for i in range(lo, hi):
                    data[i - pos] ^= 0xFF
            return bytes(data)

        def fileno(self) -> int:
            raise OSError("no sendfile for a corrupting file")

        def close(self) -> None:
            self.closed = True
            self._f.close()

    class CorruptFS(AbstractedFS):
        def open(self, filename: str, mode: str) -> Any:
            return CorruptFile(super().open(filename, mode))

    return CorruptFS


@pytest.fixture
def ftp_mirrors(tmp_path: Path) -> Iterator[Callable[..., list[FtpMirror]]]:
    from pyftpdlib.authorizers import DummyAuthorizer
    from pyftpdlib.handlers import DTPHandler, FTPHandler, ThrottledDTPHandler
    from pyftpdlib.ioloop import IOLoop
    from pyftpdlib.servers import FTPServer

    loops: list[_Loop] = []

    def start(
        files: dict[str, bytes],
        n: int = 1,
        *,
        throttle: dict[int, int] | None = None,
        pace: dict[int, int] | None = None,
        corrupt: dict[int, list[tuple[int, int]]] | None = None,
        die_after: dict[int, int] | None = None,
        root: Path | None = None,
        max_per_ip: dict[int, int] | None = None,
        pace_burst: int = 64 * 1024,
        dtp_for: dict[int, type] | None = None,
        handler_attrs: dict[int, dict[str, Any]] | None = None,
    ) -> list[FtpMirror]:
        if root is None:
            root = tmp_path / f"ftp-root-{len(loops)}"
            root.mkdir()
        for name, data in files.items():
            (root / name).write_bytes(data)
        out = []
        for i in range(n):
            auth = DummyAuthorizer()
            auth.add_anonymous(str(root))
            attrs: dict[str, Any] = {
                "authorizer": auth,
                "banner": "pftp e2e",
                "use_sendfile": False,
            }
            dtp: type = DTPHandler
            if throttle and i in throttle:
                # (_throttler on the class: pyftpdlib may close a data channel before
                # ThrottledDTPHandler.__init__ set it, and the AttributeError then
                # kills the server's loop)
                dtp = type("Throttled", (ThrottledDTPHandler,),
                           {"write_limit": throttle[i], "_throttler": None})
            if pace and i in pace:
                # (as vsftpd's anon_max_rate: 64 KiB bursts; pyftpdlib's own
                # throttle sends a second's worth at once)
                from paced_ftp import paced_dtp

                dtp = paced_dtp(pace[i], burst=pace_burst)
            if dtp_for and i in dtp_for:  # (a test's own data channel)
                dtp = dtp_for[i]
            counter = [0]
            if die_after and i in die_after:
                limit = die_after[i]
                holder: dict[str, Any] = {}

                def send(
                    self: Any,
                    data: bytes,
                    _base: type = dtp,
                    _c: list[int] = counter,
                    _limit: int = limit,
                    _h: dict[str, Any] = holder,
                ) -> int:
                    if _c[0] >= _limit:
                        _h["loop"].kill()  # every connection drops, the port closes
                        raise OSError("mirror killed")
                    sent = _base.send(self, data)
                    _c[0] += sent
                    return sent

                dtp = type("Dying", (dtp,), {"send": send})
            attrs["dtp_handler"] = dtp
            if corrupt and i in corrupt:
                attrs["abstracted_fs"] = _corrupting_fs(corrupt[i])
            if handler_attrs and i in handler_attrs:  # (a test's own commands)
                attrs.update(handler_attrs[i])
            handler = type("E2EHandler", (FTPHandler,), attrs)
            ioloop = IOLoop()
            server = FTPServer((LOOPBACK, 0), handler, ioloop=ioloop)
            if max_per_ip and i in max_per_ip:  # (more: "421 Too many connections")
                server.max_cons_per_ip = max_per_ip[i]
            port = server.socket.getsockname()[1]
            loop = _Loop(server, ioloop)
            if die_after and i in die_after:
                holder["loop"] = loop
            loops.append(loop)
            loop.thread.start()
            out.append(FtpMirror(port, root, loop.stop, counter))
        return out

    try:
        yield start
    finally:
        for loop in loops:
            loop.stop()


@pytest.fixture
def mirrors_with_a_liar(
    tmp_path: Path, ftp_mirrors: Callable[..., list[FtpMirror]]
) -> Callable[..., tuple[list[str], str]]:
    """start(name, data, honest, rate=None) -> (honest URLs, liar URL): FTP mirrors
    of one root, the liar serving every byte inverted (another copy of the same
    size); ``rate``: bytes/s per connection for all of them."""

    def start(name: str, data: bytes, honest: int, rate: int | None = None
              ) -> tuple[list[str], str]:
        root = tmp_path / f"shared-{name}"
        root.mkdir()
        limit = None if rate is None else dict.fromkeys(range(honest), rate)
        good = ftp_mirrors({name: data}, honest, root=root, throttle=limit)
        bad = ftp_mirrors({}, 1, corrupt={0: [(0, len(data))]}, root=root,
                          throttle=None if rate is None else {0: rate})
        return [g.url(name) for g in good], bad[0].url(name)

    return start


class _RangeHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    root: Path

    def log_message(self, format: str, *args: Any) -> None:
        return

    def _target(self) -> Path | None:
        p = (self.root / self.path.lstrip("/").split("?")[0]).resolve()
        return p if p.is_file() and self.root in p.parents else None

    def do_HEAD(self) -> None:
        self._serve(body=False)

    def do_GET(self) -> None:
        self._serve(body=True)

    def _serve(self, body: bool) -> None:
        path = self._target()
        if path is None:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        size = path.stat().st_size
        start, end = 0, size
        m = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
        if m and size:
            start = int(m.group(1))
            end = min(size, int(m.group(2)) + 1) if m.group(2) else size
            if start >= size:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{end - 1}/{size}")
        else:
            self.send_response(200)
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(end - start))
        self.end_headers()
        if not body:
            return
        with open(path, "rb") as f:
            f.seek(start)
            left = end - start
            try:
                while left > 0:
                    chunk = f.read(min(256 * 1024, left))
                    if not chunk:
                        break
                    self.wfile.write(chunk)
                    left -= len(chunk)
            except (BrokenPipeError, ConnectionResetError):
                return


@pytest.fixture
def http_mirror(http_servers: Callable[..., str]) -> Callable[[Path], str]:
    def start(root: Path) -> str:
        return http_servers(type("Range", (_RangeHandler,), {"root": root.resolve()})) + "/"

    return start


@dataclass
class CannedCoordinator:
    url: str
    requests: list[dict] = field(default_factory=list)
    reports: list[dict] = field(default_factory=list)


@pytest.fixture
def canned_coordinator(
    http_servers: Callable[..., str],
) -> Callable[[int, bytes | str | dict], CannedCoordinator]:
    def start(status: int, body: bytes | str | dict) -> CannedCoordinator:
        raw = (
            json.dumps(body).encode()
            if isinstance(body, dict)
            else (body.encode() if isinstance(body, str) else body)
        )
        rec = CannedCoordinator("")

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length", "0"))
                payload = json.loads(self.rfile.read(n) or b"null")
                if self.path == "/api/v1/assignments":
                    rec.requests.append(payload)
                    out, code = raw, status
                elif self.path == "/api/v1/reports":
                    rec.reports.append(payload)
                    out, code = b'{"accepted": true, "download_id": 1}', 200
                else:
                    out, code = b'{"detail": "not found"}', 404
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

        rec.url = http_servers(Handler)
        return rec

    return start


@pytest.fixture
def random_bytes() -> Callable[[int], bytes]:
    return os.urandom


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A TCP server that accepts connections and never says a word."""
    import socket

    listener = socket.create_server((LOOPBACK, 0))
    held: list = []

    def accept() -> None:
        while True:
            try:
                held.append(listener.accept())
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    yield listener.getsockname()[1]
    listener.close()
    for conn, _ in held:
        conn.close()


@pytest.fixture
def equal_plan() -> Callable[..., dict]:
    def answer(data: bytes, urls: list[str], *, sha256: str | None = None,
               request_id: str = "req-1") -> dict:
        """The coordinator's answer: equal portions of ``data`` over ``urls``."""
        cuts = [len(data) * i // len(urls) for i in range(len(urls) + 1)]
        return {
            "request_id": request_id,
            "file": {"name": "f.bin", "size": len(data), "sha256": sha256 or sha256_hex(data),
                     "piece_size": None, "piece_sha256": None},
            "assignments": [
                {"mirror": f"m{i}", "url": u, "offset": cuts[i], "length": cuts[i + 1] - cuts[i],
                 "suitability": 0.5, "expected_bps": 8e7}
                for i, u in enumerate(urls)
            ],
            "backups": [],
            "mode": "ranked",
        }

    return answer
