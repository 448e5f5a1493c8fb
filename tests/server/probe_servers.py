"""Real mirror servers on loopback for the probe/scan tests: pyftpdlib (FTP) and a
small threaded HTTP server with Range and HEAD support."""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from paced_ftp import paced_dtp
from pyftpdlib.authorizers import DummyAuthorizer
from pyftpdlib.handlers import FTPHandler
from pyftpdlib.servers import FTPServer


@dataclass
class RunningServer:
    url: str
    port: int
    connections: list[int] = field(default_factory=lambda: [0])

    @property
    def connection_count(self) -> int:
        return self.connections[0]


@contextmanager
def ftp_server(
    root: Path, *, mlsd: bool = True, port: int = 0, write_limit: int = 0,
    max_cons_per_ip: int = 0,
) -> Iterator[RunningServer]:
    """Anonymous read-only pyftpdlib on 127.0.0.1; ``mlsd=False`` = a server that
    only knows LIST (like vsftpd); ``write_limit`` > 0: each data connection held
    to that many bytes/s (``paced_dtp``); ``max_cons_per_ip`` > 0: sessions refused
    beyond that many per address."""
    auth = DummyAuthorizer()
    auth.add_anonymous(str(root))
    counter = [0]

    class Handler(FTPHandler):
        def on_connect(self) -> None:
            counter[0] += 1

    Handler.authorizer = auth
    Handler.timeout = 30
    if write_limit:
        Handler.dtp_handler = paced_dtp(write_limit)
    if not mlsd:
        Handler.proto_cmds = {
            k: v for k, v in FTPHandler.proto_cmds.items() if k not in ("MLSD", "MLST")
        }
    server = FTPServer(("127.0.0.1", port), Handler)
    server.max_cons_per_ip = max_cons_per_ip
    active = threading.Event()
    active.set()

    def loop() -> None:
        while active.is_set():
            server.serve_forever(timeout=0.05, blocking=False)
        server.close_all()

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    bound = server.address[1]
    try:
        yield RunningServer(f"ftp://127.0.0.1:{bound}/", bound, counter)
    finally:
        active.clear()
        t.join(10)


_RANGE = re.compile(r"bytes=(\d+)-(\d*)$")


@contextmanager
def http_server(root: Path, port: int = 0) -> Iterator[RunningServer]:
    counter = [0]

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            return None

        def setup(self) -> None:
            counter[0] += 1
            super().setup()

        def _target(self) -> Path | None:
            p = (root / self.path.split("?", 1)[0].lstrip("/")).resolve()
            if not str(p).startswith(str(root.resolve())) or not p.is_file():
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return None
            return p

        def do_HEAD(self) -> None:
            p = self._target()
            if p is None:
                return
            self.send_response(200)
            self.send_header("Content-Length", str(p.stat().st_size))
            self.send_header("Accept-Ranges", "bytes")
            self.end_headers()

        def do_GET(self) -> None:
            p = self._target()
            if p is None:
                return
            size = p.stat().st_size
            start, end = 0, size - 1
            m = _RANGE.match(self.headers.get("Range", ""))
            if m:
                start = int(m.group(1))
                end = min(int(m.group(2)) if m.group(2) else size - 1, size - 1)
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
            else:
                self.send_response(200)
            self.send_header("Content-Length", str(end - start + 1))
            self.end_headers()
            with p.open("rb") as fh:
                fh.seek(start)
                left = end - start + 1
                try:
                    while left > 0:
                        chunk = fh.read(min(65536, left))
                        if not chunk:
                            break
                        self.wfile.write(chunk)
                        left -= len(chunk)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    t.start()
    bound = server.server_address[1]
    try:
        yield RunningServer(f"http://127.0.0.1:{bound}/", bound, counter)
    finally:
        server.shutdown()
        server.server_close()
        t.join(10)


def make_tree(root: Path, files: dict[str, int]) -> dict[str, bytes]:
    """Create ``files`` (relative path -> size) with random bytes under ``root``."""
    out = {}
    for rel, size in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        data = os.urandom(size)
        p.write_bytes(data)
        out[rel] = data
    return out
