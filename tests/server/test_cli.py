"""`pftp-coordinator` as an admin runs it: subprocesses on SQLite and PostgreSQL."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx
from coordinator_testkit import CLI, REPO, run_cli


def test_admin_flow(db_url: str, tmp_path: Path) -> None:
    assert "database at revision" in run_cli("migrate", url=db_url).stdout
    run_cli(
        "mirror", "add", "m1", "--url", "ftp://127.0.0.1:2121/pub", "--region", "lab", url=db_url
    )
    data = os.urandom(300_001)
    src = tmp_path / "blob.bin"
    src.write_bytes(data)
    out = run_cli(
        "file", "add", "blob.bin", "--from-path", str(src), "--piece-size", "100000", url=db_url
    ).stdout
    assert hashlib.sha256(data).hexdigest() in out and "4 pieces" in out
    run_cli("replica", "add", "m1", "blob.bin", url=db_url)
    mirrors = json.loads(run_cli("mirror", "list", "--json", url=db_url).stdout)
    assert [(m["name"], m["enabled"], m["replicas"]) for m in mirrors] == [("m1", True, 1)]
    assert mirrors[0]["score"]["suitability"] == 1.0
    run_cli("downgrade", "base", url=db_url)


def test_admin_commands_and_errors(sqlite_url: str, tmp_path: Path) -> None:
    url = sqlite_url
    proc = run_cli("mirror", "list", url=url, check=False)
    assert proc.returncode == 1
    assert "pftp-coordinator migrate" in proc.stderr

    run_cli("migrate", url=url)
    run_cli("mirror", "add", "m1", "--url", "ftp://127.0.0.1:2121/pub", url=url)
    run_cli("mirror", "add", "m2", "--url", "http://127.0.0.1:8080/", url=url)
    dup = run_cli("mirror", "add", "m1", "--url", "ftp://x/", url=url, check=False)
    assert dup.returncode == 1 and "already exists" in dup.stderr

    run_cli("file", "add", "manual", "--size", "3", "--sha256", "A" * 64, url=url)
    bad = run_cli("file", "add", "bad", "--size", "3", "--sha256", "xyz", url=url, check=False)
    assert bad.returncode == 1 and "sha256" in bad.stderr

    run_cli("replica", "add", "m2", "manual", "--path", "pub/manual", url=url)
    missing = run_cli("replica", "add", "m3", "manual", url=url, check=False)
    assert missing.returncode == 1 and "no mirror named 'm3'" in missing.stderr

    run_cli("mirror", "disable", "m2", url=url)
    # `mirror set` prints the mirror with its real replica count (it once said 0).
    changed = json.loads(run_cli("mirror", "set", "m2", "--region", "lab", url=url).stdout)
    assert (changed["name"], changed["region"], changed["replicas"]) == ("m2", "lab", 1)
    run_cli("mirror", "set", "m1", "--asn", "65000", "--notes", "lab mirror", url=url)
    mirrors = json.loads(run_cli("mirror", "list", "--json", url=url).stdout)
    assert [(m["name"], m["enabled"], m["replicas"]) for m in mirrors] == [
        ("m1", True, 0),
        ("m2", False, 1),
    ]
    assert mirrors[0]["asn"] == 65000 and mirrors[0]["notes"] == "lab mirror"
    assert mirrors[1]["score"]["suitability"] is None

    files = json.loads(run_cli("file", "list", "--json", url=url).stdout)
    assert [(f["name"], f["replicas"], f["sha256"]) for f in files] == [("manual", 1, "a" * 64)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_refuses_unmigrated_database(sqlite_url: str) -> None:
    proc = run_cli("serve", "--port", str(_free_port()), url=sqlite_url, check=False)
    assert proc.returncode == 1
    assert "refusing to start" in proc.stderr and "pftp-coordinator migrate" in proc.stderr


def test_serve_answers(sqlite_url: str, tmp_path: Path) -> None:
    run_cli("migrate", url=sqlite_url)
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PFTP_")}
    env.update(
        PFTP_DATABASE_URL=sqlite_url,
        PFTP_CONFIG="/nonexistent/pftp.toml",
        PFTP_SCHEDULER_ENABLED="false",
        PFTP_DATA_DIR=str(tmp_path),
    )
    log = (tmp_path / "serve.log").open("w")
    server = subprocess.Popen(
        [*CLI, "serve", "--port", str(port)], env=env, cwd=REPO, stdout=log, stderr=log
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                r = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5)
                break
            except httpx.TransportError:
                assert server.poll() is None, (tmp_path / "serve.log").read_text()
                assert time.monotonic() < deadline, "server did not come up"
                time.sleep(0.2)
        assert r.json()["status"] == "ok"
        r = httpx.post(f"http://127.0.0.1:{port}/api/v1/assignments", json={"file": "none"})
        assert r.status_code == 404
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()
