"""Migrations up and down on SQLite and PostgreSQL; the migrated schema equals models.py."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from pftp_coordinator import migrate
from pftp_coordinator.db import create_db_engine
from pftp_coordinator.models import Base
from sqlalchemy import inspect


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
