"""Download time with and without shared-congestion detection (paper 001 table 8).

Topology of paper 001 fig 12: mirrors m0 and m1 share congested link B, m2
and m3 each have their own link, m4 is the backup; nginx serves the file on
every mirror and the real client engine (pftp_client.engine) downloads it with
the coordinator's kind of plan (equal portions on m0-m3, m4 as backup).
Cases: link B wide enough for both (no congestion), link B congested without
detection, and with detection (SharedCongestionMonitor through the engine's
flow-observer hook; app-level and packet-level timestamps). The engine's
Slow-Server-Algo is switched off in every case so that only the congestion
detector moves work to the backup.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import random
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

FILE_MB = 24
LINK_MBIT = 8
CASES = ["no-congestion", "congested-no-detection", "congested-detection-app",
         "congested-detection-packet"]


def client_main(argv: Sequence[str]) -> None:
    """Runs inside the client namespace: one download, prints a JSON line."""
    from pftp_client.congestion.capture import PacketCapture
    from pftp_client.congestion.monitor import congestion_detector_factory
    from pftp_client.engine import DownloadEngine, EngineConfig
    from pftp_client.part_file import PartFile
    from pftp_client.pieces import PieceGrid, choose_piece_size
    from pftp_client.plan import FileIdentity, MirrorSource, Plan, Portion
    from pftp_client.transports.base import open_fetcher

    ap = argparse.ArgumentParser()
    ap.add_argument("--active", nargs="+", required=True)
    ap.add_argument("--backup", nargs="*", default=[])
    ap.add_argument("--size", type=int, required=True)
    ap.add_argument("--detect", choices=["none", "app", "packet"], default="none")
    ap.add_argument("--out", required=True)
    ap.add_argument("--watchdog-s", type=float, default=240.0)
    args = ap.parse_args(argv)
    faulthandler.dump_traceback_later(args.watchdog_s, exit=True)  # a hang shows where
    active = [MirrorSource(f"m{i}", u, suitability=1.0 - 0.1 * i)
              for i, u in enumerate(args.active)]
    backups = [MirrorSource(f"b{i}", u, suitability=0.5) for i, u in enumerate(args.backup)]
    share = args.size // len(active)
    portions = [Portion(m, i * share, args.size if i == len(active) - 1 else (i + 1) * share)
                for i, m in enumerate(active)]
    plan = Plan(FileIdentity("file.bin", args.size), "coordinated", tuple(portions),
                tuple(active), tuple(backups))
    by_name = {m.name: m for m in (*active, *backups)}
    events = []
    capture = None
    factory = None
    if args.detect != "none":
        if args.detect == "packet":
            capture = PacketCapture([80]).start()

        def endpoint(name: str) -> tuple[str, int]:
            host = by_name[name].url.split("/")[2]
            return host.split(":")[0], 80

        factory = congestion_detector_factory(
            rank_of=lambda n: by_name[n].suitability,
            endpoint_of=endpoint if capture else None,
            on_event=events.append, capture=capture)
    grid = PieceGrid(args.size, choose_piece_size(args.size, len(active)))
    part = PartFile(Path(args.out), args.size, reuse=False)
    t0 = time.monotonic()
    try:
        engine = DownloadEngine(plan=plan, part=part, grid=grid, open_fetcher=open_fetcher,
                                config=EngineConfig(slow_ratio=1e-6), detector_factory=factory)
        result = engine.run()
    finally:
        if capture is not None:
            capture.stop()
    seconds = time.monotonic() - t0
    print(json.dumps({
        "seconds": round(seconds, 3),
        "bytes": result.done.total(),
        "events": [{"kept": str(e.kept), "dropped": [str(f) for f in e.dropped],
                    "confidence": round(e.confidence, 3), "packets": e.packets,
                    "source": str(e.source), "after_s": round(e.at_ns / 1e9 - t0, 3)}
                   for e in events],
        "mirrors": [(m.name, m.bytes, m.state) for m in result.mirrors],
    }))


def measure_downloads(runs: int = 5, seed: int = 6) -> dict:
    from bench.congestion_topology import HTTP_PORT, Link, Topology

    rng = random.Random(seed)
    size = FILE_MB << 20
    with tempfile.TemporaryDirectory(prefix="cg-dl-") as tmp:
        www = Path(tmp) / "www"
        www.mkdir()
        (www / "file.bin").write_bytes(np.random.default_rng(seed).bytes(size))
        links = [Link(LINK_MBIT * 1_000_000, 2)] + [Link(LINK_MBIT * 1_000_000, 1)] * 3
        times: dict[str, list[float]] = {c: [] for c in CASES}
        details: dict[str, list] = {c: [] for c in CASES}
        with Topology(links, http_root=www) as topo:
            urls = [f"http://{a}:{HTTP_PORT}/file.bin" for a in topo.mirror_addrs]
            for run in range(runs):
                order = CASES[:]
                rng.shuffle(order)
                for case in order:
                    shared_rate = 2 * LINK_MBIT if case == "no-congestion" else LINK_MBIT
                    topo.shape(0, shared_rate * 1_000_000)
                    detect = {"congested-detection-app": "app",
                              "congested-detection-packet": "packet"}.get(case, "none")
                    out = Path(tmp) / f"dl-{run}-{case}.bin"
                    argv = [sys.executable, "-m", "bench.congestion_downloads", "client",
                            "--active", *urls[:4], "--backup", urls[4], "--size", str(size),
                            "--detect", detect, "--out", str(out)]
                    res = topo.run_in_client(argv, timeout=300)
                    out.unlink(missing_ok=True)
                    if res.returncode != 0:
                        raise RuntimeError(f"download failed: {res.stderr[-3000:]}")
                    info = json.loads(res.stdout.strip().splitlines()[-1])
                    if info["bytes"] != size:
                        raise RuntimeError(f"incomplete download: {info}")
                    times[case].append(info["seconds"])
                    details[case].append(info)
                    print(f"download run {run} {case}: {info['seconds']} s "
                          f"events={info['events']}", flush=True)
    base = float(np.median(times["no-congestion"]))
    result: dict = {"file_mb": FILE_MB, "link_mbit": LINK_MBIT, "topology": "paper 001 fig 12",
                    "slow_server_algo": "off"}
    notes = {
        "no-congestion": "link B carries both m0 and m1 (2x rate)",
        "congested-no-detection": "link B fits one flow",
        "congested-detection-app": "monitor on engine receive times",
        "congested-detection-packet": "monitor on AF_PACKET timestamps",
    }
    for c in CASES:
        med = float(np.median(times[c]))
        dropped = [e["dropped"] for d in details[c] for e in d["events"]]
        result[c] = {"median_seconds": round(med, 2), "runs": len(times[c]),
                     "seconds": times[c], "vs_no_congestion": round(med / base - 1, 3),
                     "drops": dropped, "note": notes[c]}
    return result


CLI_CASES = ["no-congestion", "congested-off", "congested-app", "congested-auto"]


def measure_cli_downloads(runs: int = 3, seed: int = 6, prefix: str = "cg") -> dict:
    """The same fig 12 topology through the real command line: ``pftp get --mirror
    m0..m3 --backup m4 --congestion {off,app,auto}`` (dynamic mode, every adaptation
    of the engine on, Slow-Server-Algo included). ``auto`` as root = packet capture."""
    from bench.congestion_topology import HTTP_PORT, Link, Topology

    rng = random.Random(seed)
    size = FILE_MB << 20
    pftp = str(Path(sys.executable).parent / "pftp")
    times: dict[str, list[float]] = {c: [] for c in CLI_CASES}
    drops: dict[str, list] = {c: [] for c in CLI_CASES}
    with tempfile.TemporaryDirectory(prefix=f"{prefix}-cli-") as tmp:
        www = Path(tmp) / "www"
        www.mkdir()
        data = np.random.default_rng(seed).bytes(size)
        (www / "file.bin").write_bytes(data)
        import hashlib

        sha = hashlib.sha256(data).hexdigest()
        links = [Link(LINK_MBIT * 1_000_000, 2)] + [Link(LINK_MBIT * 1_000_000, 1)] * 3
        with Topology(links, http_root=www, prefix=prefix) as topo:
            urls = [f"http://{a}:{HTTP_PORT}/file.bin" for a in topo.mirror_addrs]
            for run in range(runs):
                order = CLI_CASES[:]
                rng.shuffle(order)
                for case in order:
                    shared_rate = 2 * LINK_MBIT if case == "no-congestion" else LINK_MBIT
                    topo.shape(0, shared_rate * 1_000_000)
                    mode = {"no-congestion": "off"}.get(case, case.split("-")[-1])
                    out = Path(tmp) / "out.bin"
                    argv = [pftp, "get", *[x for u in urls[:4] for x in ("--mirror", u)],
                            "--backup", urls[4], "--sha256", sha, "-o", str(out), "--json",
                            "--quiet", "--no-discovery", "--restart", "--congestion", mode]
                    res = topo.run_in_client(argv, timeout=300)
                    out.unlink(missing_ok=True)
                    if res.returncode != 0:
                        raise RuntimeError(f"pftp get failed: {res.stderr[-3000:]}")
                    info = json.loads(res.stdout)
                    cong = info["congestion"]
                    times[case].append(info["seconds"])
                    drops[case].append([(e["dropped"], e["source"], e["at_s"], e["packets"])
                                        for e in cong.get("events", [])])
                    print(f"cli run {run} {case}: {info['seconds']} s source={cong['source']} "
                          f"events={drops[case][-1]}", flush=True)
    base = float(np.median(times["no-congestion"]))
    return {
        c: {"median_seconds": round(float(np.median(times[c])), 2), "runs": len(times[c]),
            "seconds": times[c], "vs_no_congestion": round(float(np.median(times[c])) / base - 1,
                                                           3),
            "drops": drops[c]}
        for c in CLI_CASES
    }


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "client":
        client_main(argv[1:])
        return
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--cli", action="store_true",
                    help="download with the real `pftp get` (--congestion off/app/auto)")
    ap.add_argument("--prefix", default="cg", help="namespace prefix")
    args = ap.parse_args(argv)
    if args.cli:
        print(json.dumps(measure_cli_downloads(args.runs, prefix=args.prefix), indent=2))
        return
    print(json.dumps(measure_downloads(args.runs), indent=2))


if __name__ == "__main__":
    main()
