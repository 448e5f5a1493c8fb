"""Data retention: raw time series older than ``retention_days`` (or beyond a
per-mirror row budget) become hourly rows with ``samples`` = n; raw rows are dropped.

Aggregated rows keep the weighted mean of each value, so ``decayed_mean`` with
``counts=samples`` still sees the old data at its true weight. Cut-offs are
rounded down to whole hours so that each hour is aggregated exactly once.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session, sessionmaker

from pftp_coordinator.config import Settings
from pftp_coordinator.db import session_scope
from pftp_coordinator.models import PathProbe, UtilizationSample, utcnow

log = logging.getLogger(__name__)

MAX_RAW_ROWS_PER_MIRROR = 50_000  # per table; ~1 week of 10 s agent samples
BATCH = 20_000

PROBE_VALUES = ("rtt_s", "loss", "capacity_bps", "throughput_bps")
UTIL_VALUES = (
    "cpu_percent",
    "memory_percent",
    "load1",
    "load5",
    "load15",
    "nic_tx_bps",
    "connections",
)


@dataclass
class RetentionOutcome:
    probes_aggregated: int = 0
    probe_rows_written: int = 0
    samples_aggregated: int = 0
    sample_rows_written: int = 0


def floor_hour(ts: datetime) -> datetime:
    return ts.replace(minute=0, second=0, microsecond=0)


def weighted_means(rows: list, fields: tuple[str, ...]) -> dict[str, float | None]:
    """Pure: per field, the mean over rows weighted by their ``samples``; None when
    no row has a value."""
    out: dict[str, float | None] = {}
    for f in fields:
        num = den = 0.0
        for r in rows:
            v = getattr(r, f)
            if v is not None:
                w = max(r.samples or 1, 1)
                num += w * v
                den += w
        out[f] = num / den if den else None
    return out


def _cutoffs(session: Session, model, cutoff: datetime) -> dict[int, datetime]:
    """Per mirror: the time before which raw rows are aggregated (age or row budget)."""
    result: dict[int, datetime] = {}
    counts = session.execute(
        select(model.mirror_id, func.count()).where(model.samples == 1).group_by(model.mirror_id)
    ).all()
    for mirror_id, n in counts:
        c = cutoff
        if n > MAX_RAW_ROWS_PER_MIRROR:
            nth = session.scalar(
                select(model.ts)
                .where(model.mirror_id == mirror_id, model.samples == 1)
                .order_by(model.ts.desc())
                .offset(MAX_RAW_ROWS_PER_MIRROR)
                .limit(1)
            )
            if nth is not None:
                c = max(c, floor_hour(nth))
        result[mirror_id] = c
    return result


def _aggregate(
    session: Session,
    model,
    key: Callable,
    values: tuple[str, ...],
    cutoff: datetime,
    build: Callable,
) -> tuple[int, int]:
    raw_n = written = 0
    for mirror_id, c in _cutoffs(session, model, cutoff).items():
        lower: datetime | None = None
        while True:
            q = select(model).where(model.mirror_id == mirror_id, model.samples == 1, model.ts < c)
            if lower is not None:
                q = q.where(model.ts >= lower)
            rows = session.scalars(q.order_by(model.ts, model.id).limit(BATCH)).all()
            if not rows:
                break
            full = len(rows) == BATCH
            next_lower = None
            if full:
                # Do not split an hour between batches: stop before the last hour.
                last_hour = floor_hour(rows[-1].ts)
                part = [r for r in rows if r.ts < last_hour]
                rows, next_lower = (
                    (part, last_hour) if part else (rows, last_hour + timedelta(hours=1))
                )
            groups: dict[tuple, list] = defaultdict(list)
            for r in rows:
                groups[(floor_hour(r.ts), *key(r))].append(r)
            done: list[int] = []
            for (hour, *k), grp in groups.items():
                if len(grp) < 2:
                    continue  # a lone sample is already its own hourly row
                session.add(build(mirror_id, hour, k, grp, weighted_means(grp, values)))
                written += 1
                done.extend(r.id for r in grp)
            if done:
                session.execute(delete(model).where(model.id.in_(done)))
            session.flush()
            raw_n += len(done)
            if not full:
                break
            lower = next_lower
    return raw_n, written


def _probe_row(mirror_id: int, hour: datetime, key: list, grp: list, means: dict) -> PathProbe:
    method, ok = key
    errors = [r.error for r in grp if r.error]
    # Connections: the most the hour needed, not a mean (2.5 connections is no answer,
    # and the hour's throughput mean includes the rates those connections carried).
    conns = [r.connections for r in grp if r.connections is not None]
    return PathProbe(
        mirror_id=mirror_id,
        ts=hour,
        method=method,
        ok=ok,
        error=errors[-1] if errors else None,
        samples=len(grp),
        connections=max(conns) if conns else None,
        **means,
    )


def _sample_row(
    mirror_id: int, hour: datetime, key: list, grp: list, means: dict
) -> UtilizationSample:
    conns = means.pop("connections")
    return UtilizationSample(
        mirror_id=mirror_id,
        ts=hour,
        samples=len(grp),
        connections=round(conns) if conns is not None else None,
        cpu_percent=means.pop("cpu_percent") or 0.0,
        memory_percent=means.pop("memory_percent") or 0.0,
        **means,
    )


def apply_retention(
    factory: sessionmaker[Session], settings: Settings, *, clock: Callable[[], datetime] = utcnow
) -> RetentionOutcome:
    cutoff = floor_hour(clock() - timedelta(days=settings.retention_days))
    out = RetentionOutcome()
    with session_scope(factory) as s:
        out.probes_aggregated, out.probe_rows_written = _aggregate(
            s, PathProbe, lambda r: (r.method, r.ok), PROBE_VALUES, cutoff, _probe_row
        )
    with session_scope(factory) as s:
        out.samples_aggregated, out.sample_rows_written = _aggregate(
            s, UtilizationSample, lambda r: (), UTIL_VALUES, cutoff, _sample_row
        )
    if out.probes_aggregated or out.samples_aggregated:
        log.info(
            "retention: %d probes -> %d hourly rows, %d samples -> %d hourly rows",
            out.probes_aggregated,
            out.probe_rows_written,
            out.samples_aggregated,
            out.sample_rows_written,
        )
    return out
