"""Answer one assignment request from a ranking snapshot (paper 004, 3.2.2).

candidates (enabled, not down, usable replica, URL in a protocol the client
speaks) -> rank (ranking.py) -> select within the access bandwidth, or spread
load in balanced mode (selection.py) -> byte portions (portions.py) -> response.

No I/O besides the snapshot's lazy piece-hash loader; the clock and the rng are
passed in.
"""

from __future__ import annotations

import math
import random
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import quote

from pftp_wire.models import AssignmentRequest, AssignmentResponse
from pydantic_core import to_json

from pftp_coordinator.active_downloads import expected_seconds
from pftp_coordinator.portions import (
    finish_together_weights,
    opening,
    setup_round_trips,
    split_portions,
)
from pftp_coordinator.ranking import (
    MirrorMetrics,
    MirrorRank,
    RankedRows,
    RankingTable,
    rank_rows_lazy,
)
from pftp_coordinator.ranking_inputs import FileRecord, RankingSnapshot, ranking_table
from pftp_coordinator.selection import select_mirrors

# Characters left alone when a replica path goes into a URL ('%' too, so a path
# stored already percent-encoded is not encoded twice).
_PATH_SAFE = "/%:@!$&'()*+,;=~-._"


class UnknownFile(LookupError):
    """The coordinator has no file of that name (HTTP 404)."""


class NoUsableMirror(RuntimeError):
    """The file is known but no mirror can serve it to this client (HTTP 503)."""


@lru_cache(maxsize=1 << 16)
def _quoted(path: str) -> str:
    return quote(path.lstrip("/"), safe=_PATH_SAFE)


def replica_url(base_url: str, path: str) -> str:
    """Base URL joined with a replica path, whatever slashes either has."""
    return base_url.rstrip("/") + "/" + _quoted(path)


@dataclass(slots=True)
class _Candidates:
    """The ranked usable holders of one file for one protocol preference."""

    ranked: RankedRows
    where: dict[int, tuple[str, str]]  # mirror id -> (base URL, replica path)


@dataclass(slots=True)
class PlannedAnswer:
    """An answer serialised for the wire, plus what the API records about it."""

    body: bytes  # AssignmentResponse JSON
    request_id: str
    mode: str
    n_assignments: int
    mirrors: tuple[str, ...] = ()  # those assigned portions (not the backups)
    expected_s: float | None = None  # the file over their expected aggregate rate


def _connections(m: MirrorMetrics) -> int:
    """Connections to open to the mirror at once: the more of its probe's and of
    what a client's own trials last kept. A probe reads ~0.5 MB: nginx's
    limit_rate lets a connection's first second's allowance through at the path's
    rate, so the probe sees no limit where the client, a second later, does."""
    # (clamped to the wire's 1..64: a bad row must not make every answer invalid)
    return min(64, max(1, m.probe_connections or 1, m.report_connections or 1))


def _usable_mirrors(snapshot: RankingSnapshot, table: RankingTable) -> dict[int, tuple]:
    """mirror id -> (table row, name, urls, connections) of the enabled, not-down
    mirrors; once per snapshot. ``connections``: how many to open to the mirror at
    once (its probe's, see probes/service.py, or clients' reports; 1 when not
    known)."""
    memo = snapshot.memo.get("usable_mirrors")
    if memo is None or memo[0] is not table:
        usable = {
            mid: (table.row_of[mid], info.name, info.urls, _connections(info.metrics))
            for mid, info in snapshot.mirrors.items()
            if info.enabled and info.state != "down" and mid in table.row_of
        }
        memo = (table, usable)
        snapshot.memo["usable_mirrors"] = memo
    return memo[1]


def _plan_cache(snapshot: RankingSnapshot, settings, table: RankingTable) -> dict:  # type: ignore[no-untyped-def]
    """Per-(file, protocols) ranking cache of this snapshot. SnapshotCache carries it
    to the next snapshot only when the ranking inputs (table, replica map, mirrors)
    are unchanged, so a cached ranking is exactly what a fresh one would be."""
    memo = snapshot.memo.get("plan_cache")
    if memo is None or memo[0] is not settings or memo[1] is not table:
        memo = (settings, table, {})
        snapshot.memo["plan_cache"] = memo
    return memo[2]


def _no_mirror_reason(snapshot: RankingSnapshot, f: FileRecord, protocols: Sequence[str]) -> str:
    rs = snapshot.replicas.get(f.id)
    if rs is None or len(rs.mirror_ids) == 0:
        return "no mirror holds a usable (present, right-size) replica"
    excluded = {"disabled": 0, "down": 0, "protocol": 0}
    for mid in rs.mirror_ids:
        info = snapshot.mirrors.get(mid)
        if info is None or not info.enabled:
            excluded["disabled"] += 1
        elif info.state == "down":
            excluded["down"] += 1
        else:
            excluded["protocol"] += 1
    parts = [f"{n} {why}" for why, n in excluded.items() if n]
    return (
        f"none of the {len(rs.mirror_ids)} mirrors holding it is usable "
        f"for protocols {'/'.join(protocols)} ({', '.join(parts)})"
    )


def _candidates(
    snapshot: RankingSnapshot,
    f: FileRecord,
    protocols: tuple[str, ...],
    settings,  # type: ignore[no-untyped-def]
    now: float,
) -> _Candidates | None:
    table = ranking_table(snapshot, settings, now=now)
    cache = _plan_cache(snapshot, settings, table)
    key = (f.id, protocols)
    hit = cache.get(key)
    if hit is not None:
        return hit
    usable = _usable_mirrors(snapshot, table)
    rs = snapshot.replicas.get(f.id)
    where: dict[int, tuple[str, str]] = {}
    rows: list[int] = []
    if rs is not None:
        for mid, path in zip(rs.mirror_ids, rs.paths):  # noqa: B905 (parallel by construction)
            u = usable.get(mid)
            if u is None:
                continue
            urls = u[2]
            for proto in protocols:  # the client's order of preference
                base = urls.get(proto)
                if base:
                    where[mid] = (base, path)
                    rows.append(u[0])
                    break
    if not rows:
        return None
    cand = _Candidates(rank_rows_lazy(table, rows), where)
    limit = settings.plan_cache_size
    if limit > 0:
        if len(cache) >= limit:
            cache.clear()  # bounded; simple and atomic (popular files come back fast)
        cache[key] = cand
    return cand


def _plan(
    snapshot: RankingSnapshot,
    request: AssignmentRequest,
    *,
    settings,  # type: ignore[no-untyped-def]  # pftp_coordinator.config.Settings
    request_rate_rps: float,
    rng: random.Random,
    now: float | None,
) -> dict:
    """The answer as plain data (AssignmentResponse's shape)."""
    # ``now`` only matters when the snapshot's ranking table is not built yet
    # (SnapshotCache builds it in its refresh thread, at the snapshot's time).
    now = time.time() if now is None else now
    f = snapshot.files_by_name.get(request.file)
    if f is None:
        raise UnknownFile(f"unknown file {request.file!r}")
    protocols = tuple(request.protocols)
    cand = _candidates(snapshot, f, protocols, settings, now)
    if cand is None:
        reason = _no_mirror_reason(snapshot, f, protocols)
        raise NoUsableMirror(f"no usable mirror for {request.file!r}: {reason}")

    ranked = cand.ranked
    table = ranking_table(snapshot, settings, now=now)
    cap = request.access_bandwidth_bps or math.inf
    usable = _usable_mirrors(snapshot, table)
    opened: dict[int, tuple[int, float]] = {}

    def opening_of(r: MirrorRank) -> tuple[int, float]:
        # (connections, start delay): what the client opens to the mirror at once,
        # its held-connection count (_connections) or more where one connection's
        # slow start would be long (a far fast path), and how late it starts over
        # them. The ramp is to what the client can take: the rate capped at the
        # link; by the protocol the client will use there (HTTP's first byte
        # comes sooner).
        got = opened.get(r.key)
        if got is None:
            row = table.row_of.get(r.key)
            got = opened[r.key] = opening(
                min(r.expected_bps or 0.0, cap), None if row is None else table.rtt_s[row],
                setup_round_trips(cand.where.get(r.key, ("",))[0]),
                usable[r.key][3] if r.key in usable else 1, settings.ramp_max_connections)
        return got

    def starts(ranks: Sequence[MirrorRank]) -> dict[int, float]:
        return {r.key: opening_of(r)[1] for r in ranks if r.key in table.row_of}

    # (selection uses them only when the access bandwidth is known: then for all)
    delays = starts(ranked.ranks) if request.access_bandwidth_bps else {}
    sel = select_mirrors(
        ranked.ranks,
        access_bandwidth_bps=request.access_bandwidth_bps,
        max_mirrors=settings.max_mirrors,
        backup_count=settings.backup_count,
        balanced=request_rate_rps > settings.balanced_threshold_rps,
        rng=rng,
        congested_pairs=snapshot.congested_pairs,
        start_delay_s=delays,
    )

    chosen = sel.selected
    # Portions in proportion to expected rate when every chosen mirror has one
    # (so they finish together), else to suitability (see portions.py). A far
    # mirror starts later (set-up round trips, slow start): its portion is smaller
    # by what it cannot carry meanwhile (finish_together_weights).
    if all(r.expected_bps for r in chosen):
        rates = [float(r.expected_bps or 0.0) for r in chosen]
        if not delays:
            delays = starts(chosen)
        weights = finish_together_weights(
            f.size, rates, [delays.get(r.key, 0.0) for r in chosen]
        )
    else:
        weights = [r.suitability for r in chosen]
    portions = split_portions(
        f.size, weights, min_portion=settings.min_portion_bytes, piece_size=f.piece_size
    )
    kept = {p.index for p in portions}
    # Mirrors dropped to respect the minimum portion are better than the other
    # backups (they were selected), so they come first.
    dropped: list[MirrorRank] = [r for i, r in enumerate(chosen) if i not in kept]
    backups = (dropped + sel.backups)[: settings.backup_count]

    where = cand.where

    def entry(r: MirrorRank) -> dict:
        u = usable[r.key]
        return {
            "mirror": u[1],
            "url": replica_url(*where[r.key]),
            "suitability": r.suitability,
            "expected_bps": r.expected_bps,
            "connections": opening_of(r)[0],
            "explain": ranked.explain(r.key),
        }

    assignments = []
    for p in portions:
        a = entry(chosen[p.index])
        a["offset"] = p.offset
        a["length"] = p.length
        assignments.append(a)
    return {
        "request_id": uuid.uuid4().hex,
        "file": {
            "name": f.name,
            "size": f.size,
            "sha256": f.sha256,
            "piece_size": f.piece_size,
            "piece_sha256": snapshot.piece_hashes(f),
        },
        "assignments": assignments,
        "backups": [entry(r) for r in backups],
        "mode": sel.mode,
    }


def plan_assignments(
    snapshot: RankingSnapshot,
    request: AssignmentRequest,
    *,
    settings,  # type: ignore[no-untyped-def]  # pftp_coordinator.config.Settings
    request_rate_rps: float,
    rng: random.Random,
    now: float | None = None,
) -> AssignmentResponse:
    """Assignments and backups for ``request``.

    Raises UnknownFile, or NoUsableMirror with the reason in its message.
    """
    # One validation of the whole tree (in pydantic-core) is far cheaper than
    # building each nested model on its own.
    return AssignmentResponse.model_validate(
        _plan(
            snapshot,
            request,
            settings=settings,
            request_rate_rps=request_rate_rps,
            rng=rng,
            now=now,
        )
    )


def plan_assignments_json(
    snapshot: RankingSnapshot,
    request: AssignmentRequest,
    *,
    settings,  # type: ignore[no-untyped-def]  # pftp_coordinator.config.Settings
    request_rate_rps: float,
    rng: random.Random,
    now: float | None = None,
) -> PlannedAnswer:
    """``plan_assignments`` for the HTTP hot path: the same answer serialised
    straight from plain data by pydantic-core (no model built and re-validated;
    the data is made here and equals what plan_assignments validates, which
    tests/server/test_planner.py checks)."""
    answer = _plan(
        snapshot,
        request,
        settings=settings,
        request_rate_rps=request_rate_rps,
        rng=rng,
        now=now,
    )
    assigned = answer["assignments"]
    by_mirror = {a["mirror"]: a["expected_bps"] for a in assigned}
    return PlannedAnswer(
        to_json(answer),
        answer["request_id"],
        answer["mode"],
        len(assigned),
        tuple(by_mirror),
        expected_seconds(answer["file"]["size"], by_mirror.values()),
    )
