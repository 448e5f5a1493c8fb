"""A backup joins when the mirrors at work fall short of the access link
(engine._top_up): the coordinator's expected rates, or the user's choice of
mirrors, can leave the link half empty, and the client adds the next mirror itself.
Loopback, with two mirrors throttled by pyftpdlib and a fast backup."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from pftp_client import download

RATE = 128 * 1024  # bytes/s per slow mirror: 2 Mbit/s; both together a quarter of 8


def test_a_backup_joins_when_the_mirrors_fall_short_of_the_access_link(
    start_pyftpd, throttled_ftp_handler, tmp_path: Path
) -> None:
    data = os.urandom(3_000_000)  # ~11 s from the two slow mirrors alone
    slow = throttled_ftp_handler(RATE)
    first = start_pyftpd(handler=slow)
    first.put("f.bin", data)
    second = start_pyftpd(handler=slow, root=first.root)
    fast = start_pyftpd(root=first.root)
    out = tmp_path / "f.bin"
    s = download(mirrors=[first.url("f.bin"), second.url("f.bin")], backups=[fast.url("f.bin")],
                 output=out, sha256=hashlib.sha256(data).hexdigest(), timeout=30.0,
                 access_bandwidth_bps=8_000_000, congestion="off")
    assert s.sha256_verified and out.read_bytes() == data
    joined = [e for e in s.events if e.kind == "backup"]
    assert len(joined) == 1, s.events
    assert "of the 8.00 Mbit/s access link" in joined[0].detail
    # judged over a whole aggregate window (2 s) after the first half second
    assert 2.5 <= joined[0].at_s < 5.0
    backup = next(m for m in s.mirrors if m.url == fast.url("f.bin"))
    assert backup.role == "backup" and backup.bytes > len(data) // 2
    assert s.seconds < 8.0
