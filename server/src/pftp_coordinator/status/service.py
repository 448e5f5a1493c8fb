"""What the status page shows, gathered from the database and the ranking snapshot.

Queries are bounded (recent windows, row caps), so the page stays cheap on a large
deployment. Rendering is in views.py/templates; charts in charts.py.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit, urlunsplit

from sqlalchemy import and_, func, select
from sqlalchemy.orm import Session

from pftp_coordinator.config import Settings
from pftp_coordinator.models import (
    Agent,
    Download,
    File,
    JobRun,
    Mirror,
    MirrorReport,
    PathProbe,
    PredictorFit,
    Replica,
    UtilizationSample,
)
from pftp_coordinator.ranking import VARIABLES, params_from_settings, rank_mirrors
from pftp_coordinator.ranking_inputs import RankingSnapshot, build_snapshot
from pftp_coordinator.status.charts import DownloadBar, Series

HISTORY_HOURS = 24
MAX_HISTORY_ROWS = 20_000
RECENT_DOWNLOADS = 30
AGENT_FRESH_S = 300.0  # an agent that reported within this window counts as reporting


@dataclass
class MirrorRow:
    name: str
    state: str
    enabled: bool
    region: str | None
    urls: list[str]
    score: float | None = None  # suitability among all enabled, not-down mirrors
    explain: dict[str, float] = field(default_factory=dict)
    expected_bps: float | None = None
    last_probe_at: datetime | None = None
    last_probe_ok: bool | None = None
    last_probe_method: str | None = None
    last_probe_error: str | None = None
    rtt_s: float | None = None
    loss: float | None = None
    capacity_bps: float | None = None
    probe_throughput_bps: float | None = None
    # connections that rate was measured over (>1: each one is held by the mirror,
    # and clients are told to open that many)
    probe_connections: int | None = None
    # connections a client's own trials last kept (newest report that says)
    report_connections: int | None = None
    cpu_percent: float | None = None
    memory_percent: float | None = None
    load1: float | None = None
    nic_tx_bps: float | None = None
    connections: int | None = None
    utilization_at: datetime | None = None
    agent_last_seen: datetime | None = None
    consecutive_failures: int = 0
    replicas: int = 0


@dataclass
class DownloadRow:
    reported_at: datetime
    file_name: str
    size: int
    seconds: float
    aggregate_bps: float
    best_single_bps: float | None
    best_single_mirror: str | None
    mirrors: int
    mode: str | None
    sha256_ok: bool


@dataclass
class StatusData:
    generated_at: datetime
    mode: str  # "ranked" | "balanced"
    request_rate_rps: float
    balanced_threshold_rps: float
    mirrors: list[MirrorRow]
    variables: list[str]  # the ranking variables shown as columns
    files: int
    replicas: int
    agents: int
    agents_reporting: int
    downloads: list[DownloadRow]
    jobs: list[JobRun]
    predictor: PredictorFit | None
    rtt_series: list[Series]
    throughput_series: list[Series]
    download_bars: list[DownloadBar]
    announce: str


def redact_url(url: str) -> str:
    """Base URLs may carry FTP credentials: never show the password."""
    parts = urlsplit(url)
    if parts.password is None and parts.username is None:
        return url
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    user = f"{parts.username}:***@" if parts.password is not None else f"{parts.username}@"
    return urlunsplit((parts.scheme, user + host, parts.path, parts.query, parts.fragment))


def current_mode(request_rate_rps: float, threshold_rps: float) -> str:
    """Same rule as the planner: above the threshold, assignments spread the load."""
    return "balanced" if request_rate_rps > threshold_rps else "ranked"


def _latest_per_mirror(session: Session, model, ts_col):  # type: ignore[no-untyped-def]
    newest = (
        select(model.mirror_id, func.max(ts_col).label("mts")).group_by(model.mirror_id).subquery()
    )
    q = select(model).join(
        newest, and_(newest.c.mirror_id == model.mirror_id, newest.c.mts == ts_col)
    )
    return {row.mirror_id: row for row in session.scalars(q)}


def _scores(
    snapshot: RankingSnapshot, settings: Settings, now: float
) -> dict[int, tuple[float, dict[str, float], float | None]]:
    """Suitability of every enabled, not-down mirror as if each held the file asked for."""
    candidates = [m for m in snapshot.mirrors.values() if m.enabled and m.state != "down"]
    params = params_from_settings(settings, snapshot.predictor)
    ranks = rank_mirrors([m.metrics for m in candidates], params=params, now=now)
    return {r.key: (r.suitability, dict(r.explain), r.expected_bps) for r in ranks}


def _history(
    session: Session, names: Mapping[int, str], since: datetime
) -> tuple[list[Series], list[Series]]:
    q = (
        select(PathProbe.mirror_id, PathProbe.ts, PathProbe.rtt_s, PathProbe.throughput_bps)
        .where(PathProbe.ok.is_(True), PathProbe.ts >= since)
        .order_by(PathProbe.ts.desc())
        .limit(MAX_HISTORY_ROWS)
    )
    rtt: dict[int, list[tuple[float, float]]] = defaultdict(list)
    tput: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for mid, ts, rtt_s, tp in session.execute(q):
        t = ts.timestamp()
        if rtt_s is not None:
            rtt[mid].append((t, rtt_s * 1000.0))
        if tp is not None:
            tput[mid].append((t, tp / 1e6))

    def series(d: dict[int, list[tuple[float, float]]]) -> list[Series]:
        return [Series(names.get(mid, f"#{mid}"), pts) for mid, pts in sorted(d.items())]

    return series(rtt), series(tput)


def _downloads(session: Session) -> list[DownloadRow]:
    recent = list(
        session.scalars(
            select(Download).order_by(Download.reported_at.desc()).limit(RECENT_DOWNLOADS)
        )
    )
    if not recent:
        return []
    reports: dict[int, list[MirrorReport]] = defaultdict(list)
    for r in session.scalars(
        select(MirrorReport).where(MirrorReport.download_id.in_([d.id for d in recent]))
    ):
        reports[r.download_id].append(r)
    rows = []
    for d in reversed(recent):  # oldest first, as in the chart
        parts = [r for r in reports[d.id] if r.bytes > 0 and not r.bad_data]
        best = max(parts, key=lambda r: r.throughput_bps, default=None)
        rows.append(
            DownloadRow(
                reported_at=d.reported_at,
                file_name=d.file_name,
                size=d.size,
                seconds=d.seconds,
                aggregate_bps=(d.size * 8 / d.seconds) if d.seconds > 0 else 0.0,
                best_single_bps=best.throughput_bps if best else None,
                best_single_mirror=best.mirror_name if best else None,
                mirrors=len(reports[d.id]),
                mode=d.mode,
                sha256_ok=d.sha256_ok,
            )
        )
    return rows


def collect_status(
    session: Session,
    *,
    settings: Settings,
    snapshot: RankingSnapshot | None = None,
    request_rate_rps: float = 0.0,
    now: float | None = None,
    announce: str = "",
) -> StatusData:
    now = time.time() if now is None else now
    now_dt = datetime.fromtimestamp(now, UTC)
    if snapshot is None:
        snapshot = build_snapshot(
            session,
            now=now,
            half_life_s=settings.probe_half_life_s,
            stale_after_s=settings.stale_after_s,
        )
    scores = _scores(snapshot, settings, now)
    mirrors = list(session.scalars(select(Mirror).order_by(Mirror.name)))
    names = {m.id: m.name for m in mirrors}
    probes = _latest_per_mirror(session, PathProbe, PathProbe.ts)
    ok_probes = {
        mid: p for mid, p in probes.items() if p.ok
    }  # values from the newest probe, if it succeeded
    util = _latest_per_mirror(session, UtilizationSample, UtilizationSample.ts)
    agents = {a.mirror_id: a for a in session.scalars(select(Agent))}
    replica_counts = dict(
        session.execute(
            select(Replica.mirror_id, func.count()).where(Replica.present.is_(True))
            .group_by(Replica.mirror_id)
        ).all()
    )

    rows: list[MirrorRow] = []
    for m in mirrors:
        row = MirrorRow(
            name=m.name,
            state=m.state if m.enabled else "disabled",
            enabled=m.enabled,
            region=m.region,
            urls=[redact_url(u.base_url) for u in sorted(m.urls, key=lambda u: u.protocol)],
            consecutive_failures=m.consecutive_failures,
            replicas=int(replica_counts.get(m.id, 0)),
        )
        if m.id in scores:
            row.score, row.explain, row.expected_bps = scores[m.id]
        p = probes.get(m.id)
        if p is not None:
            row.last_probe_at, row.last_probe_ok = p.ts, p.ok
            row.last_probe_method, row.last_probe_error = p.method, p.error
        good = ok_probes.get(m.id)
        info = snapshot.mirrors.get(m.id)
        if info is not None:  # decayed aggregates, as the ranking sees them
            row.rtt_s = info.metrics.rtt_s
            row.loss = info.metrics.loss
            row.capacity_bps = info.metrics.capacity_bps
            row.probe_throughput_bps = info.metrics.probe_throughput_bps
            row.probe_connections = info.metrics.probe_connections
            row.report_connections = info.metrics.report_connections
        if good is not None and row.rtt_s is None:
            row.rtt_s, row.loss = good.rtt_s, good.loss
        u = util.get(m.id)
        if u is not None:
            row.cpu_percent, row.memory_percent = u.cpu_percent, u.memory_percent
            row.load1, row.nic_tx_bps, row.connections = u.load1, u.nic_tx_bps, u.connections
            row.utilization_at = u.ts
        a = agents.get(m.id)
        if a is not None:
            row.agent_last_seen = a.last_seen_at
        rows.append(row)
    rows.sort(key=lambda r: (r.score is None, -(r.score or 0.0), r.name))

    fresh_after = now_dt - timedelta(seconds=AGENT_FRESH_S)
    reporting = sum(
        1 for a in agents.values() if a.last_seen_at is not None and a.last_seen_at >= fresh_after
    )
    rtt_series, tput_series = _history(session, names, now_dt - timedelta(hours=HISTORY_HOURS))
    downloads = _downloads(session)
    used_vars = [v for v in VARIABLES if any(v in r.explain for r in rows)]
    return StatusData(
        generated_at=now_dt,
        mode=current_mode(request_rate_rps, settings.balanced_threshold_rps),
        request_rate_rps=request_rate_rps,
        balanced_threshold_rps=settings.balanced_threshold_rps,
        mirrors=rows,
        variables=used_vars,
        files=session.scalar(select(func.count()).select_from(File)) or 0,
        replicas=sum(replica_counts.values()),
        agents=len(agents),
        agents_reporting=reporting,
        downloads=downloads,
        jobs=list(session.scalars(select(JobRun).order_by(JobRun.job))),
        predictor=session.scalar(
            select(PredictorFit).order_by(PredictorFit.fitted_at.desc()).limit(1)
        ),
        rtt_series=rtt_series,
        throughput_series=tput_series,
        download_bars=[
            DownloadBar(
                f"{d.file_name} {d.reported_at:%H:%M:%S}", d.aggregate_bps, d.best_single_bps
            )
            for d in downloads
        ],
        announce=announce,
    )


def count_agents_reporting(session: Session, *, now: float | None = None) -> int:
    now = time.time() if now is None else now
    since = datetime.fromtimestamp(now - AGENT_FRESH_S, UTC)
    return session.scalar(
        select(func.count()).select_from(Agent).where(Agent.last_seen_at >= since)
    ) or 0
