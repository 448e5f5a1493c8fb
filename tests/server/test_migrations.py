"""Migrations up and down on SQLite and PostgreSQL; the migrated schema equals models.py."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from pftp_coordinator import migrate
from pftp_coordinator.db import create_db_engine
from pftp_coordinator.models import Base
from sqlalchemy import inspect, text


def _schema_diff(url: str) -> list:
    engine = create_db_engine(url)
    try:
        with engine.connect() as conn:
            ctx = MigrationContext.configure(
                conn, opts={"compare_type": True, "compare_server_default": True}
            )
            return compare_metadata(ctx, Base.metadata)
    finally:
        engine.dispose()


def _tables(url: str) -> set[str]:
    engine = create_db_engine(url)
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_upgrade_creates_exactly_the_models(db_url: str) -> None:
    assert migrate.current(db_url) is None
    migrate.upgrade(db_url)
    assert migrate.current(db_url) == migrate.head_revision()
    assert _tables(db_url) == set(Base.metadata.tables) | {"alembic_version"}
    assert _schema_diff(db_url) == []


def test_downgrade_to_base_and_up_again(db_url: str) -> None:
    migrate.upgrade(db_url)
    migrate.downgrade(db_url, "base")
    assert migrate.current(db_url) is None
    assert _tables(db_url) <= {"alembic_version"}
    migrate.upgrade(db_url)  # the round trip leaves a working schema
    assert _schema_diff(db_url) == []


def test_is_up_to_date_and_require(db_url: str) -> None:
    engine = create_db_engine(db_url)
    try:
        assert not migrate.is_up_to_date(engine)
        try:
            migrate.require_up_to_date(engine)
        except migrate.SchemaOutOfDate as exc:
            assert "pftp-coordinator migrate" in str(exc)
        else:
            raise AssertionError("an unmigrated database passed require_up_to_date")
        migrate.upgrade(db_url)
        assert migrate.is_up_to_date(engine)
        migrate.require_up_to_date(engine)
    finally:
        engine.dispose()


def test_upgrade_is_idempotent(sqlite_url: str) -> None:
    migrate.upgrade(sqlite_url)
    migrate.upgrade(sqlite_url)
    assert migrate.current(sqlite_url) == migrate.head_revision()


def test_migrations_dir_found() -> None:
    d = migrate.migrations_dir()
    assert (d / "env.py").is_file()
    assert any((d / "versions").glob("*.py"))


def _columns(url: str, table: str) -> set[str]:
    engine = create_db_engine(url)
    try:
        return {c["name"] for c in inspect(engine).get_columns(table)}
    finally:
        engine.dispose()


_MIRROR = ("INSERT INTO mirrors (name, enabled, state, consecutive_failures, created_at)"
           " VALUES ('m', true, 'up', 0, CURRENT_TIMESTAMP)")
_PROBE = ("INSERT INTO path_probes (mirror_id, ts, method, ok, samples, throughput_bps)"
          " SELECT id, CURRENT_TIMESTAMP, 'ftp-range', true, 1, 8e6 FROM mirrors")
_DOWNLOAD = ("INSERT INTO downloads (file_name, size, seconds, sha256_ok, reported_at)"
             " VALUES ('f', 10, 1.0, true, CURRENT_TIMESTAMP)")
_REPORT = ("INSERT INTO mirror_reports (download_id, mirror_name, bytes, seconds,"
           " throughput_bps, failures, slow, congested, bad_data, reported_at)"
           " SELECT id, 'm', 10, 1.0, 80.0, 0, false, false, false, CURRENT_TIMESTAMP"
           " FROM downloads")


def _adds_a_column_and_keeps_rows(
    db_url: str, *, before: str, after: str, table: str, column: str, kept: str,
    seed: list[str],
) -> list[tuple]:
    """Upgrade to ``before``, write ``seed``, upgrade to ``after`` (``column`` added
    to ``table``) and back: rows kept both ways. (``kept``, ``column``) of each row
    after the upgrade."""
    migrate.upgrade(db_url, before)
    assert column not in _columns(db_url, table)
    engine = create_db_engine(db_url)
    try:
        with engine.begin() as conn:
            for sql in seed:
                conn.execute(text(sql))
        migrate.upgrade(db_url, after)
        with engine.connect() as conn:
            rows = [tuple(r) for r in conn.execute(text(f"SELECT {kept}, {column} FROM {table}"))]
        migrate.downgrade(db_url, before)
        assert column not in _columns(db_url, table)
        with engine.connect() as conn:
            assert conn.execute(text(f"SELECT count(*) FROM {table}")).scalar() == len(rows)
        return rows
    finally:
        engine.dispose()


def test_0002_adds_path_probe_connections_and_keeps_rows(db_url: str) -> None:
    rows = _adds_a_column_and_keeps_rows(
        db_url, before="0001", after="0002", table="path_probes", column="connections",
        kept="throughput_bps", seed=[_MIRROR, _PROBE])
    assert rows == [(8e6, None)]  # old rows: not known


def test_0003_adds_mirror_report_connections_and_keeps_rows(db_url: str) -> None:
    rows = _adds_a_column_and_keeps_rows(
        db_url, before="0002", after="0003", table="mirror_reports", column="connections",
        kept="bytes", seed=[_DOWNLOAD, _REPORT])
    assert rows == [(10, None)]  # old rows: not said


def test_0004_adds_mirror_report_access_limited_and_keeps_rows(db_url: str) -> None:
    rows = _adds_a_column_and_keeps_rows(
        db_url, before="0003", after="0004", table="mirror_reports", column="access_limited",
        kept="bytes", seed=[_DOWNLOAD, _REPORT])
    assert rows == [(10, False)]  # old rows: the mirror's rate
