"""Files: the logical names clients ask for, with size, SHA-256 and optional piece hashes."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from pftp_coordinator.models import File, Replica
from pftp_coordinator.services.errors import AlreadyExists, InvalidInput, NotFound

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
MAX_NAME = 1024
READ_CHUNK = 1 << 20


@dataclass(frozen=True)
class FileDigest:
    size: int
    sha256: str
    piece_size: int | None
    piece_sha256: list[str] | None


def expected_piece_count(size: int, piece_size: int) -> int:
    # An empty file still has one (empty) piece, so a client can verify it the same way.
    return max(1, -(-size // piece_size))


def digest_local_file(path: Path, *, piece_size: int | None = None) -> FileDigest:
    """Size, SHA-256 and (when piece_size is given) per-piece SHA-256 of a local file."""
    if piece_size is not None and piece_size <= 0:
        raise InvalidInput("piece size must be positive")
    whole = hashlib.sha256()
    pieces: list[str] = []
    piece = hashlib.sha256()
    in_piece = 0
    size = 0
    try:
        with path.open("rb") as fh:
            while chunk := fh.read(READ_CHUNK):
                size += len(chunk)
                whole.update(chunk)
                if piece_size is None:
                    continue
                view = memoryview(chunk)
                while view:
                    take = min(len(view), piece_size - in_piece)
                    piece.update(view[:take])
                    in_piece += take
                    view = view[take:]
                    if in_piece == piece_size:
                        pieces.append(piece.hexdigest())
                        piece = hashlib.sha256()
                        in_piece = 0
    except OSError as exc:
        raise InvalidInput(f"cannot read {path}: {exc.strerror or exc}") from exc
    if piece_size is not None and (in_piece or not pieces):
        pieces.append(piece.hexdigest())
    return FileDigest(
        size=size,
        sha256=whole.hexdigest(),
        piece_size=piece_size,
        piece_sha256=pieces if piece_size is not None else None,
    )


def _check_hex(value: str, what: str) -> str:
    value = value.strip().lower()
    if not _HEX64.match(value):
        raise InvalidInput(f"{what} must be 64 hex digits, got {value[:80]!r}")
    return value


def get_file(session: Session, *, name: str) -> File:
    row = session.scalar(select(File).where(File.name == name))
    if row is None:
        raise NotFound(f"no file named {name!r}")
    return row


def add_file(
    session: Session,
    *,
    name: str,
    size: int,
    sha256: str,
    piece_size: int | None = None,
    piece_sha256: Sequence[str] | None = None,
) -> File:
    name = name.strip()
    if not name or len(name) > MAX_NAME:
        raise InvalidInput(f"file name must be 1-{MAX_NAME} characters")
    if size < 0:
        raise InvalidInput("size must be >= 0")
    sha256 = _check_hex(sha256, "sha256")
    pieces: list[str] | None = None
    if piece_sha256 is not None:
        if piece_size is None:
            raise InvalidInput("piece hashes need a piece size")
        pieces = [_check_hex(h, f"piece hash {i}") for i, h in enumerate(piece_sha256)]
    if piece_size is not None:
        if piece_size <= 0:
            raise InvalidInput("piece size must be positive")
        if pieces is not None and len(pieces) != expected_piece_count(size, piece_size):
            raise InvalidInput(
                f"{len(pieces)} piece hashes given; a {size}-byte file in {piece_size}-byte "
                f"pieces has {expected_piece_count(size, piece_size)}"
            )
    if session.scalar(select(File.id).where(File.name == name)) is not None:
        raise AlreadyExists(f"file {name!r} already exists")
    row = File(name=name, size=size, sha256=sha256, piece_size=piece_size, piece_sha256=pieces)
    session.add(row)
    session.flush()
    return row


def list_files(
    session: Session, *, prefix: str | None = None, limit: int = 1000, offset: int = 0
) -> list[tuple[File, int]]:
    """Files ordered by name, each with the number of mirrors holding it."""
    counts = (
        select(Replica.file_id, func.count().label("n"))
        .where(Replica.present.is_(True))
        .group_by(Replica.file_id)
        .subquery()
    )
    query = (
        select(File, func.coalesce(counts.c.n, 0))
        .outerjoin(counts, counts.c.file_id == File.id)
        .order_by(File.name)
        .limit(limit)
        .offset(offset)
    )
    if prefix:
        query = query.where(File.name.startswith(prefix, autoescape=True))
    return [(f, int(n)) for f, n in session.execute(query)]
