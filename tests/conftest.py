"""Fixtures shared by the whole suite: real databases, never mocks."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

PG_ADMIN_URL = os.environ.get(
    "PFTP_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)


def _pg_admin_connect():
    import psycopg

    return psycopg.connect(
        PG_ADMIN_URL.replace("postgresql+psycopg://", "postgresql://"), autocommit=True
    )


@pytest.fixture(scope="session", autouse=True)
def _no_probes_off_this_machine(tmp_path_factory) -> Iterator[None]:
    """The client's access-bandwidth probe pings the default gateway, which on a test
    host is outside every namespace we own: tests never send it (lab tests that
    measure it set PFTP_ACCESS_PROBE themselves, inside their namespaces). Also keeps
    the client's cache out of the real home directory. os.environ, so that
    subprocesses inherit it."""
    saved = {k: os.environ.get(k) for k in ("PFTP_ACCESS_PROBE", "XDG_CACHE_HOME")}
    os.environ["PFTP_ACCESS_PROBE"] = "off"
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("xdg-cache"))
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="session")
def pg_available() -> bool:
    try:
        with _pg_admin_connect():
            return True
    except Exception as exc:  # report why, then let dependants skip
        print(f"PostgreSQL not reachable at {PG_ADMIN_URL}: {exc}")
        return False


@pytest.fixture
def pg_url(pg_available: bool) -> Iterator[str]:
    """A fresh, empty PostgreSQL database for one test; dropped afterwards."""
    if not pg_available:
        pytest.skip("PostgreSQL is not running on 127.0.0.1:5432")
    name = f"pftp_test_{uuid.uuid4().hex[:12]}"
    with _pg_admin_connect() as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base = PG_ADMIN_URL.rsplit("/", 1)[0]
    try:
        yield f"{base}/{name}"
    finally:
        with _pg_admin_connect() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'pftp.db'}"


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request) -> str:
    """Run a test once on SQLite and once on PostgreSQL."""
    if request.param == "sqlite":
        return request.getfixturevalue("sqlite_url")
    return request.getfixturevalue("pg_url")


def pytest_collection_modifyitems(config, items):
    # Lab tests need root (namespaces, tc); say so instead of failing obscurely.
    if os.geteuid() != 0:
        skip = pytest.mark.skip(reason="lab tests need root for ip netns and tc")
        for item in items:
            if "lab" in item.keywords:
                item.add_marker(skip)
