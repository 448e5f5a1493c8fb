"""A migrated database with mirrors/files/replicas for the probe, scan and
scheduler tests (rows made with the models directly)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from pftp_coordinator import migrate
from pftp_coordinator.db import create_db_engine, make_session_factory, session_scope
from pftp_coordinator.models import File, Mirror, MirrorUrl, Replica
from sqlalchemy.orm import Session, sessionmaker


def migrated_factory(url: str) -> sessionmaker[Session]:
    migrate.upgrade(url)
    return make_session_factory(create_db_engine(url, pool_size=4))


def add_mirror(
    factory: sessionmaker[Session],
    name: str,
    base_url: str,
    replicas: dict[str, tuple[str, int]] | None = None,
) -> int:
    """``replicas``: file name -> (path on the mirror, registered size)."""
    protocol = base_url.split(":", 1)[0]
    with session_scope(factory) as s:
        m = Mirror(name=name)
        m.urls.append(MirrorUrl(protocol=protocol, base_url=base_url))
        s.add(m)
        s.flush()
        for fname, (path, size) in (replicas or {}).items():
            f = s.query(File).filter_by(name=fname).one_or_none()
            if f is None:
                f = File(name=fname, size=size, sha256=hashlib.sha256(fname.encode()).hexdigest())
                s.add(f)
                s.flush()
            s.add(Replica(mirror_id=m.id, file_id=f.id, path=path))
        return m.id


def tree_root(tmp_path: Path, name: str) -> Path:
    root = tmp_path / name
    root.mkdir(parents=True, exist_ok=True)
    return root
