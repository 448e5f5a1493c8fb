"""Spot checks between mirrors (cross_check.py) over real servers behind shaped
links (network lab): vsftpd and pure-ftpd, one of them with another copy of the
file (same size: a mirror not yet synced), no SHA-256 given."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pftp_lab import Lab, MirrorSpec, make_file

pytestmark = pytest.mark.lab

MBIT = 1_000_000
SIZE = 16 * 1024 * 1024 + 99


def test_a_mirror_with_another_copy_is_found_and_its_bytes_replaced(tmp_path: Path) -> None:
    src = tmp_path / "data.bin"
    make_file(src, SIZE, seed=31)
    specs = [
        MirrorSpec(rate_bps=20 * MBIT, rtt_ms=10, kind="vsftpd"),
        MirrorSpec(rate_bps=20 * MBIT, rtt_ms=10, kind="pure-ftpd"),
        MirrorSpec(rate_bps=20 * MBIT, rtt_ms=10, kind="vsftpd"),
    ]
    with Lab(specs, files={"data.bin": src}) as lab:
        stale = lab.mirrors[1]
        copy = stale.root / "data.bin"
        copy.unlink()  # (the roots may share one inode: a new file, not the old one rewritten)
        make_file(copy, SIZE, seed=32)
        copy.chmod(0o644)
        out = tmp_path / "out" / "data.bin"
        out.parent.mkdir()
        out.parent.chmod(0o777)
        argv = [sys.executable, "-m", "pftp_client.cli", "get"]
        for m in lab.mirrors:
            argv += ["--mirror", m.ftp_url("data.bin")]
        argv += ["--no-discovery", "-o", str(out), "--quiet", "--json"]
        env = {**os.environ, "PFTP_ACCESS_BANDWIDTH": "1G", "XDG_CACHE_HOME": str(out.parent)}
        proc = lab.popen_in("client", argv, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
        stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr[-2000:]
    summary = json.loads(stdout)
    assert out.read_bytes() == src.read_bytes()
    by_url = {m["url"]: m for m in summary["mirrors"]}
    liar = by_url[stale.ftp_url("data.bin")]
    print({m["url"]: (m["bytes"], m["state"]) for m in summary["mirrors"]},
          summary["cross_checked_spots"], summary["refetched_bytes"], summary["seconds"])
    assert liar["state"] == "corrupt" and "corrupt" in liar["events"]
    assert [u for u, m in by_url.items() if m["state"] == "corrupt"] == [liar["url"]]
    assert summary["refetched_bytes"] == liar["bytes"]
    # stopped at its first spot or so (1 MiB, then a few round trips), well before
    # its third of the file
    assert liar["bytes"] < SIZE / 4
    # its bytes went back to the other flows while they ran, not to a repair after
    assert sum(m["bytes"] for u, m in by_url.items() if u != liar["url"]) == SIZE
    assert summary["cross_checked_spots"] >= 2 and not summary["sha256_verified"]
