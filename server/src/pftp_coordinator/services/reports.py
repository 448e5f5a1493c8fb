"""Client reports after a download.

They feed two ranking inputs: the per-mirror throughput history (rows in
mirror_reports, read by the ranking-input snapshot) and congestion penalties
(paper 001, Shared-Con-Algo: mirrors a client found behind one congested link
are not assigned together until the penalty expires).

A client whose access link was full (access_limited) measured its link, not the
mirrors: each mirror's rate is then its share of the link. Those rows are kept
apart, as floors (ranking_inputs.py), so that one client on a slow link does not
make the mirrors look slow to every other client of the coordinator.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from pftp_wire import DownloadReport
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from pftp_coordinator.models import CongestionPenalty, Download, File, Mirror, MirrorReport, utcnow
from pftp_coordinator.services.errors import InvalidInput

MAX_MIRRORS_PER_REPORT = 256
# The flows together carried this share of the client's access bandwidth: the link,
# not the mirrors, limited them (a full link carries ~0.95 of its rate; a measured
# figure is off by several percent either way).
ACCESS_FULL_SHARE = 0.8


def access_limited(report: DownloadReport) -> bool:
    """Did the client's access link limit the download? The mirrors' steady rates
    summed (they ran side by side) against the access bandwidth the client gave.
    Flows that ran one after another (a backup taking over) only add to the sum:
    the error is toward "limited", which only makes the rates floors."""
    access = report.access_bandwidth_bps
    if not access or access <= 0:
        return False
    carried = sum(m.throughput_bps for m in report.mirrors if m.bytes > 0 and not m.bad_data)
    return carried >= ACCESS_FULL_SHARE * access


def congestion_pairs(report: DownloadReport, mirror_ids: dict[str, int]) -> set[tuple[int, int]]:
    """Unordered pairs (smaller id first) of known, distinct mirrors reported as
    sharing a congested link. Unknown names are ignored: a report cannot create mirrors."""
    pairs: set[tuple[int, int]] = set()
    for part in report.mirrors:
        a = mirror_ids.get(part.mirror)
        if a is None:
            continue
        for other in part.congested_with:
            b = mirror_ids.get(other)
            if b is None or b == a:
                continue
            pairs.add((min(a, b), max(a, b)))
    return pairs


def _upsert_penalty(
    session: Session, pair: tuple[int, int], *, now: datetime, expires_at: datetime
) -> None:
    query = select(CongestionPenalty).where(
        CongestionPenalty.mirror_a_id == pair[0], CongestionPenalty.mirror_b_id == pair[1]
    )
    for _attempt in range(2):
        row = session.scalar(query)
        if row is not None:
            row.reports += 1
            row.detected_at = now
            row.expires_at = max(row.expires_at, expires_at)
            return
        try:
            # A savepoint: another coordinator replica may insert the same pair at once.
            with session.begin_nested():
                session.add(
                    CongestionPenalty(
                        mirror_a_id=pair[0],
                        mirror_b_id=pair[1],
                        detected_at=now,
                        expires_at=expires_at,
                        reports=1,
                    )
                )
            return
        except IntegrityError:
            continue  # lost the race: update the row the other replica wrote


def _mirror_ids(session: Session, names: Iterable[str]) -> dict[str, int]:
    wanted = set(names)
    if not wanted:
        return {}
    rows = session.execute(select(Mirror.name, Mirror.id).where(Mirror.name.in_(wanted)))
    return {name: mirror_id for name, mirror_id in rows}


def record_report(
    session: Session,
    *,
    report: DownloadReport,
    penalty_ttl_s: float,
    client_addr: str | None = None,
    mode: str | None = None,
    now: datetime | None = None,
) -> Download:
    if len(report.mirrors) > MAX_MIRRORS_PER_REPORT:
        raise InvalidInput(f"a report may name at most {MAX_MIRRORS_PER_REPORT} mirrors")
    now = now or utcnow()
    names = {m.mirror for m in report.mirrors}
    for m in report.mirrors:
        names.update(m.congested_with)
    ids = _mirror_ids(session, names)
    file_id = session.scalar(select(File.id).where(File.name == report.file))
    limited = access_limited(report)
    download = Download(
        request_id=report.request_id,
        file_id=file_id,
        file_name=report.file,
        size=report.size,
        seconds=report.seconds,
        sha256_ok=report.sha256_ok,
        access_bandwidth_bps=report.access_bandwidth_bps,
        mode=mode,
        client_addr=client_addr,
        reported_at=now,
        mirror_reports=[
            MirrorReport(
                mirror_id=ids.get(m.mirror),
                mirror_name=m.mirror[:200],
                bytes=m.bytes,
                seconds=m.seconds,
                throughput_bps=m.throughput_bps,
                failures=m.failures,
                slow=m.slow,
                congested=m.congested,
                bad_data=m.bad_data,
                congested_with=list(m.congested_with) or None,
                connections=m.connections,
                access_limited=limited,
                reported_at=now,
            )
            for m in report.mirrors
        ],
    )
    session.add(download)
    session.flush()
    expires_at = now + timedelta(seconds=penalty_ttl_s)
    for pair in sorted(congestion_pairs(report, ids)):
        _upsert_penalty(session, pair, now=now, expires_at=expires_at)
    session.flush()
    return download
