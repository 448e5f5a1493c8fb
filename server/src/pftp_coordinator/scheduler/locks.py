"""Which coordinator process runs a scheduled job.

PostgreSQL: each job has a session-level advisory lock, held on one dedicated
connection for as long as the process lives (job leadership). The process that
holds it runs the job at every tick; the others try the lock at their own ticks
and skip. When the leader dies, PostgreSQL drops its connection and with it the
lock, and the next process to tick takes over. Different jobs may have different
leaders, which spreads probe work across coordinators.

SQLite: one process only (the embedded default); an in-process lock keeps a job
from overlapping itself.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from typing import Protocol

import psycopg
from sqlalchemy.engine import make_url

log = logging.getLogger(__name__)


def lock_key(job: str) -> int:
    """Stable signed 64-bit advisory lock key for a job name."""
    digest = hashlib.sha256(f"pftp-job:{job}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class JobLocks(Protocol):
    def acquire(self, job: str) -> bool: ...
    def release(self, job: str) -> None: ...
    def close(self) -> None: ...


class LocalJobLocks:
    """Per-run mutual exclusion inside one process."""

    def __init__(self) -> None:
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def acquire(self, job: str) -> bool:
        with self._guard:
            lock = self._locks.setdefault(job, threading.Lock())
        return lock.acquire(blocking=False)

    def release(self, job: str) -> None:
        self._locks[job].release()

    def close(self) -> None:
        return None


def libpq_url(sqlalchemy_url: str) -> str:
    url = make_url(sqlalchemy_url).set(drivername="postgresql")
    return url.render_as_string(hide_password=False)


class PgLeaderLocks:
    """Job leadership by session-level advisory locks on one connection."""

    def __init__(self, sqlalchemy_url: str, *, connect_timeout_s: int = 10) -> None:
        self._url = libpq_url(sqlalchemy_url)
        self._timeout = connect_timeout_s
        self._conn: psycopg.Connection | None = None
        self._held: set[str] = set()
        self._mutex = threading.Lock()

    def _connection(self) -> psycopg.Connection:
        if self._conn is not None and not self._conn.closed:
            try:
                self._conn.execute("SELECT 1")
                return self._conn
            except psycopg.Error as exc:
                log.warning(
                    "advisory-lock connection lost (%s): leadership of %s dropped",
                    exc,
                    sorted(self._held),
                )
                self._conn.close()
        self._held.clear()
        self._conn = psycopg.connect(
            self._url,
            autocommit=True,
            connect_timeout=self._timeout,
            application_name="pftp-coordinator-locks",
        )
        return self._conn

    def acquire(self, job: str) -> bool:
        with self._mutex:
            try:
                conn = self._connection()
                if job in self._held:
                    return True
                row = conn.execute("SELECT pg_try_advisory_lock(%s)", (lock_key(job),)).fetchone()
            except psycopg.Error as exc:
                log.warning("cannot take advisory lock for %s: %s", job, exc)
                return False
            if row and row[0]:
                self._held.add(job)
                log.info("this coordinator now runs job %s", job)
                return True
            return False

    def release(self, job: str) -> None:
        # Leadership is kept between runs on purpose; see the module doc.
        return None

    def give_up(self, job: str) -> None:
        """Hand a job to other processes (e.g. its mirror was deleted)."""
        with self._mutex:
            if job in self._held and self._conn is not None and not self._conn.closed:
                self._conn.execute("SELECT pg_advisory_unlock(%s)", (lock_key(job),))
            self._held.discard(job)

    def close(self) -> None:
        with self._mutex:
            if self._conn is not None:
                self._conn.close()
            self._held.clear()
