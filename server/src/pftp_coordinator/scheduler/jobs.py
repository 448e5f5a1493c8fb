"""The scheduled jobs, each wrapped to run on one coordinator and to leave a
JobRun row (who ran it, when, outcome) for the status page."""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from pftp_coordinator import metrics
from pftp_coordinator.db import session_scope
from pftp_coordinator.models import JobRun, utcnow
from pftp_coordinator.scheduler.locks import JobLocks

log = logging.getLogger(__name__)

RUNNER = f"{socket.gethostname()}:{os.getpid()}"


def runner_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def run_job(
    job: str,
    fn: Callable[[], Any],
    *,
    locks: JobLocks,
    factory: sessionmaker[Session],
    interval_s: float,
    runner: str | None = None,
) -> bool:
    """Run ``fn`` if this process holds the job; returns whether it ran.

    A process that has just taken a job over skips a run when another runner
    started it less than half an interval ago, so a takeover does not make the
    job run twice in one interval."""
    runner = runner or runner_id()
    if not locks.acquire(job):
        return False
    try:
        now = utcnow()
        with session_scope(factory) as s:
            jr = s.scalar(select(JobRun).where(JobRun.job == job))
            if (
                jr is not None
                and jr.runner != runner
                and jr.started_at > now - timedelta(seconds=interval_s / 2)
            ):
                log.info(
                    "job %s: ran on %s at %s, skipping this tick", job, jr.runner, jr.started_at
                )
                return False
            if jr is None:
                jr = JobRun(job=job, runs=0, runner=runner, started_at=now)
                s.add(jr)
            jr.runner, jr.started_at, jr.finished_at = runner, now, None
            jr.ok, jr.error = None, None
            jr.runs = (jr.runs or 0) + 1
        t0 = time.perf_counter()
        ok, error = True, None
        try:
            fn()
        except Exception as exc:  # record any job failure; the scheduler keeps going
            ok, error = False, f"{type(exc).__name__}: {exc}"
            log.exception("job %s failed on %s", job, runner)
        seconds = time.perf_counter() - t0
        metrics.record_job_run(job, ok, seconds)
        with session_scope(factory) as s:
            jr = s.scalar(select(JobRun).where(JobRun.job == job))
            if jr is not None:
                jr.finished_at, jr.ok, jr.error = utcnow(), ok, error
        log.info("job %s ran on %s in %.2f s: %s", job, runner, seconds, "ok" if ok else error)
        return True
    finally:
        locks.release(job)
