"""Inline SVG charts for the status page, rendered on the server (no JS, no CDN).

Pure functions: data in, SVG markup out. Every text that comes from data is escaped.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from html import escape

# Colour-blind-safe palette (Okabe-Ito), cycled over series.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")

_MARGIN_L, _MARGIN_R, _MARGIN_T, _MARGIN_B = 58, 12, 26, 34


@dataclass(frozen=True)
class Series:
    label: str
    points: Sequence[tuple[float, float]]  # (epoch seconds, value)


def colour(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def nice_ticks(lo: float, hi: float, count: int = 4) -> list[float]:
    """Round tick values covering [lo, hi] (1-2-5 steps)."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return []
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    raw = (hi - lo) / max(count, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    start = math.floor(lo / step) * step
    ticks = []
    v = start
    while v <= hi + step * 1e-9:
        ticks.append(round(v, 12))
        v += step
    if ticks and ticks[-1] < hi:
        ticks.append(round(ticks[-1] + step, 12))
    return ticks


def fmt_value(v: float) -> str:
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 100:
        return f"{v:.0f}"
    if a >= 10:
        return f"{v:.1f}".rstrip("0").rstrip(".")
    if a >= 0.01:
        return f"{v:.2f}".rstrip("0").rstrip(".")
    return f"{v:.1e}"


def _fmt_time(ts: float, span_s: float) -> str:
    t = datetime.fromtimestamp(ts, UTC)
    return t.strftime("%m-%d %H:%M") if span_s > 86400 else t.strftime("%H:%M")


def downsample(points: Sequence[tuple[float, float]], limit: int) -> list[tuple[float, float]]:
    """At most ``limit`` points, evenly picked, first and last kept."""
    pts = list(points)
    if len(pts) <= limit or limit < 2:
        return pts
    step = (len(pts) - 1) / (limit - 1)
    return [pts[round(i * step)] for i in range(limit)]


def empty_chart(title: str, message: str, width: int = 560, height: int = 220) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}">'
        f'<text x="{_MARGIN_L}" y="16" class="title">{escape(title)}</text>'
        f'<text x="{width / 2}" y="{height / 2}" text-anchor="middle" class="muted">'
        f"{escape(message)}</text></svg>"
    )


def time_series_chart(
    title: str,
    series: Sequence[Series],
    *,
    unit: str,
    width: int = 560,
    height: int = 220,
    max_points: int = 300,
) -> str:
    """Lines over time, one per series, with a legend; y axis starts at 0."""
    series = [Series(s.label, downsample(sorted(s.points), max_points)) for s in series]
    series = [s for s in series if s.points]
    if not series:
        return empty_chart(title, "no data yet", width, height)
    xs = [p[0] for s in series for p in s.points]
    ys = [p[1] for s in series for p in s.points]
    x0, x1 = min(xs), max(xs)
    if x1 <= x0:
        x0, x1 = x0 - 60, x1 + 60
    yticks = nice_ticks(0.0, max(ys) if max(ys) > 0 else 1.0)
    y1 = yticks[-1] if yticks else 1.0
    pw = width - _MARGIN_L - _MARGIN_R
    ph = height - _MARGIN_T - _MARGIN_B

    def px(x: float) -> float:
        return _MARGIN_L + (x - x0) / (x1 - x0) * pw

    def py(y: float) -> float:
        return _MARGIN_T + ph - (y / y1) * ph

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}">',
        f'<text x="{_MARGIN_L}" y="16" class="title">{escape(title)}</text>',
    ]
    for t in yticks:
        y = py(t)
        out.append(
            f'<line x1="{_MARGIN_L}" x2="{width - _MARGIN_R}" y1="{y:.1f}" y2="{y:.1f}" '
            f'class="grid"/><text x="{_MARGIN_L - 4}" y="{y + 4:.1f}" text-anchor="end" '
            f'class="tick">{fmt_value(t)}</text>'
        )
    out.append(
        f'<text x="12" y="{_MARGIN_T + ph / 2:.1f}" class="tick" text-anchor="middle" '
        f'transform="rotate(-90 12 {_MARGIN_T + ph / 2:.1f})">{escape(unit)}</text>'
    )
    for i in range(4):
        t = x0 + (x1 - x0) * i / 3
        anchor = "start" if i == 0 else "end" if i == 3 else "middle"
        out.append(
            f'<text x="{px(t):.1f}" y="{height - _MARGIN_B + 16}" text-anchor="{anchor}" '
            f'class="tick">{_fmt_time(t, x1 - x0)} UTC</text>'
        )
    out.append(
        f'<line x1="{_MARGIN_L}" x2="{width - _MARGIN_R}" y1="{py(0):.1f}" y2="{py(0):.1f}" '
        'class="axis"/>'
    )
    legend_x = _MARGIN_L + 8
    for i, s in enumerate(series):
        c = colour(i)
        if len(s.points) == 1:
            x, y = s.points[0]
            out.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{c}"/>')
        else:
            pts = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in s.points)
            out.append(
                f'<polyline points="{pts}" fill="none" stroke="{c}" stroke-width="1.6"/>'
            )
        label = escape(s.label)
        out.append(
            f'<rect x="{legend_x}" y="{_MARGIN_T + 2}" width="10" height="10" fill="{c}"/>'
            f'<text x="{legend_x + 14}" y="{_MARGIN_T + 11}" class="legend">{label}</text>'
        )
        legend_x += 22 + 7 * len(s.label)
    out.append("</svg>")
    return "".join(out)


@dataclass(frozen=True)
class DownloadBar:
    label: str  # e.g. file name + time
    aggregate_bps: float
    best_single_bps: float | None


def download_speed_chart(
    title: str, bars: Sequence[DownloadBar], *, width: int = 560, height: int = 240
) -> str:
    """Per recent download: parallel speed next to the best single mirror's speed."""
    if not bars:
        return empty_chart(title, "no downloads reported yet", width, height)
    top = max(max(b.aggregate_bps, b.best_single_bps or 0.0) for b in bars) / 1e6
    yticks = nice_ticks(0.0, top if top > 0 else 1.0)
    y1 = yticks[-1] if yticks else 1.0
    pw = width - _MARGIN_L - _MARGIN_R
    ph = height - _MARGIN_T - _MARGIN_B - 14
    slot = pw / len(bars)
    bw = max(2.0, min(18.0, slot * 0.38))

    def py(v_mbps: float) -> float:
        return _MARGIN_T + 14 + ph - (v_mbps / y1) * ph

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}">',
        f'<text x="{_MARGIN_L}" y="16" class="title">{escape(title)}</text>',
        f'<rect x="{_MARGIN_L + 8}" y="{_MARGIN_T - 2}" width="10" height="10" '
        f'fill="{colour(0)}"/><text x="{_MARGIN_L + 22}" y="{_MARGIN_T + 7}" class="legend">'
        "P-FTP (all mirrors)</text>",
        f'<rect x="{_MARGIN_L + 150}" y="{_MARGIN_T - 2}" width="10" height="10" '
        f'fill="{colour(1)}"/><text x="{_MARGIN_L + 164}" y="{_MARGIN_T + 7}" class="legend">'
        "best single mirror</text>",
    ]
    for t in yticks:
        y = py(t)
        out.append(
            f'<line x1="{_MARGIN_L}" x2="{width - _MARGIN_R}" y1="{y:.1f}" y2="{y:.1f}" '
            f'class="grid"/><text x="{_MARGIN_L - 4}" y="{y + 4:.1f}" text-anchor="end" '
            f'class="tick">{fmt_value(t)}</text>'
        )
    mid = _MARGIN_T + 14 + ph / 2
    out.append(
        f'<text x="12" y="{mid:.1f}" class="tick" text-anchor="middle" '
        f'transform="rotate(-90 12 {mid:.1f})">Mbit/s</text>'
    )
    for i, b in enumerate(bars):
        cx = _MARGIN_L + slot * (i + 0.5)
        agg = b.aggregate_bps / 1e6
        out.append(
            f'<rect x="{cx - bw:.1f}" y="{py(agg):.1f}" width="{bw:.1f}" '
            f'height="{py(0) - py(agg):.1f}" fill="{colour(0)}">'
            f"<title>{escape(b.label)}: {fmt_value(agg)} Mbit/s</title></rect>"
        )
        if b.best_single_bps:
            one = b.best_single_bps / 1e6
            out.append(
                f'<rect x="{cx:.1f}" y="{py(one):.1f}" width="{bw:.1f}" '
                f'height="{py(0) - py(one):.1f}" fill="{colour(1)}">'
                f"<title>{escape(b.label)}: best mirror {fmt_value(one)} Mbit/s</title></rect>"
            )
    out.append(
        f'<line x1="{_MARGIN_L}" x2="{width - _MARGIN_R}" y1="{py(0):.1f}" y2="{py(0):.1f}" '
        'class="axis"/>'
        f'<text x="{_MARGIN_L}" y="{height - 8}" class="tick">oldest</text>'
        f'<text x="{width - _MARGIN_R}" y="{height - 8}" text-anchor="end" class="tick">'
        "newest</text></svg>"
    )
    return "".join(out)
