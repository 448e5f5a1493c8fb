"""Round trips the FTP range reader spends before data flows (not a test).

    python -m bench.ftp_roundtrips [--delay-ms 40] [--servers pyftpdlib,vsftpd,pure-ftpd]
                                   [--repeat 3] [--modes pipelined,sync]

Each real server runs on loopback behind ``pftp_lab.ftp_proxy.FtpDelayProxy``,
which adds ``--delay-ms`` each way to the control connection and to every
passive data connection (RTT = 2 x delay). Times are printed in RTTs:

- ``first@0``: a new fetcher's first range at offset 0, time to the first byte
  (connect, greeting and login included);
- ``then@>0``: the next range on that fetcher, at an offset > 0, so the
  one-time REST probe runs here; time to its first byte from the ``fetch`` call;
- ``first@>0``: a new fetcher's first range at an offset > 0 (probe included);
- ``next``: the range after that one (no probe any more): what every further
  range costs; ``gap``: from the last byte of the previous range to the first
  byte of this one, i.e. with the abort of the previous range.

Modes: ``pipelined`` (the default FtpFetcher) and ``sync`` (``pipeline=False``:
one command at a time, the behaviour before pipelining). The proxy cannot delay
the client's own TCP handshake (see its docstring): a client that waits for its
data ``connect()`` before sending REST, as ``sync`` does, really pays one RTT
more per data connection than shown here; the pipelined client does not wait.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shutil
import signal
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from pftp_client.transports.base import RangeEnd
from pftp_client.transports.ftp import FtpFetcher
from pftp_lab.ftp_proxy import FtpDelayProxy
from pftp_lab.servers import pureftpd_user_argv

from .local import free_port, wait_listening
from .transport_loopback import pyftpdlib_server, vsftpd_server

FILE_SIZE = 8 * 1024 * 1024
RANGE = 256 * 1024
# (name, offset) of the ranges fetched on one new fetcher, in order.
PLANS = {
    "from 0": [("first@0", 0), ("then@>0", 4 * 1024 * 1024)],
    "from >0": [("first@>0", 1024 * 1024), ("next", 5 * 1024 * 1024)],
}
PUREFTPD_USER, PUREFTPD_PASSWORD = "bench", "bench-pw"


@contextmanager
def pureftpd_server(root: Path, work: Path) -> Iterator[str]:
    """pure-ftpd with one virtual user (anonymous pure-ftpd needs the system user
    ``ftp``, which comes and goes with Debian's FTP packages)."""
    base = Path(os.environ.get("PFTP_LAB_OPT", "/opt/pftp-lab")) / "pure-ftpd" / "usr"
    binary = base / "sbin" / "pure-ftpd"
    pure_pw = base / "bin" / "pure-pw"
    if not (binary.exists() and pure_pw.exists() and shutil.which("openssl")):
        raise RuntimeError("pure-ftpd (with pure-pw) or openssl not installed")
    port = free_port()
    argv = pureftpd_user_argv(str(binary), str(pure_pw), work, root, "127.0.0.1", port,
                              PUREFTPD_USER, PUREFTPD_PASSWORD, (42000, 42999))
    with (work / "pure-ftpd.log").open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_listening(port, proc, work / "pure-ftpd.log")
        yield f"ftp://{PUREFTPD_USER}:{PUREFTPD_PASSWORD}@127.0.0.1:{port}/"
    finally:
        # The process group we created for this server (listener and its sessions), by id.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


SERVERS: dict[str, Callable[[Path, Path], contextlib.AbstractContextManager[str]]] = {
    "pyftpdlib": pyftpdlib_server,
    "vsftpd": vsftpd_server,
    "pure-ftpd": pureftpd_server,
}


class _Clock:
    """A sink that keeps the time of the first and of the last block."""

    def __init__(self) -> None:
        self.first: float | None = None
        self.last = 0.0

    def __call__(self, _offset: int, _block: memoryview, _t: int) -> None:
        now = time.monotonic()
        if self.first is None:
            self.first = now
        self.last = now


def run_plan(
    url: str, plan: list[tuple[str, int]], factory: Callable[[str], object]
) -> dict[str, float]:
    """Seconds: time to first byte of each range of ``plan`` (from its fetch call),
    and ``gap`` between the last byte of one range and the first of the next."""
    fetcher = factory(url)
    out: dict[str, float] = {}
    previous_last: float | None = None
    try:
        for name, offset in plan:
            clock = _Clock()
            start = time.monotonic()
            got = fetcher.fetch(offset, RangeEnd(offset + RANGE), clock, threading.Event())
            if got != RANGE or clock.first is None:
                raise RuntimeError(f"short range: {got} of {RANGE} bytes")
            out[name] = clock.first - start
            if previous_last is not None:
                out["gap"] = clock.first - previous_last
            previous_last = clock.last
    finally:
        fetcher.close()
    return out


def measure(
    base_url: str, delay: float, factory: Callable[[str], object], repeat: int
) -> dict[str, dict[str, float]]:
    """Median RTTs per plan and step, through a delaying proxy in front of ``base_url``."""
    head, _, rest = base_url.partition("://")
    userinfo, _, hostport = rest.rstrip("/").rpartition("@")
    host, port = hostport.rsplit(":", 1)
    results: dict[str, dict[str, float]] = {}
    with FtpDelayProxy(host, int(port), one_way_delay=delay) as proxy:
        prefix = f"{userinfo}@" if userinfo else ""
        url = f"{head}://{prefix}{host}:{proxy.port}/big.bin"
        for plan_name, plan in PLANS.items():
            runs = [run_plan(url, plan, factory) for _ in range(repeat)]
            results[plan_name] = {
                step: statistics.median(r[step] for r in runs) / (2 * delay) for step in runs[0]
            }
    return results


def factories() -> dict[str, Callable[[str], object]]:
    return {
        "pipelined": lambda url: FtpFetcher(url, timeout=30, stall_timeout=30),
        "sync": lambda url: FtpFetcher(url, timeout=30, stall_timeout=30, pipeline=False),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--delay-ms", type=float, default=40.0, help="one-way delay added (ms)")
    ap.add_argument("--servers", default=",".join(SERVERS))
    ap.add_argument("--modes", default="pipelined,sync")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    quiet = logging.getLogger("pyftpdlib")  # a handler stops pyftpdlib adding its own
    quiet.addHandler(logging.NullHandler())
    quiet.setLevel(logging.WARNING)
    delay = args.delay_ms / 1000
    makers = factories()
    print(f"RTT {2 * args.delay_ms:g} ms; figures in RTTs (median of {args.repeat})")
    print(f"{'server':10} {'mode':10} {'first@0':>8} {'then@>0':>8}"
          f" {'first@>0':>9} {'next':>6} {'gap':>6}")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="ftp-rtt-") as tmp:
        base = Path(tmp)
        os.chmod(base, 0o755)
        root = base / "root"
        root.mkdir(mode=0o755)
        (root / "big.bin").write_bytes(os.urandom(FILE_SIZE))
        (root / "big.bin").chmod(0o644)
        for name in args.servers.split(","):
            work = base / name
            work.mkdir(mode=0o755)
            try:
                with SERVERS[name](root, work) as base_url:
                    for mode in args.modes.split(","):
                        r = measure(base_url, delay, makers[mode], args.repeat)
                        a, b = r["from 0"], r["from >0"]
                        row = (f"{a['first@0']:8.2f} {a['then@>0']:8.2f} {b['first@>0']:9.2f}"
                               f" {b['next']:6.2f} {b['gap']:6.2f}")  # fmt: skip
                        print(f"{name:10} {mode:10} {row}")
            except RuntimeError as exc:
                print(f"{name:10} skipped: {exc}")


if __name__ == "__main__":
    main()
