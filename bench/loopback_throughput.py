"""pftp vs aria2c on unshaped loopback with 4 vsftpd mirrors (issue 3's CPU/memory target).

    python -m bench.loopback_throughput [--size-mb 1024] [--runs 3] [--only pftp|aria2c]

Writes one pseudo-random file (pftp_lab.make_file) into a temp dir, serves it from 4
vsftpd processes on 127.0.0.1 ephemeral ports, then runs, interleaved, `pftp get` with the
4 mirrors and `aria2c --split=4` with the same 4 URLs. For each run: wall time, MB/s
(MiB/s of the file), user+sys CPU seconds and peak RSS of the child process tree as reported
by os.wait4 (ru_maxrss is the largest single process). Each output's sha256 is checked
outside the timing and deleted before the next run. Prints a table and writes
bench/results/loopback.json. Not a test: figures only.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from pftp_lab import make_file, sha256_file
from pftp_lab.servers import vsftpd_plain_conf

from .local import free_port, wait_listening

MIRRORS = 4
RESULTS = Path(__file__).resolve().parent / "results" / "loopback.json"
_UNPACKED = (Path(os.environ.get("PFTP_LAB_OPT", "/opt/pftp-lab")), Path("/opt/pftp-servers"))


@dataclass
class Run:
    tool: str
    run: int
    wall_s: float
    mib_per_s: float
    cpu_user_s: float
    cpu_sys_s: float
    cpu_s: float
    peak_rss_mib: float
    exit_code: int
    sha256_ok: bool


def _vsftpd_binary() -> str:
    for base in _UNPACKED:
        path = base / "vsftpd" / "usr" / "sbin" / "vsftpd"
        if os.access(path, os.X_OK):
            return str(path)
    found = shutil.which("vsftpd") or "/usr/sbin/vsftpd"
    if not os.access(found, os.X_OK):
        raise SystemExit("vsftpd not installed; run `make system-deps`")
    return found


def vsftpd_conf(root: Path, work: Path, port: int, pasv: tuple[int, int]) -> str:
    # The tests' settings (no privilege switch, sessions in our process tree), so it runs
    # as root on plain loopback without the `ftp` user.
    conf = vsftpd_plain_conf(root, work, "127.0.0.1", port, pasv)
    return "".join(f"{k}={v}\n" for k, v in conf.items())


@contextmanager
def vsftpd_mirrors(root: Path, work: Path, count: int) -> Iterator[list[int]]:
    """`count` vsftpd processes serving `root`; yields their ports; kills them all on exit."""
    binary = _vsftpd_binary()
    procs: list[subprocess.Popen] = []
    base = 20000 + int.from_bytes(os.urandom(2), "big") % 10000
    try:
        ports = []
        for i in range(count):
            d = work / f"vsftpd-{i}"
            (d / "empty").mkdir(parents=True)
            port = free_port()
            conf = d / "vsftpd.conf"
            conf.write_text(vsftpd_conf(root, d, port, (base + 100 * i, base + 100 * i + 99)))
            conf.chmod(0o600)
            log = d / "stdout.log"
            with log.open("wb") as out:
                proc = subprocess.Popen(
                    [binary, str(conf)], stdout=out, stderr=subprocess.STDOUT,
                    start_new_session=True,  # one process group per server: killed by its id
                )
            procs.append(proc)
            wait_listening(port, proc, log)
            ports.append(port)
        yield ports
    finally:
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        for proc in procs:
            proc.wait(10)


def measure(argv: list[str], env: dict[str, str], log: Path) -> tuple[float, int, object]:
    """Run argv; returns (wall seconds, exit code, rusage of it and its waited-for children)."""
    with log.open("wb") as out:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, proc.returncode, usage


def run_one(tool: str, i: int, urls: list[str], sha: str, size: int, out_dir: Path,
            extra: list[str]) -> Run:
    out = out_dir / f"{tool}.out"
    log = out_dir / f"{tool}-{i}.log"
    env = dict(os.environ)
    if tool == "pftp":
        exe = str(Path(sys.executable).with_name("pftp"))
        argv = [exe, "get", *[a for u in urls for a in ("--mirror", u)], "--no-discovery",
                "--sha256", sha, "-o", str(out), "--quiet", "--json", *extra]
        env["PFTP_ACCESS_PROBE"] = "off"
    else:
        argv = ["aria2c", "--split=4", "--max-connection-per-server=1", "--min-split-size=1M",
                "--file-allocation=none", "--allow-overwrite=true", "--check-certificate=false",
                "--console-log-level=warn", "--summary-interval=0",
                "-d", str(out_dir), "-o", out.name, *urls]
    wall, code, usage = measure(argv, env, log)
    ok = code == 0 and out.exists() and sha256_file(out) == sha
    if code != 0:
        print(f"  {tool} run {i} exited {code}: {log.read_text()[-400:]}", file=sys.stderr)
    with contextlib.suppress(FileNotFoundError):
        out.unlink()
    user, system = usage.ru_utime, usage.ru_stime  # type: ignore[attr-defined]
    return Run(tool, i, round(wall, 3), round(size / 2**20 / wall, 1), round(user, 2),
               round(system, 2), round(user + system, 2),
               round(usage.ru_maxrss / 1024, 1), code, ok)  # type: ignore[attr-defined]


def summarise(runs: list[Run]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for tool in sorted({r.tool for r in runs}):
        mine = [r for r in runs if r.tool == tool]
        out[tool] = {
            "median_mib_per_s": round(statistics.median(r.mib_per_s for r in mine), 1),
            "median_cpu_s": round(statistics.median(r.cpu_s for r in mine), 2),
            "max_peak_rss_mib": max(r.peak_rss_mib for r in mine),
            "all_sha256_ok": all(r.sha256_ok for r in mine),
        }
    return out


def print_table(runs: list[Run]) -> None:
    head = f"{'tool':7} {'run':>3} {'wall s':>8} {'MiB/s':>8} {'user s':>7} {'sys s':>7} " \
           f"{'cpu s':>7} {'peakRSS MiB':>11} {'sha ok':>6}"
    print(head)
    print("-" * len(head))
    for r in runs:
        print(f"{r.tool:7} {r.run:>3} {r.wall_s:>8.2f} {r.mib_per_s:>8.1f} {r.cpu_user_s:>7.2f} "
              f"{r.cpu_sys_s:>7.2f} {r.cpu_s:>7.2f} {r.peak_rss_mib:>11.1f} {r.sha256_ok!s:>6}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=int, default=1024, help="file size in MiB (default 1024)")
    ap.add_argument("--runs", type=int, default=3, help="runs per tool (default 3)")
    ap.add_argument("--only", choices=("pftp", "aria2c"), help="run one tool only")
    ap.add_argument("--pftp-arg", action="append", default=[],
                    help="extra `pftp get` argument (repeatable), e.g. --pftp-arg=--congestion=off")
    ap.add_argument("--out", type=Path, default=RESULTS, help=f"JSON output (default {RESULTS})")
    args = ap.parse_args()
    if args.size_mb <= 0 or args.runs <= 0:
        ap.error("--size-mb and --runs must be positive")
    tools = [args.only] if args.only else ["pftp", "aria2c"]
    if "aria2c" in tools and shutil.which("aria2c") is None:
        raise SystemExit("aria2c not installed; run `make system-deps`")
    size = args.size_mb * 2**20
    tmp = Path(tempfile.mkdtemp(prefix="pftp-bench-loopback-"))
    try:
        root = tmp / "root"
        root.mkdir()
        root.chmod(0o755)
        name = f"random-{args.size_mb}M.bin"
        t0 = time.perf_counter()
        sha = make_file(root / name, size)
        print(f"wrote {args.size_mb} MiB in {time.perf_counter() - t0:.1f} s, sha256 {sha[:16]}...")
        out_dir = tmp / "out"
        out_dir.mkdir()
        runs: list[Run] = []
        with vsftpd_mirrors(root, tmp, MIRRORS) as ports:
            urls = [f"ftp://127.0.0.1:{p}/{name}" for p in ports]
            for i in range(1, args.runs + 1):
                for tool in tools:
                    r = run_one(tool, i, urls, sha, size, out_dir, args.pftp_arg)
                    print(f"  {tool} run {i}: {r.mib_per_s} MiB/s, cpu {r.cpu_s} s, "
                          f"rss {r.peak_rss_mib} MiB, sha ok {r.sha256_ok}", flush=True)
                    runs.append(r)
        print()
        print_table(runs)
        summary = summarise(runs)
        for tool, s in summary.items():
            print(f"{tool}: median {s['median_mib_per_s']} MiB/s, median cpu {s['median_cpu_s']} s,"
                  f" max peak RSS {s['max_peak_rss_mib']} MiB")
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({
            "size_mib": args.size_mb,
            "mirrors": MIRRORS,
            "server": "vsftpd",
            "pftp_extra_args": args.pftp_arg,
            "load_avg": os.getloadavg(),
            "cpus": os.cpu_count(),
            "runs": [asdict(r) for r in runs],
            "summary": summary,
        }, indent=2) + "\n")
        print(f"wrote {args.out}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
