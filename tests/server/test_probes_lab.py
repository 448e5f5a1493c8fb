"""Probes in a private network-namespace lab with tc tbf links (prefix `pb`):
the throughput probe ranks a 40 Mbit/s mirror above a 10 Mbit/s one, a stopped
mirror is marked down, a restarted one comes back."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pftp_coordinator.db import session_scope
from pftp_coordinator.models import Mirror, PathProbe, utcnow
from pftp_coordinator.probes.aggregate import summarize_probes
from probe_db import add_mirror, migrated_factory, tree_root
from probe_servers import make_tree
from sqlalchemy import select

pytestmark = pytest.mark.lab
HERE = Path(__file__).parent
RATES = {"m1": 40_000_000, "m2": 10_000_000}


def _ftp_server(ns: str, addr: str, root: Path, log: Path) -> subprocess.Popen:
    from pftp_lab.netns import env_with_sbin

    return subprocess.Popen(
        [
            "ip",
            "netns",
            "exec",
            ns,
            sys.executable,
            "-m",
            "pyftpdlib",
            "-i",
            addr,
            "-p",
            "21",
            "-d",
            str(root),
        ],
        stdout=log.open("a"),
        stderr=subprocess.STDOUT,
        env=env_with_sbin(),
    )


def _wait_port(ns: str, addr: str) -> None:
    deadline = time.monotonic() + 30
    probe = f"import socket; socket.create_connection(('{addr}', 21), timeout=2).close()"
    while time.monotonic() < deadline:
        if (
            subprocess.run(
                ["ip", "netns", "exec", ns, sys.executable, "-c", probe], capture_output=True
            ).returncode
            == 0
        ):
            return
        time.sleep(0.3)
    raise AssertionError(f"FTP server on {addr} in {ns} did not start")


@pytest.fixture
def pb_lab(tmp_path):
    """pb<id>-c (coordinator side) linked to pb<id>-m1 / pb<id>-m2, mirror egress shaped."""
    from pftp_lab import netns

    lab = f"pb{secrets.token_hex(2)}"
    namespaces = [f"{lab}-c", f"{lab}-m1", f"{lab}-m2"]
    procs: dict[str, subprocess.Popen] = {}
    try:
        for ns in namespaces:
            netns.add_namespace(ns)
        addrs = {}
        for k, m in enumerate(("m1", "m2"), start=1):
            c_dev, m_dev = f"{lab}c{k}", f"{lab}{m}"
            netns.add_veth(c_dev, f"{lab}-c", m_dev, f"{lab}-{m}")
            netns.add_address(f"{lab}-c", c_dev, f"10.98.{k}.1/30")
            netns.add_address(f"{lab}-{m}", m_dev, f"10.98.{k}.2/30")
            netns.set_shaping(f"{lab}-{m}", m_dev, RATES[m])  # download direction
            addrs[m] = f"10.98.{k}.2"
        root = tree_root(tmp_path, "pub")
        make_tree(root, {"big.bin": 8 * 1024 * 1024})
        for m, addr in addrs.items():
            procs[m] = _ftp_server(f"{lab}-{m}", addr, root, tmp_path / f"{m}.log")
        for m, addr in addrs.items():
            _wait_port(f"{lab}-{m}", addr)
        yield {"id": lab, "addrs": addrs, "root": root, "procs": procs, "tmp": tmp_path}
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait(10)
        for ns in namespaces:
            netns.delete_namespace(ns)


def _probe(lab: dict, url: str, *ids: int) -> dict:
    from pftp_lab.netns import env_with_sbin

    env = env_with_sbin(dict(os.environ))
    proc = subprocess.run(
        [
            "ip",
            "netns",
            "exec",
            f"{lab['id']}-c",
            sys.executable,
            str(HERE / "lab_probe_run.py"),
            url,
            *map(str, ids),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=HERE,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_lab_throughput_ranks_and_down_up(pb_lab, sqlite_url):
    factory = migrated_factory(sqlite_url)
    ids = {
        m: add_mirror(factory, m, f"ftp://{addr}:21/", {"big": ("big.bin", 8 * 1024 * 1024)})
        for m, addr in pb_lab["addrs"].items()
    }
    out = _probe(pb_lab, sqlite_url, ids["m1"], ids["m2"])
    assert all(o["ok"] for o in out.values()), out
    now = utcnow()
    with session_scope(factory) as s:
        summ = {
            m: summarize_probes(
                s.scalars(select(PathProbe).where(PathProbe.mirror_id == mid)).all(), now, 1800
            )
            for m, mid in ids.items()
        }
    for m, sm in summ.items():
        print(
            f"{m} ({RATES[m] / 1e6:.0f} Mbit/s tbf): ranged read {sm.throughput_bps / 1e6:.1f}"
            f" Mbit/s, packet-train {(sm.capacity_bps or 0) / 1e6:.1f} Mbit/s, "
            f"rtt {sm.rtt_s * 1e3:.2f} ms"
        )
    assert summ["m1"].bandwidth_bps > summ["m2"].bandwidth_bps

    # Stop m2: one probe round marks it down.
    pb_lab["procs"]["m2"].kill()
    pb_lab["procs"]["m2"].wait(10)
    out = _probe(pb_lab, sqlite_url, ids["m2"])
    assert out[str(ids["m2"])]["state"] == "down", out
    with session_scope(factory) as s:
        assert s.get(Mirror, ids["m2"]).state == "down"
        assert s.get(Mirror, ids["m1"]).state == "up"

    # Restart it: the next probe brings it back.
    pb_lab["procs"]["m2"] = _ftp_server(
        f"{pb_lab['id']}-m2", pb_lab["addrs"]["m2"], pb_lab["root"], pb_lab["tmp"] / "m2.log"
    )
    _wait_port(f"{pb_lab['id']}-m2", pb_lab["addrs"]["m2"])
    out = _probe(pb_lab, sqlite_url, ids["m2"])
    assert out[str(ids["m2"])]["state"] == "up", out


@pytest.mark.lab
def test_a_far_path_is_read_past_its_slow_start(tmp_path: Path) -> None:
    """A 40 Mbit/s mirror 80 ms away (the lab's delay line): 512 kB read as a whole
    are mostly slow start; read on while the rate still grows, the probe measures the
    path. Real vsftpd, real TCP, from the client's namespace."""
    from pftp_lab import Lab, MirrorSpec, make_file

    src = tmp_path / "data.bin"
    make_file(src, 8 * 1024 * 1024, seed=4)
    code = (
        "import json,sys\n"
        "from pftp_coordinator.probes.throughput import ftp_ranged_read\n"
        "url, extra = sys.argv[1], int(sys.argv[2])\n"
        "r = ftp_ranged_read(url, 512 * 1024, timeout_s=20, max_size=extra)\n"
        "print(json.dumps({'bps': r.bps, 'nbytes': r.nbytes}))\n"
    )
    rate = 40_000_000
    with Lab([MirrorSpec(rate_bps=rate, rtt_ms=80)], files={"data.bin": src}) as lab:
        url = lab.mirrors[0].ftp_url("data.bin")
        got = {}
        for extra in (0, 4 * 1024 * 1024):
            res = lab.run_in("client", [sys.executable, "-c", code, url, str(extra)],
                             timeout=60, check=True)
            got[extra] = json.loads(res.stdout)
    print(got)
    short, long = got[0], got[4 * 1024 * 1024]
    assert short["nbytes"] == 512 * 1024
    assert 512 * 1024 < long["nbytes"] <= 4 * 1024 * 1024
    assert 0.75 * rate < long["bps"] < 1.1 * rate
    assert short["bps"] < long["bps"]
