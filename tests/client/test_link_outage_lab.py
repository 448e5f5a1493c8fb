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


def test_the_clients_own_network_down_for_seconds_costs_no_mirror(tmp_path: Path) -> None:
    """The client's default route goes away for 8 s mid-download (its own network,
    not a mirror's) and its connections are reset: every reconnect fails at once
    with "Network is unreachable". Counted as the mirrors' failures, both used up
    their retries 4 s into the outage and the download ended with "every mirror
    failed" (exit 4 after 6 s, the client before session 44; lab r16, session 43:
    "No route to host"). Nothing has come from any mirror meanwhile, so it is the
    client's network: the flows wait for it, blaming no one, and the download
    completes once the route is back."""
    src = tmp_path / "data.bin"
    size = 16 * 1024 * 1024 + 5
    digest = make_file(src, size, seed=45)
    specs = [MirrorSpec(rate_bps=8 * MBIT, rtt_ms=10, name="a"),
             MirrorSpec(rate_bps=8 * MBIT, rtt_ms=10, kind="pure-ftpd", name="b")]
    with Lab(specs, files={"data.bin": src}) as lab:
        route = lab.run_in("client", ["ip", "route", "show", "default"], check=True).stdout
        route = route.strip().split()
        assert route and route[0] == "default", route
        ns = lab.client_ns

        def route_down() -> None:
            subprocess.run(["ip", "-n", ns, "route", "del", "default"], check=True)
            # (and the transfers' connections with it: reset, as a NAT or a
            # firewall that lost their state would; what follows are reconnects)
            subprocess.run(["ip", "netns", "exec", ns, "ss", "-K", "state", "established"],
                           check=True, capture_output=True)

        def route_up() -> None:
            subprocess.run(["ip", "-n", ns, "route", "replace", *route], check=True)

        down = lab.at(2.0, route_down)
        up = lab.at(10.0, route_up)
        try:
            summary, out = download_dynamic(
                lab, tmp_path, digest, [m.ftp_url("data.bin") for m in lab.mirrors],
                extra=("--stall-timeout", "2"))
        finally:
            down.cancel()
            up.cancel()
            route_up()
    assert summary["sha256_verified"] and out.stat().st_size == size
    waits = [e for e in summary["events"]
             if e["kind"] == "retry" and "own network looks down" in e["detail"]]
    print(summary["seconds"], [(e["at_s"], e["mirror"], e["detail"][:80]) for e in waits])
    assert waits and all(e["at_s"] >= 2.0 for e in waits)
    assert summary["seconds"] > 10.0  # (the outage was inside the download)
    assert not [e for e in summary["events"] if e["kind"] == "failed"]
    assert all(m["bytes"] > 0 for m in summary["mirrors"])
    assert all(m["failures"] <= 1 for m in summary["mirrors"])  # (the reset alone)
