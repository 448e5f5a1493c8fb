"""Coordinator load benchmark (issue 2, Targets): `make bench-coordinator`.

1. Creates a fresh PostgreSQL database, migrates it (`pftp-coordinator migrate`),
   and bulk-loads it with COPY: 1,000 mirrors, 100,000 files on mostly 5-30
   mirrors each (~1.6 M replicas), 6 h of path probes, 1 h of utilization samples
   for the mirrors that run an agent, client reports, an eq. 3 fit and a few
   congestion penalties.
2. Starts `pftp-coordinator serve --workers N` (scheduler off: the mirrors are
   fictitious `.invalid` hosts that must never be contacted).
3. Drives POST /api/v1/assignments from a separate load-generator process over
   loopback (C keep-alive connections, closed loop; random files, access
   bandwidths and protocol lists): `wrk` with bench/coordinator_wrk.lua when it is
   installed (C, a few percent of a core: the server gets the CPU), else a raw
   asyncio HTTP/1.1 client in Python (which itself needs ~a third of a core per
   1,000 requests/s on this kind of machine, so it caps what can be measured).
4. Writes bench/results/coordinator.json and drops the database.

Figures are printed, never asserted: this is a benchmark, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

from .local import free_port

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "coordinator.json"
PG_ADMIN = os.environ.get("PFTP_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
BIN = Path(sys.executable).parent


# --- data ------------------------------------------------------------------------


def replica_counts(rng: np.random.Generator, n_files: int, n_mirrors: int) -> np.ndarray:
    """Mostly 5-30 mirrors per file; some scarce (1-4) and some very popular."""
    kind = rng.random(n_files)
    counts = rng.integers(5, 31, n_files)
    scarce = kind < 0.08
    counts[scarce] = rng.integers(1, 5, scarce.sum())
    popular = kind > 0.98
    counts[popular] = rng.integers(31, 200, popular.sum())
    return np.minimum(counts, n_mirrors)


def _ts(dt: datetime) -> str:
    return dt.isoformat()


def load_database(dsn: str, *, n_mirrors: int, n_files: int, seed: int) -> dict[str, float]:
    import psycopg

    rng = np.random.default_rng(seed)
    now = datetime.now(UTC)
    t0 = time.perf_counter()
    counts = replica_counts(rng, n_files, n_mirrors)
    # Mirrors differ in size: some hold far more files (weights ~ Zipf-ish).
    popularity = 1.0 / np.arange(1, n_mirrors + 1) ** 0.6
    popularity /= popularity.sum()
    stats: dict[str, float] = {}
    with psycopg.connect(dsn) as conn, conn.cursor() as cur:
        with cur.copy(
            "COPY mirrors (id, name, region, asn, enabled, notes, state, consecutive_failures,"
            " last_probe_at, last_scan_at, created_at) FROM STDIN"
        ) as cp:
            for i in range(1, n_mirrors + 1):
                state = "down" if i % 97 == 0 else "up"
                enabled = i % 101 != 0
                cp.write_row(
                    (
                        i,
                        f"mirror{i:04d}",
                        f"region{i % 20}",
                        64500 + i % 50,
                        enabled,
                        None,
                        state,
                        0,
                        now,
                        now,
                        now,
                    )
                )
        with cur.copy("COPY mirror_urls (id, mirror_id, protocol, base_url) FROM STDIN") as cp:
            uid = 0
            for i in range(1, n_mirrors + 1):
                uid += 1
                cp.write_row((uid, i, "ftp", f"ftp://mirror{i:04d}.bench.invalid/pub/"))
                if i % 5 < 3:
                    uid += 1
                    cp.write_row((uid, i, "http", f"http://mirror{i:04d}.bench.invalid/pub/"))
        sizes = rng.integers(1 << 20, 8 << 30, n_files)
        with cur.copy(
            "COPY files (id, name, size, sha256, piece_size, piece_sha256, created_at) FROM STDIN"
        ) as cp:
            for f in range(1, n_files + 1):
                cp.write_row(
                    (f, f"dist/f{f:06d}.iso", int(sizes[f - 1]), f"{f:064x}", None, None, now)
                )
        n_rep = 0
        with cur.copy(
            "COPY replicas (id, mirror_id, file_id, path, present, size_seen, verified_at)"
            " FROM STDIN"
        ) as cp:
            for f in range(1, n_files + 1):
                k = int(counts[f - 1])
                holders = rng.choice(n_mirrors, size=k, replace=False, p=popularity) + 1
                path = f"dist/f{f:06d}.iso"
                size = int(sizes[f - 1])
                for m in holders:
                    n_rep += 1
                    cp.write_row((n_rep, int(m), f, path, True, size, now))
        stats["replicas"] = n_rep
        # Path probes: every 5 min for 6 h (72 per mirror).
        base_bw = rng.lognormal(np.log(40e6), 1.0, n_mirrors)
        base_rtt = rng.uniform(0.005, 0.3, n_mirrors)
        pid = 0
        with cur.copy(
            "COPY path_probes (id, mirror_id, ts, method, ok, rtt_s, loss, capacity_bps,"
            " throughput_bps, error, samples) FROM STDIN"
        ) as cp:
            for m in range(n_mirrors):
                for k in range(72):
                    pid += 1
                    ok = rng.random() > 0.02
                    ts = now - timedelta(seconds=300 * k + float(rng.uniform(0, 60)))
                    if ok:
                        cp.write_row(
                            (
                                pid,
                                m + 1,
                                ts,
                                "tcp-connect",
                                True,
                                float(base_rtt[m] * rng.uniform(0.8, 1.3)),
                                float(max(0.0, rng.normal(0.01, 0.01))),
                                float(base_bw[m] * 2),
                                float(base_bw[m] * rng.uniform(0.5, 1.1)),
                                None,
                                1,
                            )
                        )
                    else:
                        cp.write_row(
                            (
                                pid,
                                m + 1,
                                ts,
                                "tcp-connect",
                                False,
                                None,
                                None,
                                None,
                                None,
                                "timeout",
                                1,
                            )
                        )
        stats["path_probes"] = pid
        # Utilization: 80 % of mirrors run an agent, one sample a minute for 1 h.
        uid = 0
        with cur.copy(
            "COPY utilization_samples (id, mirror_id, ts, cpu_percent, memory_percent,"
            " load1, load5,"
            " load15, nic_tx_bps, connections, samples) FROM STDIN"
        ) as cp:
            for m in range(n_mirrors):
                if m % 5 == 4:
                    continue
                cpu0 = float(rng.uniform(5, 90))
                for k in range(60):
                    uid += 1
                    cp.write_row(
                        (
                            uid,
                            m + 1,
                            now - timedelta(seconds=60 * k),
                            float(np.clip(cpu0 + rng.normal(0, 5), 0, 100)),
                            float(rng.uniform(20, 80)),
                            1.0,
                            1.0,
                            1.0,
                            1e8,
                            50,
                            1,
                        )
                    )
        stats["utilization_samples"] = uid
        # Client reports: 5,000 downloads, 1-4 mirrors each.
        with cur.copy(
            "COPY downloads (id, request_id, file_id, file_name, size, seconds, sha256_ok,"
            " access_bandwidth_bps, mode, client_addr, reported_at) FROM STDIN"
        ) as dcp:
            for d in range(1, 5001):
                f = int(rng.integers(1, n_files + 1))
                dcp.write_row(
                    (
                        d,
                        uuid.uuid4().hex,
                        f,
                        f"dist/f{f:06d}.iso",
                        int(sizes[f - 1]),
                        60.0,
                        True,
                        100_000_000,
                        "ranked",
                        "127.0.0.1",
                        now - timedelta(seconds=float(rng.uniform(0, 6 * 3600))),
                    )
                )
        rid = 0
        with cur.copy(
            "COPY mirror_reports (id, download_id, mirror_id, mirror_name, bytes, seconds,"
            " throughput_bps, failures, slow, congested, bad_data, congested_with, reported_at)"
            " FROM STDIN"
        ) as cp:
            for d in range(1, 5001):
                for m in rng.choice(n_mirrors, size=int(rng.integers(1, 5)), replace=False) + 1:
                    rid += 1
                    cp.write_row(
                        (
                            rid,
                            d,
                            int(m),
                            f"mirror{m:04d}",
                            10 << 20,
                            5.0,
                            float(base_bw[m - 1] * rng.uniform(0.3, 1.0)),
                            0,
                            False,
                            False,
                            False,
                            None,
                            now - timedelta(seconds=float(rng.uniform(0, 6 * 3600))),
                        )
                    )
        stats["mirror_reports"] = rid
        cur.execute(
            "INSERT INTO predictor_fits (id, fitted_at, a, b, r2, n_samples)"
            " VALUES (1, %s, 247.44, 344, 0.9, 500)",
            (now,),
        )
        for i in range(1, 40):
            cur.execute(
                "INSERT INTO congestion_penalties"
                " (id, mirror_a_id, mirror_b_id, detected_at, expires_at, reports)"
                " VALUES (%s, %s, %s, %s, %s, 1)",
                (i, i, i + 1, now, now + timedelta(hours=1)),
            )
        for table in (
            "mirrors",
            "mirror_urls",
            "files",
            "replicas",
            "path_probes",
            "utilization_samples",
            "downloads",
            "mirror_reports",
            "predictor_fits",
            "congestion_penalties",
        ):
            cur.execute(
                f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
                f"(SELECT coalesce(max(id), 1) FROM {table}))"
            )
        conn.commit()
        cur.execute("ANALYZE")
    stats["load_s"] = round(time.perf_counter() - t0, 1)
    return stats


# --- load generator (runs in its own process) ------------------------------------------


def _bodies(file_ids: list[int], seed: int, count: int = 20_000) -> list[bytes]:
    rng = random.Random(seed)
    bws = [None, 1_000_000, 10_000_000, 50_000_000, 100_000_000, 1_000_000_000]
    out = []
    for _ in range(count):
        body = json.dumps(
            {
                "file": f"dist/f{rng.choice(file_ids):06d}.iso",
                "access_bandwidth_bps": rng.choice(bws),
                "protocols": rng.choice([["ftp", "http"], ["http", "ftp"], ["ftp"]]),
            }
        ).encode()
        out.append(body)
    return out


async def _connection(
    host: str,
    port: int,
    bodies: list[bytes],
    offset: int,
    stop_at: float,
    warm_until: float,
    lat: list[float],
    errors: list[str],
) -> int:
    reader, writer = await asyncio.open_connection(host, port)
    n = 0
    i = offset
    try:
        while True:
            now = time.perf_counter()
            if now >= stop_at:
                break
            body = bodies[i % len(bodies)]
            i += 7
            req = (
                b"POST /api/v1/assignments HTTP/1.1\r\nHost: bench\r\n"
                b"Content-Type: application/json\r\n"
                b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
            )
            t = time.perf_counter()
            writer.write(req)
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head[9:12])
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            await reader.readexactly(length)
            dt = time.perf_counter() - t
            if t >= warm_until:
                lat.append(dt)
                n += 1
                if status != 200:
                    errors.append(f"HTTP {status}")
    except (OSError, asyncio.IncompleteReadError) as exc:
        errors.append(f"{type(exc).__name__}: {exc}")
    finally:
        writer.close()
    return n


def load_generator_main(args: argparse.Namespace) -> None:
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    file_ids = [int(x) for x in Path(args.file_ids).read_text().split()]
    bodies = _bodies(file_ids, args.seed)

    async def run() -> dict:
        start = time.perf_counter()
        warm_until = start + args.warmup
        stop_at = warm_until + args.duration
        lat: list[float] = []
        errors: list[str] = []
        await asyncio.gather(
            *[
                _connection(
                    "127.0.0.1", args.port, bodies, c * 997, stop_at, warm_until, lat, errors
                )
                for c in range(args.connections)
            ]
        )
        return {"lat": lat, "errors": errors, "elapsed": args.duration}

    res = asyncio.run(run())
    lat = np.array(res["lat"]) * 1000.0
    out = {
        "requests": int(lat.size),
        "throughput_rps": round(lat.size / res["elapsed"], 1),
        "latency_ms": {
            "p50": round(float(np.percentile(lat, 50)), 2) if lat.size else None,
            "p95": round(float(np.percentile(lat, 95)), 2) if lat.size else None,
            "p99": round(float(np.percentile(lat, 99)), 2) if lat.size else None,
            "max": round(float(lat.max()), 2) if lat.size else None,
        },
        "errors": len(res["errors"]),
        "error_samples": sorted(set(res["errors"]))[:5],
    }
    print(json.dumps(out))


WRK_SCRIPT = ROOT / "bench" / "coordinator_wrk.lua"


def _run_wrk(
    port: int, bodies_file: Path, *, connections: int, threads: int, seconds: float
) -> dict:
    """One wrk run; the Lua script's summary line as a dict."""
    out = subprocess.run(
        [
            "wrk",
            f"-t{threads}",
            f"-c{connections}",
            f"-d{max(1, round(seconds))}s",
            "--timeout",
            "10s",
            "-s",
            str(WRK_SCRIPT),
            f"http://127.0.0.1:{port}",
            "--",
            str(bodies_file),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=seconds + 120,
    )
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        raise RuntimeError(f"wrk printed no summary: {out.stdout}\n{out.stderr}")
    return json.loads(lines[-1])


def _children_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_wrk_load(
    port: int, file_ids: list[int], args: argparse.Namespace, server_pid: int
) -> tuple[dict, float, float]:
    """Warm-up run, then the measured run. Returns (result like the Python
    generator's, server CPU seconds and load-generator CPU seconds of the
    measured run)."""
    bodies_file = Path(f"/tmp/pftp_bench_bodies_{os.getpid()}.txt")
    bodies_file.write_bytes(b"\n".join(_bodies(file_ids, args.seed)) + b"\n")
    try:
        if args.warmup > 0:
            _run_wrk(
                port,
                bodies_file,
                connections=args.connections,
                threads=args.wrk_threads,
                seconds=args.warmup,
            )
        cpu0, gen0 = _tree_cpu_s(server_pid), _children_cpu_s()
        res = _run_wrk(
            port,
            bodies_file,
            connections=args.connections,
            threads=args.wrk_threads,
            seconds=args.duration,
        )
        server_cpu_s = _tree_cpu_s(server_pid) - cpu0
        gen_cpu_s = _children_cpu_s() - gen0
    finally:
        bodies_file.unlink(missing_ok=True)
    elapsed = res["duration_us"] / 1e6
    n = int(res["requests"])
    errors = {k[4:]: int(v) for k, v in res.items() if k.startswith("err_") and v}
    out = {
        "requests": n,
        "elapsed_s": elapsed,
        "throughput_rps": round(n / elapsed, 1) if elapsed > 0 else 0.0,
        "latency_ms": {
            "p50": round(res["p50_us"] / 1000, 2),
            "p95": round(res["p95_us"] / 1000, 2),
            "p99": round(res["p99_us"] / 1000, 2),
            "max": round(res["max_us"] / 1000, 2),
        },
        # wrk counts non-2xx/3xx answers as "status" errors, plus socket errors.
        "errors": sum(errors.values()),
        "error_samples": [f"{k}: {v}" for k, v in sorted(errors.items())],
    }
    return out, server_cpu_s, gen_cpu_s


# --- orchestration ------------------------------------------------------------------


def _wait_healthy(port: int, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"coordinator exited with {proc.returncode} during start")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError("coordinator did not become healthy in time")


def _tree_cpu_s(root_pid: int) -> float:
    """User+system CPU seconds of a process and its children (the uvicorn workers)."""
    import psutil

    total = 0.0
    try:
        root = psutil.Process(root_pid)
        for p in [root, *root.children(recursive=True)]:
            try:
                t = p.cpu_times()
                total += t.user + t.system
            except psutil.NoSuchProcess:
                continue
    except psutil.NoSuchProcess:
        pass
    return total


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mirrors", type=int, default=1000)
    ap.add_argument("--files", type=int, default=100_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--duration", type=float, default=20.0)
    ap.add_argument("--warmup", type=float, default=3.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--generator",
        choices=("auto", "wrk", "python"),
        default="auto",
        help="load generator: wrk (if installed, the default) or the built-in Python one",
    )
    ap.add_argument("--wrk-threads", type=int, default=1)
    ap.add_argument("--keep-db", action="store_true", help="do not drop the database afterwards")
    ap.add_argument("--db", help="reuse this already loaded database name (skips the load)")
    ap.add_argument("--output", type=Path, default=RESULTS)
    ap.add_argument("--load-generator", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--file-ids", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.load_generator:
        load_generator_main(args)
        return 0

    import psycopg

    name = args.db or f"pftp_bench_{uuid.uuid4().hex[:10]}"
    base = PG_ADMIN.rsplit("/", 1)[0]
    dsn = f"{base}/{name}"
    env = dict(
        os.environ,
        PFTP_DATABASE_URL=dsn,
        PFTP_SCHEDULER_ENABLED="false",
        PFTP_ANNOUNCE_ENABLED="false",
        PFTP_LOG_LEVEL="WARNING",
        PFTP_CONFIG="/nonexistent",
    )
    stats: dict[str, float] = {}
    server: subprocess.Popen | None = None
    created = False
    try:
        if not args.db:
            with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{name}"')
            created = True
            subprocess.run(
                [str(BIN / "pftp-coordinator"), "migrate"],
                env=env,
                check=True,
                stdout=subprocess.DEVNULL,
            )
            print(f"loading {args.mirrors} mirrors, {args.files} files into {name} ...", flush=True)
            stats = load_database(dsn, n_mirrors=args.mirrors, n_files=args.files, seed=args.seed)
            print(f"loaded: {stats}", flush=True)
        # Files some enabled, not-down mirror holds: a 503 for a file whose only
        # holders are down is a correct answer, not a load failure.
        with psycopg.connect(dsn) as conn:
            servable = [
                r[0]
                for r in conn.execute(
                    "SELECT DISTINCT r.file_id FROM replicas r JOIN mirrors m ON m.id = r.mirror_id"
                    " WHERE m.enabled AND m.state <> 'down' AND r.present"
                )
            ]
        ids_file = Path(f"/tmp/pftp_bench_files_{os.getpid()}.txt")
        ids_file.write_text("\n".join(map(str, servable)))
        port = free_port()
        t0 = time.perf_counter()
        server = subprocess.Popen(
            [
                str(BIN / "pftp-coordinator"),
                "serve",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--workers",
                str(args.workers),
            ],
            env=env,
            start_new_session=True,
        )
        _wait_healthy(port, server, timeout=300)
        startup_s = time.perf_counter() - t0
        print(
            f"coordinator up with {args.workers} workers in {startup_s:.1f} s; "
            f"{args.connections} connections for {args.duration:.0f} s ...",
            flush=True,
        )
        generator = args.generator
        if generator == "auto":
            generator = "wrk" if shutil.which("wrk") else "python"
        load0 = os.getloadavg()[0]
        if generator == "wrk":
            res, server_cpu_s, gen_cpu_s = run_wrk_load(port, servable, args, server.pid)
            # CPU of the measured run only.
            cpu_per_req_us = server_cpu_s / res["requests"] * 1e6 if res["requests"] else None
            gen_label = f"wrk ({args.wrk_threads} thread(s), bench/coordinator_wrk.lua)"
        else:
            cpu0 = _tree_cpu_s(server.pid)
            gen0 = _children_cpu_s()
            gen = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "bench.coordinator_bench",
                    "--load-generator",
                    "--port",
                    str(port),
                    "--file-ids",
                    str(ids_file),
                    "--connections",
                    str(args.connections),
                    "--duration",
                    str(args.duration),
                    "--warmup",
                    str(args.warmup),
                    "--seed",
                    str(args.seed),
                ],
                cwd=ROOT,
                capture_output=True,
                text=True,
                check=True,
                timeout=args.duration + args.warmup + 120,
            )
            server_cpu_s = _tree_cpu_s(server.pid) - cpu0
            gen_cpu_s = _children_cpu_s() - gen0
            res = json.loads(gen.stdout.strip().splitlines()[-1])
            # CPU per answer (includes warm-up requests, which are not counted: an
            # overestimate).
            total_req = res["requests"] * (args.duration + args.warmup) / args.duration
            cpu_per_req_us = server_cpu_s / total_req * 1e6 if total_req else None
            gen_label = "python asyncio (uvloop) generator"
        load1 = os.getloadavg()[0]
        # On a busy shared machine CPU per answer, not wall-clock throughput, is
        # the figure that carries over.
        result = {
            "mirrors": args.mirrors,
            "files": args.files,
            "requests": res["requests"],
            "throughput_rps": res["throughput_rps"],
            "latency_ms": {k: res["latency_ms"][k] for k in ("p50", "p95", "p99")},
            "errors": res["errors"],
            "details": {
                "replicas": stats.get("replicas"),
                "servable_files": len(servable),
                "workers": args.workers,
                "connections": args.connections,
                "duration_s": args.duration,
                "latency_max_ms": res["latency_ms"]["max"],
                "error_samples": res["error_samples"],
                "startup_s": round(startup_s, 1),
                "server_cpu_s": round(server_cpu_s, 2),
                "server_cpu_per_request_us": round(cpu_per_req_us, 1) if cpu_per_req_us else None,
                "load_generator": gen_label,
                "load_generator_cpu_s": round(gen_cpu_s, 2),
                "loadavg_1m_before_after": [round(load0, 2), round(load1, 2)],
                "db_load_s": stats.get("load_s"),
                "cpus": os.cpu_count(),
                "when": datetime.now(UTC).isoformat(timespec="seconds"),
            },
        }
        ids_file.unlink(missing_ok=True)
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(result, indent=2) + "\n")
        print(json.dumps(result, indent=2))
        return 0
    finally:
        if server is not None and server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()
        if created and not args.keep_db:
            with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        elif created:
            print(f"database kept: {name}")


if __name__ == "__main__":
    sys.exit(main())
