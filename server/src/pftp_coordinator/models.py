"""SQLAlchemy 2 models: the coordinator's database (paper 004, 3.2.1).

Portable across PostgreSQL and SQLite: no dialect-specific types; timestamps are
stored as UTC. Alembic migrations in the top-level migrations/ create exactly
these tables; change both together.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    false,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship
from sqlalchemy.types import TypeDecorator


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """Always timezone-aware UTC in Python, whatever the backend returns
    (SQLite hands back naive datetimes)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    type_annotation_map: ClassVar[dict] = {datetime: UTCDateTime()}


class Mirror(Base):
    __tablename__ = "mirrors"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    region: Mapped[str | None] = mapped_column(String(100))
    asn: Mapped[int | None] = mapped_column(BigInteger)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    notes: Mapped[str | None] = mapped_column(Text)
    # Health as seen by probes: "unknown" until the first probe, then "up"/"down".
    state: Mapped[str] = mapped_column(String(16), default="unknown")
    consecutive_failures: Mapped[int] = mapped_column(Integer, default=0)
    last_probe_at: Mapped[datetime | None]
    last_scan_at: Mapped[datetime | None]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    urls: Mapped[list[MirrorUrl]] = relationship(
        back_populates="mirror", cascade="all, delete-orphan", lazy="selectin"
    )


class MirrorUrl(Base):
    """Base URL of a mirror for one protocol, e.g. ftp://host/pub/ (credentials may be inline)."""

    __tablename__ = "mirror_urls"
    __table_args__ = (UniqueConstraint("mirror_id", "protocol"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    mirror_id: Mapped[int] = mapped_column(ForeignKey("mirrors.id", ondelete="CASCADE"))
    protocol: Mapped[str] = mapped_column(String(10))  # ftp | http | https
    base_url: Mapped[str] = mapped_column(String(2000))

    mirror: Mapped[Mirror] = relationship(back_populates="urls")


class File(Base):
    __tablename__ = "files"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(1024), unique=True)
    size: Mapped[int] = mapped_column(BigInteger)
    sha256: Mapped[str] = mapped_column(String(64))
    piece_size: Mapped[int | None] = mapped_column(BigInteger)
    piece_sha256: Mapped[list[str] | None] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Replica(Base):
    """Mirror x file -> path on that mirror. Used for assignments only when
    ``present`` and ``size_seen`` equals the file's size."""

    __tablename__ = "replicas"
    __table_args__ = (
        UniqueConstraint("mirror_id", "file_id"),
        Index("ix_replicas_file", "file_id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    mirror_id: Mapped[int] = mapped_column(ForeignKey("mirrors.id", ondelete="CASCADE"))
    file_id: Mapped[int] = mapped_column(ForeignKey("files.id", ondelete="CASCADE"))
    path: Mapped[str] = mapped_column(String(2000))  # relative to the mirror's base URL
    present: Mapped[bool] = mapped_column(Boolean, default=True)
    size_seen: Mapped[int | None] = mapped_column(BigInteger)
    verified_at: Mapped[datetime | None]


class PathProbe(Base):
    """One path measurement toward a mirror (time series). ``samples`` > 1 marks
    a row that aggregates older raw samples (retention)."""

    __tablename__ = "path_probes"
    __table_args__ = (Index("ix_path_probes_mirror_ts", "mirror_id", "ts"),)

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    mirror_id: Mapped[int] = mapped_column(ForeignKey("mirrors.id", ondelete="CASCADE"))
    ts: Mapped[datetime] = mapped_column(default=utcnow)
    # e.g. "icmp", "tcp-syn", "tcp-connect", "packet-pair", "ftp-range", "http-range"
    method: Mapped[str] = mapped_column(String(32))
    ok: Mapped[bool] = mapped_column(Boolean, default=True)
    rtt_s: Mapped[float | None] = mapped_column(Float)
    loss: Mapped[float | None] = mapped_column(Float)  # fraction 0..1
    capacity_bps: Mapped[float | None] = mapped_column(Float)
    throughput_bps: Mapped[float | None] = mapped_column(Float)
    error: Mapped[str | None] = mapped_column(Text)
    samples: Mapped[int] = mapped_column(Integer, default=1)
    # Throughput rows: connections that carried throughput_bps together (> 1 when
    # one connection was held below the path's rate); None = not known (1).
    connections: Mapped[int | None] = mapped_column(Integer)


class UtilizationSample(Base):
    __tablename__ = "utilization_samples"
    __table_args__ = (Index("ix_utilization_mirror_ts", "mirror_id", "ts"),)

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    mirror_id: Mapped[int] = mapped_column(ForeignKey("mirrors.id", ondelete="CASCADE"))
    ts: Mapped[datetime] = mapped_column(default=utcnow)
    cpu_percent: Mapped[float] = mapped_column(Float)
    memory_percent: Mapped[float] = mapped_column(Float)
    load1: Mapped[float | None] = mapped_column(Float)
    load5: Mapped[float | None] = mapped_column(Float)
    load15: Mapped[float | None] = mapped_column(Float)
    nic_tx_bps: Mapped[float | None] = mapped_column(Float)
    connections: Mapped[int | None] = mapped_column(Integer)
    samples: Mapped[int] = mapped_column(Integer, default=1)


class Agent(Base):
    """A mirror's utilization agent. Only a hash of its bearer token is stored."""

    __tablename__ = "agents"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    mirror_id: Mapped[int] = mapped_column(
        ForeignKey("mirrors.id", ondelete="CASCADE"), unique=True
    )
    token_hash: Mapped[str] = mapped_column(String(128), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_seen_at: Mapped[datetime | None]


class Download(Base):
    """A client's report after a download."""

    __tablename__ = "downloads"
    __table_args__ = (Index("ix_downloads_reported_at", "reported_at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    request_id: Mapped[str | None] = mapped_column(String(64), index=True)
    file_id: Mapped[int | None] = mapped_column(ForeignKey("files.id", ondelete="SET NULL"))
    file_name: Mapped[str] = mapped_column(String(1024))
    size: Mapped[int] = mapped_column(BigInteger)
    seconds: Mapped[float] = mapped_column(Float)
    sha256_ok: Mapped[bool] = mapped_column(Boolean)
    access_bandwidth_bps: Mapped[int | None] = mapped_column(BigInteger)
    mode: Mapped[str | None] = mapped_column(String(16))
    client_addr: Mapped[str | None] = mapped_column(String(64))
    reported_at: Mapped[datetime] = mapped_column(default=utcnow)

    mirror_reports: Mapped[list[MirrorReport]] = relationship(
        back_populates="download", cascade="all, delete-orphan"
    )


class MirrorReport(Base):
    """Per-mirror part of a client report: feeds the throughput-history variable
    and the eq. 3 predictor."""

    __tablename__ = "mirror_reports"
    __table_args__ = (Index("ix_mirror_reports_mirror", "mirror_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    download_id: Mapped[int] = mapped_column(ForeignKey("downloads.id", ondelete="CASCADE"))
    mirror_id: Mapped[int | None] = mapped_column(ForeignKey("mirrors.id", ondelete="SET NULL"))
    mirror_name: Mapped[str] = mapped_column(String(200))
    bytes: Mapped[int] = mapped_column(BigInteger)
    seconds: Mapped[float] = mapped_column(Float)
    throughput_bps: Mapped[float] = mapped_column(Float)
    failures: Mapped[int] = mapped_column(Integer, default=0)
    slow: Mapped[bool] = mapped_column(Boolean, default=False)
    congested: Mapped[bool] = mapped_column(Boolean, default=False)
    bad_data: Mapped[bool] = mapped_column(Boolean, default=False)
    congested_with: Mapped[list[str] | None] = mapped_column(JSON)
    # connections to the mirror the client's own trials kept (None: not said, or
    # none tried: those the coordinator advised are not the client's finding)
    connections: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # The client's access link was full (services/reports.py, access_limited): this
    # rate is the mirror's share of that link, a floor of what the mirror gives.
    access_limited: Mapped[bool] = mapped_column(
        Boolean, default=False, server_default=false()
    )
    reported_at: Mapped[datetime] = mapped_column(default=utcnow)

    download: Mapped[Download] = relationship(back_populates="mirror_reports")


class PredictorFit(Base):
    """Fit of paper 004 eq. 3, time = a / bandwidth + b * RTT, on client reports."""

    __tablename__ = "predictor_fits"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    fitted_at: Mapped[datetime] = mapped_column(default=utcnow)
    a: Mapped[float] = mapped_column(Float)
    b: Mapped[float] = mapped_column(Float)
    r2: Mapped[float] = mapped_column(Float)
    n_samples: Mapped[int] = mapped_column(Integer)


class CongestionPenalty(Base):
    """Two mirrors a client found behind one congested link (paper 001, Shared-Con-Algo);
    ranking avoids assigning both to one client until ``expires_at``."""

    __tablename__ = "congestion_penalties"
    __table_args__ = (UniqueConstraint("mirror_a_id", "mirror_b_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    mirror_a_id: Mapped[int] = mapped_column(ForeignKey("mirrors.id", ondelete="CASCADE"))
    mirror_b_id: Mapped[int] = mapped_column(ForeignKey("mirrors.id", ondelete="CASCADE"))
    detected_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime]
    reports: Mapped[int] = mapped_column(Integer, default=1)


class JobRun(Base):
    """Last run of each scheduled job (which replica ran it, outcome) for the status page."""

    __tablename__ = "job_runs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job: Mapped[str] = mapped_column(String(100), unique=True)
    runner: Mapped[str] = mapped_column(String(200))  # host:pid of the coordinator replica
    started_at: Mapped[datetime]
    finished_at: Mapped[datetime | None]
    ok: Mapped[bool | None] = mapped_column(Boolean)
    error: Mapped[str | None] = mapped_column(Text)
    runs: Mapped[int] = mapped_column(Integer, default=0)
