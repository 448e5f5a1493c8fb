"""Replicas: which mirror holds which file, at which path."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from pftp_coordinator.models import File, Mirror, Replica
from pftp_coordinator.services.errors import InvalidInput
from pftp_coordinator.services.files import get_file
from pftp_coordinator.services.mirrors import get_mirror


def _check_path(path: str) -> str:
    path = path.strip()
    if not path:
        raise InvalidInput("replica path must not be empty")
    if "://" in path:
        raise InvalidInput("replica path is relative to the mirror's base URLs, not a URL")
    if any(part == ".." for part in path.split("/")):
        raise InvalidInput("replica path must not contain '..'")
    return path.lstrip("/")


def add_replica(
    session: Session,
    *,
    mirror: str,
    file: str,
    path: str | None = None,
) -> Replica:
    """Record (or update) that ``mirror`` holds ``file`` at ``path`` (default: the
    file's logical name, relative to the mirror's base URLs).

    The admin's word is trusted until a replica scan looks: size_seen stays NULL
    (usable) until a scan records what it saw; a scan that sees another size, or
    no file, takes the replica out of assignments. Clients verify SHA-256 anyway.
    """
    mirror_row = get_mirror(session, name=mirror)
    file_row = get_file(session, name=file)
    rel_path = _check_path(path if path is not None else file_row.name)
    replica = session.scalar(
        select(Replica).where(Replica.mirror_id == mirror_row.id, Replica.file_id == file_row.id)
    )
    if replica is None:
        replica = Replica(mirror_id=mirror_row.id, file_id=file_row.id)
        session.add(replica)
    replica.path = rel_path
    replica.present = True
    replica.size_seen = None
    replica.verified_at = None
    session.flush()
    return replica


def list_replicas(
    session: Session, *, file: str | None = None, mirror: str | None = None
) -> list[tuple[Replica, Mirror, File]]:
    query = (
        select(Replica, Mirror, File)
        .join(Mirror, Mirror.id == Replica.mirror_id)
        .join(File, File.id == Replica.file_id)
        .order_by(File.name, Mirror.name)
    )
    if file is not None:
        query = query.where(File.id == get_file(session, name=file).id)
    if mirror is not None:
        query = query.where(Mirror.id == get_mirror(session, name=mirror).id)
    return [(r, m, f) for r, m, f in session.execute(query)]


def is_usable(replica: Replica, file_row: File) -> bool:
    """The rule assignments follow (ranking_inputs.load_replica_map): present, and
    either not scanned yet or the scan saw the file's size."""
    return replica.present and replica.size_seen in (None, file_row.size)
