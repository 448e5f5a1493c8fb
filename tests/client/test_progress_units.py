"""One unit for every rate a person sees (progress.py): bytes per second in the
binary units of the sizes beside it, in the live bar and table, the plain lines
and the summary line; the bar's rate is the table's rates summed. The --json
fields stay in bits/s."""

from __future__ import annotations

import hashlib
import io
import re

from pftp_client.progress import PlainProgress, RichProgress, human_rate, render_summary_line
from pftp_client.summary import DownloadSummary, MirrorStats
from rich.console import Console

MIB = 1024 * 1024
# any rate in another unit: Mbit/s, MB/s (rich's own), kB/s, bit/s...
OTHER_UNITS = re.compile(r"bit/s|\b[kMGT]B/s|\bbps\b")


def _stats() -> list[MirrorStats]:
    return [
        MirrorStats(name="ftp://a/f", url="ftp://a/f", state="fetching", bytes=2 * MIB,
                    seconds=1.0),
        MirrorStats(name="ftp://b/f", url="ftp://b/f", state="fetching", bytes=4 * MIB,
                    seconds=2.0),
    ]


def _summary(stats: list[MirrorStats]) -> DownloadSummary:
    return DownloadSummary(
        name="f", path="/tmp/f", size=8 * MIB, seconds=2.0, mode="dynamic",
        sha256=hashlib.sha256(b"").hexdigest(), expected_sha256=None, sha256_verified=False,
        mirrors=stats, resumed_bytes=2 * MIB,
    )


def test_human_rate_is_bytes_per_second_in_binary_units() -> None:
    assert human_rate(None) == "-"
    assert human_rate(512) == "512 B/s"
    assert human_rate(1536) == "1.5 KiB/s"
    assert human_rate(12.5 * MIB) == "12.5 MiB/s"
    assert human_rate(3 * 1024 * MIB) == "3.0 GiB/s"


def test_the_live_bar_and_table_show_the_same_unit_and_agree() -> None:
    out = io.StringIO()
    p = RichProgress(Console(file=out, force_terminal=True, width=160, color_system=None))
    stats = _stats()
    p.start("f", 8 * MIB, [s.name for s in stats])
    p.update(3 * MIB, 8 * MIB, 1.0, stats, {"ftp://a/f": 1 * MIB, "ftp://b/f": 2.5 * MIB})
    assert p._live is not None
    p._live.refresh()
    frame = out.getvalue()
    # the table's rows, and the bar: their sum, in the same unit
    assert "1.0 MiB/s" in frame and "2.5 MiB/s" in frame and "3.5 MiB/s" in frame, frame
    assert "3.0/8.0 MiB" in frame, frame  # (the bar's bytes: MiB as the table's, not MB)
    assert not OTHER_UNITS.search(frame), frame
    stats[0].state = stats[1].state = "done"
    p.finish(_summary(stats))
    text = out.getvalue()
    # the last frame's bar and the summary line under it: this run's 6 MiB in 2 s
    assert text.count("3.0 MiB/s") >= 2, text
    assert "(3.0 MiB/s)" in text and "ftp://a/f: 2.0 MiB 2.0 MiB/s" in text, text
    assert not OTHER_UNITS.search(text), text


def test_plain_lines_and_the_summary_line_use_the_same_unit() -> None:
    out = io.StringIO()
    p = PlainProgress(out, every_s=0.0)
    stats = _stats()
    p.start("f", 8 * MIB, [s.name for s in stats])
    p.update(3 * MIB, 8 * MIB, 1.0, stats, {"ftp://a/f": 1 * MIB, "ftp://b/f": None})
    p.finish(_summary(stats))
    lines = out.getvalue().splitlines()
    assert lines[1] == ("pftp:  37.5% 3.0 MiB in 1s, 1.0 MiB/s "
                        "[ftp://a/f fetching 1.0 MiB/s, ftp://b/f fetching -]"), lines
    assert lines[2] == render_summary_line(_summary(stats))
    assert lines[2].startswith("pftp: /tmp/f: 8.0 MiB in 2.0s (3.0 MiB/s), "), lines
    assert "ftp://b/f: 4.0 MiB 2.0 MiB/s" in lines[2], lines
    assert not OTHER_UNITS.search(out.getvalue()), lines


def test_the_json_summary_keeps_bits_per_second() -> None:
    out = _summary(_stats()).to_json_dict()
    assert out["rate_bps"] == 8 * 6 * MIB / 2.0
    assert out["mirrors"][0]["rate_bps"] == 8 * 2 * MIB / 1.0
