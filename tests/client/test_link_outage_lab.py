"""A mirror's link goes down for longer than the rate meter's window and comes back
(network lab: the link itself, so the control connection's ABOR waits on TCP's
backoff too). Its range is handed over meanwhile. Once a new connection to it gets
through (path_check.py) its ABOR is given up and it works on at the rate a monitor
round last saw; without that, once the ABOR is answered, it gets a trial range
(engine._trial_range). Before either, the silence had worn its meter down to 0 and
the mirror sat out the rest of the download (sweep "freeze-long": 1.39x the bound,
1.05x with trials, 1.01-1.03x with path checks)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
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
    # (back through its path check, or a trial range once the ABOR is answered)
    backs = [e for e in events if e[1] == "retry"]
    assert backs and backs[0][0] >= 6.0, events
    # ~5 MB before the outage; after it, half of what was left
    assert back["bytes"] > 12 * 1024 * 1024, back


# The download in the lab's client namespace through the library, with the trial
# ranges held off for a minute: what brings the mirror back is its path check.
_DOWNLOAD = """
import json, sys
from pftp_client import EngineConfig, download
out, digest, check, *urls = sys.argv[1:]
cfg = EngineConfig(trial_wait_s=60.0, trial_wait_max_s=60.0, path_check=check == "on")
s = download(mirrors=urls, output=out, sha256=digest, config=cfg, report=False,
             access_bandwidth_bps=1_000_000_000)
print(json.dumps(s.to_json_dict()))
"""


def _download_checked(lab: Lab, tmp_path: Path, digest: str, check: bool) -> dict:
    out = tmp_path / f"out-{check}" / "data.bin"
    out.parent.mkdir()
    out.parent.chmod(0o777)
    argv = [sys.executable, "-c", _DOWNLOAD, str(out), digest, "on" if check else "off",
            *(m.ftp_url("data.bin") for m in lab.mirrors)]
    env = {**os.environ, "XDG_CACHE_HOME": str(out.parent)}
    proc = lab.popen_in("client", argv, env=env, stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE, text=True)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr[-2000:]
    summary = json.loads(stdout)
    assert summary["sha256_verified"] and out.stat().st_size == SIZE
    return summary


def test_a_path_check_brings_a_mirror_back_once_its_link_is(tmp_path: Path) -> None:
    """The same 4.5 s outage, trials held off: with its path check, the flaky mirror
    is renewed once a new connection gets through (after some that did not) and
    serves a share of the rest; without, it serves nothing after the outage."""
    src = tmp_path / "data.bin"
    digest = make_file(src, SIZE, seed=29)
    specs = [MirrorSpec(rate_bps=20 * MBIT, rtt_ms=10, name="steady"),
             MirrorSpec(rate_bps=20 * MBIT, rtt_ms=10, kind="pure-ftpd", name="flaky")]
    served = {}
    with Lab(specs, files={"data.bin": src}) as lab:
        flaky = lab.mirror("flaky")
        for check in (True, False):
            down = lab.at(2.0, lab.disconnect, flaky)
            up = lab.at(6.5, lab.reconnect, flaky)
            try:
                summary = _download_checked(lab, tmp_path, digest, check)
            finally:
                down.cancel()
                up.cancel()
                if not lab.link_up(flaky):
                    lab.reconnect(flaky)
            back = next(m for m in summary["mirrors"] if m["url"] == flaky.ftp_url("data.bin"))
            events = [(round(e["at_s"], 2), e["kind"], e["detail"][:100])
                      for e in summary["events"] if e["mirror"] == back["name"]]
            print(check, summary["seconds"], back["bytes"], events)
            renewals = [e for e in events if "its path is back" in e[2]]
            served[check] = back["bytes"]
            if check:
                assert renewals and renewals[0][0] >= 6.0, events
                assert "got through after" in renewals[0][2]
            else:
                assert not renewals, events
    # (~5 MB before the outage either way; after it, with the check, a good share)
    assert served[True] > served[False] + 8 * 1024 * 1024, served
    assert served[False] < 8 * 1024 * 1024, served
