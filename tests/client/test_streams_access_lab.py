"""Stream trials beside a full access link (lab): the client knows its access link,
and the flows fill it. Another connection to a mirror there only takes from the
other flows; the access queue's drops put segments out of order on every flow
behind it, which must not read as the mirror's path losing them (session 44,
lab r26: 28.5 Mbit/s access, mirrors of 5.3 Mbit/s at 40 ms and 28.7 at 80 ms; the
5.3 one got an extra connection at 2 s on "19 % of its segments out of order", and
the download took 1.31-1.33x the bound against 1.19-1.21x without it)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pftp_lab import Lab, MirrorSpec, make_file
from test_long_path_lab import download_dynamic

pytestmark = pytest.mark.lab

MBIT = 1_000_000
SIZE = 17 * 1024 * 1024 + 99


def test_no_extra_connection_on_out_of_order_segments_behind_a_full_access_link(
    tmp_path: Path,
) -> None:
    src = tmp_path / "data.bin"
    digest = make_file(src, SIZE, seed=44)
    specs = [
        MirrorSpec(rate_bps=int(5.3 * MBIT), rtt_ms=40, kind="pure-ftpd", name="slow"),
        MirrorSpec(rate_bps=int(28.7 * MBIT), rtt_ms=80, name="fast"),
    ]
    with Lab(specs, files={"data.bin": src}, access_bps=int(28.5 * MBIT)) as lab:
        summary, out = download_dynamic(
            lab, tmp_path, digest, [m.ftp_url("data.bin") for m in lab.mirrors], access="28.5M")
    assert summary["sha256_verified"] and out.stat().st_size == SIZE
    streams = [e["detail"] for e in summary["events"] if e["kind"] == "stream"]
    print(summary["seconds"], streams, [(m["name"], m["bytes"]) for m in summary["mirrors"]])
    assert not [d for d in streams if "out of order" in d]
    assert all(m["bytes"] > 0 for m in summary["mirrors"])
    assert summary["duplicate_bytes"] <= 0.01 * SIZE
