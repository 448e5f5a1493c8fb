"""A download's timeline as an SVG line chart (``pftp get --plot``, ``pftp plot``).

x: seconds since the download began; y: Mbit/s. One line per mirror and one for
all of them together, a legend with the mirrors' names, round-numbered ticks, and
each event (slow, failed, congested, corrupt, stolen...) as a small labelled mark
on its mirror's line (hover for its detail). Standard library only: the client
does not depend on matplotlib. Every text that comes from data (mirror names,
event details, the file name, an error) is escaped for XML.
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pftp_client.timeline import Timeline, TimelineEvent, merge_pairs

WIDTH, HEIGHT = 960, 540
_LEFT, _TOP, _BOTTOM = 70, 58, 50
MAX_POINTS = 1000  # per line; longer series are merged in pairs of bins
# matplotlib's default colours (tab10) without its grey, kept for the grid
PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
    "#8c564b", "#e377c2", "#bcbd22", "#17becf",
)
DASHES = ("", "7 3", "2 2")  # past len(PALETTE) mirrors the colours come back dashed
TOTAL_COLOUR = "#222222"
# events drawn as a downward triangle (something went wrong); others as a dot
BAD_KINDS = frozenset({"slow", "failed", "congested", "corrupt"})
_FONT = "DejaVu Sans, Helvetica, Arial, sans-serif"
_NAME_CHARS = 34  # a longer mirror name is cut in the legend (full name on hover)


def nice_step(span: float, target: int) -> float:
    """A round tick step (1, 2, 2.5 or 5 x 10^k) giving about ``target`` ticks over
    ``span`` (Heckbert's "nice numbers")."""
    if not (span > 0 and math.isfinite(span)):
        return 1.0
    raw = span / max(target, 1)
    mag = 10 ** math.floor(math.log10(raw))
    return next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw * (1 - 1e-9))


def ticks(hi: float, target: int, *, cover: bool) -> list[float]:
    """Ticks from 0 in round steps: up to ``hi`` (``cover``: the first at or past it)."""
    if not (hi > 0 and math.isfinite(hi)):
        hi = 1.0
    step = nice_step(hi, target)
    out, i = [0.0], 1
    while out[-1] < hi * (1 - 1e-9) and i <= 4 * target + 4:
        v = round(i * step, 10)
        if v > hi * (1 + 1e-9) and not cover:
            break
        out.append(v)
        i += 1
    return out


def fmt_tick(v: float, step: float) -> str:
    """``v`` with as many decimals as the step needs (2.5 -> 1, 0.25 -> 2, 50 -> 0)."""
    for d in range(7):
        scaled = step * 10**d
        if abs(scaled - round(scaled)) < 1e-6 * max(1.0, scaled):
            return f"{v:.{d}f}"
    return f"{v:g}"


_BAD_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def xml_text(s: object) -> str:
    """``s`` safe in XML text and attributes: & < > " ' escaped, characters XML
    1.0 forbids (controls, lone surrogates) replaced by U+FFFD."""
    t = _BAD_XML.sub("\ufffd", str(s))
    return (
        t.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        .replace('"', "&quot;").replace("'", "&#39;")
    )


def _cut(s: str, n: int) -> str:
    return s if len(s) <= n else s[: n - 1] + "…"


def _text_width(s: str, size: float) -> float:
    return 0.6 * size * len(s)  # (an estimate: no font metrics here)


@dataclass
class _Series:
    name: str
    rates: list[float]  # Mbit/s per bin
    colour: str
    dash: str
    width: float


def _rates_mbps(bins: Sequence[int], bin_s: float, seconds: float) -> list[float]:
    """Mbit/s per bin; the last bin over the part of it the download lasted."""
    n = len(bins)
    out = [8 * b / bin_s / 1e6 for b in bins]
    if n:
        last_w = seconds - (n - 1) * bin_s
        if 1e-3 <= last_w < bin_s:
            out[-1] = 8 * bins[-1] / last_w / 1e6
    return out


def _centres(n: int, bin_s: float, seconds: float) -> list[float]:
    xs = [(i + 0.5) * bin_s for i in range(n)]
    if n and (n - 1) * bin_s < seconds < n * bin_s:
        xs[-1] = ((n - 1) * bin_s + seconds) / 2
    return xs


def _interp(xs: Sequence[float], ys: Sequence[float], x: float) -> float:
    """The line's height at ``x`` (held flat before the first and after the last point)."""
    if not xs:
        return 0.0
    i = bisect.bisect_left(xs, x)
    if i == 0:
        return ys[0]
    if i == len(xs):
        return ys[-1]
    f = (x - xs[i - 1]) / (xs[i] - xs[i - 1]) if xs[i] > xs[i - 1] else 1.0
    return ys[i - 1] + f * (ys[i] - ys[i - 1])


def _thinned(tl: Timeline) -> Timeline:
    """At most MAX_POINTS bins (a hand-made or very long timeline)."""
    mirrors, bin_s = dict(tl.mirrors), tl.bin_s
    while max((len(b) for b in mirrors.values()), default=0) > MAX_POINTS:
        mirrors = {k: merge_pairs(v) for k, v in mirrors.items()}
        bin_s *= 2
    return Timeline(bin_s, tl.seconds, mirrors, tl.events, tl.start_s)


def render_svg(
    timeline: Timeline,
    *,
    title: str = "",
    subtitle: str = "",
    mirror_notes: Mapping[str, str] | None = None,
    width: int = WIDTH,
    height: int = HEIGHT,
) -> str:
    """The chart as an SVG document. ``mirror_notes``: a short text after a
    mirror's name in the legend (its bytes and final state, say)."""
    tl = _thinned(timeline)
    n = tl.bin_count()
    seconds = max(tl.seconds, n * tl.bin_s if tl.seconds <= 0 else 0.0, 1e-3)
    xs = _centres(n, tl.bin_s, seconds)
    names = list(tl.mirrors)
    series = [
        _Series(name, _rates_mbps(tl.mirrors[name], tl.bin_s, seconds),
                PALETTE[i % len(PALETTE)], DASHES[i // len(PALETTE) % len(DASHES)], 1.6)
        for i, name in enumerate(names)
    ]
    total = _Series("total", _rates_mbps(tl.total(), tl.bin_s, seconds), TOTAL_COLOUR, "", 2.6)
    notes = dict(mirror_notes or {})
    legend_rows = [("total", "all mirrors", total), *((s.name, notes.get(s.name, ""), s)
                                                      for s in series)]
    legend_w = min(300.0, max(210.0, 40 + max(
        _text_width(_cut(name, _NAME_CHARS), 11) for name, _, _ in legend_rows)))
    left, top, right, bottom = _LEFT, _TOP, width - legend_w - 16, height - _BOTTOM
    pw, ph = right - left, bottom - top

    ymax = max((max(s.rates, default=0.0) for s in (total, *series)), default=0.0)
    yt = ticks(ymax if ymax > 0 else 1.0, 5, cover=True)
    y1 = yt[-1]
    xt = ticks(seconds, 8, cover=False)
    xstep = xt[1] - xt[0] if len(xt) > 1 else seconds
    ystep = yt[1] - yt[0] if len(yt) > 1 else y1

    def px(x: float) -> float:
        return left + min(max(x, 0.0), seconds) / seconds * pw

    def py(y: float) -> float:
        return bottom - min(max(y, 0.0), y1) / y1 * ph

    out = [
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="{_FONT}" role="img" '
        f'aria-label="{xml_text(title or "throughput per mirror")}">',
        f"<title>{xml_text(title or 'throughput per mirror')}</title>",
        f'<rect width="{width}" height="{height}" fill="#ffffff"/>',
        f'<text x="{left}" y="24" font-size="15" font-weight="bold" fill="#111">'
        f"{xml_text(_cut(title, 100))}</text>",
        f'<text x="{left}" y="42" font-size="11" fill="#555">{xml_text(_cut(subtitle, 140))}'
        "</text>",
        f'<rect x="{left}" y="{top}" width="{pw:.1f}" height="{ph:.1f}" fill="none" '
        'stroke="#bbbbbb"/>',
    ]
    # grid and ticks
    for v in yt:
        y = py(v)
        out.append(
            f'<line x1="{left}" x2="{right:.1f}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e4e4e4"/>'
            f'<text x="{left - 6}" y="{y + 4:.1f}" font-size="11" text-anchor="end" '
            f'fill="#333">{fmt_tick(v, ystep)}</text>'
        )
    for v in xt:
        x = px(v)
        out.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{bottom}" stroke="#eeeeee"/>'
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{bottom}" y2="{bottom + 5}" stroke="#555"/>'
            f'<text x="{x:.1f}" y="{bottom + 18}" font-size="11" text-anchor="middle" '
            f'fill="#333">{fmt_tick(v, xstep)}</text>'
        )
    out.append(
        f'<line x1="{left}" x2="{right:.1f}" y1="{bottom}" y2="{bottom}" stroke="#555"/>'
        f'<line x1="{left}" x2="{left}" y1="{top}" y2="{bottom}" stroke="#555"/>'
        f'<text x="{(left + right) / 2:.1f}" y="{height - 12}" font-size="12" '
        'text-anchor="middle" fill="#222">seconds since the download began</text>'
        f'<text x="18" y="{(top + bottom) / 2:.1f}" font-size="12" text-anchor="middle" '
        f'fill="#222" transform="rotate(-90 18 {(top + bottom) / 2:.1f})">Mbit/s</text>'
    )
    if n == 0 or not names:
        out.append(
            f'<text x="{(left + right) / 2:.1f}" y="{(top + bottom) / 2:.1f}" font-size="13" '
            'text-anchor="middle" fill="#777">no transfer was recorded</text>'
        )
    # lines: the total first, under the mirrors' (one mirror alone is drawn over it)
    for s in (total, *series):
        pts = list(zip(xs, s.rates, strict=True))
        if pts:  # each bin's mean at its centre; the first and last held to the edges
            pts = [(0.0, pts[0][1]), *pts, (seconds, pts[-1][1])]
        coords = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
        dash = f' stroke-dasharray="{s.dash}"' if s.dash else ""
        opacity = ' stroke-opacity="0.8"' if s is total else ""
        out.append(
            f'<polyline data-series="{xml_text(s.name)}" points="{coords}" fill="none" '
            f'stroke="{s.colour}" stroke-width="{s.width}"{dash}{opacity} '
            'stroke-linejoin="round" stroke-linecap="round"/>'
        )
    out.extend(_event_marks(tl.events, {s.name: s for s in series}, xs, px, py, top, right))
    out.extend(_legend(legend_rows, right + 16, top, legend_w))
    out.append("</svg>\n")
    return "\n".join(out)


def _event_marks(
    events: Sequence[TimelineEvent],
    by_name: Mapping[str, _Series],
    xs: Sequence[float],
    px: Callable[[float], float],
    py: Callable[[float], float],
    top: float,
    right: float,
) -> list[str]:
    """One mark per event on its mirror's line; a mirror's events of one kind
    closer than 8 px share a mark ("stolen ×3"). Labels are moved up (then down)
    until they overlap no label placed before."""
    groups: list[list[TimelineEvent]] = []
    for ev in sorted(events, key=lambda e: (e.mirror, e.kind, e.at_s)):
        g = groups[-1] if groups else None
        if g and g[0].mirror == ev.mirror and g[0].kind == ev.kind and \
                px(ev.at_s) - px(g[-1].at_s) < 8:
            g.append(ev)
        else:
            groups.append([ev])
    groups.sort(key=lambda g: g[0].at_s)
    placed: list[tuple[float, float, float, float]] = []
    out: list[str] = []
    for g in groups:
        ev = g[0]
        s = by_name.get(ev.mirror)
        x = px(ev.at_s)
        y = py(_interp(xs, s.rates, ev.at_s)) if s is not None else py(0.0)
        colour = s.colour if s is not None else "#777777"
        label = ev.kind if len(g) == 1 else f"{ev.kind} ×{len(g)}"
        tip = "\n".join(
            f"{e.mirror}: {e.kind} at {e.at_s:.2f} s" + (f": {e.detail}" if e.detail else "")
            for e in g[:12]
        ) + (f"\n... and {len(g) - 12} more" if len(g) > 12 else "")
        w, h = _text_width(label, 10), 11.0
        lx = min(x + 5, right - w - 2)
        box = (lx, y - 6 - h, lx + w, y - 6)
        for dy in (0, -12, -24, -36, -48, 24, 36, 48, 60):
            cand = (lx, y - 6 - h + dy, lx + w, y - 6 + dy)
            # (against the last 60 placed: marks come in time order, and a file
            # with thousands of events stays linear)
            if cand[1] >= top and not any(_overlap(cand, b) for b in placed[-60:]):
                box = cand
                break
        placed.append(box)
        shape = (
            f'<path d="M{x - 4.5:.1f},{y - 4:.1f} L{x + 4.5:.1f},{y - 4:.1f} '
            f'L{x:.1f},{y + 4:.1f} Z"'
            if ev.kind in BAD_KINDS
            else f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3.5"'
        )
        out.append(
            f'<g class="event" data-kind="{xml_text(ev.kind)}" data-mirror="{xml_text(ev.mirror)}"'
            f' data-count="{len(g)}"><title>{xml_text(tip)}</title>'
            f'{shape} fill="{colour}" stroke="#111" stroke-width="0.8"/>'
            f'<text x="{box[0]:.1f}" y="{box[3] - 2:.1f}" font-size="10" fill="{_darker(colour)}" '
            'stroke="#ffffff" stroke-width="3" paint-order="stroke">'
            f"{xml_text(label)}</text></g>"
        )
    return out


def _darker(colour: str, by: float = 0.35) -> str:
    """``#rrggbb`` mixed with black: a mirror's colour legible as 10-px text."""
    rgb = [int(colour[i : i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(c * (1 - by)):02x}" for c in rgb)


def _overlap(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def _legend(
    rows: Sequence[tuple[str, str, _Series]], x: float, y: float, width: float
) -> list[str]:
    out = [f'<g class="legend"><rect x="{x - 6:.1f}" y="{y:.1f}" width="{width:.1f}" '
           f'height="{24 + 30 * len(rows) + 30}" fill="#ffffff" stroke="#cccccc"/>']
    for i, (name, note, s) in enumerate(rows):
        ry = y + 18 + 30 * i
        dash = f' stroke-dasharray="{s.dash}"' if s.dash else ""
        out.append(
            f'<line x1="{x:.1f}" x2="{x + 22:.1f}" y1="{ry - 4:.1f}" y2="{ry - 4:.1f}" '
            f'stroke="{s.colour}" stroke-width="{s.width}"{dash}/>'
            f'<text x="{x + 28:.1f}" y="{ry:.1f}" font-size="11" fill="#111">'
            f"<title>{xml_text(name)}</title>{xml_text(_cut(name, _NAME_CHARS))}</text>"
            f'<text x="{x + 28:.1f}" y="{ry + 13:.1f}" font-size="9.5" fill="#666">'
            f"{xml_text(_cut(note, _NAME_CHARS + 4))}</text>"
        )
    ky = y + 18 + 30 * len(rows) + 6
    out.append(
        f'<path d="M{x + 6.5:.1f},{ky - 8:.1f} L{x + 15.5:.1f},{ky - 8:.1f} '
        f'L{x + 11:.1f},{ky:.1f} Z" fill="#999" stroke="#111" stroke-width="0.8"/>'
        f'<text x="{x + 22:.1f}" y="{ky:.1f}" font-size="9.5" fill="#444">slow, failed, '
        "congested, corrupt</text>"
        f'<circle cx="{x + 11:.1f}" cy="{ky + 11:.1f}" r="3.5" fill="#999" stroke="#111" '
        f'stroke-width="0.8"/><text x="{x + 22:.1f}" y="{ky + 15:.1f}" font-size="9.5" '
        'fill="#444">other events (hover: detail)</text></g>'
    )
    return out


# --- from a summary (pftp get --json's output, or the summary itself) ---------------


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def svg_from_summary(summary: Mapping[str, Any]) -> str:
    """The chart of a ``--json`` summary (a successful download's, or a failure's
    ``{"error", "exit_code", "timeline"}``); ValueError when it has no usable
    timeline, saying why."""
    if not isinstance(summary, Mapping):
        raise ValueError("not a pftp --json summary (a JSON object)")
    raw = summary.get("timeline")
    if raw is None:
        raise ValueError(
            "it has no timeline (a summary from a pftp without timelines, or a download that "
            "failed before any transfer began)"
        )
    tl = Timeline.from_json_dict(raw)
    notes: dict[str, str] = {}
    for m in summary.get("mirrors") or []:
        if isinstance(m, dict) and isinstance(m.get("name"), str):
            got = m.get("bytes")
            state = m.get("state")
            parts = [_size(got) if isinstance(got, int | float) else "", str(state or "")]
            notes[m["name"]] = ", ".join(p for p in parts if p)
    bins = f"{tl.bin_s:g}-s bins"
    if "error" in summary:
        title = f"download failed (exit {summary.get('exit_code', '?')})"
        subtitle = f"{bins}; {summary.get('error')}"
    else:
        name = str(summary.get("name") or summary.get("path") or "download")
        size = summary.get("size")
        secs = summary.get("seconds")
        rate = summary.get("rate_bps")
        title = name
        if isinstance(size, int | float) and isinstance(secs, int | float):
            title += f": {_size(size)} in {secs:.2f} s"
        if isinstance(rate, int | float):
            title += f", {rate / 1e6:.1f} Mbit/s"
        verified = summary.get("sha256_verified")
        check = "SHA-256 verified" if verified else "not verified (no SHA-256 known)"
        if verified is False and summary.get("expected_sha256"):
            check = "SHA-256 did not match"
        resumed = summary.get("resumed_bytes")
        subtitle = f"{summary.get('mode', '?')} mode, {check}; {bins}"
        if isinstance(resumed, int) and resumed:
            subtitle += f"; resumed with {_size(resumed)} already there"
    return render_svg(tl, title=title, subtitle=subtitle, mirror_notes=notes)
