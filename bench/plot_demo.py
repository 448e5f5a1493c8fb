"""The throughput chart (`pftp get --plot`) on paced loopback mirrors, and what its
sampling costs (notes/client-plot.md). Not a test: figures and a picture.

    python -m bench.plot_demo demo       # 4 paced HTTP mirrors + a backup, events
    python -m bench.plot_demo overhead [--runs 7] [--size-mb 512]

demo: each mirror is a stdlib HTTP server with Range support in its own process,
paced as one link per mirror (all its connections share the rate, like the lab's
shaped links): 32 Mbit/s that slows to a twentieth after 2 s, 16, 8 that dies after
3 MiB, 4, and a 12 Mbit/s backup. Writes bench/results/plot-demo.{json,svg}.

overhead: 4 vsftpd mirrors on unshaped loopback (bench.loopback_throughput), `pftp
get` with the timeline sampled every 0.25 s (as shipped) and with sampling off (the
sampler's waits patched to 1e9 s: only the final sample), interleaved; wall time
and the client's CPU (os.wait4), and the sampler thread's own CPU time.
"""

from __future__ import annotations

import argparse
import contextlib
import http.server
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from .local import free_port, wait_listening

RESULTS = Path(__file__).resolve().parent / "results"
CHUNK = 16 * 1024


# --- a paced HTTP mirror (runs in its own process) -------------------------------------


def serve(port: int, root: Path, rate_bps: float, slow_at: float | None, slow_factor: float,
          die_after: int | None) -> None:
    lock = threading.Lock()
    state = {"next_free": 0.0, "first": None, "sent": 0}

    def pace(n: int) -> None:
        """Reserve the link for n bytes (shared by all of this mirror's connections)."""
        with lock:
            now = time.monotonic()
            if state["first"] is None:
                state["first"] = now
            rate = rate_bps
            if slow_at is not None and now - state["first"] >= slow_at:
                rate = rate_bps / slow_factor
            start = max(now, state["next_free"])
            state["next_free"] = start + 8 * n / rate
            state["sent"] += n
            if die_after is not None and state["sent"] > die_after:
                os._exit(0)  # a killed server: every connection drops, the port closes
            wait = state["next_free"] - now
        time.sleep(wait)

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            return

        def do_HEAD(self) -> None:
            self._serve(body=False)

        def do_GET(self) -> None:
            self._serve(body=True)

        def _serve(self, body: bool) -> None:
            path = root / self.path.lstrip("/")
            if not path.is_file():
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            size = path.stat().st_size
            start, end = 0, size
            m = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
            if m:
                start = int(m.group(1))
                end = min(size, int(m.group(2)) + 1) if m.group(2) else size
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{end - 1}/{size}")
            else:
                self.send_response(200)
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("Content-Length", str(end - start))
            self.end_headers()
            if not body:
                return
            with open(path, "rb") as f, contextlib.suppress(BrokenPipeError,
                                                            ConnectionResetError):
                f.seek(start)
                left = end - start
                while left > 0:
                    chunk = f.read(min(CHUNK, left))
                    pace(len(chunk))
                    self.wfile.write(chunk)
                    left -= len(chunk)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    server.serve_forever()


def demo(out_dir: Path) -> None:
    specs = [  # (Mbit/s, slow after s, die after bytes)
        (32, 2.0, None), (16, None, None), (8, None, 3 * 2**20), (4, None, None),
        (12, None, None),  # the backup
    ]
    with tempfile.TemporaryDirectory(prefix="pftp-plot-demo-") as tmp:
        root = Path(tmp) / "root"
        root.mkdir()
        data = os.urandom(48 * 2**20)
        (root / "demo.bin").write_bytes(data)
        import hashlib

        sha = hashlib.sha256(data).hexdigest()
        procs, urls = [], []
        try:
            for rate, slow_at, die in specs:
                port = free_port()
                argv = [sys.executable, "-m", "bench.plot_demo", "serve", "--port", str(port),
                        "--root", str(root), "--rate", str(rate * 1e6)]
                if slow_at is not None:
                    argv += ["--slow-at", str(slow_at)]
                if die is not None:
                    argv += ["--die-after", str(die)]
                procs.append(subprocess.Popen(argv, start_new_session=True))
                wait_listening(port, procs[-1])
                urls.append(f"http://127.0.0.1:{port}/demo.bin")
            chart = out_dir / "plot-demo.svg"
            pftp = str(Path(sys.executable).with_name("pftp"))
            argv = [pftp, "get", *[a for u in urls[:4] for a in ("--mirror", u)],
                    "--backup", urls[4], "--sha256", sha, "-o", str(Path(tmp) / "out.bin"),
                    "--plot", str(chart), "--json", "--quiet", "--no-discovery"]
            env = {**os.environ, "PFTP_CLIENT_CONFIG": str(Path(tmp) / "none.toml")}
            env.pop("PFTP_ACCESS_BANDWIDTH", None)
            r = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
        finally:
            for p in procs:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait(10)
        if r.returncode != 0:
            raise SystemExit(f"pftp exited {r.returncode}: {r.stderr[-2000:]}")
        out = json.loads(r.stdout)
        out["path"] = "demo.bin"
        (out_dir / "plot-demo.json").write_text(json.dumps(out, indent=1) + "\n")
        tl = out["timeline"]
        print(f"{out['size'] / 2**20:.0f} MiB in {out['seconds']:.2f} s; timeline "
              f"{len(next(iter(tl['mirrors'].values())))} bins of {tl['bin_s']} s, "
              f"{len(tl['events'])} events: "
              + ", ".join(sorted({e['kind'] for e in tl['events']})))
        for m in out["mirrors"]:
            print(f"  {m['name']}: {m['bytes'] / 2**20:.1f} MiB, {m['state']}, {m['events']}")
        print(f"wrote {chart} and {out_dir / 'plot-demo.json'}")


# --- what sampling costs ---------------------------------------------------------------

# `pftp` as its entry point runs it, with the sampler's figures on stderr at the end;
# argv[1] = the sampling interval ("off": 1e9 s, only the final sample).
_WRAPPER = """
import sys, pftp_client.timeline as t
interval = sys.argv.pop(1)
if interval == "off":
    t.TimelineSampler.__init__.__kwdefaults__.update(interval_s=1e9, first_s=1e9)
stop = t.TimelineSampler.stop
def report(self, *a, **k):
    out = stop(self, *a, **k)
    sys.stderr.write(f"SAMPLER {self.samples} {self.cpu_s:.6f}\\n")
    return out
t.TimelineSampler.stop = report
sys.argv[0] = "pftp"
from pftp_client.launch import main
main()
"""


def overhead(runs: int, size_mb: int) -> None:
    from pftp_lab import make_file, sha256_file

    from .loopback_throughput import measure, vsftpd_mirrors

    tmp = Path(tempfile.mkdtemp(prefix="pftp-plot-overhead-"))
    results: dict[str, list[dict[str, float]]] = {"on": [], "off": []}
    try:
        root = tmp / "root"
        root.mkdir()
        root.chmod(0o755)
        sha = make_file(root / "f.bin", size_mb * 2**20)
        out = tmp / "out.bin"
        env = {**os.environ, "PFTP_CLIENT_CONFIG": str(tmp / "none.toml"),
               "PFTP_ACCESS_PROBE": "off"}
        env.pop("PFTP_ACCESS_BANDWIDTH", None)
        with vsftpd_mirrors(root, tmp, 4) as ports:
            urls = [f"ftp://127.0.0.1:{p}/f.bin" for p in ports]
            for i in range(runs):
                for arm in ("on", "off") if i % 2 == 0 else ("off", "on"):
                    log = tmp / f"{arm}-{i}.log"
                    argv = [sys.executable, "-c", _WRAPPER, "0.25" if arm == "on" else "off",
                            "get", *[a for u in urls for a in ("--mirror", u)], "--sha256",
                            sha, "-o", str(out), "--quiet", "--no-discovery"]
                    wall, code, usage = measure(argv, env, log)
                    text = log.read_text()
                    if code != 0 or sha256_file(out) != sha:
                        raise SystemExit(f"run {arm} {i} failed ({code}): {text[-1000:]}")
                    m = re.search(r"SAMPLER (\d+) ([\d.]+)", text)
                    samples, cpu = (int(m.group(1)), float(m.group(2))) if m else (0, 0.0)
                    results[arm].append({
                        "wall_s": wall,
                        "cpu_s": usage.ru_utime + usage.ru_stime,  # type: ignore[attr-defined]
                        "samples": samples, "sampler_cpu_s": cpu,
                    })
                    out.unlink()
                    print(f"  {arm:3} run {i}: {wall:.3f} s wall, "
                          f"{results[arm][-1]['cpu_s']:.2f} s CPU, {samples} samples, "
                          f"sampler {cpu * 1e3:.2f} ms CPU")
    finally:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    summary = {}
    for arm, rs in results.items():
        summary[arm] = {k: round(statistics.median(r[k] for r in rs), 4) for k in rs[0]}
    on = results["on"]
    per_sample = sum(r["sampler_cpu_s"] for r in on) / max(1, sum(r["samples"] for r in on))
    summary["sampler_cpu_per_sample_us"] = round(per_sample * 1e6, 1)
    print(json.dumps(summary, indent=1))
    (RESULTS / "plot-overhead.json").write_text(
        json.dumps({"size_mb": size_mb, "runs": runs, "summary": summary, "all": results},
                   indent=1) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--root", type=Path, required=True)
    s.add_argument("--rate", type=float, required=True, help="bits/s")
    s.add_argument("--slow-at", type=float, default=None)
    s.add_argument("--slow-factor", type=float, default=20.0)
    s.add_argument("--die-after", type=int, default=None)
    sub.add_parser("demo")
    o = sub.add_parser("overhead")
    o.add_argument("--runs", type=int, default=7)
    o.add_argument("--size-mb", type=int, default=512)
    args = ap.parse_args()
    if args.cmd == "serve":
        serve(args.port, args.root, args.rate, args.slow_at, args.slow_factor, args.die_after)
    elif args.cmd == "demo":
        demo(RESULTS)
    else:
        overhead(args.runs, args.size_mb)


if __name__ == "__main__":
    main()
