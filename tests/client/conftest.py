"""Real FTP/HTTP servers for client tests: pyftpdlib in a thread, vsftpd, pure-ftpd,
proftpd and nginx as subprocesses on loopback with ephemeral ports and configs in tmp_path.

Fixtures (each yields a ``MirrorServer`` with ``root``, ``base_url``, ``url(name)``,
``put(name, data)`` and ``kill()``):

- ``pyftpd_server``: pyftpdlib, anonymous, in-process.
- ``vsftpd_server``: vsftpd, anonymous.
- ``pureftpd_server``: pure-ftpd with a virtual user; ``base_url`` carries the
  credentials (``ftp://tr:...@127.0.0.1:port/``) because anonymous pure-ftpd
  needs the system user ``ftp``, which comes and goes with Debian's FTP packages.
- ``proftpd_server``: proftpd, anonymous (an <Anonymous> block naming the root).
- ``nginx_server``: nginx with Range support at ``/``; ``/norange/`` serves the same
  root but ignores Range (``max_ranges 0``, answers 200); ``/slow/`` is throttled.

Factories for custom setups (shared root between mirrors, throttling, quirky
handlers, IPv6): ``start_pyftpd``, ``start_vsftpd``, ``start_pureftpd``,
``start_proftpd``, ``start_nginx`` (``tls=True``: https with a fresh self-signed certificate in
``server.ca_file``). ``ipv6_loopback`` gives "::1" or skips, saying why.
Everything started is killed at teardown, also on failure.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import stat
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest
from pftp_lab.servers import PROFTPD_PACKAGE, proftpd_conf, pureftpd_user_argv, vsftpd_plain_conf

LOOPBACK = "127.0.0.1"
_STARTUP_TIMEOUT = 20.0
# Where scripts/install-system-deps.sh unpacks the FTP servers: Debian declares vsftpd,
# pure-ftpd and proftpd as conflicting, so apt can never have two installed.
_UNPACKED = (Path(os.environ.get("PFTP_LAB_OPT", "/opt/pftp-lab")), Path("/opt/pftp-servers"))


def find_server_binary(package: str, name: str, subdir: str = "sbin") -> str | None:
    env = os.environ.get(f"PFTP_{name.upper().replace('-', '_')}")
    candidates = [env] if env else []
    candidates += [str(base / package / "usr" / subdir / name) for base in _UNPACKED]
    candidates += [shutil.which(name) or "", f"/usr/{subdir}/{name}"]
    for path in candidates:
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def ipv6_loopback_available() -> bool:
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.fixture
def ipv6_loopback() -> str:
    """``"::1"``, or skip the test (saying why) when this machine has no IPv6 loopback."""
    if not ipv6_loopback_available():
        pytest.skip("no IPv6 loopback on this machine")
    return "::1"


def url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def free_port(host: str = LOOPBACK) -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def pasv_range(width: int = 100) -> tuple[int, int]:
    """A random passive port range; servers skip ports already in use within it."""
    base = 20000 + int.from_bytes(os.urandom(2), "big") % 12000
    return base, base + width - 1


@dataclass
class MirrorServer:
    kind: str
    root: Path
    host: str
    port: int
    scheme: str = "ftp"
    userinfo: str = ""  # "user:password@" when the server needs a login
    pids: list[int] = field(default_factory=list)  # listener processes (subprocess servers)
    ca_file: Path | None = None  # certificate to trust (https nginx)
    # nginx: one line per request, "connection-number requests-on-it METHOD range"
    access_log: Path | None = None
    _stop: Callable[[], None] | None = field(default=None, repr=False)

    @property
    def base_url(self) -> str:
        return f"{self.scheme}://{self.userinfo}{url_host(self.host)}:{self.port}/"

    def url(self, name: str, prefix: str = "") -> str:
        return f"{self.base_url}{prefix}{name}"

    def put(self, name: str, data: bytes) -> Path:
        """Write a file under the served root, readable by unprivileged server processes."""
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        path.chmod(0o644)
        return path

    def kill(self) -> None:
        """SIGKILL the server and every session process it forked (or, in-process,
        drop every connection at once)."""
        if self._stop is not None:
            self._stop()

    def session_pids(self) -> list[int]:
        out = []
        for pid in self.pids:
            with contextlib.suppress(psutil.NoSuchProcess):
                out += [c.pid for c in psutil.Process(pid).children(recursive=True)]
        return out


def _kill_tree(pids: list[int]) -> None:
    """SIGKILL the given processes and all their descendants, by pid.

    Each server is its own process group (start_new_session), so the group goes
    first, in one atomic signal: killing children one by one lets nginx's master
    fork a replacement worker before its own turn comes, and that orphan lives on.
    Descendants that left the group are stopped, then killed, by pid.
    """
    victims: list[psutil.Process] = []
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)  # the group this fixture created, by its id
        try:
            proc = psutil.Process(pid)
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.send_signal(signal.SIGSTOP)  # a stopped process cannot fork
            victims += [proc, *proc.children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
    for proc in victims:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.send_signal(signal.SIGKILL)
    deadline = time.monotonic() + 10
    while victims and time.monotonic() < deadline:
        # Our own child is reaped by Popen.wait later; orphans may linger as zombies
        # when PID 1 does not reap: either way they are dead and their sockets closed.
        victims = [p for p in victims if _alive(p)]
        time.sleep(0.01)


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _wait_listening(host: str, port: int, proc: subprocess.Popen | None, log: Path | None) -> None:
    deadline = time.monotonic() + _STARTUP_TIMEOUT
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            text = log.read_text(errors="replace") if log and log.exists() else ""
            raise RuntimeError(f"server exited with {proc.returncode}: {text[-2000:]}")
        try:
            with socket.create_connection((host, port), timeout=1.0):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"server on {host}:{port} did not start within {_STARTUP_TIMEOUT}s")


def _make_root(tmp_path: Path, name: str) -> Path:
    root = tmp_path / name
    root.mkdir(parents=True, exist_ok=True)
    # pytest makes tmp dirs 0700; servers that drop privileges read as nobody.
    for p in (tmp_path, root):
        p.chmod(0o755)
    return root


def _traversable(path: Path) -> None:
    """Let others search every directory above ``path`` (o+x, not read): proftpd
    checks the anonymous root as nobody before it chroots there, and pytest makes its
    base temp directories 0700."""
    for d in path.parents:
        mode = d.stat().st_mode
        if not mode & stat.S_IXOTH:
            d.chmod(stat.S_IMODE(mode) | stat.S_IXOTH)


class _Spawner:
    """Starts subprocess servers for one test and kills all of them at teardown."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.procs: list[subprocess.Popen] = []
        self.count = 0

    def spawn(
        self, argv: list[str], host: str, port: int, log: Path, **kw: Any
    ) -> subprocess.Popen:
        with log.open("ab") as out:
            proc = subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # one process group per server, see _kill_tree
                **kw,
            )
        self.procs.append(proc)
        try:
            _wait_listening(host, port, proc, log)
        except BaseException:
            _kill_tree([proc.pid])
            raise
        return proc

    def workdir(self, kind: str) -> Path:
        self.count += 1
        d = self.tmp_path / f"{kind}-{self.count}"
        d.mkdir()
        d.chmod(0o755)
        return d

    def close(self) -> None:
        _kill_tree([p.pid for p in self.procs])
        for p in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=5)


@pytest.fixture
def _spawner(tmp_path: Path) -> Iterator[_Spawner]:
    sp = _Spawner(tmp_path)
    try:
        yield sp
    finally:
        sp.close()


# ------------------------------------------------------------------ pyftpdlib


class _PyftpdThread:
    def __init__(self, server: Any) -> None:
        self.server = server
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pyftpd", daemon=True)

    def _run(self) -> None:
        try:
            while not self._halt.is_set():
                self.server.serve_forever(timeout=0.05, blocking=False)
        finally:
            self.server.close_all()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._halt.set()
        self._thread.join(timeout=15)


@pytest.fixture
def start_pyftpd(tmp_path: Path) -> Iterator[Callable[..., MirrorServer]]:
    """``start_pyftpd(handler=FTPHandler subclass, root=..., host=..., users={name: pw},
    port=...)``."""
    from pyftpdlib.authorizers import DummyAuthorizer
    from pyftpdlib.handlers import FTPHandler
    from pyftpdlib.ioloop import IOLoop
    from pyftpdlib.servers import FTPServer

    running: list[_PyftpdThread] = []

    def start(
        handler: type | None = None,
        root: Path | None = None,
        host: str = LOOPBACK,
        users: dict[str, str] | None = None,
        anonymous: bool = True,
        port: int = 0,
    ) -> MirrorServer:
        root = root or _make_root(tmp_path, f"pyftpd-root-{len(running)}")
        auth = DummyAuthorizer()
        if anonymous:
            auth.add_anonymous(str(root))
        for name, password in (users or {}).items():
            auth.add_user(name, password, str(root), perm="elr")
        base = handler or FTPHandler
        cls = type("TestHandler", (base,), {"authorizer": auth, "banner": "pftp test"})
        # One IOLoop per server: pyftpdlib's default loop is a process-wide singleton,
        # and two threads polling it race (corrupted replies seen with 2+ servers).
        server = FTPServer((host, port), cls, ioloop=IOLoop())
        port = server.socket.getsockname()[1]
        thread = _PyftpdThread(server)
        running.append(thread)
        thread.start()
        return MirrorServer("pyftpdlib", root, host, port, _stop=thread.stop)

    try:
        yield start
    finally:
        for thread in running:
            thread.stop()


@pytest.fixture
def throttled_ftp_handler() -> Callable[[int], type]:
    """``throttled_ftp_handler(bytes_per_s)``: see _throttled_ftp_handler."""
    return _throttled_ftp_handler


def _throttled_ftp_handler(bytes_per_s: int) -> type:
    """A pyftpdlib handler whose transfers average ``bytes_per_s``: pyftpdlib's
    throttle sends two seconds' worth at once, then sleeps two seconds. A slow
    mirror, as seen by the engine's one- and two-second windows."""
    from pyftpdlib.handlers import FTPHandler, ThrottledDTPHandler

    dtp = type("SlowDTP", (ThrottledDTPHandler,), {"write_limit": bytes_per_s})
    return type("SlowHandler", (FTPHandler,), {"dtp_handler": dtp})


@pytest.fixture
def pyftpd_server(start_pyftpd: Callable[..., MirrorServer]) -> MirrorServer:
    return start_pyftpd()


@pytest.fixture
def closed_port_url() -> str:
    """An http:// URL on a loopback port nothing listens on (connection refused)."""
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        port = s.getsockname()[1]
    return f"http://{LOOPBACK}:{port}"


# --------------------------------------------------------------------- vsftpd


@pytest.fixture
def start_vsftpd(tmp_path: Path, _spawner: _Spawner) -> Callable[..., MirrorServer]:
    """``start_vsftpd(root=..., host=..., **extra_conf)``, e.g. ``anon_max_rate=200000``."""
    binary = find_server_binary("vsftpd", "vsftpd")

    def start(root: Path | None = None, host: str = LOOPBACK, **extra: Any) -> MirrorServer:
        if binary is None:
            pytest.skip("vsftpd not installed (run `make system-deps`)")
        work = _spawner.workdir("vsftpd")
        root = root or _make_root(tmp_path, f"vsftpd-root-{_spawner.count}")
        (work / "empty").mkdir()
        port = free_port(host)
        conf = vsftpd_plain_conf(root, work, host, port, pasv_range())
        conf.update(extra)
        conf_file = work / "vsftpd.conf"
        conf_file.write_text("".join(f"{k}={v}\n" for k, v in conf.items()))
        proc = _spawner.spawn([binary, str(conf_file)], host, port, work / "stdout.log")
        server = MirrorServer("vsftpd", root, host, port, pids=[proc.pid])
        server._stop = lambda: _kill_tree([proc.pid])
        return server

    return start


@pytest.fixture
def vsftpd_server(start_vsftpd: Callable[..., MirrorServer]) -> MirrorServer:
    return start_vsftpd()


# ------------------------------------------------------------------ pure-ftpd

PUREFTPD_USER = "tr"
PUREFTPD_PASSWORD = "s3cret pw"


@pytest.fixture
def start_pureftpd(tmp_path: Path, _spawner: _Spawner) -> Callable[..., MirrorServer]:
    """``start_pureftpd(root=..., host=..., extra_args=[...])``: virtual user tr with a
    password containing a space (percent-encoded in the URL)."""
    binary = find_server_binary("pure-ftpd", "pure-ftpd")
    pure_pw = find_server_binary("pure-ftpd", "pure-pw", subdir="bin")
    if pure_pw is None and binary is not None:
        sibling = Path(binary).parents[1] / "bin" / "pure-pw"
        pure_pw = str(sibling) if sibling.exists() else None

    def start(
        root: Path | None = None, host: str = LOOPBACK, extra_args: list[str] | None = None
    ) -> MirrorServer:
        if binary is None or pure_pw is None or shutil.which("openssl") is None:
            pytest.skip("pure-ftpd (with pure-pw) or openssl not installed")
        work = _spawner.workdir("pureftpd")
        root = root or _make_root(tmp_path, f"pureftpd-root-{_spawner.count}")
        port = free_port(host)
        argv = pureftpd_user_argv(
            binary, pure_pw, work, root, host, port, PUREFTPD_USER, PUREFTPD_PASSWORD,
            pasv_range(), extra_args,
        )
        proc = _spawner.spawn(argv, host, port, work / "stdout.log")
        server = MirrorServer(
            "pure-ftpd",
            root,
            host,
            port,
            pids=[proc.pid],
            userinfo=f"{PUREFTPD_USER}:{PUREFTPD_PASSWORD.replace(' ', '%20')}@",
        )
        server._stop = lambda: _kill_tree([proc.pid])
        return server

    return start


@pytest.fixture
def pureftpd_server(start_pureftpd: Callable[..., MirrorServer]) -> MirrorServer:
    return start_pureftpd()


# -------------------------------------------------------------------- proftpd


@pytest.fixture
def start_proftpd(tmp_path: Path, _spawner: _Spawner) -> Callable[..., MirrorServer]:
    """``start_proftpd(root=..., host=..., **directives)``, e.g.
    ``TransferRate="RETR 200"`` (KB/s) or ``AllowRetrieveRestart="off"``."""
    binary = find_server_binary(PROFTPD_PACKAGE, "proftpd")

    def start(root: Path | None = None, host: str = LOOPBACK, **extra: str) -> MirrorServer:
        if binary is None:
            pytest.skip("proftpd not installed (run `make system-deps`)")
        work = _spawner.workdir("proftpd")
        root = root or _make_root(tmp_path, f"proftpd-root-{_spawner.count}")
        _traversable(root)
        port = free_port(host)
        conf_file = work / "proftpd.conf"
        conf_file.write_text(proftpd_conf(root, work, host, port, pasv_range(), extra))
        proc = _spawner.spawn([binary, "-n", "-q", "-c", str(conf_file)], host, port,
                              work / "stdout.log")
        server = MirrorServer("proftpd", root, host, port, pids=[proc.pid])
        server._stop = lambda: _kill_tree([proc.pid])
        return server

    return start


@pytest.fixture
def proftpd_server(start_proftpd: Callable[..., MirrorServer]) -> MirrorServer:
    return start_proftpd()


# ---------------------------------------------------------------------- nginx


@pytest.fixture
def start_nginx(tmp_path: Path, _spawner: _Spawner) -> Callable[..., MirrorServer]:
    """``start_nginx(root=..., host=..., slow_rate="200k")``.

    Locations over the same root: ``/`` (Range supported), ``/norange/`` (Range
    ignored: 200 with the whole file), ``/slow/`` (``limit_rate slow_rate``),
    ``/fastfirst/`` (2 MB of each response at once, then 16 kB/s),
    ``/moved/NAME`` (302 to ``/NAME``), ``/busy/`` (503), ``/ratelimited/`` (429).
    """
    binary = find_server_binary("nginx", "nginx")

    def start(
        root: Path | None = None, host: str = LOOPBACK, slow_rate: str = "200k", tls: bool = False
    ) -> MirrorServer:
        if binary is None:
            pytest.skip("nginx not installed (run `make system-deps`)")
        work = _spawner.workdir("nginx")
        root = root or _make_root(tmp_path, f"nginx-root-{_spawner.count}")
        port = free_port(host)
        listen = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        tls_conf = ""
        if tls:
            if shutil.which("openssl") is None:
                pytest.skip("openssl not installed")
            subprocess.run(
                ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                 "-keyout", str(work / "key.pem"), "-out", str(work / "cert.pem"),
                 "-subj", "/CN=localhost", "-addext", f"subjectAltName=IP:{host},DNS:localhost"],
                check=True, capture_output=True,
            )  # fmt: skip
            listen += " ssl"
            tls_conf = f"ssl_certificate {work}/cert.pem; ssl_certificate_key {work}/key.pem;"
        conf = work / "nginx.conf"
        conf.write_text(
            f"""daemon off;
master_process on;
worker_processes 1;
user root root;
pid {work}/nginx.pid;
error_log {work}/error.log warn;
events {{ worker_connections 256; }}
http {{
    log_format conn '$connection $connection_requests $request_method $http_range';
    access_log {work}/access.log conn;
    sendfile on;
    keepalive_timeout 60;
    keepalive_requests 10000;
    default_type application/octet-stream;
    client_body_temp_path {work}/body;
    proxy_temp_path {work}/proxy;
    fastcgi_temp_path {work}/fastcgi;
    uwsgi_temp_path {work}/uwsgi;
    scgi_temp_path {work}/scgi;
    server {{
        listen {listen};
        {tls_conf}
        root {root};
        location / {{ }}
        location /norange/ {{ alias {root}/; max_ranges 0; }}
        location /slow/ {{ alias {root}/; limit_rate {slow_rate}; sendfile off; }}
        location /fastfirst/ {{ alias {root}/; limit_rate_after 2m; limit_rate 16k; sendfile off; }}
        location ~ ^/moved/(.*)$ {{ return 302 /$1; }}
        location /busy/ {{ return 503; }}
        location /ratelimited/ {{ return 429; }}
    }}
}}
"""
        )
        proc = _spawner.spawn(
            [binary, "-p", str(work), "-e", str(work / "error.log"), "-c", str(conf)],
            host,
            port,
            work / "stdout.log",
        )
        server = MirrorServer(
            "nginx", root, host, port, scheme="https" if tls else "http", pids=[proc.pid]
        )
        server.ca_file = work / "cert.pem" if tls else None
        server.access_log = work / "access.log"
        server._stop = lambda: _kill_tree([proc.pid])
        return server

    return start


@pytest.fixture
def nginx_server(start_nginx: Callable[..., MirrorServer]) -> MirrorServer:
    return start_nginx()


@pytest.fixture
def http_servers() -> Iterator[Callable[..., str]]:
    """``start(handler_class, tls=None) -> base URL``: a ThreadingHTTPServer on
    loopback per call (HTTPS with an ssl context); all shut down after the test."""
    import http.server
    import ssl

    servers: list[http.server.ThreadingHTTPServer] = []

    def start(handler: type, tls: ssl.SSLContext | None = None) -> str:
        srv = http.server.ThreadingHTTPServer((LOOPBACK, 0), handler)
        srv.daemon_threads = True
        if tls is not None:
            srv.socket = tls.wrap_socket(srv.socket, server_side=True)
        threading.Thread(
            target=srv.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True
        ).start()
        servers.append(srv)
        return f"{'https' if tls else 'http'}://{LOOPBACK}:{srv.server_address[1]}"

    try:
        yield start
    finally:
        for srv in servers:
            srv.shutdown()
            srv.server_close()
