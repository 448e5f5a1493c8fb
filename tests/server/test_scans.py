"""Replica scans over real FTP (MLSD and LIST-only) and HTTP servers on loopback."""

from __future__ import annotations

import pytest
from coordinator_testkit import AUTH, run_cli, running_app
from pftp_coordinator.db import session_scope
from pftp_coordinator.models import File, Mirror, Replica
from pftp_coordinator.scans.listing import index_names, parse_list_line
from pftp_coordinator.scans.service import scan_mirror
from probe_db import add_mirror, migrated_factory, tree_root
from probe_servers import ftp_server, http_server, make_tree
from sqlalchemy import select

FILES = {f"pub/d{i % 4}/f{i}.bin": 1000 + i for i in range(24)}


def _replicas() -> dict[str, tuple[str, int]]:
    reg = {f"f{i}": (f"d{i % 4}/f{i}.bin", 1000 + i) for i in range(24)}
    reg["f3"] = ("d3/f3.bin", 999_999)  # registered size differs from the mirror's
    reg["gone"] = ("d1/gone.bin", 10)  # not on the mirror
    reg["nodir"] = ("nodir/x.bin", 10)  # directory missing
    return reg


def _state(factory, mid):
    with session_scope(factory) as s:
        rows = s.execute(
            select(File.name, Replica.present, Replica.size_seen, File.size, Replica.verified_at)
            .join(File, File.id == Replica.file_id)
            .where(Replica.mirror_id == mid)
        ).all()
        return {r.name: r for r in rows}


def _check(outcome, state):
    assert outcome.checked == 26 and outcome.present == 24
    assert sorted(outcome.missing) == ["gone", "nodir"]
    assert outcome.size_mismatch == ["f3"]
    assert state["f5"].present and state["f5"].size_seen == 1005
    assert not state["gone"].present and state["gone"].verified_at is not None
    # Present but the wrong size: unusable (size_seen != files.size).
    assert state["f3"].present and state["f3"].size_seen == 1003 != state["f3"].size


@pytest.mark.parametrize("mlsd", [True, False], ids=["mlsd", "list-only"])
def test_ftp_scan_one_connection(db_url, tmp_path, mlsd):
    factory = migrated_factory(db_url)
    root = tree_root(tmp_path, "m")
    make_tree(root, FILES)
    with ftp_server(root, mlsd=mlsd) as ftp:
        mid = add_mirror(factory, "m", ftp.url + "pub/", _replicas())
        out = scan_mirror(factory, mid)
        assert ftp.connection_count == 1  # 26 files, 5 directories, one connection
    _check(out, _state(factory, mid))
    with session_scope(factory) as s:
        assert s.get(Mirror, mid).last_scan_at is not None


def test_http_scan_head_over_one_connection(sqlite_url, tmp_path):
    factory = migrated_factory(sqlite_url)
    root = tree_root(tmp_path, "m")
    make_tree(root, FILES)
    with http_server(root) as http:
        mid = add_mirror(factory, "h", http.url + "pub/", _replicas())
        out = scan_mirror(factory, mid)
        assert http.connection_count == 1  # keep-alive: 26 HEADs, one connection
    _check(out, _state(factory, mid))


def test_scan_of_dead_mirror_keeps_replicas(sqlite_url, tmp_path):
    factory = migrated_factory(sqlite_url)
    root = tree_root(tmp_path, "m")
    make_tree(root, FILES)
    with ftp_server(root) as ftp:
        mid = add_mirror(factory, "m", ftp.url + "pub/", _replicas())
        scan_mirror(factory, mid)
    before = _state(factory, mid)
    with pytest.raises(OSError):
        scan_mirror(factory, mid, timeout_s=5)
    assert _state(factory, mid) == before


def test_listing_parsers():
    assert parse_list_line("-rw-r--r--    1 ftp      ftp       1048576 Jan 01 12:00 a b.iso") == (
        "a b.iso",
        1048576,
        True,
    )
    assert (
        parse_list_line("drwxr-xr-x    2 0        0            4096 Mar  3  2023 sub")[2] is False
    )
    assert parse_list_line("lrwxrwxrwx 1 0 0 7 Mar 3 2023 cur -> v1.2")[0] == "cur"
    assert parse_list_line("01-02-24  03:04PM              1234 win.exe") == ("win.exe", 1234, True)
    assert parse_list_line("total 12") is None
    assert index_names('<a href="../">..</a><a href="x%20y.iso">x</a><a href="d/">d/</a>') == {
        "x y.iso"
    }


def test_admin_scan_from_cli_and_api(pg_url, tmp_path):
    root = tree_root(tmp_path, "m")
    make_tree(root, FILES)
    factory = migrated_factory(pg_url)
    with ftp_server(root) as ftp:
        mid = add_mirror(factory, "m-cli", ftp.url + "pub/", _replicas())
        proc = run_cli("scan", "m-cli", url=pg_url)
        assert '"present": 24' in proc.stdout
        assert "no mirror named" in run_cli("scan", "nope", url=pg_url, check=False).stderr
        with running_app(pg_url, tmp_path) as client:
            r = client.post("/api/v1/admin/mirrors/m-cli/scan", headers=AUTH)
            assert r.status_code == 200, r.text
            assert r.json()["size_mismatch"] == ["f3"]
            assert client.post("/api/v1/admin/mirrors/m-cli/scan").status_code == 401
            assert client.post("/api/v1/admin/mirrors/nope/scan", headers=AUTH).status_code == 404
            r = client.post("/api/v1/admin/mirrors/m-cli/probe", headers=AUTH)
            assert r.status_code == 200 and r.json()["state"] == "up", r.text
    _check_state = _state(factory, mid)
    assert _check_state["f1"].present
