"""Throughput sanity check of the transports on unshaped loopback (not a test).

    python -m bench.transport_loopback [--size-mb 1024] [--servers pyftpdlib,vsftpd,nginx]

Serves one sparse file (reads come from the page cache, no disk) and fetches it
whole with one FtpFetcher/HttpFetcher, then in 4 ranges on one connection, into
a sink that only counts (``--write`` pwrites into a file instead). Prints MB/s
and the CPU seconds of the fetching thread alone (``time.thread_time``; the
in-process pyftpdlib server runs in another thread and is not counted).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from pftp_client.transports.base import DataSink, RangeEnd, RangeFetcher
from pftp_client.transports.registry import fetcher_for_url

from .local import free_port, wait_listening

_UNPACKED = ("/opt/pftp-lab/{0}/usr/sbin/{0}", "/opt/pftp-servers/{0}/usr/sbin/{0}")


def _binary(name: str) -> str | None:
    for pattern in _UNPACKED:
        if os.access(pattern.format(name), os.X_OK):
            return pattern.format(name)
    return shutil.which(name) or (
        f"/usr/sbin/{name}" if os.access(f"/usr/sbin/{name}", os.X_OK) else None
    )


@contextmanager
def _subprocess(argv: list[str], port: int, log: Path) -> Iterator[subprocess.Popen]:
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_listening(port, proc)
        yield proc
    finally:
        # The process group we created for this server (listener and its sessions), by id.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


@contextmanager
def pyftpdlib_server(root: Path, work: Path) -> Iterator[str]:
    from pyftpdlib.authorizers import DummyAuthorizer
    from pyftpdlib.handlers import FTPHandler
    from pyftpdlib.servers import FTPServer

    auth = DummyAuthorizer()
    auth.add_anonymous(str(root))
    handler = type("BenchHandler", (FTPHandler,), {"authorizer": auth})
    server = FTPServer(("127.0.0.1", 0), handler)
    port = server.socket.getsockname()[1]
    halt = threading.Event()

    def loop() -> None:
        while not halt.is_set():
            server.serve_forever(timeout=0.05, blocking=False)
        server.close_all()

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    try:
        yield f"ftp://127.0.0.1:{port}/"
    finally:
        halt.set()
        t.join(10)


@contextmanager
def vsftpd_server(root: Path, work: Path) -> Iterator[str]:
    binary = _binary("vsftpd")
    if binary is None:
        raise RuntimeError("vsftpd not installed")
    port = free_port()
    (work / "empty").mkdir()
    conf = work / "vsftpd.conf"
    conf.write_text(
        f"listen=YES\nlisten_address=127.0.0.1\nlisten_port={port}\nbackground=NO\n"
        f"anonymous_enable=YES\nlocal_enable=NO\nwrite_enable=NO\nanon_root={root}\n"
        "no_anon_password=YES\nrun_as_launching_user=YES\nftp_username=nobody\n"
        f"secure_chroot_dir={work / 'empty'}\npasv_enable=YES\npasv_min_port=41000\n"
        "pasv_max_port=41999\nisolate=NO\nisolate_network=NO\nseccomp_sandbox=NO\n"
        "xferlog_enable=NO\npam_service_name=ftp\n"
    )
    with _subprocess([binary, str(conf)], port, work / "vsftpd.log"):
        yield f"ftp://127.0.0.1:{port}/"


@contextmanager
def nginx_server(root: Path, work: Path) -> Iterator[str]:
    binary = _binary("nginx")
    if binary is None:
        raise RuntimeError("nginx not installed")
    port = free_port()
    conf = work / "nginx.conf"
    conf.write_text(
        f"daemon off; master_process on; worker_processes 1; user root root;\n"
        f"pid {work}/nginx.pid; error_log {work}/error.log warn;\n"
        "events { worker_connections 64; }\n"
        f"http {{ access_log off; sendfile on; client_body_temp_path {work}/b;\n"
        f"proxy_temp_path {work}/p; fastcgi_temp_path {work}/f; uwsgi_temp_path {work}/u;\n"
        f"scgi_temp_path {work}/s;\n"
        f"server {{ listen 127.0.0.1:{port}; root {root}; location / {{ }} }} }}\n"
    )
    with _subprocess([binary, "-p", str(work), "-e", str(work / "error.log"), "-c", str(conf)],
                     port, work / "nginx.log"):  # fmt: skip
        yield f"http://127.0.0.1:{port}/"


SERVERS: dict[str, Callable[[Path, Path], object]] = {
    "pyftpdlib": pyftpdlib_server,
    "vsftpd": vsftpd_server,
    "nginx": nginx_server,
}


def _run(
    fetcher: RangeFetcher, ranges: list[tuple[int, int]], sink: DataSink
) -> tuple[float, float]:
    wall0, cpu0 = time.perf_counter(), time.thread_time()
    for start, end in ranges:
        got = fetcher.fetch(start, RangeEnd(end), sink, threading.Event())
        if got != end - start:
            raise RuntimeError(f"short fetch {got} of {end - start}")
    return time.perf_counter() - wall0, time.thread_time() - cpu0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--servers", default="pyftpdlib,vsftpd,nginx")
    ap.add_argument("--write", action="store_true", help="pwrite into a temp file (sparse)")
    args = ap.parse_args()
    size = args.size_mb * 1024 * 1024
    with tempfile.TemporaryDirectory(prefix="tr-bench-") as tmp:
        base = Path(tmp)
        os.chmod(base, 0o755)
        root = base / "root"
        root.mkdir(mode=0o755)
        with (root / "big.bin").open("wb") as f:
            f.truncate(size)  # sparse: served from the page cache
        out_fd = os.open(base / "out.bin", os.O_CREAT | os.O_WRONLY, 0o644) if args.write else -1

        def sink(offset: int, block: memoryview, _t: int) -> None:
            if out_fd >= 0:
                os.pwrite(out_fd, block, offset)

        quarter = size // 4
        plans = {
            "whole": [(0, size)],
            "4 ranges": [(i * quarter, (i + 1) * quarter) for i in range(4)],
        }
        print(f"{'server':10} {'plan':9} {'MB/s':>8} {'client CPU s':>13} {'CPU s/GB':>9}")
        for name in args.servers.split(","):
            work = base / name
            work.mkdir()
            try:
                with SERVERS[name](root, work) as base_url:
                    fetcher = fetcher_for_url(f"{base_url}big.bin", timeout=30, stall_timeout=30)
                    try:
                        for plan, ranges in plans.items():
                            wall, cpu = _run(fetcher, ranges, sink)
                            mb = size / 1e6
                            print(f"{name:10} {plan:9} {mb / wall:8.0f} {cpu:13.2f} "
                                  f"{cpu / (size / 2**30):9.2f}")  # fmt: skip
                    finally:
                        fetcher.close()
            except RuntimeError as exc:
                print(f"{name:10} skipped: {exc}")
        if out_fd >= 0:
            os.close(out_fd)


if __name__ == "__main__":
    main()
