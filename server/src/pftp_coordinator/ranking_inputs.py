"""Ranking inputs: an in-memory snapshot of what the ranking needs, kept fresh.

A request must not cost a heavy query (issue 2, Targets), so every worker holds a
``RankingSnapshot``: mirrors with their decayed measurements, the replica map, the
files, the latest eq. 3 fit and the active congestion penalties. ``SnapshotCache``
rebuilds it from the database every ``settings.snapshot_refresh_s`` in a
background thread; requests keep using the previous snapshot meanwhile (only the
very first request waits for a load).

Per refresh (a handful of aggregate queries, output O(mirrors)):
* path probes: per mirror, half-life-weighted means (weight 2^(-age/half_life)
  times ``samples`` of an aggregated row) of RTT, loss, capacity and throughput
  over successful probes younger than ``stale_after_s``, plus the newest probe time;
  and the ``connections`` of the newest throughput probe that recorded it (clients
  open that many connections to the mirror at once), and those of the newest
  client report that says how many its own trials kept;
* utilization: the latest sample per mirror younger than ``stale_after_s``;
* client throughput history: half-life-weighted mean of mirror_reports, apart
  from those a full access link limited (services/reports.py): floors, of which
  the highest counts, halved every half-life of its age;
* the latest PredictorFit and the unexpired CongestionPenalty pairs.

The replica map (100,000 files x ~15 replicas) is the expensive part. It is
reloaded only when files or replicas changed, detected by a cheap signature
(the newest file and replica ids, which catch additions at once; on PostgreSQL
the tables' insert/update/delete counters in pg_stat_user_tables, which lag a
commit by up to ~10 s; on SQLite counts and sums), and in any case every
``REPLICA_FULL_RELOAD_S`` as a safety net (statistics counters are best-effort).

Replica rule: a replica is usable when ``present`` and ``size_seen`` equals the
file's size, or ``size_seen`` is NULL: an admin registered it and no scan has run
yet. We trust the admin here because the client verifies SHA-256 (and piece
hashes) anyway and reports bad data; a scan that sees another size excludes it.

Memory: per file a compact ``array('i')`` of mirror ids and a tuple of interned
path strings; piece hashes (possibly thousands per file) are not held but loaded
on demand through a small LRU cache.
"""

from __future__ import annotations

import gc
import logging
import math
import threading
import time
from array import array
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import String as SAString
from sqlalchemy import and_, case, cast, func, literal_column, or_, select, text
from sqlalchemy.orm import Session, sessionmaker

from pftp_coordinator.models import (
    CongestionPenalty,
    File,
    Mirror,
    MirrorReport,
    MirrorUrl,
    PathProbe,
    PredictorFit,
    Replica,
    UtilizationSample,
)
from pftp_coordinator.ranking import (
    MirrorMetrics,
    PredictorCoefficients,
    RankingTable,
    build_table,
    params_from_settings,
)

log = logging.getLogger(__name__)

REPLICA_FULL_RELOAD_S = 300.0
# Measurement aggregates (probes, utilization, client history) are recomputed at
# most this often: they change every probe/agent interval, and the aggregate
# queries are the costly part of a refresh (each worker runs its own).
METRICS_REFRESH_S = 15.0
PIECE_CACHE_SIZE = 256


@dataclass(frozen=True, slots=True)
class MirrorInfo:
    id: int
    name: str
    enabled: bool
    state: str  # "unknown" | "up" | "down"
    urls: Mapping[str, str]  # protocol -> base URL
    metrics: MirrorMetrics


@dataclass(frozen=True, slots=True)
class FileRecord:
    id: int
    name: str
    size: int
    sha256: str
    piece_size: int | None
    has_pieces: bool  # piece hashes exist; fetch with RankingSnapshot.piece_hashes


@dataclass(frozen=True, slots=True)
class ReplicaSet:
    """Usable replicas of one file: parallel mirror ids and paths."""

    mirror_ids: array  # array('i')
    paths: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ReplicaMap:
    files_by_name: Mapping[str, FileRecord]
    replicas: Mapping[int, ReplicaSet]  # file id -> usable replicas
    demand: Mapping[int, float]  # mirror id -> sum over its files of 1/replica count
    signature: tuple[Any, ...] = ()
    loaded_at: float = 0.0


@dataclass(frozen=True)
class RankingSnapshot:
    taken_at: float  # epoch seconds
    mirrors: Mapping[int, MirrorInfo]
    files_by_name: Mapping[str, FileRecord]
    replicas: Mapping[int, ReplicaSet]
    predictor: PredictorCoefficients | None = None
    congested_pairs: frozenset[frozenset[int]] = frozenset()
    piece_loader: Callable[[int], list[str] | None] | None = field(default=None, repr=False)
    # Per-snapshot memo for the planner (e.g. ranking params); not data.
    memo: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def file(self, name: str) -> FileRecord | None:
        return self.files_by_name.get(name)

    def replicas_of(self, file_name: str) -> list[tuple[int, str]]:
        """The replica map as (mirror id, path) pairs; [] for unknown files."""
        f = self.files_by_name.get(file_name)
        rs = self.replicas.get(f.id) if f is not None else None
        if rs is None:
            return []
        return list(zip(rs.mirror_ids, rs.paths, strict=True))

    def piece_hashes(self, f: FileRecord) -> list[str] | None:
        if not f.has_pieces or self.piece_loader is None:
            return None
        return self.piece_loader(f.id)


# --- loading from the database ------------------------------------------------------


def _epoch_expr(session: Session, col):  # type: ignore[no-untyped-def]
    if session.get_bind().dialect.name == "sqlite":
        return (func.julianday(col) - 2440587.5) * 86400.0
    return func.extract("epoch", col)


def _pow2(session: Session, x):  # type: ignore[no-untyped-def]
    if session.get_bind().dialect.name == "sqlite":
        # Math functions are optional in SQLite builds: register our own.
        raw = session.connection().connection.driver_connection
        raw.create_function("pftp_pow2", 1, lambda v: 2.0**v, deterministic=True)
        return func.pftp_pow2(x)
    return func.power(2.0, x)


def _decay(session: Session, ts_col, now: float, half_life_s: float):  # type: ignore[no-untyped-def]
    """2^(-age / half-life) of each row, age from its ``ts_col`` to ``now``."""
    age = literal_column(repr(float(now))) - _epoch_expr(session, ts_col)
    return _pow2(session, -age / float(half_life_s))


def _decayed_mean_cols(session: Session, table, ts_col, cols, now: float, half_life_s: float):  # type: ignore[no-untyped-def]
    w = _decay(session, ts_col, now, half_life_s)
    if hasattr(table, "samples"):
        w = w * table.samples
    out = []
    for c in cols:
        out.append(
            (
                func.sum(w * c) / func.nullif(func.sum(case((c.is_not(None), w), else_=0.0)), 0.0)
            ).label(c.key)
        )
    return out


def load_mirror_metrics(
    session: Session, *, now: float, half_life_s: float, stale_after_s: float
) -> dict[int, dict[str, Any]]:
    """Per-mirror measurement aggregates: mirror id -> MirrorMetrics kwargs."""
    cutoff = datetime.fromtimestamp(now - stale_after_s, UTC)
    now_dt = datetime.fromtimestamp(now, UTC)
    out: dict[int, dict[str, Any]] = {}

    p = PathProbe
    q = (
        select(
            p.mirror_id,
            func.max(p.ts).label("newest"),
            *_decayed_mean_cols(
                session,
                p,
                p.ts,
                [p.rtt_s, p.loss, p.capacity_bps, p.throughput_bps],
                now,
                half_life_s,
            ),
        )
        .where(p.ok.is_(True), p.ts > cutoff, p.ts <= now_dt)
        .group_by(p.mirror_id)
    )
    for row in session.execute(q):
        out.setdefault(row.mirror_id, {}).update(
            rtt_s=row.rtt_s,
            loss=row.loss,
            capacity_bps=row.capacity_bps,
            probe_throughput_bps=row.throughput_bps,
            probe_ts=_ts(row.newest),
        )

    # Connections: the newest ok throughput row that knows them (a probe whose
    # parallel read failed leaves them unknown, and the one before still holds).
    known = and_(
        p.ok.is_(True),
        p.throughput_bps.is_not(None),
        p.connections.is_not(None),
        p.ts > cutoff,
        p.ts <= now_dt,
    )
    for mid, conns in _newest_connections(session, p, p.ts, known):
        out.setdefault(mid, {})["probe_connections"] = conns

    u = UtilizationSample
    latest = (
        select(u.mirror_id, func.max(u.ts).label("mts"))
        .where(u.ts > cutoff, u.ts <= now_dt)
        .group_by(u.mirror_id)
        .subquery()
    )
    q = select(u.mirror_id, u.cpu_percent, u.memory_percent, u.ts).join(
        latest, and_(latest.c.mirror_id == u.mirror_id, latest.c.mts == u.ts)
    )
    for row in session.execute(q):
        out.setdefault(row.mirror_id, {}).update(
            cpu_percent=row.cpu_percent,
            memory_percent=row.memory_percent,
            utilization_ts=_ts(row.ts),
        )

    r = MirrorReport
    # Rates measured behind a full access link are the mirror's share of that link:
    # floors, kept apart from the history of rates the mirror itself set. Each is
    # a lower bound, so the highest counts, halved every half-life of its age.
    floor = func.max(
        r.throughput_bps * _decay(session, r.reported_at, now, half_life_s)
    ).label("throughput_bps")
    for limited, value, ts in ((False, "throughput_bps", "throughput_ts"),
                               (True, "throughput_floor_bps", "throughput_floor_ts")):
        rate = (floor if limited else _decayed_mean_cols(
            session, r, r.reported_at, [r.throughput_bps], now, half_life_s)[0])
        q = (
            select(r.mirror_id, func.max(r.reported_at).label("newest"), rate)
            .where(
                r.mirror_id.is_not(None),
                r.bytes > 0,
                r.bad_data.is_(False),
                r.access_limited.is_(limited),
                r.reported_at > cutoff,
                r.reported_at <= now_dt,
            )
            .group_by(r.mirror_id)
        )
        for row in session.execute(q):
            out.setdefault(row.mirror_id, {}).update(
                {value: row.throughput_bps, ts: _ts(row.newest)}
            )

    # Connections a client's own trials kept: the newest report that says.
    said = and_(
        r.mirror_id.is_not(None),
        r.connections.is_not(None),
        r.bad_data.is_(False),
        r.reported_at > cutoff,
        r.reported_at <= now_dt,
    )
    for mid, conns in _newest_connections(session, r, r.reported_at, said):
        out.setdefault(mid, {})["report_connections"] = conns
    return out


def _newest_connections(
    session: Session, table: Any, ts: Any, where: Any
) -> list[tuple[int, int]]:
    """(mirror id, connections) of each mirror's newest row of ``table`` (by its
    column ``ts``) among those ``where`` selects; the largest when several rows
    share that time."""
    newest = (select(table.mirror_id, func.max(ts).label("nts"))
              .where(where).group_by(table.mirror_id).subquery())
    q = (
        select(table.mirror_id, func.max(table.connections).label("connections"))
        .join(newest, and_(newest.c.mirror_id == table.mirror_id, newest.c.nts == ts))
        .where(where)
        .group_by(table.mirror_id)
    )
    return [(row.mirror_id, int(row.connections)) for row in session.execute(q)]


def _ts(v: datetime | str | None) -> float | None:
    """Epoch seconds of an aggregate's max(ts) (SQLite returns it as text)."""
    if v is None:
        return None
    if isinstance(v, str):
        v = datetime.fromisoformat(v)
    if v.tzinfo is None:
        v = v.replace(tzinfo=UTC)
    return v.timestamp()


def replica_signature(session: Session) -> tuple[Any, ...]:
    """Cheap value that changes when files or replicas change (see module doc).

    The newest ids (primary-key index, instant) catch additions at once; the
    rest is PostgreSQL's per-table insert/update/delete counters, which lag a
    commit by up to ~10 s, or on SQLite (small databases) a count and newest
    verification time."""
    ids = tuple(
        session.execute(
            select(
                select(func.max(File.id)).scalar_subquery(),
                select(func.max(Replica.id)).scalar_subquery(),
            )
        ).one()
    )
    if session.get_bind().dialect.name == "postgresql":
        rows = session.execute(
            text(
                "SELECT relname, n_tup_ins, n_tup_upd, n_tup_del "
                "FROM pg_stat_user_tables WHERE relname IN ('files', 'replicas') "
                "ORDER BY relname"
            )
        ).all()
        return (ids, tuple(tuple(r) for r in rows))
    rf = session.execute(select(func.count(), func.sum(File.size))).one()
    rr = session.execute(
        select(
            func.count(),
            func.max(Replica.verified_at),
            func.sum(case((Replica.present.is_(True), 1), else_=0)),
            func.sum(func.coalesce(Replica.size_seen, -1)),
        )
    ).one()
    return (ids, tuple(rf), tuple(rr))


def load_replica_map(session: Session, *, now: float) -> ReplicaMap:
    """Files and usable replicas, plus per-mirror demand (paper 001, 2.2.2)."""
    has_pieces = and_(File.piece_sha256.is_not(None), cast(File.piece_sha256, SAString) != "null")
    files: dict[str, FileRecord] = {}
    for fid, name, size, sha, psize, hp in session.execute(
        select(
            File.id,
            File.name,
            File.size,
            File.sha256,
            File.piece_size,
            case((has_pieces, True), else_=False),
        )
    ):
        files[name] = FileRecord(fid, name, int(size), sha, psize, bool(hp))

    usable = and_(
        Replica.present.is_(True),
        or_(Replica.size_seen.is_(None), Replica.size_seen == File.size),
    )
    q = (
        select(Replica.file_id, Replica.mirror_id, Replica.path)
        .join(File, File.id == Replica.file_id)
        .where(usable)
        .order_by(Replica.file_id, Replica.mirror_id)
    )
    interned: dict[str, str] = {}
    replicas: dict[int, ReplicaSet] = {}
    demand: dict[int, float] = {}

    def add(fid: int, ids: list[int], paths: list[str]) -> None:
        replicas[fid] = ReplicaSet(array("i", ids), tuple(paths))
        share = 1.0 / len(ids)
        for mid in ids:
            demand[mid] = demand.get(mid, 0.0) + share

    def intern(path: str) -> str:
        p = interned.get(path)
        if p is None:
            interned[path] = p = path
        return p

    if session.get_bind().dialect.name == "postgresql":
        # Grouped in the server: one row per (file, path) instead of one per
        # replica, ~15x fewer rows to decode (the load is then bound by PostgreSQL).
        grouped = (
            select(Replica.file_id, Replica.path, func.array_agg(Replica.mirror_id))
            .join(File, File.id == Replica.file_id)
            .where(usable)
            .group_by(Replica.file_id, Replica.path)
        )
        by_file: dict[int, tuple[list[int], list[str]]] = {}
        for fid, path, mids in session.execute(grouped):
            p = intern(path)
            entry = by_file.get(fid)
            if entry is None:
                by_file[fid] = (list(mids), [p] * len(mids))
            else:
                entry[0].extend(mids)
                entry[1].extend([p] * len(mids))
        for fid, (ids, paths) in by_file.items():
            if len(set(paths)) > 1 or ids != sorted(ids):
                order = sorted(range(len(ids)), key=ids.__getitem__)
                ids, paths = [ids[i] for i in order], [paths[i] for i in order]
            add(fid, ids, paths)
    else:
        cur_file: int | None = None
        ids: list[int] = []
        paths: list[str] = []
        for fid, mid, path in session.execute(q):
            if fid != cur_file:
                if cur_file is not None:
                    add(cur_file, ids, paths)
                cur_file, ids, paths = fid, [], []
            ids.append(mid)
            paths.append(intern(path))
        if cur_file is not None:
            add(cur_file, ids, paths)
    return ReplicaMap(files, replicas, demand, loaded_at=now)


def load_static(
    session: Session, *, now: float
) -> tuple[dict[int, tuple], PredictorCoefficients | None, frozenset[frozenset[int]]]:
    """Mirrors (id -> (name, enabled, state, urls)), the latest fit, active penalty pairs."""
    mirrors: dict[int, tuple] = {}
    for mid, name, enabled, state in session.execute(
        select(Mirror.id, Mirror.name, Mirror.enabled, Mirror.state)
    ):
        mirrors[mid] = (name, bool(enabled), state, {})
    for mid, proto, base in session.execute(
        select(MirrorUrl.mirror_id, MirrorUrl.protocol, MirrorUrl.base_url)
    ):
        if mid in mirrors:
            mirrors[mid][3][proto] = base
    fit = session.execute(
        select(PredictorFit.a, PredictorFit.b)
        .order_by(PredictorFit.fitted_at.desc(), PredictorFit.id.desc())
        .limit(1)
    ).first()
    predictor = PredictorCoefficients(float(fit.a), float(fit.b)) if fit is not None else None
    if predictor is not None and not predictor.usable():
        predictor = None
    now_dt = datetime.fromtimestamp(now, UTC)
    pairs = frozenset(
        frozenset((a, b))
        for a, b in session.execute(
            select(CongestionPenalty.mirror_a_id, CongestionPenalty.mirror_b_id).where(
                CongestionPenalty.expires_at > now_dt
            )
        )
        if a != b
    )
    return mirrors, predictor, pairs


def build_snapshot(
    session: Session,
    *,
    now: float,
    half_life_s: float,
    stale_after_s: float,
    replica_map: ReplicaMap | None = None,
    metrics: dict[int, dict[str, Any]] | None = None,
    piece_loader: Callable[[int], list[str] | None] | None = None,
    static: tuple[dict[int, tuple], PredictorCoefficients | None, frozenset[frozenset[int]]]
    | None = None,
) -> RankingSnapshot:
    """A complete snapshot; ``replica_map``, ``metrics`` (load_mirror_metrics) and
    ``static`` (load_static) are reused when given."""
    if replica_map is None:
        replica_map = load_replica_map(session, now=now)
    mirrors_raw, predictor, pairs = static if static is not None else load_static(session, now=now)
    if metrics is None:
        metrics = load_mirror_metrics(
            session, now=now, half_life_s=half_life_s, stale_after_s=stale_after_s
        )
    mirrors: dict[int, MirrorInfo] = {}
    for mid, (name, enabled, state, urls) in mirrors_raw.items():
        kw = metrics.get(mid, {})
        mirrors[mid] = MirrorInfo(
            id=mid,
            name=name,
            enabled=enabled,
            state=state,
            urls=urls,
            metrics=MirrorMetrics(key=mid, demand=replica_map.demand.get(mid), **kw),
        )
    return RankingSnapshot(
        taken_at=now,
        mirrors=mirrors,
        files_by_name=replica_map.files_by_name,
        replicas=replica_map.replicas,
        predictor=predictor,
        congested_pairs=pairs,
        piece_loader=piece_loader,
    )


class _PieceCache:
    """Bounded LRU of piece hash lists, loaded by primary key on demand."""

    def __init__(
        self, session_factory: sessionmaker[Session], size: int = PIECE_CACHE_SIZE
    ) -> None:
        self._factory = session_factory
        self._size = size
        self._lock = threading.Lock()
        self._data: OrderedDict[int, list[str] | None] = OrderedDict()

    def __call__(self, file_id: int) -> list[str] | None:
        with self._lock:
            if file_id in self._data:
                self._data.move_to_end(file_id)
                return self._data[file_id]
        with self._factory() as s:
            pieces = s.scalar(select(File.piece_sha256).where(File.id == file_id))
        with self._lock:
            self._data[file_id] = pieces
            while len(self._data) > self._size:
                self._data.popitem(last=False)
        return pieces

    def clear(self) -> None:
        with self._lock:
            self._data.clear()


class SnapshotCache:
    """Holds the current RankingSnapshot; ``get()`` never waits for a refresh once
    one snapshot exists. A stale snapshot (older than ``snapshot_refresh_s``)
    triggers one background refresh; ``start()`` adds a thread that refreshes
    periodically even without requests."""

    def __init__(
        self,
        session_factory: sessionmaker[Session],
        settings: Any,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._factory = session_factory
        self._settings = settings
        self._clock = clock
        self._snapshot: RankingSnapshot | None = None
        self._replica_map: ReplicaMap | None = None
        self._metrics: dict[int, dict[str, Any]] | None = None
        self._metrics_at = 0.0
        self._static: tuple | None = None  # load_static() behind the current snapshot
        self._lock = threading.Lock()  # one refresh at a time
        self._flag_lock = threading.Lock()
        self._refreshing = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.pieces = _PieceCache(session_factory)
        self.last_refresh_s: float | None = None  # duration, for metrics/status
        self.last_replica_reload_s: float | None = None
        self.last_error: str | None = None

    # -- public ---------------------------------------------------------------------

    def get(self) -> RankingSnapshot:
        snap = self._snapshot
        if snap is None:
            with self._lock:
                if self._snapshot is None:
                    self._refresh_locked()
                snap = self._snapshot
            assert snap is not None
            return snap
        refresh_s = self._settings.snapshot_refresh_s
        # With the periodic thread running, a request triggers a refresh only when
        # that thread has fallen behind; otherwise both would refresh (twice the
        # database and CPU work for the same freshness).
        limit = refresh_s if self._thread is None else 2 * refresh_s
        if self._clock() - snap.taken_at >= limit:
            self._refresh_in_background()
        return snap

    def refresh(self, *, force_replicas: bool = False) -> RankingSnapshot:
        """Rebuild now (blocking); e.g. after an admin change in this process."""
        with self._lock:
            if force_replicas:
                self._replica_map = None
            self._metrics = None
            self._refresh_locked()
            assert self._snapshot is not None
            return self._snapshot

    def invalidate_replicas(self) -> None:
        """The next refresh reloads files and replicas (call after admin edits)."""
        self._replica_map = None
        self.pieces.clear()

    def invalidate_metrics(self) -> None:
        """The next refresh recomputes the measurement aggregates."""
        self._metrics = None

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="pftp-snapshot", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None

    # -- internals --------------------------------------------------------------------

    def _loop(self) -> None:
        interval = self._settings.snapshot_refresh_s
        wait_s = interval
        while not self._stop.wait(wait_s):
            started = time.monotonic()
            with self._lock:
                try:
                    self._refresh_locked()
                except Exception as exc:  # keep serving the old snapshot
                    self.last_error = f"{type(exc).__name__}: {exc}"
                    log.exception("ranking snapshot refresh failed; keeping the previous one")
            # A new snapshot every `interval`, however long the refresh took.
            wait_s = max(0.05 * interval, interval - (time.monotonic() - started))

    def _refresh_in_background(self) -> None:
        # A separate small lock for the flag: the request path must never wait
        # for the refresh lock, which a running (possibly slow) refresh holds.
        with self._flag_lock:
            if self._refreshing:
                return
            self._refreshing = True

        def run() -> None:
            try:
                if not self._lock.acquire(blocking=False):
                    return  # a refresh is already running; its result will do
                try:
                    self._refresh_locked()
                finally:
                    self._lock.release()
            except Exception as exc:
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.exception("ranking snapshot refresh failed; keeping the previous one")
            finally:
                self._refreshing = False

        threading.Thread(target=run, name="pftp-snapshot-refresh", daemon=True).start()

    def _refresh_locked(self) -> None:
        s = self._settings
        t0 = time.perf_counter()
        now = self._clock()
        with self._factory() as session:
            sig = replica_signature(session)
            rm = self._replica_map
            if rm is None or rm.signature != sig or now - rm.loaded_at >= REPLICA_FULL_RELOAD_S:
                t1 = time.perf_counter()
                rm = load_replica_map(session, now=now)
                rm = ReplicaMap(rm.files_by_name, rm.replicas, rm.demand, sig, now)
                self.last_replica_reload_s = time.perf_counter() - t1
                self.pieces.clear()
                # Hundreds of thousands of long-lived containers: keep the cyclic GC
                # from walking them on every full collection (latency spikes). They
                # hold no cycles, so an old map is still freed by reference counting.
                gc.freeze()
                log.info(
                    "replica map loaded: %d files, %d with replicas, in %.2f s",
                    len(rm.files_by_name),
                    len(rm.replicas),
                    self.last_replica_reload_s,
                )
            metrics, metrics_at = self._metrics, self._metrics_at
            if metrics is None or now - metrics_at >= max(s.snapshot_refresh_s, METRICS_REFRESH_S):
                metrics = load_mirror_metrics(
                    session, now=now, half_life_s=s.probe_half_life_s, stale_after_s=s.stale_after_s
                )
                metrics_at = now
            static = load_static(session, now=now)
            old = self._snapshot
            reused = (
                old is not None
                and metrics is self._metrics
                and rm is self._replica_map
                and static == self._static
            )
            if reused:
                assert old is not None
                # Nothing the ranking uses changed (the usual case between
                # measurement refreshes): the same snapshot, newly dated. Its memo
                # (ranking table, per-file rankings) stays valid. Rebuilding ~1,000
                # mirrors every refresh held the GIL for tens of milliseconds.
                snap = replace(old, taken_at=now)
            else:
                snap = build_snapshot(
                    session,
                    now=now,
                    half_life_s=s.probe_half_life_s,
                    stale_after_s=s.stale_after_s,
                    replica_map=rm,
                    metrics=metrics,
                    piece_loader=self.pieces,
                    static=static,
                )
            session.rollback()
        if not reused and (
            old is not None
            and metrics is self._metrics
            and rm is self._replica_map
            and old.predictor == snap.predictor
            and old.mirrors.keys() == snap.mirrors.keys()
            and "ranking" in old.memo
        ):
            # Same measurements: the ranking table (confidence evaluated when the
            # measurements were loaded) carries over.
            snap.memo["ranking"] = old.memo["ranking"]
            if "plan_cache" in old.memo and old.mirrors == snap.mirrors:
                # Same table, replica map and mirrors (state, URLs): the planner's
                # per-file rankings are still exact.
                snap.memo["plan_cache"] = old.memo["plan_cache"]
        ranking_table(snap, s)  # built here, off the request path
        self._metrics, self._metrics_at = metrics, metrics_at
        self._replica_map = rm
        self._static = static
        self._snapshot = snap
        self.last_refresh_s = time.perf_counter() - t0
        self.last_error = None


def ranking_table(
    snapshot: RankingSnapshot, settings: Any, *, now: float | None = None
) -> RankingTable:
    """The snapshot's RankingTable for ``settings``, built once per snapshot
    (SnapshotCache builds it in its refresh thread; otherwise the first request
    does). Data confidence is thus evaluated at the snapshot's time, not per
    request: an error of at most snapshot_refresh_s against a half-life of many
    minutes."""
    cached = snapshot.memo.get("ranking")
    if cached is None or cached[0] is not settings:
        params = params_from_settings(settings, snapshot.predictor)
        table = build_table(
            [m.metrics for m in snapshot.mirrors.values()],
            params=params,
            now=snapshot.taken_at if now is None else now,
        )
        cached = (settings, table)
        snapshot.memo["ranking"] = cached
    return cached[1]


def snapshot_age_s(snapshot: RankingSnapshot, now: float) -> float:
    return max(0.0, now - snapshot.taken_at) if math.isfinite(snapshot.taken_at) else math.inf


__all__ = [
    "FileRecord",
    "MirrorInfo",
    "RankingSnapshot",
    "ReplicaMap",
    "ReplicaSet",
    "SnapshotCache",
    "build_snapshot",
    "load_mirror_metrics",
    "load_replica_map",
    "ranking_table",
    "replica_signature",
]
