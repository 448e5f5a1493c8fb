"""Scan one mirror and write what was seen into ``replicas``.

A replica is usable by the ranking only when ``present`` and ``size_seen`` equals
the file's size; a mismatch is logged and left in the table for admins to see.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from pftp_coordinator.db import session_scope
from pftp_coordinator.models import File, Mirror, Replica, utcnow
from pftp_coordinator.probes.service import PROTOCOL_PREFERENCE
from pftp_coordinator.scans.ftp import scan_ftp
from pftp_coordinator.scans.http import scan_http

log = logging.getLogger(__name__)


@dataclass
class ScanOutcome:
    mirror: str
    protocol: str
    checked: int = 0
    present: int = 0
    missing: list[str] = field(default_factory=list)
    size_mismatch: list[str] = field(default_factory=list)


def scan_mirror(
    factory: sessionmaker[Session],
    mirror_id: int,
    *,
    timeout_s: float = 30.0,
    clock: Callable[[], datetime] = utcnow,
) -> ScanOutcome | None:
    """None for an unknown, disabled or URL-less mirror. Network errors propagate
    (the scheduler records them); replicas are then left as they were."""
    with session_scope(factory) as s:
        mirror = s.get(Mirror, mirror_id)
        if mirror is None or not mirror.enabled or not mirror.urls:
            return None
        url = sorted(
            mirror.urls,
            key=lambda u: (
                PROTOCOL_PREFERENCE.index(u.protocol) if u.protocol in PROTOCOL_PREFERENCE else 99
            ),
        )[0]
        name, protocol, base_url = mirror.name, url.protocol, url.base_url
        paths = list(s.scalars(select(Replica.path).where(Replica.mirror_id == mirror_id)))
    if protocol == "ftp":
        seen = scan_ftp(base_url, paths, timeout_s=timeout_s)
    elif protocol in ("http", "https"):
        seen = scan_http(base_url, paths, timeout_s=timeout_s)
    else:
        raise ValueError(f"mirror {name}: cannot scan protocol {protocol!r}")

    outcome = ScanOutcome(name, protocol)
    now = clock()
    with session_scope(factory) as s:
        rows = s.execute(
            select(Replica, File.size, File.name)
            .join(File, File.id == Replica.file_id)
            .where(Replica.mirror_id == mirror_id)
        ).all()
        for replica, size, file_name in rows:
            outcome.checked += 1
            replica.verified_at = now
            if replica.path not in seen:
                replica.present = False
                replica.size_seen = None
                outcome.missing.append(file_name)
                continue
            replica.present = True
            replica.size_seen = seen[replica.path]
            outcome.present += 1
            if replica.size_seen is not None and replica.size_seen != size:
                outcome.size_mismatch.append(file_name)
                log.warning(
                    "mirror %s: %s has %d bytes, expected %d: replica not used",
                    name,
                    file_name,
                    replica.size_seen,
                    size,
                )
        m = s.get(Mirror, mirror_id)
        if m is not None:
            m.last_scan_at = now
    log.info(
        "scan %s (%s): %d checked, %d present, %d missing, %d size mismatch",
        name,
        protocol,
        outcome.checked,
        outcome.present,
        len(outcome.missing),
        len(outcome.size_mismatch),
    )
    return outcome
