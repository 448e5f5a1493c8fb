"""A coordinator's backup joins when the mirrors it chose to cover the access link
fall short of it (engine._top_up). Loopback: two mirrors throttled by pyftpdlib to
2 Mbit/s in all, a fast backup, 8 Mbit/s configured."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from pftp_client import download

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
