"""The ranged-read probe and the replica scanner against real vsftpd, pure-ftpd, proftpd
and pyftpdlib on loopback (fixtures from tests/client/conftest.py, see conftest.py here).

pure-ftpd is the awkward one: it answers RETR with ``150-Accepted data connection``
+ ``150 4096.0 kbytes to download`` and, after a hang-up, with another
``150 0.520 seconds (measured here), ...`` line, which the probe used to take for
an error (the lab bench saw every pure-ftpd mirror fail its probe).
"""

from __future__ import annotations

import ftplib
import hashlib
import logging
import os
import time
from collections.abc import Callable

import pytest
from pftp_coordinator.ftp_control import url_path
from pftp_coordinator.probes.throughput import ProbeError, ftp_ranged_read
from pftp_coordinator.scans.ftp import scan_ftp

SIZE = 3 * 1024 * 1024 + 123
KINDS = ["vsftpd", "pure-ftpd", "proftpd", "pyftpdlib"]


@pytest.fixture
def start_server(request, start_vsftpd, start_pureftpd, start_proftpd, start_pyftpd) -> Callable:
    return {"vsftpd": start_vsftpd, "pure-ftpd": start_pureftpd, "proftpd": start_proftpd,
            "pyftpdlib": start_pyftpd}[request.param]


def _sessions_end(server, timeout_s: float = 30.0) -> bool:
    """True once the server has no session process left (vsftpd and pure-ftpd fork
    one per session; pyftpdlib has none to see, so it is always True)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not server.session_pids():
            return True
        time.sleep(0.1)
    return False


def test_url_path_is_relative_to_the_login_directory():
    assert url_path("/pub/a%20b.bin") == "pub/a b.bin"
    assert url_path("/%2Fsrv/f") == "/srv/f"
    assert url_path("/") == "" and url_path("") == ""
    assert url_path("/pub/f;type=i") == "pub/f"


@pytest.mark.parametrize("start_server", KINDS, indirect=True)
def test_ranged_read_exact_bytes_and_clean_end(start_server, caplog):
    caplog.set_level(logging.INFO, logger="pftp_coordinator.probes.throughput")
    server = start_server()
    server.put("pub/data.bin", os.urandom(SIZE))
    url = server.url("pub/data.bin")
    # Several reads in a row: each one ends its session with QUIT -> 221, so none is
    # refused for too many open sessions and none leaves a session process behind.
    # (A QUIT sent while pure-ftpd was still in its transfer loop was swallowed in
    # about a third of the early hang-ups: both sides then waited for the timeout.)
    for i in range(12):
        offset, size = ((0, 256 * 1024), (1_000_001, 300_000), (0, 1))[i % 3]
        r = ftp_ranged_read(url, size, offset=offset, timeout_s=30)
        assert r.method == "ftp-range" and r.nbytes == size and r.bps > 0
        assert r.seconds >= r.first_byte_s > 0
    unclean = [rec.getMessage() for rec in caplog.records if "no clean QUIT" in rec.getMessage()]
    assert not unclean, unclean
    assert _sessions_end(server), f"{server.kind} kept sessions: {server.session_pids()}"
    # Past the end: what is left, and the server's own end of data is accepted.
    tail = ftp_ranged_read(url, 100_000, offset=SIZE - 50_000, timeout_s=30)
    assert tail.nbytes == 50_000
    # The whole file in one read (the server ends the data exactly at our size).
    whole = ftp_ranged_read(url, SIZE, timeout_s=60)
    assert whole.nbytes == SIZE
    with pytest.raises(ProbeError, match="ftp-range"):
        ftp_ranged_read(server.url("pub/missing.bin"), 1000, timeout_s=30)
    assert _sessions_end(server), f"{server.kind} kept sessions: {server.session_pids()}"


@pytest.mark.parametrize("start_server", ["vsftpd", "pure-ftpd", "proftpd"], indirect=True)
def test_ranged_read_leaves_the_server_usable(start_server):
    """After a probe that hung up early, an ordinary client gets the right bytes."""
    server = start_server()
    data = os.urandom(SIZE)
    server.put("data.bin", data)
    for _ in range(3):
        assert ftp_ranged_read(server.url("data.bin"), 64 * 1024, timeout_s=30).nbytes == 65536
    user, _, password = server.userinfo.rstrip("@").partition(":")
    ftp = ftplib.FTP(timeout=30)
    try:
        ftp.connect(server.host, server.port)
        ftp.login(user or "anonymous", password.replace("%20", " ") or "x@")
        got = bytearray()
        ftp.retrbinary("RETR data.bin", got.extend)
        ftp.quit()
    finally:
        ftp.close()
    assert hashlib.sha256(got).digest() == hashlib.sha256(data).digest()


@pytest.mark.parametrize("start_server", KINDS, indirect=True)
def test_scan_sizes_on_real_servers(start_server):
    server = start_server()
    files = {
        "pub/a.bin": 1000,
        "pub/sub/b.bin": 0,
        "pub/sub/c d.bin": 4097,  # a space in the name
        "pub/sub/deeper/e.bin": 12345,
        "top.bin": 77,
    }
    for rel, n in files.items():
        server.put(rel, os.urandom(n))
    (server.root / "pub" / "adir.bin").mkdir()  # a directory is not a replica
    (server.root / "pub" / "adir.bin").chmod(0o755)
    wanted = [*files, "pub/missing.bin", "nodir/x.bin", "pub/adir.bin"]
    seen = scan_ftp(server.base_url, wanted, timeout_s=30)
    assert seen == files
    # A base URL below the login directory: replica paths are relative to it.
    seen_pub = scan_ftp(
        server.base_url + "pub/", ["a.bin", "sub/c d.bin", "gone.bin"], timeout_s=30
    )
    assert seen_pub == {"a.bin": 1000, "sub/c d.bin": 4097}
    assert _sessions_end(server), f"{server.kind} kept sessions: {server.session_pids()}"


def test_cli_probes_all_mirrors_at_once(sqlite_url, start_vsftpd, start_pureftpd, start_pyftpd):
    """`pftp-coordinator probe --all` (and with names): every server kind's ranged
    read succeeds, and the mirrors are probed concurrently in one process."""
    import json

    from coordinator_testkit import run_cli
    from probe_db import add_mirror, migrated_factory

    factory = migrated_factory(sqlite_url)
    data = os.urandom(1024 * 1024)
    servers = {"vs": start_vsftpd(), "pure": start_pureftpd(), "py": start_pyftpd()}
    for name, server in servers.items():
        server.put("pub/data.bin", data)
        add_mirror(factory, name, server.base_url + "pub/", {"data.bin": ("data.bin", len(data))})
    proc = run_cli("probe", "--all", url=sqlite_url, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    outcomes = {o["mirror"]: o for o in json.loads(proc.stdout)}
    assert set(outcomes) == set(servers)
    for name, o in outcomes.items():
        assert o["ok"] and o["state"] == "up" and o["attempts"] == 1, (name, o)
        reads = [r for r in o["rows"] if r["method"] == "ftp-range"]
        assert reads and reads[0]["ok"] and reads[0]["throughput_bps"] > 0, (name, o)
    one = run_cli("probe", "pure", url=sqlite_url)
    assert json.loads(one.stdout)["mirror"] == "pure"  # one name: one object, as before
    two = json.loads(run_cli("probe", "vs", "py", url=sqlite_url).stdout)
    assert sorted(o["mirror"] for o in two) == ["py", "vs"]
    bad = run_cli("probe", url=sqlite_url, check=False)
    assert bad.returncode == 1 and "--all" in bad.stderr
    assert "no mirror named" in run_cli("probe", "nope", url=sqlite_url, check=False).stderr
