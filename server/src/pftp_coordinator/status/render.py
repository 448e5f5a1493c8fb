"""Jinja2 rendering of the status page (template in templates/, autoescaped)."""

from __future__ import annotations

from datetime import datetime
from functools import lru_cache
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, select_autoescape

from pftp_coordinator.status.charts import download_speed_chart, time_series_chart
from pftp_coordinator.status.service import HISTORY_HOURS, StatusData

TEMPLATES = Path(__file__).parent / "templates"
DASH = "–"


def fmt_bps(v: float | None) -> str:
    if v is None:
        return DASH
    for unit, div in (("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if v >= div:
            return f"{v / div:.3g} {unit}"
    return f"{v:.0f} bit/s"


def fmt_size(n: int | None) -> str:
    if n is None:
        return DASH
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"


def fmt_ms(seconds: float | None) -> str:
    return DASH if seconds is None else f"{seconds * 1000:.3g} ms"


def fmt_pct(v: float | None) -> str:
    return DASH if v is None else f"{v:.0f} %"


def fmt_pct_fraction(v: float | None) -> str:
    return DASH if v is None else f"{v * 100:.2g} %"


def fmt_ago(then: datetime | None, now: datetime) -> str:
    if then is None:
        return DASH
    s = (now - then).total_seconds()
    if s < 0:
        return "just now"
    if s < 90:
        return f"{s:.0f} s ago"
    if s < 5400:
        return f"{s / 60:.0f} min ago"
    if s < 172800:
        return f"{s / 3600:.1f} h ago"
    return f"{s / 86400:.0f} d ago"


@lru_cache(maxsize=1)
def environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(str(TEMPLATES)),
        autoescape=select_autoescape(["html"]),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        bps=fmt_bps,
        size=fmt_size,
        ms=fmt_ms,
        pct=fmt_pct,
        pct_fraction=fmt_pct_fraction,
        ago=fmt_ago,
    )
    return env


def render_status(data: StatusData, *, refresh_s: int = 30) -> str:
    return environment().get_template("status.html").render(
        s=data,
        refresh_s=refresh_s,
        history_hours=HISTORY_HOURS,
        rtt_chart=time_series_chart("RTT per mirror", data.rtt_series, unit="ms"),
        throughput_chart=time_series_chart(
            "Probe throughput per mirror", data.throughput_series, unit="Mbit/s"
        ),
        downloads_chart=download_speed_chart(
            "Download speed vs best single mirror", data.download_bars
        ),
    )
