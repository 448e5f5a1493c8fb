"""P-FTP against aria2c, axel, lftp and plain curl in the network lab (issue 5).

    python -m bench.lab_bench            # all 7 scenarios, 3 runs per tool
    python -m bench.lab_bench --quick    # small files, 1 run, 3 scenarios (developer loop)

Writes bench/results/latest.json, latest.md and latest.png. Needs root (network namespaces).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pftp_lab import Lab, LabError, make_file

from . import coordinator, report
from .scenarios import SCENARIOS, Scenario
from .tools import RunContext, run_once, tools_for

RESULTS = Path(__file__).resolve().parent / "results"


def machine_info(quick: bool, runs: int) -> dict[str, Any]:
    def version(argv: list[str]) -> str:
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return "missing"
        text = (out.stdout or out.stderr).strip().splitlines()
        return text[0][:80] if text else "?"

    cpu = "?"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parent.parent).stdout.strip()
    return {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "mode": "quick" if quick else "full",
        "runs": runs,
        "hostname": platform.node(),
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
        "cpu_model": cpu,
        "load_avg": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
        "git_rev": rev,
        "tools": {
            "aria2c": version(["aria2c", "--version"]),
            "axel": version(["axel", "--version"]),
            "lftp": version(["lftp", "--version"]),
            "curl": version(["curl", "--version"]),
        },
    }


def run_scenario(sc: Scenario, *, quick: bool, runs: int, idx: int, total: int,
                 tmp: Path, only_tools: set[str] | None) -> dict[str, Any]:
    size = sc.file_bytes(quick)
    bound = sc.bound_s(size)
    src = tmp / f"{sc.name}.bin"
    digest = make_file(src, size, seed=idx)
    print(f"\n[{idx}/{total}] {sc.name}: {sc.title}\n"
          f"  file {size / (1 << 20):.0f} MiB, lower bound {bound:.2f} s", flush=True)
    entry: dict[str, Any] = {
        "name": sc.name, "title": sc.title, "file_bytes": size, "bound_s": round(bound, 3),
        "mirrors": {}, "access_bps": sc.access_bps,
        "events": [ev.__dict__ for ev in sc.events], "tools": {},
    }
    t_setup = time.monotonic()
    with Lab(list(sc.mirrors), files={"data.bin": src}, access_bps=sc.access_bps,
             bottlenecks=list(sc.bottlenecks), coordinator=True) as lab:
        desc = lab.describe()
        entry["mirrors"] = desc["mirrors"]
        entry["bottlenecks"] = desc["bottlenecks"]
        print(f"  lab {lab.lab_id} up in {time.monotonic() - t_setup:.1f} s; "
              f"starting coordinator...", flush=True)
        coord = coordinator.start(lab, src, "data.bin")
        entry["coordinator"] = {"url": coord.url, "reason": coord.reason,
                                "setup_s": round(coord.setup_s, 2), "steps_s": coord.steps_s,
                                "probes": coord.probes}
        print(f"  coordinator: {coord.url or 'unavailable: ' + coord.reason[:160]}", flush=True)
        try:
            out_dir = tmp / sc.name
            out_dir.mkdir(exist_ok=True)
            ctx = RunContext(
                lab=lab, scenario=sc, fname="data.bin", sha256=digest, file_bytes=size,
                out_dir=out_dir,
                # quick: a run slower than 12x the bound counts as failed (keeps the loop short)
                timeout_s=max(15.0, 12 * bound) if quick else max(60.0, 25 * bound),
                coordinator_url=coord.url, coordinator_reason=coord.reason or "no coordinator",
                rng=random.Random(1000 + idx),
            )
            for tool in tools_for(sc, quick):
                if only_tools and not any(tool.name.startswith(t) for t in only_tools):
                    continue
                reason = tool.unavailable(ctx)
                if reason:
                    entry["tools"][tool.name] = {
                        "status": "unavailable", "reason": reason, "runs_s": [],
                        "median_s": None, "ratio_to_bound": None, "sha256_ok": False,
                        "min_s": None, "max_s": None, "ok_runs": 0,
                    }
                    print(f"  {tool.name:<18} unavailable: {reason[:120]}", flush=True)
                    continue
                times, oks, errors, details = [], [], [], []
                tool_runs = min(runs, tool.max_runs or runs)
                for r in range(tool_runs):
                    res = run_once(tool, ctx, r)
                    times.append(res.seconds)
                    oks.append(res.ok)
                    if res.error:
                        errors.append(res.error)
                    if res.detail:
                        details.append(res.detail)
                    mark = "ok" if res.ok else f"FAILED ({res.error[:140]})"
                    print(f"  {tool.name:<18} run {r + 1}/{tool_runs}: {res.seconds:7.2f} s  "
                          f"x{res.seconds / bound:5.2f}  {mark}", flush=True)
                summary = report.summarize(times, oks, bound)
                summary["status"] = "ok" if all(oks) else "failed" if not any(oks) else "partial"
                summary["errors"] = errors
                if details:
                    summary["details"] = details
                entry["tools"][tool.name] = summary
        finally:
            coordinator.drop_db(coord.database)
        entry["lab_events"] = [e.__dict__ for e in lab.events][-50:]
    src.unlink()
    return entry


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.lab_bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="small files, 1 run, 3 scenarios, curl from the fastest mirror only")
    parser.add_argument("--runs", type=int, help="runs per tool (default 3, quick 1)")
    parser.add_argument("--scenario", action="append", help="only these scenarios (repeat)")
    parser.add_argument("--tool", action="append", help="only tools whose name starts so")
    parser.add_argument("--out", type=Path, default=RESULTS, help="results directory")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("bench.lab_bench needs root: it builds network namespaces and tc qdiscs "
              "(run `sudo make bench`).", file=sys.stderr)
        return 2
    runs = args.runs or (1 if args.quick else 3)
    chosen = [s for s in SCENARIOS if (s.quick or not args.quick)]
    if args.scenario:
        unknown = set(args.scenario) - {s.name for s in SCENARIOS}
        if unknown:
            print(f"unknown scenario(s) {sorted(unknown)}; known: "
                  f"{[s.name for s in SCENARIOS]}", file=sys.stderr)
            return 2
        chosen = [s for s in SCENARIOS if s.name in args.scenario]
    result: dict[str, Any] = {"machine": machine_info(args.quick, runs), "scenarios": []}
    t0 = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="pftp-bench-"))
    tmp.chmod(0o755)
    result["complete"] = False
    try:
        for i, sc in enumerate(chosen, 1):
            result["scenarios"].append(run_scenario(
                sc, quick=args.quick, runs=runs, idx=i, total=len(chosen), tmp=tmp,
                only_tools=set(args.tool) if args.tool else None))
            # After every scenario, so that an interrupted run still leaves its figures.
            result["complete"] = i == len(chosen)
            _write(result, args.out, time.monotonic() - t0)
    except LabError as exc:
        print(f"bench.lab_bench: lab error: {exc}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\nwrote {args.out}/latest.json, latest.md, latest.png "
          f"({result['machine']['wall_s']} s)", flush=True)
    return 0


def _write(result: dict[str, Any], out: Path, wall_s: float) -> None:
    result["machine"]["wall_s"] = round(wall_s, 1)
    out.mkdir(parents=True, exist_ok=True)
    tmp_json = out / "latest.json.tmp"
    tmp_json.write_text(json.dumps(result, indent=2) + "\n")
    tmp_json.replace(out / "latest.json")
    (out / "latest.md").write_text(report.markdown(result) + "\n")
    report.chart(result, out / "latest.png")


if __name__ == "__main__":
    sys.exit(main())
