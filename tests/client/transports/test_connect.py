"""Connections to a name with several addresses, one of them dead (connect.py).

A dead address here is a real one that drops SYNs: a loopback listener whose
accept queue is full (Linux drops a SYN then, and the connect waits). Names are
resolved from a hosts file bind-mounted over /etc/hosts in a private mount
namespace (``unshare --mount``), for the CLI run in it.
"""

from __future__ import annotations

import hashlib
import http.client
import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar
from urllib.parse import urlsplit

import pytest
from pftp_client.transports import connect as connect_module
from pftp_client.transports.connect import (
    STAGGER_S,
    connect_addresses,
    interleave,
    resolve,
    worked_first,
)

V4 = socket.AF_INET
V6 = socket.AF_INET6


def _info(addr: tuple, family: int = V4) -> tuple:
    return (family, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", addr)


class _BlackHole:
    """A listener on ``host`` whose accept queue is full: SYNs to it are dropped."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, port))
        self.sock.listen(0)
        self.addr = self.sock.getsockname()
        self.fill: list[socket.socket] = []
        for _ in range(3):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(self.addr)
            self.fill.append(s)
        time.sleep(0.1)
        # (the premise: a new connect to it waits)
        probe = socket.socket()
        probe.settimeout(0.3)
        try:
            with pytest.raises(TimeoutError):
                probe.connect(self.addr)
        finally:
            probe.close()

    def close(self) -> None:
        for s in self.fill:
            s.close()
        self.sock.close()


@pytest.fixture
def black_hole() -> Iterator[_BlackHole]:
    hole = _BlackHole()
    yield hole
    hole.close()


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    yield s
    s.close()


def _refused_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_families_alternate_from_the_first_ones() -> None:
    a6, b6, c6 = (_info((f"2001:db8::{i}", 80, 0, 0), V6) for i in (1, 2, 3))
    a4, b4 = (_info((f"192.0.2.{i}", 80)) for i in (1, 2))
    assert interleave([a6, b6, c6, a4, b4]) == [a6, a4, b6, b4, c6]
    assert interleave([a4, a6, b6]) == [a4, a6, b6]
    assert interleave([a4, b4]) == [a4, b4]
    assert interleave([]) == []


def test_the_address_that_worked_is_tried_first_next_time() -> None:
    a, b, c = (_info((f"192.0.2.{i}", 80)) for i in (1, 2, 3))
    assert worked_first([a, b, c], ("192.0.2.3", 80)) == [c, a, b]
    assert worked_first([a, b, c], None) == [a, b, c]
    assert worked_first([a, b, c], ("198.51.100.1", 80)) == [a, b, c]  # (no longer listed)


def test_a_names_addresses_are_kept_a_while(monkeypatch: pytest.MonkeyPatch) -> None:
    port = _refused_port()
    first = resolve("localhost", port)
    assert first and all(i[4][1] == port for i in first)
    assert resolve("localhost", port) is first  # (no second lookup)
    assert resolve(b"localhost", port) == first  # (bytes: its own entry)
    monkeypatch.setattr(connect_module, "RESOLVED_FOR_S", 0.0)
    again = resolve("localhost", port)
    assert again == first and again is not first  # (expired: asked again)


def test_a_dead_first_address_costs_one_stagger_not_the_timeout(
    black_hole: _BlackHole, listener: socket.socket
) -> None:
    started = []
    t0 = time.monotonic()
    sock = connect_addresses([_info(black_hole.addr), _info(listener.getsockname())], 20.0,
                             started=lambda: started.append(time.monotonic() - t0))
    took = time.monotonic() - t0
    with sock:
        assert sock.getpeername() == listener.getsockname()
        assert sock.gettimeout() == 20.0  # blocking, with the timeout, as create_connection
    assert STAGGER_S <= took < 5.0  # (20 s: the dead one's whole timeout)
    assert len(started) == 1 and started[0] < STAGGER_S  # once, with the first SYN


def test_a_refused_address_hands_over_at_once(listener: socket.socket) -> None:
    t0 = time.monotonic()
    with connect_addresses([_info(("127.0.0.1", _refused_port())),
                            _info(listener.getsockname())], 20.0) as sock:
        assert sock.getpeername() == listener.getsockname()
    assert time.monotonic() - t0 < STAGGER_S


def test_an_address_this_host_cannot_open_a_socket_for_is_passed_over(
    listener: socket.socket,
) -> None:
    # (a family the kernel does not support, as AF_INET6 where IPv6 is compiled out:
    # socket() itself fails with EAFNOSUPPORT)
    unusable = (4095, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", ("nowhere", 1))
    with connect_addresses([unusable, _info(listener.getsockname())], 5.0) as sock:
        assert sock.getpeername() == listener.getsockname()
    with pytest.raises(OSError, match="not supported"):
        connect_addresses([unusable], 5.0)


def test_every_address_refused_says_so_for_each() -> None:
    ports = [_refused_port(), _refused_port()]
    with pytest.raises(ConnectionRefusedError) as err:
        connect_addresses([_info(("127.0.0.1", p)) for p in ports], 5.0)
    for p in ports:
        assert f"127.0.0.1:{p}" in str(err.value)


def test_only_dead_addresses_time_out_within_the_timeout(black_hole: _BlackHole) -> None:
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match="timed out"):
        connect_addresses([_info(black_hole.addr), _info(black_hole.addr)], 0.8)
    assert 0.8 <= time.monotonic() - t0 < 3.0


# --- a download from a name whose first address is dead ----------------------------------


def _resolved_in(hosts: Path, name: str) -> list[str]:
    """The addresses of ``name`` in the order the resolver gives them, with
    ``hosts`` as /etc/hosts (skips when no private mount namespace can be had)."""
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs root and unshare(1) for a private /etc/hosts")
    code = ("import socket; print(' '.join(a[4][0] for a in socket.getaddrinfo("
            f"{name!r}, 80, type=socket.SOCK_STREAM)))")
    out = subprocess.run(_in_hosts(hosts, [sys.executable, "-c", code]), capture_output=True,
                         text=True, timeout=30)
    if out.returncode != 0:
        pytest.skip(f"no private mount namespace here: {out.stderr.strip()[-300:]}")
    return out.stdout.split()


def _in_hosts(hosts: Path, argv: list[str]) -> list[str]:
    return ["unshare", "--mount", "sh", "-c",
            'mount --bind "$0" /etc/hosts && exec "$@"', str(hosts), *argv]


@pytest.mark.parametrize("proto", ["ftp", "http"])
def test_a_download_from_a_name_whose_first_address_is_dead(
    tmp_path: Path, proto: str, start_pyftpd, start_nginx
) -> None:
    """The mirror's name has two addresses; the resolver's first drops every SYN.
    Every connection of the download (FTP control connections, HTTP requests
    through httpx, the head start's) gets through on the other one after a
    stagger, not after the 30 s connect timeout each (socket.create_connection
    and httpx try the addresses one after the other)."""
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.2 dual.test\n127.0.0.1 dual.test\n")
    order = _resolved_in(hosts, "dual.test")
    assert sorted(order) == ["127.0.0.1", "127.0.0.2"], order
    dead, good = order
    data = os.urandom(3_000_000 + 17)
    server = (start_pyftpd(host=good) if proto == "ftp" else start_nginx(host=good))
    server.put("f.bin", data)
    hole = _BlackHole(dead, server.port)
    try:
        out = tmp_path / "out" / "f.bin"
        out.parent.mkdir()
        url = f"{proto}://dual.test:{server.port}/f.bin"
        argv = [sys.executable, "-m", "pftp_client.cli", "get", "--mirror", url,
                "--no-discovery", "--sha256", hashlib.sha256(data).hexdigest(),
                "-o", str(out), "--quiet", "--json"]
        env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path)}
        t0 = time.monotonic()
        proc = subprocess.run(_in_hosts(hosts, argv), capture_output=True, text=True,
                              timeout=240, env=env)
        took = time.monotonic() - t0
    finally:
        hole.close()
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(proc.stdout)
    assert summary["sha256_verified"] is True
    assert out.read_bytes() == data
    # (each connection to the dead address would have waited 30 s)
    assert took < 15.0, (took, proc.stderr[-2000:])


def test_the_coordinator_is_reached_past_a_dead_first_address(tmp_path: Path) -> None:
    """The coordinator's name with a dead first address: both ways the client
    POSTs to it (coordinator._post: http.client; early._http_post: a plain socket
    on the way to the plan) get through on the other address within a stagger."""
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.2 coord.test\n127.0.0.1 coord.test\n")
    dead, good = _resolved_in(hosts, "coord.test")

    class Answer(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            reply = json.dumps({"echo": body.decode()}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args: object) -> None:
            return None

    server = http.server.ThreadingHTTPServer((good, 0), Answer)
    port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    hole = _BlackHole(dead, port)
    try:
        code = (
            "import json, sys, time\n"
            "from pftp_client.coordinator import _post\n"
            "from pftp_client.early import _http_post\n"
            f"url = 'http://coord.test:{port}/api/v1/assignments'\n"
            "out = []\n"
            "for post in (_post, _http_post):\n"
            "    t = time.monotonic()\n"
            "    status, body = post(url, b'{\"a\": 1}', 20.0)\n"
            "    out.append([status, json.loads(body)['echo'], time.monotonic() - t])\n"
            "print(json.dumps(out))\n"
        )
        proc = subprocess.run(_in_hosts(hosts, [sys.executable, "-c", code]),
                              capture_output=True, text=True, timeout=120)
    finally:
        hole.close()
        server.shutdown()
        server.server_close()
    assert proc.returncode == 0, proc.stderr[-2000:]
    for status, echo, took in json.loads(proc.stdout):
        assert (status, echo) == (200, '{"a": 1}')
        assert took < 5.0  # (20 s: the dead address's whole timeout)


class _ForwardProxy(http.server.BaseHTTPRequestHandler):
    """A plain HTTP forward proxy: relays GET/HEAD for an absolute URI to its
    origin, Range included, and notes what it relayed."""

    seen: ClassVar[list[tuple[str, str, str | None]]] = []

    def _relay(self, method: str) -> None:
        url = urlsplit(self.path)
        _ForwardProxy.seen.append((method, self.path, self.headers.get("Range")))
        upstream = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
        hop = {"connection", "keep-alive", "proxy-connection", "transfer-encoding"}
        upstream.request(method, url.path,
                         headers={k: v for k, v in self.headers.items() if k.lower() not in hop})
        resp = upstream.getresponse()
        self.send_response(resp.status)
        for key, value in resp.getheaders():
            if key.lower() not in hop:
                self.send_header(key, value)
        self.end_headers()
        try:
            while method != "HEAD" and (chunk := resp.read(65536)):
                self.wfile.write(chunk)
        except (BrokenPipeError, ConnectionResetError):
            return  # (the client cut its range short: a fetch that ended early)
        finally:
            upstream.close()

    def do_GET(self) -> None:
        self._relay("GET")

    def do_HEAD(self) -> None:
        self._relay("HEAD")

    def log_message(self, *args: object) -> None:
        return None


def test_a_proxy_from_the_environment_is_still_used(tmp_path: Path, start_nginx) -> None:
    """With http_proxy set, the HTTP fetcher keeps httpx's own transport (which
    reads it), not the staggered one: every request goes through the proxy."""
    server = start_nginx()
    data = os.urandom(2_000_000 + 5)
    server.put("f.bin", data)
    _ForwardProxy.seen = []
    proxy = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _ForwardProxy)
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    try:
        out = tmp_path / "out.bin"
        env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
        env.update(http_proxy=f"http://127.0.0.1:{proxy.server_address[1]}",
                   XDG_CACHE_HOME=str(tmp_path), XDG_CONFIG_HOME=str(tmp_path))
        proc = subprocess.run(
            [sys.executable, "-m", "pftp_client.cli", "get", "--mirror", server.url("f.bin"),
             "--no-discovery", "--sha256", hashlib.sha256(data).hexdigest(), "-o", str(out),
             "--quiet", "--json"], capture_output=True, text=True, timeout=120, env=env)
    finally:
        proxy.shutdown()
        proxy.server_close()
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout)["sha256_verified"] is True
    assert out.read_bytes() == data
    gets = [s for s in _ForwardProxy.seen if s[0] == "GET" and s[1] == server.url("f.bin")]
    assert gets, _ForwardProxy.seen  # (the file's bytes came through the proxy)
