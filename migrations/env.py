"""Alembic environment for the P-FTP coordinator, driven from code (no alembic.ini).

pftp_coordinator.migrate builds the Alembic Config and passes either a live
connection (``config.attributes["connection"]``) or a URL (main option
``sqlalchemy.url``). The same revisions run on PostgreSQL and SQLite; SQLite
needs batch mode ("move and copy") for ALTERs, hence render_as_batch.
"""

from __future__ import annotations

from alembic import context
from pftp_coordinator.db import create_db_engine
from pftp_coordinator.models import Base
from sqlalchemy import Connection

config = context.config
target_metadata = Base.metadata


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
        compare_server_default=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_offline() -> None:
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        target_metadata=target_metadata,
        literal_binds=True,
        render_as_batch=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _configure(connection)
        return
    url = config.get_main_option("sqlalchemy.url")
    if not url:
        raise RuntimeError("no database URL given to the migrations")
    engine = create_db_engine(url, pool_size=1)
    try:
        with engine.connect() as conn:
            _configure(conn)
            conn.commit()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
