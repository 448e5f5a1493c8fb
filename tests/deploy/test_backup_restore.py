"""The backup and restore commands of deploy/BACKUP.md, run for real on seeded databases."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import uuid
from pathlib import Path

import pytest
from deploy_spec import BIN

SHA = "b" * 64


def cli(url: str, *args: str) -> str:
    res = subprocess.run(
        [str(BIN / "pftp-coordinator"), "--database-url", url, *args],
        capture_output=True, text=True, timeout=120,
    )
    assert res.returncode == 0, f"pftp-coordinator {' '.join(args)}: {res.stderr[-2000:]}"
    return res.stdout


def seed(url: str) -> None:
    """Migrate and register two mirrors, a file, a replica and an agent (in-process: the
    CLI costs seconds per call on a loaded machine; the restore side uses the CLI)."""
    from pftp_coordinator import migrate
    from pftp_coordinator.db import create_db_engine, make_session_factory, session_scope
    from pftp_coordinator.models import Agent, File, Mirror, MirrorUrl, Replica

    migrate.upgrade(url)
    engine = create_db_engine(url)
    try:
        with session_scope(make_session_factory(engine)) as s:
            m1 = Mirror(name="backup-m1", region="east")
            m1.urls = [MirrorUrl(protocol="ftp", base_url="ftp://10.1.0.2/pub/")]
            m2 = Mirror(name="backup-m2")
            m2.urls = [MirrorUrl(protocol="http", base_url="http://10.1.0.3/pub/")]
            f = File(name="iso/a.iso", size=1 << 20, sha256=SHA)
            s.add_all([m1, m2, f])
            s.flush()
            s.add(Replica(mirror_id=m1.id, file_id=f.id, path="iso/a.iso"))
            s.add(Agent(mirror_id=m1.id, token_hash="c" * 64))
    finally:
        engine.dispose()


def mirror_names(url: str) -> list[str]:
    rows = json.loads(cli(url, "mirror", "list", "--json", "--no-scores"))
    return sorted(r["name"] for r in rows)


def libpq(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://")


def _fresh_pg(pg_url: str) -> tuple[str, str]:
    base, _, _name = pg_url.rpartition("/")
    return base, f"pftp_restore_{uuid.uuid4().hex[:10]}"


@pytest.mark.postgres
def test_pg_dump_and_restore(pg_url: str, tmp_path: Path) -> None:
    import psycopg

    seed(pg_url)
    dump = tmp_path / "pftp.dump"
    subprocess.run(
        ["pg_dump", "--format=custom", "--no-owner", f"--file={dump}", libpq(pg_url)],
        check=True, timeout=120,
    )
    assert dump.stat().st_size > 1000
    base, name = _fresh_pg(pg_url)
    admin = libpq(f"{base}/postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    restored = f"{base}/{name}"
    try:
        subprocess.run(
            ["pg_restore", "--no-owner", f"--dbname={libpq(restored)}", str(dump)],
            check=True, timeout=120,
        )
        cli(restored, "migrate")  # a no-op on a current dump
        assert mirror_names(restored) == ["backup-m1", "backup-m2"]
        files = json.loads(cli(restored, "file", "list", "--json"))
        assert [f["name"] for f in files] == ["iso/a.iso"]
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_sqlite_online_backup_and_restore(tmp_path: Path) -> None:
    live = tmp_path / "coordinator.db"
    url = f"sqlite:///{live}"
    seed(url)
    # Python's online backup (the BACKUP.md one-liner without the sqlite3 tool).
    copy = tmp_path / "backup-python.db"
    src, dst = sqlite3.connect(live), sqlite3.connect(copy)
    try:
        src.backup(dst)
    finally:
        dst.close()
        src.close()
    assert mirror_names(f"sqlite:///{copy}") == ["backup-m1", "backup-m2"]
    if shutil.which("sqlite3"):
        copy2 = tmp_path / "backup-cli.db"
        subprocess.run(["sqlite3", str(live), f".backup '{copy2}'"], check=True, timeout=60)
        assert mirror_names(f"sqlite:///{copy2}") == ["backup-m1", "backup-m2"]
    # Restore: replace the live file with the copy, drop WAL side files.
    cli(url, "mirror", "add", "added-after-backup", "--url", "ftp://10.1.0.9/")
    shutil.copyfile(copy, live)
    for side in ("coordinator.db-wal", "coordinator.db-shm"):
        (tmp_path / side).unlink(missing_ok=True)
    assert mirror_names(url) == ["backup-m1", "backup-m2"]
