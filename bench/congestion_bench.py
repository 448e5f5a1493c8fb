"""Shared-congestion benchmark: detectors x timestamp sources on real namespaces.

    python -m bench.congestion_bench                 # measure (root) and evaluate
    python -m bench.congestion_bench --runs 5        # fewer runs per topology
    python -m bench.congestion_bench --from-traces   # re-evaluate recorded traces only

Topologies (paper 001 figs 12-15 plus two more): two mirrors sharing a
congested link; two separate shared pairs; three sharing; four sharing; no
sharing (each mirror behind its own congested link); cross traffic (iperf3)
on the shared link. Link rates are drawn per run (seeded) around the nominal
values. Every run records, for the same downloads, the packet-level
(AF_PACKET) and both application-level timestamp sources, so each detector is
judged on identical traffic for every source.

Online evaluation, as the monitor works: every CHECK_MS the detector sees the
newest WINDOW packets (receive events) of each flow up to that moment (app
receive times without coalesced receives), a shared verdict counts once it was given
CONFIRMATIONS checks in a row; the first decided verdict of a pair is its
decision. Writes
bench/results/congestion.json, congestion.md and congestion.png.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path

import numpy as np
from pftp_client.congestion import DETECTORS
from pftp_client.congestion.detectors import pair_test_for
from pftp_client.congestion.record import load
from pftp_client.congestion.timestamps import TYPICAL_MSS, clean_app_timestamps

RESULTS = Path(__file__).resolve().parent / "results"
TRACES = RESULTS / "congestion_traces"
SOURCES = ["packet-afpacket", "app-kernel", "app-recv"]
CHECK_MS = 100  # = SharedCongestionMonitor's default interval
WINDOW = 400  # = its default window_packets
CONFIRMATIONS = 2  # = its default confirmations (shared verdicts in a row)
RUN_SECONDS = 2.5
M = 1_000_000


@dataclass(frozen=True)
class Scenario:
    name: str
    links: tuple[tuple[float, int, bool], ...]  # (nominal Mbit/s, mirrors, cross traffic)
    paper: str


SCENARIOS = [
    Scenario("two-shared", ((8, 2, False), (8, 1, False), (6, 1, False)), "fig 12"),
    Scenario("two-pairs", ((8, 2, False), (10, 2, False)), "fig 13"),
    Scenario("three-shared", ((12, 3, False), (8, 1, False)), "fig 14"),
    Scenario("four-shared", ((16, 4, False),), "fig 15"),
    Scenario("no-sharing", ((6, 1, False), (8, 1, False), (10, 1, False), (12, 1, False)), "-"),
    Scenario("no-sharing-equal", ((8, 1, False), (8, 1, False), (8, 1, False)), "-"),
    Scenario("cross-traffic", ((12, 2, True), (8, 1, False)), "-"),
]


# -- measurement ---------------------------------------------------------------------------
def measure(scenarios: Sequence[Scenario], runs: int, seed: int) -> None:
    from bench.congestion_topology import SERVE_PORT, Link, Topology

    TRACES.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    for sc in scenarios:
        links = [Link(int(r * M), n, x) for r, n, x in sc.links]
        with Topology(links) as topo:
            for run in range(runs):
                rates = []
                for j, link in enumerate(links):
                    rate = int(link.rate_bps * rng.uniform(0.75, 1.25))
                    topo.shape(j, rate)
                    rates.append(rate)
                cross = topo.start_cross_traffic(RUN_SECONDS + 2)
                if cross:
                    time.sleep(1.0)  # let the cross flow fill the shared link first
                out = TRACES / f"{sc.name}_{run:03d}.npz"
                argv = [sys.executable, "-m", "pftp_client.congestion.record", "--capture",
                        "--seconds", str(RUN_SECONDS), "--out", str(out)]
                for addr in topo.mirror_addrs:
                    argv += ["--flow", f"{addr}:{SERVE_PORT}:1000000000"]
                res = topo.run_in_client(argv, timeout=RUN_SECONDS + 60)
                for p in cross:
                    p.kill()
                    p.wait(timeout=10)
                if res.returncode != 0:
                    raise RuntimeError(f"recorder failed: {res.stderr[-2000:]}")
                meta = {"scenario": sc.name, "run": run, "rates_bps": rates,
                        "mirror_link": topo.mirror_link}
                (TRACES / f"{sc.name}_{run:03d}.json").write_text(json.dumps(meta))
                print(f"{sc.name} run {run}: {res.stdout.strip()}", flush=True)


# -- evaluation ----------------------------------------------------------------------------
@dataclass
class PairOutcome:
    truth: bool
    decided: bool
    said_shared: bool
    ever_shared: bool
    packets: float
    seconds: float


def _cum_packets(times: np.ndarray, nbytes: np.ndarray, at: int) -> float:
    idx = np.searchsorted(times, at, side="right")
    return float(nbytes[:idx].sum()) / TYPICAL_MSS


def evaluate_run(trace: dict, mirror_link: Sequence[int], detector: str,
                 source: str) -> list[PairOutcome]:
    test = pair_test_for(detector, source)
    flows = trace["flows"]
    times = [f[source] for f in flows]
    sizes = [f["packet_bytes"] if source.startswith("packet") else f["app_bytes"] for f in flows]
    # what the monitor feeds the test: app-recv without the late (coalesced) receives
    fed = times if source != "app-recv" else [
        clean_app_timestamps(t, n) for t, n in zip(times, sizes, strict=True)]
    per_packet = source.startswith("packet")
    if any(t.size < 2 for t in times):
        return []
    t0 = min(int(t[0]) for t in times)
    t_end = max(int(t[-1]) for t in times)
    checks = np.arange(t0 + CHECK_MS * 1_000_000, t_end + 1, CHECK_MS * 1_000_000)
    outcomes = []
    for a, b in combinations(range(len(flows)), 2):
        truth = mirror_link[a] == mirror_link[b]
        first = None
        ever = False
        streak = 0
        for at in checks:
            ia = np.searchsorted(fed[a], at, side="right")
            ib = np.searchsorted(fed[b], at, side="right")
            wa, wb = fed[a][:ia][-WINDOW:], fed[b][:ib][-WINDOW:]
            if per_packet:  # as the monitor does: packet sizes go with packet times
                v = test(wa, wb, sizes=(sizes[a][:ia][-WINDOW:], sizes[b][:ib][-WINDOW:]))
            else:
                v = test(wa, wb)
            streak = streak + 1 if v.shared else 0
            if v.shared and streak < CONFIRMATIONS:
                continue
            if v.decided and first is None:
                pk = min(_cum_packets(times[a], sizes[a], at), _cum_packets(times[b], sizes[b], at))
                first = (v.shared, pk, (at - t0) / 1e9)
            ever = ever or v.shared
            if first is not None and (ever or at - t0 > 2e9):
                break
        if first is None:
            outcomes.append(PairOutcome(truth, False, False, ever, math.nan, math.nan))
        else:
            outcomes.append(PairOutcome(truth, True, first[0], ever, first[1], first[2]))
    return outcomes


def summarise(outs: list[PairOutcome], runs: int) -> dict:
    if not outs:
        return {"accuracy": None, "false_positive_rate": None, "median_packets_to_decision": None,
                "median_seconds_to_decision": None, "runs": runs, "pairs": 0}
    correct = [o.decided and o.said_shared == o.truth for o in outs]
    neg = [o for o in outs if not o.truth]
    pos = [o for o in outs if o.truth]
    dec = [o for o in outs if o.decided]
    return {
        "accuracy": round(float(np.mean(correct)), 4),
        "false_positive_rate": round(float(np.mean([o.said_shared for o in neg])), 4) if neg
        else None,
        "false_negative_rate": round(float(np.mean([not o.said_shared for o in pos])), 4) if pos
        else None,
        "false_positive_rate_any_check": round(float(np.mean([o.ever_shared for o in neg])), 4)
        if neg else None,
        "undecided_rate": round(1 - len(dec) / len(outs), 4),
        "median_packets_to_decision": round(float(np.median([o.packets for o in dec])), 1)
        if dec else None,
        "p90_packets_to_decision": round(float(np.percentile([o.packets for o in dec], 90)), 1)
        if dec else None,
        "median_seconds_to_decision": round(float(np.median([o.seconds for o in dec])), 3)
        if dec else None,
        "runs": runs,
        "pairs": len(outs),
    }


def evaluate(scenarios: Sequence[Scenario], detectors: Sequence[str]) -> dict:
    per: dict = {d: {s: [] for s in SOURCES} for d in detectors}
    per_sc: dict = {sc.name: {d: {s: [] for s in SOURCES} for d in detectors} for sc in scenarios}
    runs_of: dict[str, int] = {}
    for sc in scenarios:
        files = sorted(TRACES.glob(f"{sc.name}_*.npz"))
        runs_of[sc.name] = len(files)
        for f in files:
            meta = json.loads(f.with_suffix(".json").read_text())
            trace = load(str(f))
            for d in detectors:
                for s in SOURCES:
                    outs = evaluate_run(trace, meta["mirror_link"], d, s)
                    per[d][s].extend(outs)
                    per_sc[sc.name][d][s].extend(outs)
    total_runs = sum(runs_of.values())
    return {
        "detectors": {d: {s: summarise(per[d][s], total_runs) for s in SOURCES} for d in detectors},
        "scenarios": {sc.name: {"paper": sc.paper, "runs": runs_of[sc.name],
                                "links_mbit": [list(x) for x in sc.links],
                                "detectors": {d: {s: summarise(per_sc[sc.name][d][s],
                                                               runs_of[sc.name])
                                                  for s in SOURCES} for d in detectors}}
                      for sc in scenarios},
        "settings": {"check_ms": CHECK_MS, "window_packets": WINDOW, "run_seconds": RUN_SECONDS},
    }


def _fmt(x: object, pct: bool = False) -> str:
    if x is None:
        return "-"
    return f"{100 * float(x):.1f} %" if pct else f"{x}"


def markdown(result: dict) -> str:
    lines = ["# Shared-congestion detection (bench/congestion_bench.py)", "",
             "| detector | timestamps | pairwise accuracy | false 'shared' | missed shared | "
             "undecided | median packets/flow | p90 packets | median s | pairs | runs |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for d, by_src in result["detectors"].items():
        for s, r in by_src.items():
            lines.append(f"| {d} | {s} | {_fmt(r['accuracy'], True)} | "
                         f"{_fmt(r['false_positive_rate'], True)} | "
                         f"{_fmt(r.get('false_negative_rate'), True)} | "
                         f"{_fmt(r.get('undecided_rate'), True)} | "
                         f"{_fmt(r['median_packets_to_decision'])} | "
                         f"{_fmt(r.get('p90_packets_to_decision'))} | "
                         f"{_fmt(r['median_seconds_to_decision'])} | {r['pairs']} | {r['runs']} |")
    lines += ["", "## Per topology (accuracy / false 'shared' / median packets)", "",
              "| topology | paper | " + " | ".join(
                  f"{d} {s}" for d in result["detectors"] for s in SOURCES) + " |",
              "|---|---|" + "---|" * (len(result["detectors"]) * len(SOURCES))]
    for name, sc in result["scenarios"].items():
        cells = []
        for d in result["detectors"]:
            for s in SOURCES:
                r = sc["detectors"][d][s]
                cells.append(f"{_fmt(r['accuracy'], True)} / {_fmt(r['false_positive_rate'], True)}"
                             f" / {_fmt(r['median_packets_to_decision'])}")
        lines.append(f"| {name} | {sc['paper']} | " + " | ".join(cells) + " |")
    if result.get("downloads"):
        lines += ["", "## Download time (paper 001 table 8 style)", "",
                  "| case | median s | runs | note |", "|---|---|---|---|"]
        for case, r in result["downloads"].items():
            if isinstance(r, dict) and "median_seconds" in r:
                lines.append(f"| {case} | {r['median_seconds']} | {r['runs']} | "
                             f"{r.get('note', '')} |")
    return "\n".join(lines) + "\n"


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dets = list(result["detectors"])
    scs = list(result["scenarios"])
    fig, axes = plt.subplots(1, len(SOURCES), figsize=(5 * len(SOURCES), 4), sharey=True)
    width = 0.8 / len(dets)
    for ax, s in zip(axes, SOURCES, strict=True):
        for k, d in enumerate(dets):
            acc = [result["scenarios"][n]["detectors"][d][s]["accuracy"] or 0 for n in scs]
            ax.bar(np.arange(len(scs)) + k * width, [100 * a for a in acc], width, label=d)
        ax.set_xticks(np.arange(len(scs)) + width * (len(dets) - 1) / 2)
        ax.set_xticklabels(scs, rotation=35, ha="right", fontsize=8)
        ax.set_title(f"timestamps: {s}")
        ax.set_ylim(0, 100.5)
        ax.axhline(97, color="grey", ls=":", lw=1)
        ax.axhline(90, color="grey", ls="--", lw=1)
    axes[0].set_ylabel("pairwise accuracy (%)")
    axes[0].legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--seed", type=int, default=6)
    ap.add_argument("--from-traces", action="store_true", help="skip measuring")
    ap.add_argument("--only", nargs="*", help="scenario names")
    ap.add_argument("--no-downloads", action="store_true")
    args = ap.parse_args(argv)
    scenarios = [s for s in SCENARIOS if not args.only or s.name in args.only]
    if not args.from_traces:
        measure(scenarios, args.runs, args.seed)
    result = evaluate(scenarios, list(DETECTORS))
    out_json = RESULTS / "congestion.json"
    previous = json.loads(out_json.read_text()) if out_json.exists() else {}
    if not args.no_downloads:
        from bench.congestion_downloads import measure_downloads

        result["downloads"] = measure_downloads(runs=max(3, args.runs // 4), seed=args.seed)
    else:
        result["downloads"] = previous.get("downloads", {})
    RESULTS.mkdir(parents=True, exist_ok=True)
    out_json.write_text(json.dumps(result, indent=2))
    (RESULTS / "congestion.md").write_text(markdown(result))
    plot(result, RESULTS / "congestion.png")
    print(markdown(result))


if __name__ == "__main__":
    main()
