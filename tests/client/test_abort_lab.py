"""Cutting a range short on real servers behind a shaped link (network lab).

On loopback a cut transfer's server has its socket buffers to fill and answers
ABOR twice; behind a shaped link pure-ftpd is still sending when the data
connection is reset and answers once (226 "Since you see this ABOR must've
succeeded"). Waiting for a second reply there cost the reply timeout and the
control connection (ftp.FtpFetcher._abort)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from pftp_lab import Lab, MirrorSpec, make_file

pytestmark = pytest.mark.lab

MBIT = 1_000_000

# Two 16 KiB ranges far apart on one fetcher: the second must reuse the session.
_SPOTS = r"""
import json, sys, threading, time
from pftp_client.transports.base import RangeEnd, open_fetcher
f = open_fetcher(sys.argv[1], timeout=20.0, stall_timeout=10.0)
out = []
for start in (1_000_000, 20_000_000):
    got = bytearray()
    t0 = time.monotonic()
    f.fetch(start, RangeEnd(start + 16384), lambda o, d, a: got.extend(d), threading.Event())
    out.append({"start": start, "bytes": got.hex(), "s": time.monotonic() - t0})
out.append({"reconnects": f.reconnects})
f.close()
print(json.dumps(out))
"""


@pytest.mark.parametrize("kind", ["pure-ftpd", "vsftpd"])
def test_a_cut_range_keeps_the_control_connection(tmp_path: Path, kind: str) -> None:
    src = tmp_path / "data.bin"
    make_file(src, 32 << 20, seed=5)
    data = src.read_bytes()
    with Lab([MirrorSpec(rate_bps=20 * MBIT, rtt_ms=20, kind=kind)],
             files={"data.bin": src}) as lab:
        r = lab.run_in("client", [sys.executable, "-c", _SPOTS,
                                  lab.mirrors[0].ftp_url("data.bin")], timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    *spots, tail = json.loads(r.stdout)
    print(spots[0]["s"], spots[1]["s"], tail)
    for spot in spots:
        assert bytes.fromhex(spot["bytes"]) == data[spot["start"]: spot["start"] + 16384]
    assert tail["reconnects"] == 0, r.stderr[-2000:]
