"""Summaries of benchmark runs and the files written next to latest.json (table, chart)."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any


def summarize(runs_s: list[float], ok: list[bool], bound_s: float) -> dict[str, Any]:
    """Median and spread over the successful runs; every run's time is kept in runs_s."""
    good = [t for t, k in zip(runs_s, ok, strict=True) if k]
    median = statistics.median(good) if good else None
    return {
        "runs_s": [round(t, 3) for t in runs_s],
        "median_s": round(median, 3) if median is not None else None,
        "min_s": round(min(good), 3) if good else None,
        "max_s": round(max(good), 3) if good else None,
        "stdev_s": round(statistics.stdev(good), 3) if len(good) > 1 else 0.0 if good else None,
        "ratio_to_bound": round(median / bound_s, 3) if median is not None else None,
        "ok_runs": len(good),
        "sha256_ok": bool(runs_s) and all(ok),
    }


def _fmt(v: float | None, spec: str = ".2f") -> str:
    return "—" if v is None else format(v, spec)


def markdown(result: dict[str, Any]) -> str:
    m = result["machine"]
    lines = [
        "# P-FTP lab benchmark",
        "",
        f"{m.get('date', '')} · {m.get('mode', '')} · {m.get('runs', '')} run(s) per tool · "
        f"{m.get('cpus', '')} CPUs · kernel {m.get('kernel', '')}",
        "",
        "Times in seconds (median over successful runs; spread = min–max). "
        "Ratio = median / lower bound (file size over the best aggregate rate of the "
        "topology, piecewise over its events). ✗ = a run failed or its SHA-256 did not match.",
        "",
    ]
    for sc in result["scenarios"]:
        lines += [
            f"## {sc['name']}: {sc.get('title', '')}",
            "",
            f"File {sc['file_bytes'] / (1 << 20):.0f} MiB, bound **{sc['bound_s']:.2f} s**.",
            "",
            "| tool | median s | ratio | spread s | runs | SHA-256 | note |",
            "|---|---:|---:|---:|---:|:---:|---|",
        ]
        for name, t in sc["tools"].items():
            if t.get("status") == "unavailable":
                lines.append(f"| {name} | — | — | — | 0 | — | unavailable: "
                             f"{t.get('reason', '')[:120]} |")
                continue
            spread = (f"{_fmt(t['min_s'])}–{_fmt(t['max_s'])}" if t["min_s"] is not None
                      else "—")
            note = "; ".join(e[:120] for e in t.get("errors", [])[:1])
            lines.append(
                f"| {name} | {_fmt(t['median_s'])} | {_fmt(t['ratio_to_bound'])} | {spread} | "
                f"{t['ok_runs']}/{len(t['runs_s'])} | {'✓' if t['sha256_ok'] else '✗'} | "
                f"{note.replace('|', '/').replace(chr(10), ' ')} |"
            )
        lines.append("")
    return "\n".join(lines)


def chart(result: dict[str, Any], path: Path) -> None:
    """One panel per scenario: median time per tool (whiskers min–max), bound as a line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scenarios = result["scenarios"]
    cols = 2 if len(scenarios) > 1 else 1
    rows = (len(scenarios) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(7.5 * cols, 3.6 * rows), squeeze=False)
    for ax, sc in zip(axes.flat, scenarios, strict=False):
        names, med, lo, hi, colors = [], [], [], [], []
        for name, t in sc["tools"].items():
            names.append(name)
            if t.get("median_s") is None:
                med.append(0.0)
                lo.append(0.0)
                hi.append(0.0)
                colors.append("#bbbbbb")
                continue
            med.append(t["median_s"])
            lo.append(t["median_s"] - t["min_s"])
            hi.append(t["max_s"] - t["median_s"])
            colors.append("#2b6cb0" if name.startswith("pftp") else
                          "#999999" if name.startswith("curl") else "#dd8452")
        x = range(len(names))
        ax.bar(x, med, color=colors, yerr=[lo, hi], capsize=3)
        for i, (n, v) in enumerate(zip(names, med, strict=True)):
            if v == 0.0:
                ax.text(i, 0, "n/a", ha="center", va="bottom", fontsize=7, rotation=90)
            del n
        ax.axhline(sc["bound_s"], color="crimson", linestyle="--", linewidth=1.2,
                   label=f"lower bound {sc['bound_s']:.2f} s")
        ax.set_xticks(list(x))
        ax.set_xticklabels(names, rotation=40, ha="right", fontsize=7)
        ax.set_ylabel("seconds")
        ax.set_title(f"{sc['name']} ({sc['file_bytes'] / (1 << 20):.0f} MiB)", fontsize=9)
        ax.legend(fontsize=7, loc="best")
    for ax in list(axes.flat)[len(scenarios):]:
        ax.axis("off")
    fig.suptitle("P-FTP lab benchmark: download time per tool (median, min–max)", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
