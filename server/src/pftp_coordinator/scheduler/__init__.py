"""APScheduler jobs of the coordinator (issue 4): per-mirror probes and replica
scans, predictor refit, retention. ``start_scheduler`` is called by the API's
lifespan; every job runs on one coordinator at a time (see locks.py).

Jobs:
- ``probe:<mirror id>`` every probe_interval_s (+ jitter), "probes" executor of
  probe_concurrency threads (bounded concurrency);
- ``scan:<mirror id>`` every scan_interval_s (+ jitter);
  a mirror's first probe and scan come one interval after its last recorded one
  (``Mirror.last_probe_at`` / ``last_scan_at``), so that a restarted coordinator,
  or ``serve`` after an operator's ``probe --all``, does not read every mirror
  again within seconds, over the paths its clients are downloading on;
- ``predictor-refit`` every predictor_refit_interval_s;
- ``retention`` every retention_interval_s;
- a local, unlocked ``mirror-sync`` that adds/removes per-mirror jobs as mirrors
  are created, disabled or deleted.
"""

from __future__ import annotations

import logging
import random
from datetime import UTC, datetime, timedelta
from typing import Any

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.interval import IntervalTrigger
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from pftp_coordinator.active_downloads import ActiveDownloads
from pftp_coordinator.config import Settings
from pftp_coordinator.db import is_sqlite, session_scope
from pftp_coordinator.models import Mirror
from pftp_coordinator.predictor import refit
from pftp_coordinator.probes.service import probe_mirror
from pftp_coordinator.retention import apply_retention
from pftp_coordinator.scans.service import scan_mirror
from pftp_coordinator.scheduler.jobs import run_job, runner_id
from pftp_coordinator.scheduler.locks import JobLocks, LocalJobLocks, PgLeaderLocks

log = logging.getLogger(__name__)

MIRROR_SYNC_S = 30.0

__all__ = ["CoordinatorScheduler", "first_run", "start_scheduler"]


def first_run(
    now: datetime,
    interval_s: float,
    delay_s: float,
    jitter_s: float,
    last_at: datetime | None = None,
) -> datetime:
    """When a job first runs: after a short delay (plus jitter, so that mirrors
    added together do not probe in lockstep), and not before one interval after its
    last recorded run (``last_at``, e.g. the mirror's last probe); later runs come
    every interval from that one. A ``last_at`` in the future (another host's
    clock) counts as now."""
    first = now + timedelta(seconds=delay_s + jitter_s)
    if last_at is not None:
        due = min(last_at, now) + timedelta(seconds=interval_s + jitter_s)
        first = max(first, due)
    return first


class CoordinatorScheduler:
    def __init__(
        self,
        settings: Settings,
        factory: sessionmaker[Session],
        locks: JobLocks,
        *,
        first_run_delay_s: float = 5.0,
        active: ActiveDownloads | None = None,
    ) -> None:
        self.settings = settings
        self.active = active  # (the app's running downloads: probes wait for them)
        self.factory = factory
        self.locks = locks
        self.runner = runner_id()
        self.first_run_delay_s = first_run_delay_s
        self.scheduler = BackgroundScheduler(
            executors={
                "default": ThreadPoolExecutor(4),
                "probes": ThreadPoolExecutor(settings.probe_concurrency),
            },
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None},
            timezone="UTC",
        )

    def _locked(self, job: str, fn: Any, interval_s: float) -> Any:
        def wrapper() -> None:
            run_job(
                job,
                fn,
                locks=self.locks,
                factory=self.factory,
                interval_s=interval_s,
                runner=self.runner,
            )

        return wrapper

    def _add(
        self,
        job: str,
        fn: Any,
        interval_s: float,
        *,
        jitter_s: float = 0.0,
        executor: str = "default",
        last_at: datetime | None = None,
    ) -> None:
        first = first_run(
            datetime.now(UTC),
            interval_s,
            self.first_run_delay_s,
            random.uniform(0, min(jitter_s, interval_s)),
            last_at,
        )
        self.scheduler.add_job(
            self._locked(job, fn, interval_s),
            IntervalTrigger(
                seconds=interval_s, jitter=jitter_s or None, start_date=first, timezone="UTC"
            ),
            id=job,
            name=job,
            executor=executor,
            replace_existing=True,
        )

    def sync_mirror_jobs(self) -> None:
        s = self.settings
        with session_scope(self.factory) as session:
            last = {
                mid: (probed, scanned)
                for mid, probed, scanned in session.execute(
                    select(Mirror.id, Mirror.last_probe_at, Mirror.last_scan_at).where(
                        Mirror.enabled.is_(True)
                    )
                )
            }
        ids = set(last)
        have = {j.id for j in self.scheduler.get_jobs()}
        for mid in ids:
            if f"probe:{mid}" not in have:
                self._add(
                    f"probe:{mid}",
                    lambda mid=mid: probe_mirror(self.factory, mid, s, active=self.active),
                    s.probe_interval_s,
                    jitter_s=s.probe_jitter_s,
                    executor="probes",
                    last_at=last[mid][0],
                )
            if f"scan:{mid}" not in have:
                self._add(
                    f"scan:{mid}",
                    lambda mid=mid: scan_mirror(
                        self.factory, mid, timeout_s=max(30.0, s.probe_timeout_s)
                    ),
                    s.scan_interval_s,
                    jitter_s=min(s.probe_jitter_s, s.scan_interval_s),
                    last_at=last[mid][1],
                )
        for job_id in have:
            kind, _, mid = job_id.partition(":")
            if kind in ("probe", "scan") and int(mid) not in ids:
                self.scheduler.remove_job(job_id)
                if isinstance(self.locks, PgLeaderLocks):
                    self.locks.give_up(job_id)

    def start(self) -> CoordinatorScheduler:
        s = self.settings
        self._add("predictor-refit", lambda: refit(self.factory, s), s.predictor_refit_interval_s)
        self._add("retention", lambda: apply_retention(self.factory, s), s.retention_interval_s)
        self.scheduler.add_job(
            self._sync_safely,
            IntervalTrigger(seconds=MIRROR_SYNC_S),
            id="mirror-sync",
            next_run_time=datetime.now().astimezone(),
        )
        self.scheduler.start()
        log.info("scheduler started on %s (%s locks)", self.runner, type(self.locks).__name__)
        return self

    def _sync_safely(self) -> None:
        try:
            self.sync_mirror_jobs()
        except Exception:  # the DB may be briefly away; next sync retries
            log.exception("mirror job sync failed")

    def shutdown(self, wait: bool = False) -> None:
        if self.scheduler.running:
            self.scheduler.shutdown(wait=wait)
        self.locks.close()


class _Disabled:
    def shutdown(self, wait: bool = False) -> None:
        return None


def start_scheduler(
    settings: Settings,
    session_factory: sessionmaker[Session],
    active: ActiveDownloads | None = None,
) -> Any:
    """Start the background jobs; returns an object with ``.shutdown()``.
    ``active``: the downloads the app in this process assigned (probes wait for
    them to end before reading a mirror)."""
    if not settings.scheduler_enabled:
        log.info("scheduler disabled (PFTP_SCHEDULER_ENABLED=false)")
        return _Disabled()
    engine = session_factory.kw.get("bind")
    url = (
        engine.url.render_as_string(hide_password=False)
        if engine is not None
        else (settings.effective_database_url)
    )
    locks: JobLocks = LocalJobLocks() if is_sqlite(url) else PgLeaderLocks(url)
    return CoordinatorScheduler(settings, session_factory, locks, active=active).start()
