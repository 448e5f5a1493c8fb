"""`make demo`: a coordinated parallel download from rate-limited FTP mirrors on loopback.

What it does, everything on 127.0.0.1 and in one temporary directory:
1. starts 4 pyftpdlib FTP mirrors (separate processes) with different send-rate
   limits (ThrottledDTPHandler), all serving one generated file;
2. starts the coordinator (`pftp-coordinator migrate` + `serve`, a real uvicorn
   process) on SQLite in the temp data dir;
3. registers the file with `pftp-coordinator file add --from-path` and the mirrors
   and replicas through the admin API;
4. downloads the file from the single fastest mirror (baseline), then in parallel:
   a first round on a cold coordinator (no measurements yet) whose per-mirror
   report feeds the throughput history, then the real client `pftp get`
   (or, if it is not usable, the small downloader below driven by the assignments);
5. verifies SHA-256 each time, prints per-mirror portions and times, and stops
   and deletes everything it started, also on failure or Ctrl-C.
"""

from __future__ import annotations

import argparse
import ftplib
import hashlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import httpx

MiB = 1 << 20
# Send-rate limits of the mirrors, bytes/s: the fastest is less than half the total.
RATES = {"slow": 1 * MiB, "medium": 2 * MiB, "fast": 4 * MiB, "faster": 6 * MiB}
FILE_NAME = "demo/payload.bin"
BIN = Path(sys.executable).parent


# --- FTP mirror process (this script re-run with --serve-mirror) ------------------------


def serve_mirror(root: str, rate: int) -> None:
    from pyftpdlib.authorizers import DummyAuthorizer
    from pyftpdlib.handlers import FTPHandler, ThrottledDTPHandler
    from pyftpdlib.servers import FTPServer

    class Throttled(ThrottledDTPHandler):
        """Paced sending: pyftpdlib's own throttle overshoots at several MiB/s, so the
        demo paces to the byte: never ahead of start + bytes / rate."""

        write_limit = rate  # bytes/s the mirror sends (RETR)
        read_limit = 0
        _pace_start: float | None = None
        _paced = 0

        def _throttle_bandwidth(self, len_chunk: int, max_speed: int) -> None:
            now = time.monotonic()
            if self._pace_start is None:
                self._pace_start = now
            self._paced += len_chunk
            ahead = self._pace_start + self._paced / max_speed - now
            if ahead > 0.005:

                def unsleep() -> None:
                    self.add_channel(events=self.ioloop.WRITE)

                self.del_channel()
                self._cancel_throttler()
                self._throttler = self.ioloop.call_later(ahead, unsleep, _errback=self.handle_error)

    class Handler(FTPHandler):
        dtp_handler = Throttled
        banner = "P-FTP demo mirror"
        passive_ports = None

    authorizer = DummyAuthorizer()
    authorizer.add_anonymous(root, perm="elr")
    Handler.authorizer = authorizer
    server = FTPServer(("127.0.0.1", 0), Handler)
    server.max_cons = 64
    print(server.address[1], flush=True)  # the parent reads the port
    import logging

    logging.getLogger("pyftpdlib").setLevel(logging.WARNING)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # serve_forever closes all on exit
    server.serve_forever(handle_exit=True)


# --- a minimal parallel FTP REST downloader ---------------------------------------------


@dataclass
class Part:
    mirror: str
    url: str
    offset: int
    length: int
    got: int = 0
    seconds: float = 0.0
    failures: int = 0
    errors: list[str] = field(default_factory=list)


def fetch_range(url: str, offset: int, length: int, fd: int, timeout: float = 60.0) -> int:
    """REST offset + RETR, stop after ``length`` bytes; pwrite at the offset. Returns bytes."""
    parts = urlsplit(url)
    ftp = ftplib.FTP()
    ftp.connect(parts.hostname or "127.0.0.1", parts.port or 21, timeout=timeout)
    got = 0
    try:
        ftp.login(parts.username or "anonymous", parts.password or "pftp@")
        ftp.voidcmd("TYPE I")
        conn = ftp.transfercmd(f"RETR {parts.path.lstrip('/')}", rest=offset or None)
        try:
            while got < length:
                chunk = conn.recv(min(256 * 1024, length - got))
                if not chunk:
                    break
                os.pwrite(fd, chunk, offset + got)
                got += len(chunk)
        finally:
            conn.close()
    finally:
        ftp.close()  # no QUIT/ABOR dance: we stopped on purpose after our bytes
    return got


def download_parts(parts: list[Part], backups: list[dict], out: Path, size: int) -> float:
    """Fetch all parts in parallel; a failed part's rest goes to the next backup."""
    with out.open("wb") as fh:
        fh.truncate(size)
    fd = os.open(out, os.O_WRONLY)
    backup_urls = [b["url"] for b in backups]
    lock = threading.Lock()

    def run(part: Part) -> None:
        url = part.url
        start = time.perf_counter()
        while part.got < part.length:
            try:
                part.got += fetch_range(url, part.offset + part.got, part.length - part.got, fd)
            except (OSError, ftplib.Error) as exc:
                part.failures += 1
                part.errors.append(f"{url}: {exc}")
                with lock:
                    if not backup_urls or part.failures > 3:
                        raise
                    url = backup_urls.pop(0)
        part.seconds = time.perf_counter() - start

    threads = [threading.Thread(target=run, args=(p,), daemon=True) for p in parts]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    os.close(fd)
    missing = [p for p in parts if p.got != p.length]
    if missing:
        raise RuntimeError(f"incomplete parts: {[(p.mirror, p.errors) for p in missing]}")
    return elapsed


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(MiB):
            h.update(chunk)
    return h.hexdigest()


# --- orchestration ----------------------------------------------------------------------


class Demo:
    def __init__(self, size: int, keep: bool) -> None:
        self.size = size
        self.keep = keep
        self.tmp = Path(tempfile.mkdtemp(prefix="pftp-demo-"))
        self.procs: list[subprocess.Popen] = []
        self.token = secrets.token_hex(16)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("PFTP_")}
        self.env.update(
            PFTP_COORDINATOR_CONFIG=str(self.tmp / "no-config.toml"),
            PFTP_CLIENT_CONFIG=str(self.tmp / "no-client-config.toml"),
            # The mirrors are on loopback: the gateway's link says nothing about them,
            # and the demo must not send probes off this machine.
            PFTP_ACCESS_PROBE="off",
            XDG_CACHE_HOME=str(self.tmp / "cache"),
            PFTP_DATA_DIR=str(self.tmp / "data"),
            PFTP_DATABASE_URL=f"sqlite:///{self.tmp / 'data' / 'coordinator.db'}",
            PFTP_ADMIN_TOKEN=self.token,
            PFTP_SCHEDULER_ENABLED="false",
            PFTP_SNAPSHOT_REFRESH_S="0.5",
            PFTP_MIN_PORTION_BYTES=str(256 * 1024),
            PFTP_LOG_LEVEL="WARNING",
        )
        self.mirror_ports: dict[str, int] = {}
        self.base = ""

    # processes
    def start(self, args: list[str], log_name: str, **kw) -> subprocess.Popen:
        log = (self.tmp / log_name).open("w")
        proc = subprocess.Popen(args, env=self.env, stderr=log, **kw)
        self.procs.append(proc)
        return proc

    def stop_all(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self.keep:
            print(f"kept {self.tmp}")
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def cli(self, *args: str) -> str:
        proc = subprocess.run(
            [str(BIN / "pftp-coordinator"), *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"pftp-coordinator {' '.join(args)}: {proc.stderr.strip()}")
        return proc.stdout.strip()

    # setup
    def make_payload(self) -> Path:
        root = self.tmp / "mirror-root"
        path = root / FILE_NAME
        path.parent.mkdir(parents=True)
        with path.open("wb") as fh:
            left = self.size
            while left:
                n = min(left, 4 * MiB)
                fh.write(os.urandom(n))
                left -= n
        return path

    def start_mirrors(self) -> None:
        root = self.tmp / "mirror-root"
        for name, rate in RATES.items():
            proc = self.start(
                [sys.executable, __file__, "--serve-mirror", str(root), str(rate)],
                f"mirror-{name}.log",
                stdout=subprocess.PIPE,
                text=True,
            )
            line = proc.stdout.readline().strip() if proc.stdout else ""
            if not line.isdigit():
                raise RuntimeError(f"mirror {name} did not start: see {self.tmp}")
            self.mirror_ports[name] = int(line)

    def start_coordinator(self) -> None:
        print("  " + self.cli("migrate"))
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.base = f"http://127.0.0.1:{port}"
        proc = self.start(
            [str(BIN / "pftp-coordinator"), "serve", "--port", str(port)], "coordinator.log"
        )
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(self.base + "/healthz", timeout=5).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                log = (self.tmp / "coordinator.log").read_text()
                raise RuntimeError(f"coordinator did not start:\n{log}")
            time.sleep(0.2)

    def register(self, payload: Path) -> None:
        print(
            "  "
            + self.cli(
                "file", "add", FILE_NAME, "--from-path", str(payload), "--piece-size", str(MiB)
            )
        )
        auth = {"Authorization": f"Bearer {self.token}"}
        with httpx.Client(base_url=self.base, headers=auth, timeout=30) as c:
            for name, port in self.mirror_ports.items():
                r = c.post(
                    "/api/v1/admin/mirrors",
                    json={
                        "name": name,
                        "urls": [f"ftp://127.0.0.1:{port}/"],
                        "notes": f"demo mirror, {RATES[name] / MiB:g} MiB/s",
                    },
                )
                if r.status_code != 201:
                    raise RuntimeError(f"adding mirror {name}: {r.text}")
                r = c.post("/api/v1/admin/replicas", json={"mirror": name, "file": FILE_NAME})
                if r.status_code != 201:
                    raise RuntimeError(f"adding the replica on {name}: {r.text}")
        print(f"  registered {len(self.mirror_ports)} mirrors and their replicas (admin API)")

    def assignments(self, want_mirrors: int | None = None, ranked: bool = False) -> dict:
        """The coordinator's answer; waits until its ranking snapshot (refreshed every
        PFTP_SNAPSHOT_REFRESH_S) shows ``want_mirrors`` and, with ``ranked``, the
        reported throughput history (suitabilities no longer all equal)."""
        deadline = time.monotonic() + 60
        while True:
            r = httpx.post(
                self.base + "/api/v1/assignments",
                json={"file": FILE_NAME, "access_bandwidth_bps": None, "protocols": ["ftp"]},
                timeout=30,
            )
            if r.status_code == 200:
                body = r.json()
                spread = {round(a["suitability"], 6) for a in body["assignments"]}
                if (want_mirrors is None or len(body["assignments"]) >= want_mirrors) and (
                    not ranked or len(spread) > 1
                ):
                    return body
            if time.monotonic() > deadline:
                raise RuntimeError(f"no assignments: {r.status_code} {r.text}")
            time.sleep(0.3)  # the coordinator's snapshot picks new rows up shortly

    # downloads
    def single(self, expected: str) -> float:
        name = max(RATES, key=RATES.__getitem__)
        out = self.tmp / "single.bin"
        part = Part(name, f"ftp://127.0.0.1:{self.mirror_ports[name]}/{FILE_NAME}", 0, self.size)
        elapsed = download_parts([part], [], out, self.size)
        assert sha256_of(out) == expected, "single-mirror download has the wrong SHA-256"
        out.unlink()
        return elapsed

    def coordinated(self, expected: str, label: str, ranked: bool = False) -> float:
        plan = self.assignments(want_mirrors=len(RATES), ranked=ranked)
        parts = [Part(a["mirror"], a["url"], a["offset"], a["length"]) for a in plan["assignments"]]
        out = self.tmp / "parallel.bin"
        elapsed = download_parts(parts, plan["backups"], out, self.size)
        ok = sha256_of(out) == expected
        out.unlink()
        print(
            f"\n{label}: mode={plan['mode']}, {len(parts)} mirrors, "
            f"{elapsed:.2f} s, SHA-256 {'OK' if ok else 'MISMATCH'}"
        )
        print_portions(
            [(p.mirror, p.offset, p.length, p.seconds) for p in parts],
            {a["mirror"]: a["suitability"] for a in plan["assignments"]},
        )
        if not ok:
            raise RuntimeError("parallel download has the wrong SHA-256")
        report = {
            "request_id": plan["request_id"],
            "file": FILE_NAME,
            "size": self.size,
            "seconds": elapsed,
            "sha256_ok": ok,
            "access_bandwidth_bps": None,
            "mirrors": [
                {
                    "mirror": p.mirror,
                    "bytes": p.got,
                    "seconds": p.seconds,
                    "throughput_bps": 8 * p.got / p.seconds if p.seconds else 0.0,
                    "failures": p.failures,
                }
                for p in parts
            ],
        }
        httpx.post(self.base + "/api/v1/reports", json=report, timeout=30).raise_for_status()
        return elapsed

    def real_client(self, expected: str) -> float | None:
        pftp = BIN / "pftp"
        if not pftp.exists():
            return None
        plan = self.assignments(want_mirrors=len(RATES), ranked=True)
        out = self.tmp / "client.bin"
        t0 = time.perf_counter()
        proc = subprocess.run(
            [
                str(pftp),
                "get",
                FILE_NAME,
                "--coordinator",
                self.base,
                "-o",
                str(out),
                "--json",
                "-q",
                "--no-discovery",
            ],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=600,
            cwd=self.tmp,
        )
        elapsed = time.perf_counter() - t0
        if proc.returncode != 0 or not out.exists():
            print(
                f"\n(the client `pftp get` failed, rc={proc.returncode}: "
                f"{proc.stderr.strip()[-400:]}; using the demo downloader instead)"
            )
            return None
        ok = sha256_of(out) == expected
        try:
            summary = json.loads(proc.stdout)
        except json.JSONDecodeError:
            summary = {}
        seconds = float(summary.get("seconds") or elapsed)
        print(
            f"\nclient `pftp get` (coordinated, ranked by the reported history): "
            f"{seconds:.2f} s in the client ({elapsed:.2f} s with process start), "
            f"SHA-256 {'OK' if ok else 'MISMATCH'}"
        )
        print("  coordinator's plan for this file now:")
        print_portions(
            [(a["mirror"], a["offset"], a["length"], None) for a in plan["assignments"]],
            {a["mirror"]: a["suitability"] for a in plan["assignments"]},
        )
        if summary.get("mirrors"):
            print("  what the client fetched (it adapts: slow-server and tail handling):")
            for m in summary["mirrors"]:
                rate = float(m.get("rate_bps") or 0) / 8 / MiB
                print(
                    f"    {m['name']:<8} {m.get('role', ''):<7} {m['bytes']:>10} B "
                    f"in {float(m.get('seconds') or 0):6.2f} s  ({rate:5.2f} MiB/s)"
                )
        if not ok:
            raise RuntimeError("the client's file has the wrong SHA-256")
        return seconds

    def run(self) -> None:
        print(f"P-FTP demo in {self.tmp}")
        payload = self.make_payload()
        expected = sha256_of(payload)
        print(f"- generated {FILE_NAME}: {self.size / MiB:g} MiB, sha256 {expected[:16]}...")
        self.start_mirrors()
        print(
            "- FTP mirrors: "
            + ", ".join(
                f"{n} :{p} ({RATES[n] / MiB:g} MiB/s)" for n, p in self.mirror_ports.items()
            )
        )
        print("- coordinator (SQLite):")
        self.start_coordinator()
        print(f"  serving at {self.base}")
        self.register(payload)

        single = self.single(expected)
        fastest = max(RATES, key=RATES.__getitem__)
        print(f"\nsingle fastest mirror ({fastest}): {single:.2f} s, SHA-256 OK")
        cold = self.coordinated(expected, "round 1, cold coordinator (no measurements yet)")
        warm = self.real_client(expected)
        label = "client `pftp get`"
        if warm is None:
            warm = self.coordinated(
                expected, "round 2, ranked by the reported throughput", ranked=True
            )
            label = "round 2 (demo downloader)"
        print("\nmirror scores now (pftp-coordinator mirror list):")
        for line in self.cli("mirror", "list").splitlines():
            print("  " + line)
        print(
            f"\nsummary: single fastest mirror {single:.2f} s | coordinated cold {cold:.2f} s"
            f" | {label} {warm:.2f} s | speedup vs single {single / warm:.2f}x"
        )


def print_portions(
    rows: list[tuple[str, int, int, float | None]], suitability: dict[str, float]
) -> None:
    total = sum(r[2] for r in rows)
    for mirror, offset, length, seconds in sorted(rows, key=lambda r: r[1]):
        took = f" in {seconds:5.2f} s" if seconds is not None else ""
        print(
            f"    {mirror:<8} {RATES.get(mirror, 0) / MiB:>3g} MiB/s  suitability "
            f"{suitability.get(mirror, 0):.3f}  bytes {offset:>10}+{length:<10} "
            f"({100 * length / total:5.1f}%){took}"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=24)
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (logs)")
    parser.add_argument("--serve-mirror", nargs=2, metavar=("ROOT", "RATE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_mirror:
        serve_mirror(args.serve_mirror[0], int(args.serve_mirror[1]))
        return 0
    demo = Demo(args.size_mib * MiB, args.keep)
    try:
        demo.run()
    except (RuntimeError, AssertionError, httpx.HTTPError) as exc:
        print(f"demo failed: {exc}", file=sys.stderr)
        demo.keep = True
        return 1
    except KeyboardInterrupt:
        return 130
    finally:
        demo.stop_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
