"""Mirrors: add, change, enable/disable, list."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from pftp_coordinator.models import Mirror, MirrorUrl, Replica
from pftp_coordinator.services.errors import AlreadyExists, InvalidInput, NotFound

PROTOCOLS = ("ftp", "http", "https")
MAX_NAME = 200


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()  # "leave this field as it is" in update_mirror


def parse_base_urls(urls: Sequence[str]) -> dict[str, str]:
    """Protocol -> base URL, the protocol taken from each URL's scheme.

    Base URLs end with "/" so a replica path joins below them, not beside them.
    """
    out: dict[str, str] = {}
    for raw in urls:
        url = raw.strip()
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in PROTOCOLS:
            raise InvalidInput(f"base URL {raw!r}: scheme must be one of {', '.join(PROTOCOLS)}")
        if not parts.hostname:
            raise InvalidInput(f"base URL {raw!r} has no host")
        if parts.query or parts.fragment:
            raise InvalidInput(f"base URL {raw!r} must not have a query or fragment")
        if scheme in out:
            raise InvalidInput(f"two base URLs for protocol {scheme}")
        out[scheme] = url if url.endswith("/") else url + "/"
    return out


def _check_name(name: str) -> str:
    name = name.strip()
    if not name or len(name) > MAX_NAME or any(c.isspace() for c in name):
        raise InvalidInput(f"mirror name {name!r}: 1-{MAX_NAME} characters, no spaces")
    return name


def get_mirror(session: Session, *, name: str) -> Mirror:
    mirror = session.scalar(select(Mirror).where(Mirror.name == name))
    if mirror is None:
        raise NotFound(f"no mirror named {name!r}")
    return mirror


def add_mirror(
    session: Session,
    *,
    name: str,
    urls: Sequence[str],
    region: str | None = None,
    asn: int | None = None,
    notes: str | None = None,
    enabled: bool = True,
) -> Mirror:
    name = _check_name(name)
    by_protocol = parse_base_urls(urls)
    if not by_protocol:
        raise InvalidInput("a mirror needs at least one base URL (ftp://, http:// or https://)")
    if asn is not None and asn < 0:
        raise InvalidInput("asn must be a non-negative AS number")
    if session.scalar(select(Mirror.id).where(Mirror.name == name)) is not None:
        raise AlreadyExists(f"mirror {name!r} already exists")
    mirror = Mirror(
        name=name,
        region=region,
        asn=asn,
        notes=notes,
        enabled=enabled,
        state="unknown",
        consecutive_failures=0,
        urls=[MirrorUrl(protocol=p, base_url=u) for p, u in by_protocol.items()],
    )
    session.add(mirror)
    session.flush()
    return mirror


def update_mirror(
    session: Session,
    *,
    name: str,
    urls: Sequence[str] | None = None,
    region: str | None = UNSET,
    asn: int | None = UNSET,
    notes: str | None = UNSET,
    enabled: bool | None = None,
) -> Mirror:
    """Change the given fields; ``urls`` replaces the whole set of base URLs."""
    mirror = get_mirror(session, name=name)
    if urls is not None:
        by_protocol = parse_base_urls(urls)
        if not by_protocol:
            raise InvalidInput("a mirror needs at least one base URL")
        existing = {u.protocol: u for u in mirror.urls}
        for protocol, url_row in existing.items():
            if protocol not in by_protocol:
                mirror.urls.remove(url_row)
        for protocol, base_url in by_protocol.items():
            if protocol in existing:
                existing[protocol].base_url = base_url
            else:
                mirror.urls.append(MirrorUrl(protocol=protocol, base_url=base_url))
    if region is not UNSET:
        mirror.region = region
    if asn is not UNSET:
        if asn is not None and asn < 0:
            raise InvalidInput("asn must be a non-negative AS number")
        mirror.asn = asn
    if notes is not UNSET:
        mirror.notes = notes
    if enabled is not None:
        mirror.enabled = enabled
    session.flush()
    return mirror


def set_enabled(session: Session, *, name: str, enabled: bool) -> Mirror:
    return update_mirror(session, name=name, enabled=enabled)


def list_mirrors(session: Session, *, enabled_only: bool = False) -> list[Mirror]:
    query = select(Mirror).order_by(Mirror.name)
    if enabled_only:
        query = query.where(Mirror.enabled.is_(True))
    return list(session.scalars(query))


def replica_counts(session: Session) -> dict[int, int]:
    """Mirror id -> number of replicas marked present."""
    rows = session.execute(
        select(Replica.mirror_id, func.count())
        .where(Replica.present.is_(True))
        .group_by(Replica.mirror_id)
    )
    return {mirror_id: count for mirror_id, count in rows}


def replica_count(session: Session, *, mirror_id: int) -> int:
    """Number of one mirror's replicas marked present (as counted by replica_counts)."""
    count = session.scalar(
        select(func.count())
        .select_from(Replica)
        .where(Replica.mirror_id == mirror_id, Replica.present.is_(True))
    )
    return int(count or 0)
