"""Status page: data gathering, rendering, charts, and the routes of the real app."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from coordinator_testkit import running_app
from pftp_coordinator.config import Settings
from pftp_coordinator.db import create_db_engine, make_session_factory
from pftp_coordinator.status.charts import (
    DownloadBar,
    Series,
    download_speed_chart,
    nice_ticks,
    time_series_chart,
)
from pftp_coordinator.status.render import fmt_bps, render_status
from pftp_coordinator.status.service import collect_status, current_mode, redact_url
from status_seed import MIRRORS, seed_database


def _collect(url: str, **kw):  # type: ignore[no-untyped-def]
    engine = create_db_engine(url)
    try:
        with make_session_factory(engine)() as session:
            return collect_status(session, settings=Settings(database_url=url), **kw)
    finally:
        engine.dispose()


def test_collect_status_on_seeded_database(db_url: str) -> None:
    seed_database(db_url)
    data = _collect(db_url)
    names = [m.name for m in data.mirrors]
    assert sorted(names) == sorted(MIRRORS)
    by_name = {m.name: m for m in data.mirrors}
    # Down mirror is listed but not ranked; the ranked ones' scores sum to 1.
    assert by_name["mirror-down"].state == "down" and by_name["mirror-down"].score is None
    ranked = [m for m in data.mirrors if m.score is not None]
    assert len(ranked) == 3
    assert sum(m.score for m in ranked) == pytest.approx(1.0)
    assert names[0] == "mirror-alpha"  # fastest, lowest RTT, least loaded
    assert {"bandwidth", "rtt", "cpu", "throughput"} <= set(data.variables)
    # Last probe and utilization; a mirror without an agent has no utilization.
    assert by_name["mirror-alpha"].cpu_percent == pytest.approx(20.0)
    assert by_name["mirror-charlie"].cpu_percent is None
    assert by_name["mirror-down"].last_probe_ok is False
    assert by_name["mirror-bravo"].probe_connections == 3
    assert by_name["mirror-alpha"].probe_connections == 1
    assert by_name["mirror-charlie"].report_connections == 4
    assert by_name["mirror-alpha"].report_connections is None
    # Passwords never reach the page.
    assert all("secret" not in u for m in data.mirrors for u in m.urls)
    assert data.agents == 2 and data.agents_reporting == 2
    assert data.files == 3 and data.replicas == 12
    assert len(data.downloads) == 6
    assert data.downloads[0].reported_at < data.downloads[-1].reported_at
    assert all(d.best_single_bps and d.aggregate_bps > d.best_single_bps for d in data.downloads)
    assert len(data.rtt_series) == 4 and len(data.throughput_series) == 4
    assert data.predictor is not None and data.predictor.n_samples == 18
    assert {j.job for j in data.jobs} == {"probe", "scan"}
    assert data.mode == "ranked"


def test_mode_follows_request_rate(sqlite_url: str) -> None:
    seed_database(sqlite_url)
    assert _collect(sqlite_url, request_rate_rps=500.0).mode == "balanced"
    assert current_mode(10.0, 50.0) == "ranked"
    assert current_mode(50.1, 50.0) == "balanced"


def test_rendered_html_is_self_contained(sqlite_url: str) -> None:
    seed_database(sqlite_url)
    html = render_status(_collect(sqlite_url))
    for name in MIRRORS:
        assert f'data-mirror="{name}"' in html
    assert html.count("<svg") == 3 and "<polyline" in html and "<rect" in html
    assert "<script" not in html
    assert not re.search(r'(src|href)="https?://', html)  # no CDN, no external assets
    assert "secret" not in html
    assert 'id="mode">ranked<' in html
    assert html.count("over 3</span>") == 1  # bravo's probe read over 3 connections
    assert html.count("clients kept 4</span>") == 1  # charlie's clients kept 4


def test_empty_database_renders(sqlite_url: str) -> None:
    from pftp_coordinator import migrate

    migrate.upgrade(sqlite_url)
    html = render_status(_collect(sqlite_url))
    assert "No mirrors registered yet" in html and "no data yet" in html


def test_names_are_escaped(sqlite_url: str) -> None:
    chart = time_series_chart("t", [Series("<b>x</b>", [(0, 1), (60, 2)])], unit="ms")
    assert "<b>" not in chart and "&lt;b&gt;" in chart


def test_charts_and_formatting() -> None:
    assert nice_ticks(0, 47) == [0, 20, 40, 60]
    assert nice_ticks(0, 1) == [0, 0.5, 1.0]
    bars = [DownloadBar("f", 80e6, 30e6), DownloadBar("g", 60e6, None)]
    svg = download_speed_chart("d", bars)
    assert svg.count("<rect") >= 5  # 2 legend + 3 bars
    assert fmt_bps(None) == "–" and fmt_bps(12.5e6) == "12.5 Mbit/s"
    assert redact_url("ftp://u:p@h:21/x") == "ftp://u:***@h:21/x"
    assert redact_url("http://h/x") == "http://h/x"


def test_routes_of_the_real_app(sqlite_url: str, tmp_path: Path) -> None:
    seed_database(sqlite_url)
    with running_app(sqlite_url, tmp_path) as client:
        for path in ("/", "/status"):
            r = client.get(path)
            assert r.status_code == 200
            assert r.headers["content-type"].startswith("text/html")
            assert "mirror-bravo" in r.text
            assert r.headers.get("x-request-id")
        metrics = client.get("/metrics").text
        assert "pftp_agents_reporting 2.0" in metrics
        assert 'route="/status"' in metrics
