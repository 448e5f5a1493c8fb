"""Admin endpoints (Bearer admin token): mirrors, files, replicas.

The same actions as the `pftp-coordinator mirror|file|replica` commands,
through the same services. Service errors become 404/409/422 in app.py.
"""

from __future__ import annotations

from fastapi import APIRouter, Query, Request, status
from sqlalchemy.orm import Session

from pftp_coordinator.api.deps import AdminDep, SessionDep
from pftp_coordinator.models import File, Mirror, Replica
from pftp_coordinator.schemas import (
    FileCreate,
    FileRead,
    MirrorCreate,
    MirrorRead,
    MirrorScore,
    MirrorUpdate,
    ReplicaCreate,
    ReplicaRead,
)
from pftp_coordinator.services import files as file_service
from pftp_coordinator.services import mirrors as mirror_service
from pftp_coordinator.services import replicas as replica_service
from pftp_coordinator.services.mirror_scores import current_scores

router = APIRouter(prefix="/api/v1/admin", tags=["admin"], dependencies=[AdminDep])


def _commit_and_invalidate(request: Request, session: Session) -> None:
    # Commit first, so the snapshot's next refresh reloads files/replicas from the
    # committed state (mirror rows are re-read on every refresh anyway).
    session.commit()
    request.app.state.snapshot_cache.invalidate_replicas()


def mirror_read(
    mirror: Mirror, *, replicas: int, score: MirrorScore | None = None
) -> MirrorRead:
    # ``replicas`` has no default: a changed mirror must report its real count.
    return MirrorRead(
        name=mirror.name,
        urls={u.protocol: u.base_url for u in mirror.urls},
        region=mirror.region,
        asn=mirror.asn,
        enabled=mirror.enabled,
        notes=mirror.notes,
        state=mirror.state,
        last_probe_at=mirror.last_probe_at,
        replicas=replicas,
        score=score,
    )


def _with_count(session: Session, mirror: Mirror) -> MirrorRead:
    return mirror_read(
        mirror, replicas=mirror_service.replica_count(session, mirror_id=mirror.id)
    )


def file_read(row: File, *, replicas: int = 0) -> FileRead:
    return FileRead(
        name=row.name,
        size=row.size,
        sha256=row.sha256,
        piece_size=row.piece_size,
        pieces=len(row.piece_sha256 or []),
        replicas=replicas,
    )


def replica_read(replica: Replica, mirror: Mirror, file_row: File) -> ReplicaRead:
    return ReplicaRead(
        mirror=mirror.name,
        file=file_row.name,
        path=replica.path,
        present=replica.present,
        usable=replica_service.is_usable(replica, file_row),
        size_seen=replica.size_seen,
        verified_at=replica.verified_at,
    )


@router.get("/mirrors", response_model=list[MirrorRead], summary="Mirrors with current scores")
def list_mirrors(request: Request, session: SessionDep) -> list[MirrorRead]:
    mirrors = mirror_service.list_mirrors(session)
    counts = mirror_service.replica_counts(session)
    scores = current_scores(
        request.app.state.snapshot_cache.get(), settings=request.app.state.settings
    )
    return [mirror_read(m, replicas=counts.get(m.id, 0), score=scores.get(m.name)) for m in mirrors]


@router.post("/mirrors", response_model=MirrorRead, status_code=status.HTTP_201_CREATED)
def add_mirror(body: MirrorCreate, session: SessionDep) -> MirrorRead:
    mirror = mirror_service.add_mirror(session, **body.model_dump())
    return mirror_read(mirror, replicas=0)  # new: no replicas yet


@router.get("/mirrors/{name}", response_model=MirrorRead)
def get_mirror(name: str, session: SessionDep) -> MirrorRead:
    return _with_count(session, mirror_service.get_mirror(session, name=name))


@router.patch("/mirrors/{name}", response_model=MirrorRead, summary="Change a mirror")
def change_mirror(name: str, body: MirrorUpdate, session: SessionDep) -> MirrorRead:
    # Only fields present in the body change (null clears region/asn/notes).
    mirror = mirror_service.update_mirror(session, name=name, **body.model_dump(exclude_unset=True))
    return _with_count(session, mirror)


@router.post("/mirrors/{name}/enable", response_model=MirrorRead)
def enable_mirror(name: str, session: SessionDep) -> MirrorRead:
    return _with_count(session, mirror_service.set_enabled(session, name=name, enabled=True))


@router.post("/mirrors/{name}/disable", response_model=MirrorRead)
def disable_mirror(name: str, session: SessionDep) -> MirrorRead:
    return _with_count(session, mirror_service.set_enabled(session, name=name, enabled=False))


@router.get("/files", response_model=list[FileRead])
def list_files(
    session: SessionDep,
    prefix: str | None = None,
    limit: int = Query(default=1000, ge=1, le=10_000),
    offset: int = Query(default=0, ge=0),
) -> list[FileRead]:
    rows = file_service.list_files(session, prefix=prefix, limit=limit, offset=offset)
    return [file_read(f, replicas=n) for f, n in rows]


@router.post("/files", response_model=FileRead, status_code=status.HTTP_201_CREATED)
def add_file(body: FileCreate, request: Request, session: SessionDep) -> FileRead:
    row = file_service.add_file(session, **body.model_dump())
    _commit_and_invalidate(request, session)
    return file_read(row)


@router.get("/replicas", response_model=list[ReplicaRead])
def list_replicas(
    session: SessionDep, file: str | None = None, mirror: str | None = None
) -> list[ReplicaRead]:
    rows = replica_service.list_replicas(session, file=file, mirror=mirror)
    return [replica_read(r, m, f) for r, m, f in rows]


@router.post("/replicas", response_model=ReplicaRead, status_code=status.HTTP_201_CREATED)
def add_replica(body: ReplicaCreate, request: Request, session: SessionDep) -> ReplicaRead:
    replica = replica_service.add_replica(session, **body.model_dump())
    mirror = mirror_service.get_mirror(session, name=body.mirror)
    file_row = file_service.get_file(session, name=body.file)
    _commit_and_invalidate(request, session)
    return replica_read(replica, mirror, file_row)
