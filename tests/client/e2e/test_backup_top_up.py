"""A coordinator's backup joins when the mirrors it chose to cover the access link
fall short of it (engine._top_up). Loopback: two mirrors throttled by pyftpdlib to
2 Mbit/s in all, a fast backup, 8 Mbit/s configured."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from pftp_client import download
from pftp_client.engine import EngineConfig

RATE = 128 * 1024  # bytes/s per slow mirror


def _answer(data: bytes, urls: list[str], backup: str, expected_bps: float) -> dict:
    half = len(data) // 2
    spans = [(0, half), (half, len(data) - half)]
    return {
        "request_id": "req-top-up",
        "file": {"name": "f.bin", "size": len(data), "sha256": hashlib.sha256(data).hexdigest()},
        "assignments": [
            {"mirror": f"m{i}", "url": u, "offset": o, "length": n, "suitability": 0.5,
             "expected_bps": expected_bps}
            for i, (u, (o, n)) in enumerate(zip(urls, spans, strict=True))
        ],
        "backups": [{"mirror": "b0", "url": backup, "suitability": 0.1, "expected_bps": 8e7}],
        "mode": "ranked",
    }


def _run(start_pyftpd, throttled_ftp_handler, canned_coordinator, tmp_path: Path,
         data: bytes, expected_bps: float):
    slow = throttled_ftp_handler(RATE)
    first = start_pyftpd(handler=slow)
    first.put("f.bin", data)
    second = start_pyftpd(handler=slow, root=first.root)
    fast = start_pyftpd(root=first.root)
    urls = [first.url("f.bin"), second.url("f.bin")]
    coord = canned_coordinator(200, _answer(data, urls, fast.url("f.bin"), expected_bps))
    out = tmp_path / "f.bin"
    s = download("f.bin", coordinator=coord.url, output=out, timeout=30.0,
                 access_bandwidth_bps=8_000_000, congestion="off")
    assert s.sha256_verified and out.read_bytes() == data
    return s


def test_a_backup_joins_when_the_chosen_mirrors_fall_short_of_the_link(
    start_pyftpd, throttled_ftp_handler, canned_coordinator, tmp_path: Path
) -> None:
    """Their expected rates (2 x 4 Mbit/s) cover the 8 Mbit/s link; they carry 2."""
    data = os.urandom(3_000_000)  # ~11 s from the two slow mirrors alone
    s = _run(start_pyftpd, throttled_ftp_handler, canned_coordinator, tmp_path, data, 4e6)
    joined = [e for e in s.events if e.kind == "backup"]
    assert len(joined) == 1, s.events
    assert "of the 8.00 Mbit/s access link" in joined[0].detail
    # judged over a monitor round (~1 s) that began after the first half second:
    # the first such round ends at ~2 s, not before 1.5 s, and it joins then
    assert 1.5 <= joined[0].at_s < 3.0
    backup = next(m for m in s.mirrors if m.name == "b0")
    assert backup.role == "backup" and backup.bytes > len(data) // 2
    assert s.seconds < 8.0


def test_no_backup_joins_where_the_coordinator_stopped_short_of_the_link(
    start_pyftpd, throttled_ftp_handler, canned_coordinator, tmp_path: Path
) -> None:
    """Expected 2 x 1 Mbit/s of an 8 Mbit/s link: the coordinator stopped short of it
    for a reason of its own (a backup it keeps apart from a mirror it shares a link
    with, say), so its backup only stands in for a failed or slow mirror."""
    data = os.urandom(1_400_000)  # ~4 s (3 bursts a mirror): past the judgement at ~2 s
    s = _run(start_pyftpd, throttled_ftp_handler, canned_coordinator, tmp_path, data, 1e6)
    assert not [e for e in s.events if e.kind == "backup"], s.events
    assert all(m.name != "b0" for m in s.mirrors)
    assert s.seconds > 3.0  # long enough for the top-up to have been judged



PACED = 256 * 1024  # bytes/s (~2.1 Mbit/s): a paced mirror, 64 KiB bursts as vsftpd's


def _paced(ftp_mirrors, canned_coordinator, tmp_path: Path, data: bytes, *, paced: int,
           expected_bps: float, access_bps: int, backup_paced: bool = False,
           measured: bool = True):
    """``paced`` mirrors at PACED each share the file, a backup waits (fast, or
    paced too), and the client takes its access link for ``access_bps``, a figure
    it measured (as its packet train would) or, ``measured=False``, one it was given."""
    ms = ftp_mirrors({"f.bin": data}, paced + 1,
                     pace=dict.fromkeys(range(paced + backup_paced), PACED))
    n = len(data)
    spans = [(i * n // paced, (i + 1) * n // paced - i * n // paced) for i in range(paced)]
    answer = {
        "request_id": "req-figure",
        "file": {"name": "f.bin", "size": n, "sha256": hashlib.sha256(data).hexdigest()},
        "assignments": [
            {"mirror": f"m{i}", "url": ms[i].url("f.bin"), "offset": o, "length": ln,
             "suitability": 0.5, "expected_bps": expected_bps}
            for i, (o, ln) in enumerate(spans)
        ],
        "backups": [{"mirror": "b0", "url": ms[-1].url("f.bin"), "suitability": 0.1,
                     "expected_bps": 8e7}],
        "mode": "ranked",
    }
    coord = canned_coordinator(200, answer)
    out = tmp_path / "f.bin"
    s = download("f.bin", coordinator=coord.url, output=out, timeout=30.0,
                 access_bandwidth_bps=access_bps, congestion="off",
                 config=EngineConfig(test_access_figure=measured))
    assert s.sha256_verified and out.read_bytes() == data
    return s


def _raised_with_one_backup(s, why: str, *, min_bytes: int, max_s: float):
    """One backup joined, for ``why``; the 2 Mbit/s figure was raised (the summary
    says so); the backup took over ``min_bytes``; all within ``max_s``. The join."""
    joined = [e for e in s.events if e.kind == "backup"]
    assert len(joined) == 1, s.events
    assert why in joined[0].detail
    assert any("above the 2.0 Mbit/s figure" in n for n in s.notes), s.notes
    backup = next(m for m in s.mirrors if m.name == "b0")
    assert backup.bytes > min_bytes
    assert s.seconds < max_s
    return joined[0]


def test_flows_above_the_access_figure_raise_it_and_a_backup_joins(
    ftp_mirrors, canned_coordinator, tmp_path: Path
) -> None:
    """Two mirrors carry ~4.2 Mbit/s on a link taken for 2 (a figure measured during
    cross traffic, or outdated): it was wrong, and so is the coordinator's choice
    sized for it; the backup joins and takes most of what is left."""
    data = os.urandom(4_000_000)  # ~7.6 s from the two paced mirrors alone
    s = _paced(ftp_mirrors, canned_coordinator, tmp_path, data, paced=2, expected_bps=1e6,
               access_bps=2_000_000)
    joined = _raised_with_one_backup(s, "above the 2.00 Mbit/s access figure: the link is "
                                     "faster", min_bytes=len(data) // 3, max_s=5.0)
    assert 1.5 <= joined.at_s < 3.0


def test_a_mirror_that_fills_both_figures_is_tested_with_a_backup(
    ftp_mirrors, canned_coordinator, tmp_path: Path
) -> None:
    """One mirror carries ~2.1 Mbit/s: both the 2 Mbit/s access figure and the rate
    the coordinator expects of it, so either may be the limit. One backup joins to
    tell (paced too, so the rest outlasts the next round); the aggregate doubles, so
    the figure was low and is raised."""
    data = os.urandom(2_500_000)  # ~9.5 s from the paced mirror alone
    s = _paced(ftp_mirrors, canned_coordinator, tmp_path, data, paced=1, expected_bps=2e6,
               access_bps=2_000_000, backup_paced=True)
    _raised_with_one_backup(s, "a backup tests which one limits them",
                            min_bytes=len(data) // 4, max_s=8.0)


def test_a_mirror_well_below_its_expected_rate_at_the_figure_is_not_tested(
    ftp_mirrors, canned_coordinator, tmp_path: Path
) -> None:
    """The mirror is expected to give 16 Mbit/s and carries ~2.1, the 2 Mbit/s access
    figure: the access link is what limits it (a fast mirror behind a slow link), so
    no backup joins to test the figure."""
    data = os.urandom(1_200_000)  # ~4.6 s: past the judgements at ~2 and ~3 s
    s = _paced(ftp_mirrors, canned_coordinator, tmp_path, data, paced=1, expected_bps=16e6,
               access_bps=2_000_000)
    assert not [e for e in s.events if e.kind == "backup"], s.events
    assert all(m.name != "b0" for m in s.mirrors)
    assert s.seconds > 3.0


def test_a_configured_figure_is_not_tested(
    ftp_mirrors, canned_coordinator, tmp_path: Path
) -> None:
    """The same mirror filling both figures, but the figure was configured (the
    user's word, as PFTP_ACCESS_BANDWIDTH): no backup joins to test it."""
    data = os.urandom(1_200_000)  # ~4.6 s: past the judgements at ~2 and ~3 s
    s = _paced(ftp_mirrors, canned_coordinator, tmp_path, data, paced=1, expected_bps=2e6,
               access_bps=2_000_000, measured=False)
    assert not [e for e in s.events if e.kind == "backup"], s.events
    assert s.seconds > 3.0
