"""Lead start in the network lab (lead.py): three vsftpd mirrors of 20 Mbit/s behind a
4 Mbit/s access link, the client's access bandwidth configured, downloads with
`pftp get --mirror ... --json`. Real namespaces, real tbf shaping, real servers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pftp_lab import Lab, MirrorSpec, make_file

pytestmark = pytest.mark.lab

ACCESS = 4_000_000
MIRROR = 20_000_000
SIZE = 3 * 1024 * 1024 + 123  # about 6.5 s at 4 Mbit/s


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Lab, str]]:
    src = tmp_path_factory.mktemp("lead") / "data.bin"
    digest = make_file(src, SIZE, seed=11)
    with Lab([MirrorSpec(rate_bps=MIRROR)] * 3, files={"data.bin": src},
             access_bps=ACCESS) as lab:
        yield lab, digest


def start_pftp(lab: Lab, digest: str, out: Path, access: str) -> subprocess.Popen[str]:
    out.parent.chmod(0o777)
    argv = [sys.executable, "-m", "pftp_client.cli", "get"]
    for m in lab.mirrors:
        argv += ["--mirror", m.ftp_url("data.bin")]
    argv += ["--no-discovery", "--sha256", digest, "-o", str(out), "--quiet", "--json"]
    env = {**os.environ, "PFTP_ACCESS_BANDWIDTH": access, "XDG_CACHE_HOME": str(out.parent)}
    return lab.popen_in("client", argv, env=env, stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen[str], out: Path) -> dict[str, Any]:
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr[-2000:]
    summary = json.loads(stdout)
    assert summary["sha256_verified"] and out.stat().st_size == SIZE
    print({m["name"]: (m["state"], m["bytes"], m["events"]) for m in summary["mirrors"]})
    print([(e["at_s"], e["kind"], e["mirror"], e["detail"]) for e in summary["events"]][:6])
    return summary


def joins(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The standbys' "resumed" events (a parked flow's resumption says otherwise)."""
    return [e for e in summary["events"]
            if e["kind"] == "resumed" and e["detail"].startswith("joins: ")]


def by_mirror(summary: dict[str, Any], lab: Lab) -> list[dict[str, Any]]:
    """The summary's mirror entries in the lab's mirror order."""
    rows = {m["url"]: m for m in summary["mirrors"]}
    return [rows[m.ftp_url("data.bin")] for m in lab.mirrors]


def with_fault_on_leader(
    lb: Lab, digest: str, out: Path, fault: Callable[[], object], undo: Callable[[], object]
) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    """Download behind the 4 Mbit/s link with ``fault`` hitting the leading mirror
    1.5 s in; ``undo`` restores it for the next test, whatever happened. Returns the
    summary, the leader's entry and the others'."""
    proc = start_pftp(lb, digest, out, "4M")
    timer = lb.at(1.5, fault)
    try:
        s = finish(proc, out)
    finally:
        timer.cancel()
        undo()
    lead, *rest = by_mirror(s, lb)
    return s, lead, rest


def test_one_flow_fills_the_access_link_and_the_others_stand_by(lab, tmp_path):
    """Any one of the mirrors fills the 4 Mbit/s link: the first one fetches the whole
    file in one request, the others stay connected and idle. No lane ends before the
    end of the file, so no byte crosses the access link twice."""
    lb, digest = lab
    out = tmp_path / "a.bin"
    s = finish(start_pftp(lb, digest, out, "4M"), out)
    lead, *rest = by_mirror(s, lb)
    assert lead["bytes"] == SIZE and lead["state"] == "done"
    # its one request may still be reading the 226 when the summary is made: its
    # time so far counts (a report with 0 s would rank the mirror as dead)
    assert 0.5 * ACCESS < lead["rate_bps"] < 1.5 * ACCESS
    assert all(m["bytes"] == 0 and m["state"] == "standby" for m in rest)
    assert s["fetched_bytes"] == SIZE


def test_a_leader_short_of_the_configured_link_lets_everyone_in(lab, tmp_path):
    """Configured at 60 Mbit/s, the link really carries 4: the first flow is far
    short of the figure after a few round trips, so the others join at once and the
    file is dealt among all three. (At 200 Mbit/s a lead start would not pay, so
    everyone would start at once anyway: lead.pays_off.)"""
    lb, digest = lab
    out = tmp_path / "b.bin"
    s = finish(start_pftp(lb, digest, out, "60M"), out)
    rows = by_mirror(s, lb)
    assert all(m["bytes"] > 0 for m in rows), "every mirror took part"
    joined = joins(s)
    assert {e["mirror"] for e in joined} == {rows[1]["name"], rows[2]["name"]}
    assert all(e["at_s"] < 1.0 and "of the 60.00 Mbit/s" in e["detail"] for e in joined)


def test_leader_killed_the_standbys_take_over(lab, tmp_path):
    lb, digest = lab
    _s, lead, rest = with_fault_on_leader(
        lb, digest, tmp_path / "c.bin", lambda: lb.kill(0),
        lambda: lb.mirrors[0].alive or lb.restart(0),
    )
    assert 0 < lead["bytes"] < SIZE
    assert "failed" in lead["events"] or "retry" in lead["events"]
    # while its server is down, its retries reconnect first: they cut nobody's lane
    assert "stolen" not in lead["events"]
    assert sum(m["bytes"] for m in rest) == SIZE - lead["bytes"]
    assert all("resumed" in m["events"] for m in rest)


def test_leader_slowed_down_the_standbys_join(lab, tmp_path):
    """The leading mirror falls to 0.4 Mbit/s after 1.5 s: the download runs well
    below the access link for two monitor rounds, or over the look since the link
    was found full, so the others join (or sooner: the drop overflows the mirror's
    queue, and loss recovery may keep it silent for 1 s)."""
    lb, digest = lab
    s, lead, rest = with_fault_on_leader(
        lb, digest, tmp_path / "d.bin", lambda: lb.set_rate(0, 400_000),
        lambda: lb.set_rate(0, MIRROR),
    )
    joined = joins(s)
    whys = ("fell to", "received nothing", "since it was found full")
    assert joined and all(any(w in e["detail"] for w in whys) for e in joined), joined
    assert all(m["bytes"] > 0 for m in rest)
    assert lead["bytes"] < SIZE // 2


def test_leader_cut_off_the_standbys_join_within_seconds(lab, tmp_path):
    """The leading mirror's link goes down after 1.5 s: its transfer stalls without
    an error (that would take the 15 s stall timeout). After 1 s of silence the
    others join and share what it had not fetched; the file completes without it."""
    lb, digest = lab
    s, lead, rest = with_fault_on_leader(
        lb, digest, tmp_path / "e.bin", lambda: lb.disconnect(0), lambda: lb.reconnect(0)
    )
    joined = joins(s)
    assert joined and all("received nothing" in e["detail"] for e in joined), joined
    assert all(e["at_s"] < 4.0 for e in joined)
    assert sum(m["bytes"] for m in rest) == SIZE - lead["bytes"]
    assert s["seconds"] < 12, "the stalled leader did not hold the download"
