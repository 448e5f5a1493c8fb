"""Apply, revert and inspect the Alembic migrations, without an alembic.ini.

The revisions live in the repository's top-level ``migrations/``; an installed
wheel carries a copy at ``pftp_coordinator/_migrations`` (server/pyproject.toml
force-include). The installed copy wins, so a wheel never looks for a checkout.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

from pftp_coordinator.db import create_db_engine

MIGRATE_HINT = "run `pftp-coordinator migrate` first"


class MigrationsNotFound(RuntimeError):
    pass


def migrations_dir() -> Path:
    """The directory holding env.py and versions/."""
    package_dir = Path(__file__).resolve().parent
    candidates = [
        package_dir / "_migrations",  # wheel install
        package_dir.parents[2] / "migrations",  # editable install: server/src/pftp_coordinator
    ]
    for candidate in candidates:
        if (candidate / "env.py").is_file():
            return candidate
    raise MigrationsNotFound(
        "cannot find the migrations (looked in " + ", ".join(str(c) for c in candidates) + ")"
    )


def alembic_config(url: str | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    if url is not None:
        # ConfigParser interpolation: a literal % in a password must be doubled.
        cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(url: str, rev: str = "head") -> None:
    command.upgrade(alembic_config(url), rev)


def downgrade(url: str, rev: str) -> None:
    command.downgrade(alembic_config(url), rev)


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def _current_on(engine: Engine) -> str | None:
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def current(url: str) -> str | None:
    """The revision the database is at; None when never migrated."""
    engine = create_db_engine(url, pool_size=1)
    try:
        return _current_on(engine)
    finally:
        engine.dispose()


def is_up_to_date(engine: Engine) -> bool:
    return _current_on(engine) == head_revision()


def require_up_to_date(engine: Engine) -> None:
    """Raise with the command to run when the schema is behind (or missing)."""
    at = _current_on(engine)
    head = head_revision()
    if at != head:
        where = "not migrated" if at is None else f"at revision {at}, expected {head}"
        url = engine.url.render_as_string()  # password hidden
        raise SchemaOutOfDate(f"database {url} is {where}: {MIGRATE_HINT}")


class SchemaOutOfDate(RuntimeError):
    pass
