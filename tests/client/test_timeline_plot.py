"""The throughput timeline (timeline.py) and its SVG chart (plot_svg.py), without a
network: binning, bounded memory, the JSON form, and what the chart must show."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
import threading
import xml.etree.ElementTree as ET

import pytest
from pftp_client import early
from pftp_client.plot_svg import (
    MAX_POINTS,
    fmt_tick,
    nice_step,
    render_svg,
    svg_from_summary,
    ticks,
    xml_text,
)
from pftp_client.summary import MirrorEvent
from pftp_client.timeline import (
    Timeline,
    TimelineBuilder,
    TimelineEvent,
    TimelineSampler,
    merge_pairs,
    spread,
)

SVG = "{http://www.w3.org/2000/svg}"


def _series(root: ET.Element) -> list[str]:
    return [p.get("data-series", "") for p in root.iter(f"{SVG}polyline")]


# --- binning ---------------------------------------------------------------------------


def test_spread_splits_an_interval_over_its_bins_in_proportion_and_exactly():
    bins: list[int] = []
    spread(bins, 0.25, 0.0, 0.25, 1000)
    assert bins == [1000]
    spread(bins, 0.25, 0.25, 1.0, 3001)  # three whole bins
    assert bins == [1000, 1000, 1001, 1000]  # (cumulative rounding: the total is exact)
    # a late sample: 0.6 s of bytes, from the middle of a bin to the middle of another
    b2: list[int] = []
    spread(b2, 0.25, 0.1, 0.7, 600)
    assert b2 == [150, 250, 200]
    # zero-length interval: all to t1's bin
    b3: list[int] = []
    spread(b3, 0.25, 0.5, 0.5, 7)
    assert b3 == [0, 7]


def test_merge_pairs_sums_neighbours_and_keeps_an_odd_last_bin():
    assert merge_pairs([1, 2, 3, 4, 5]) == [3, 7, 5]
    assert merge_pairs([]) == []
    assert merge_pairs([9]) == [9]


def test_a_long_download_stays_within_max_bins_and_keeps_every_byte():
    """Bounded memory: 10 hours of 0.25-s samples (144,000) into at most 64 bins per
    mirror; the bin width doubles each time; no byte is lost, the shape is kept."""
    b = TimelineBuilder(bin_s=0.25, max_bins=64)
    rate_a, rate_b = 1000, 3000  # bytes/s; mirror b stops at half time
    a_total = b_total = 0
    hours = 10 * 3600
    t = 0.0
    widths = {b.bin_s}
    while t < hours:
        t += 0.25
        a_total += rate_a // 4
        if t <= hours / 2:
            b_total += rate_b // 4
        b.add(t, [("a", a_total), ("b", b_total)])
        widths.add(b.bin_s)
        assert all(len(v) <= 64 for v in b.bins.values())
    tl = b.timeline()
    assert tl.bin_count() <= 64
    assert tl.bin_s == 0.25 * 2 ** round(math.log2(tl.bin_s / 0.25))  # doubled, not rescaled
    assert tl.bin_s * 64 >= hours > tl.bin_s * 32
    assert len(widths) == round(math.log2(tl.bin_s / 0.25)) + 1
    assert sum(tl.mirrors["a"]) == a_total and sum(tl.mirrors["b"]) == b_total
    # b sent in the first half only
    half = int(hours / 2 / tl.bin_s)
    assert all(n == 0 for n in tl.mirrors["b"][half + 1 :])
    assert all(n > 0 for n in tl.mirrors["b"][:half])
    # a steady mirror's full bins are equal
    full = tl.mirrors["a"][: int(hours / tl.bin_s)]
    assert max(full) - min(full) <= 1


def test_a_mirror_that_joins_late_starts_with_empty_bins_and_names_are_summed():
    b = TimelineBuilder(bin_s=0.5, max_bins=100)
    b.add(0.5, [("a", 100)])
    b.add(1.0, [("a", 200)])
    b.add(1.5, [("a", 300), ("late", 50), ("late", 10)])  # the same name twice: summed
    tl = b.timeline()
    assert tl.mirrors == {"a": [100, 100, 100], "late": [0, 0, 60]}
    assert tl.total() == [100, 100, 160] and tl.received() == 360


def test_a_counter_that_goes_back_is_a_new_base_not_negative_bytes():
    b = TimelineBuilder(bin_s=1.0, max_bins=10)
    b.add(1.0, [("a", 500)])
    b.add(2.0, [("a", 100)])
    b.add(3.0, [("a", 300)])
    assert b.timeline().mirrors["a"] == [500, 0, 200]


def test_sampler_thread_samples_and_stop_adds_the_final_counts():
    now = [0.0]
    count = [0]
    lock = threading.Lock()

    def read() -> list[tuple[str, int]]:
        with lock:
            now[0] += 0.25  # a fake clock, advanced by each read
            count[0] += 1000
            return [("m", count[0])]

    sampler = TimelineSampler(read, lambda: now[0], interval_s=0.01, max_bins=8)
    sampler.start()
    while sampler.samples < 20:
        threading.Event().wait(0.01)
    with lock:
        final = count[0] + 5
    tl = sampler.stop([("m", final)], [MirrorEvent("slow", "m", 0.25, "d")], start_s=0.125)
    assert tl.received() == final
    assert tl.bin_count() <= 8 and tl.bin_s > 0.01
    # the engine's events move to the timeline's clock (from the download's start)
    assert tl.events == [TimelineEvent(0.375, "m", "slow", "d")] and tl.start_s == 0.125
    assert sampler.stop([("m", final)]).received() == final  # (twice: harmless)


# --- JSON ------------------------------------------------------------------------------


def _timeline() -> Timeline:
    return Timeline(
        0.5, 1.2,
        {"a": [1000, 2000, 500], "b": [0, 4000, 100]},
        [TimelineEvent(0.7, "b", "stolen", "took 1 MiB from a"),
         TimelineEvent(1.0, "a", "failed", "ftp://u:secret@h/x refused")],
        0.05,
    )


def test_json_round_trip_and_passwords_masked():
    d = _timeline().to_json_dict()
    assert "secret" not in str(d) and "u:***@h" in d["events"][1]["detail"]
    back = Timeline.from_json_dict(d)
    assert back.mirrors == _timeline().mirrors and back.bin_s == 0.5
    assert [e.kind for e in back.events] == ["stolen", "failed"]


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        ([], "not a JSON object"),
        ({"bin_s": 0, "seconds": 1, "mirrors": {}}, "bin_s must be a positive number"),
        ({"bin_s": "x", "seconds": 1, "mirrors": {}}, "bin_s"),
        ({"bin_s": 1e-300, "seconds": 1, "mirrors": {}}, "bin_s must be at least"),
        ({"bin_s": 1, "seconds": 1, "mirrors": {"a": [10**400]}}, "whole numbers"),
        ({"bin_s": 1, "seconds": float("nan"), "mirrors": {}}, "seconds"),
        ({"bin_s": 1, "seconds": 1, "mirrors": []}, "timeline.mirrors"),
        ({"bin_s": 1, "seconds": 1, "mirrors": {"a": [1, -2]}}, "mirrors['a']"),
        ({"bin_s": 1, "seconds": 1, "mirrors": {"a": [1.5]}}, "whole numbers"),
        ({"bin_s": 1, "seconds": 1, "mirrors": {"a": [True]}}, "whole numbers"),
        ({"bin_s": 1, "seconds": 1, "mirrors": {}, "events": [{"kind": "x"}]}, "events[0]"),
        ({"bin_s": 1, "seconds": 1, "mirrors": {},
          "events": [{"kind": "x", "mirror": "a", "at_s": None}]}, "events[0].at_s"),
    ],
)
def test_a_bad_timeline_is_refused_saying_what_is_wrong(raw, words):
    with pytest.raises(ValueError, match=re.escape(words)):
        Timeline.from_json_dict(raw)


# --- the chart -------------------------------------------------------------------------


def test_ticks_of_nothing_or_of_infinity_end():
    assert ticks(0.0, 5, cover=True) == ticks(float("inf"), 5, cover=True) == ticks(
        float("nan"), 5, cover=True) == ticks(1.0, 5, cover=True)


def test_nice_ticks_are_round_numbers():
    for hi, target in [(3.953, 8), (783.2, 5), (0.37, 5), (12_345.0, 5), (1.0, 5), (59.9, 8)]:
        ts = ticks(hi, target, cover=True)
        step = ts[1] - ts[0]
        mant = step / 10 ** math.floor(math.log10(step))
        assert round(mant, 6) in (1, 2, 2.5, 5), (hi, ts)
        assert ts[0] == 0 and ts[-1] >= hi and ts[-2] < hi
        assert 2 <= len(ts) - 1 <= 2 * target
        assert not ticks(hi, target, cover=False)[-1] > hi
    assert nice_step(783.2, 5) == 200
    assert [fmt_tick(v, 0.25) for v in (0, 0.25, 1)] == ["0.00", "0.25", "1.00"]
    assert [fmt_tick(v, 200) for v in (0, 200)] == ["0", "200"]
    assert fmt_tick(7.5, 2.5) == "7.5"


def test_svg_parses_and_has_one_line_per_mirror_plus_the_total_and_the_event_marks():
    svg = render_svg(_timeline(), title="f.bin", subtitle="sub")
    root = ET.fromstring(svg)
    assert _series(root) == ["total", "a", "b"]
    marks = [g for g in root.iter(f"{SVG}g") if g.get("class") == "event"]
    assert sorted((g.get("data-mirror"), g.get("data-kind")) for g in marks) == [
        ("a", "failed"), ("b", "stolen")]
    # the total's first point is a's + b's rate in bin 0: 1000 B over 0.5 s = 0.016 Mbit/s;
    # bin 1: 6000 B / 0.5 s = 0.096 Mbit/s; the y axis covers the peak
    labels = [t.text for t in root.iter(f"{SVG}text")]
    assert "Mbit/s" in labels and "seconds since the download began" in labels
    assert "0.10" in labels  # the top y tick covers 0.096 Mbit/s with a round number


def test_mirror_names_and_details_are_escaped():
    nasty = 'm<&"1\'>\x01\ud800'
    tl = Timeline(0.25, 0.5, {nasty: [10, 20]}, [TimelineEvent(0.3, nasty, "slow", "<b>&")])
    svg = render_svg(tl, title='t<"&>')
    assert "<&" not in svg and '<b>' not in svg
    root = ET.fromstring(svg.encode("utf-8"))  # (lone surrogates would not even encode)
    assert _series(root) == ["total", 'm<&"1\'>\ufffd\ufffd']
    texts = "".join(root.itertext())
    assert 'm<&"1\'>' in texts and "t<\"&>" in texts
    assert xml_text("a&b") == "a&amp;b"


def test_a_timeline_without_bins_or_with_one_still_renders():
    empty = render_svg(Timeline(0.25, 0.0, {}, []))
    root = ET.fromstring(empty)
    assert _series(root) == ["total"]
    assert "no transfer was recorded" in "".join(root.itertext())
    one = ET.fromstring(render_svg(Timeline(0.25, 0.1, {"a": [5000]}, [])))
    assert _series(one) == ["total", "a"]
    pts = next(one.iter(f"{SVG}polyline")).get("points", "").split()
    xs = {float(p.split(",")[0]) for p in pts}
    ys = {p.split(",")[1] for p in pts}
    assert len(ys) == 1 and max(xs) - min(xs) > 500  # a flat line across, not a dot


def test_a_huge_hand_made_timeline_is_thinned_to_max_points():
    tl = Timeline(0.01, 100.0, {"a": [1] * 10_000}, [])
    root = ET.fromstring(render_svg(tl))
    for p in root.iter(f"{SVG}polyline"):
        assert len(p.get("points", "").split()) <= MAX_POINTS


def test_many_events_of_a_kind_close_together_share_one_mark():
    events = [TimelineEvent(1.0 + i * 0.001, "a", "stolen") for i in range(30)]
    events.append(TimelineEvent(3.0, "a", "stolen"))
    tl = Timeline(0.25, 4.0, {"a": [1000] * 16}, events)
    root = ET.fromstring(render_svg(tl))
    marks = [g for g in root.iter(f"{SVG}g") if g.get("class") == "event"]
    assert sorted(int(g.get("data-count", "0")) for g in marks) == [1, 30]
    assert "stolen ×30" in "".join(root.itertext())


def test_svg_from_summary_titles_success_and_failure():
    tl = _timeline().to_json_dict()
    ok = {"name": "iso/x.iso", "size": 3 * 2**20, "seconds": 1.25, "rate_bps": 2e7,
          "sha256_verified": True, "mode": "dynamic", "resumed_bytes": 0, "timeline": tl,
          "mirrors": [{"name": "a", "bytes": 3500, "state": "failed"}]}
    root = ET.fromstring(svg_from_summary(ok))
    text = "".join(root.itertext())
    assert "iso/x.iso: 3.0 MiB in 1.25 s, 20.0 Mbit/s" in text
    assert "SHA-256 verified" in text and "3.4 KiB, failed" in text
    bad = ET.fromstring(svg_from_summary({"error": "no mirror", "exit_code": 4, "timeline": tl}))
    assert "download failed (exit 4)" in "".join(bad.itertext())
    for not_plottable in ({"error": "x", "exit_code": 2}, [], {"timeline": None}):
        with pytest.raises(ValueError):
            svg_from_summary(not_plottable)  # type: ignore[arg-type]


def test_the_head_start_reads_past_plot_and_its_value():
    """early.parse_get must skip --plot's value, not take it for a NAME (which would
    start a coordinator request for it, or no head start at all)."""
    url = "ftp://127.0.0.1:1/f"
    assert early.parse_get(["get", "--mirror", url, "--plot", "p.svg"]) == (None, [url], [], None)
    assert early.parse_get(["get", "--plot=p.svg", "-m", url]) == (None, [url], [], None)
    assert early.mirror_urls(["get", "--plot", "p.svg", "--mirror", url]) == ([url], [])


def test_the_cli_loads_no_plot_module_until_it_draws(tmp_path):
    """Start-up (notes/client-startup.md): parsing `get ... --plot` loads neither the
    renderer nor json; `pftp plot` loads them when it runs."""
    code = (
        "import sys\n"
        "from pftp_client.cli import build_parser\n"
        "build_parser().parse_args(['get', '--mirror', 'ftp://127.0.0.1/f', '--plot', 'p.svg'])\n"
        "print([m for m in ('pftp_client.plot_svg', 'pftp_client.timeline', 'json', 'html')"
        " if m in sys.modules])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60,
                         env={**os.environ, "PFTP_CLIENT_CONFIG": str(tmp_path / "none.toml")})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_an_event_mark_sits_on_its_mirrors_line():
    tl = Timeline(1.0, 3.0, {"a": [1000, 3000, 2000], "b": [500, 500, 500]},
                  [TimelineEvent(1.5, "a", "stolen"), TimelineEvent(2.5, "b", "retry")])
    root = ET.fromstring(render_svg(tl))
    lines = {p.get("data-series"): [tuple(map(float, xy.split(",")))
                                    for xy in p.get("points", "").split()]
             for p in root.iter(f"{SVG}polyline")}
    for g in (g for g in root.iter(f"{SVG}g") if g.get("class") == "event"):
        dot = g.find(f"{SVG}circle")
        assert dot is not None
        x, y = float(dot.get("cx", "")), float(dot.get("cy", ""))
        # the mark is at a bin's centre here: one of its mirror's points
        assert any(abs(x - px) < 0.11 and abs(y - py) < 0.11
                   for px, py in lines[g.get("data-mirror")]), (x, y)
