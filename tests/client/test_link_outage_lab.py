"""A mirror's link goes down for longer than the rate meter's window and comes back
(network lab: the link itself, so the control connection's ABOR waits on TCP's
backoff too). Its range is handed over meanwhile; once the ABOR is answered the
flow gets a trial range (engine._trial_range) at the rate a monitor round last saw,
and works on. Before, the silence had worn its meter down to 0 and the mirror sat
out the rest of the download (sweep "freeze-long": 1.39x the bound, 1.05x since)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from pftp_lab import Lab, MirrorSpec, make_file
from test_long_path_lab import download_dynamic

pytestmark = pytest.mark.lab

MBIT = 1_000_000
SIZE = 48 * 1024 * 1024  # ~13 s from two 20 Mbit/s mirrors with 4 s of one lost


def test_a_mirror_back_from_a_link_outage_works_again(tmp_path: Path) -> None:
    src = tmp_path / "data.bin"
    digest = make_file(src, SIZE, seed=23)
    specs = [MirrorSpec(rate_bps=20 * MBIT, rtt_ms=10, name="steady"),
             MirrorSpec(rate_bps=20 * MBIT, rtt_ms=10, kind="pure-ftpd", name="flaky")]
    with Lab(specs, files={"data.bin": src}) as lab:
        flaky = lab.mirror("flaky")
        t0 = time.monotonic()
        down = lab.at(2.0, lab.disconnect, flaky)
        up = lab.at(6.5, lab.reconnect, flaky)
        try:
            summary, out = download_dynamic(
                lab, tmp_path, digest, [m.ftp_url("data.bin") for m in lab.mirrors])
        finally:
            down.cancel()
            up.cancel()
        took = time.monotonic() - t0
    assert summary["sha256_verified"] and out.stat().st_size == SIZE
    by_url = {m["url"]: m for m in summary["mirrors"]}
    back = by_url[flaky.ftp_url("data.bin")]
    events = [(round(e["at_s"], 2), e["kind"], e["detail"][:90]) for e in summary["events"]
              if e["mirror"] == back["name"]]
    print(took, {m["name"]: m["bytes"] for m in summary["mirrors"]}, events)
    assert took > 7.0  # (the outage was over before the download)
    trials = [e for e in events if e[1] == "retry" and "trial" in e[2]]
    assert trials and trials[0][0] >= 6.0, events
    # ~5 MB before the outage; after it, half of what was left
    assert back["bytes"] > 12 * 1024 * 1024, back
