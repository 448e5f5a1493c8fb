"""Answer one assignment request from a ranking snapshot (paper 004, 3.2.2).

candidates (enabled, not down, usable replica, URL in a protocol the client
speaks) -> rank (ranking.py) -> select within the access bandwidth, or spread
load in balanced mode (selection.py) -> byte portions (portions.py) -> response.

No I/O besides the snapshot's lazy piece-hash loader; the clock and the rng are
passed in.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Sequence
from functools import lru_cache
from urllib.parse import quote

from pftp_wire.models import AssignmentRequest, AssignmentResponse

from pftp_coordinator.portions import split_portions
from pftp_coordinator.ranking import MirrorRank, rank_rows
from pftp_coordinator.ranking_inputs import MirrorInfo, RankingSnapshot, ranking_table
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


def _pick_url(info: MirrorInfo, protocols: Sequence[str]) -> str | None:
    for proto in protocols:  # the client's order of preference
        base = info.urls.get(proto)
        if base:
            return base
    return None


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
    now = time.time() if now is None else now
    f = snapshot.files_by_name.get(request.file)
    if f is None:
        raise UnknownFile(f"unknown file {request.file!r}")

    rs = snapshot.replicas.get(f.id)
    n_replicas = len(rs.mirror_ids) if rs is not None else 0
    table = ranking_table(snapshot, settings, now=now)
    row_of = table.row_of
    where: dict[int, tuple[str, str]] = {}  # mirror id -> (base URL, replica path)
    rows: list[int] = []
    names: dict[int, str] = {}
    excluded = {"disabled": 0, "down": 0, "protocol": 0}
    if rs is not None:
        for mid, path in zip(rs.mirror_ids, rs.paths, strict=True):
            info = snapshot.mirrors.get(mid)
            if info is None or not info.enabled:
                excluded["disabled"] += 1
                continue
            if info.state == "down":
                excluded["down"] += 1
                continue
            base = _pick_url(info, request.protocols)
            if base is None:
                excluded["protocol"] += 1
                continue
            where[mid] = (base, path)
            names[mid] = info.name
            rows.append(row_of[mid])
    if not rows:
        if n_replicas == 0:
            reason = "no mirror holds a usable (present, right-size) replica"
        else:
            parts = [f"{n} {why}" for why, n in excluded.items() if n]
            reason = (
                f"none of the {n_replicas} mirrors holding it is usable "
                f"for protocols {'/'.join(request.protocols)} ({', '.join(parts)})"
            )
        raise NoUsableMirror(f"no usable mirror for {request.file!r}: {reason}")

    ranked = rank_rows(table, rows)
    sel = select_mirrors(
        ranked,
        access_bandwidth_bps=request.access_bandwidth_bps,
        max_mirrors=settings.max_mirrors,
        backup_count=settings.backup_count,
        balanced=request_rate_rps > settings.balanced_threshold_rps,
        rng=rng,
        congested_pairs=snapshot.congested_pairs,
    )

    chosen = sel.selected
    # Portions in proportion to expected rate when every chosen mirror has one
    # (so they finish together), else to suitability (see portions.py).
    if all(r.expected_bps for r in chosen):
        weights = [float(r.expected_bps or 0.0) for r in chosen]
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

    def entry(r: MirrorRank) -> dict:
        return {
            "mirror": names[r.key],
            "url": replica_url(*where[r.key]),
            "suitability": r.suitability,
            "expected_bps": r.expected_bps,
            "explain": r.explain,
        }

    assignments = []
    for p in portions:
        a = entry(chosen[p.index])
        a["offset"] = p.offset
        a["length"] = p.length
        assignments.append(a)
    # One validation of the whole tree (in pydantic-core) is far cheaper than
    # building each nested model on its own.
    return AssignmentResponse.model_validate(
        {
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
    )
