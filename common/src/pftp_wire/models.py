"""Pydantic models for every message between client, coordinator and agent."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from pftp_wire.constants import ANNOUNCE_PORT as ANNOUNCE_PORT
from pftp_wire.constants import API_PREFIX as API_PREFIX

Protocol = Literal["ftp", "http", "https"]

_SHA256_HEX = r"^[0-9a-f]{64}$"


class _Wire(BaseModel):
    # Unknown fields from a newer peer are ignored rather than fatal.
    model_config = ConfigDict(extra="ignore", frozen=False)


# --- client -> coordinator: ask for assignments ---------------------------------


class AssignmentRequest(_Wire):
    file: str = Field(min_length=1, max_length=1024, description="logical file name")
    access_bandwidth_bps: int | None = Field(
        default=None, gt=0, description="client's access bandwidth; null = unknown"
    )
    protocols: list[Protocol] = Field(default_factory=lambda: ["ftp", "http"], min_length=1)


class FileInfo(_Wire):
    name: str
    size: int = Field(ge=0)
    sha256: str = Field(pattern=_SHA256_HEX)
    piece_size: int | None = Field(default=None, gt=0)
    piece_sha256: list[str] | None = None

    @field_validator("piece_sha256")
    @classmethod
    def _hex_pieces(cls, v: list[str] | None) -> list[str] | None:
        if v is not None:
            for h in v:
                if len(h) != 64 or any(c not in "0123456789abcdef" for c in h):
                    raise ValueError("piece_sha256 entries must be 64 lowercase hex digits")
        return v


class Assignment(_Wire):
    mirror: str
    url: str
    offset: int = Field(ge=0)
    length: int = Field(ge=0)
    suitability: float
    expected_bps: float | None = None
    # Connections to open to this mirror at once: >1 when the coordinator's probe
    # found each connection held below the path's rate (a per-connection limit)
    # and that many together carried expected_bps, or when one connection's slow
    # start would be long (a far fast path: pftp_wire.tcp_model.ramp_connections).
    connections: int = Field(default=1, ge=1, le=64)
    # Per-variable suitability S_k of this mirror (why it was chosen).
    explain: dict[str, float] = Field(default_factory=dict)


class Backup(_Wire):
    mirror: str
    url: str
    suitability: float
    expected_bps: float | None = None
    connections: int = Field(default=1, ge=1, le=64)  # (as Assignment's)
    explain: dict[str, float] = Field(default_factory=dict)


class AssignmentResponse(_Wire):
    request_id: str
    file: FileInfo
    assignments: list[Assignment]
    backups: list[Backup]
    mode: Literal["ranked", "balanced"]


# --- client -> coordinator: report after a download ------------------------------


class MirrorReport(_Wire):
    mirror: str = Field(min_length=1)
    url: str | None = None
    bytes: int = Field(ge=0)
    seconds: float = Field(ge=0)
    throughput_bps: float = Field(ge=0)
    failures: int = Field(default=0, ge=0)
    slow: bool = False
    congested: bool = False
    bad_data: bool = False
    # Other mirrors this one was found to share a congested link with.
    congested_with: list[str] = Field(default_factory=list)
    # Connections to it the client's own trials kept (the first and the extra ones
    # that paid: a server's per-connection limit); None when it tried none.
    connections: int | None = Field(default=None, ge=1, le=64)


class DownloadReport(_Wire):
    request_id: str | None = None
    file: str
    size: int = Field(ge=0)
    seconds: float = Field(ge=0)
    sha256_ok: bool
    access_bandwidth_bps: int | None = None
    mirrors: list[MirrorReport]


class ReportAck(_Wire):
    accepted: bool
    download_id: int | None = None


# --- agent -> coordinator: utilization --------------------------------------------


class UtilizationSample(_Wire):
    ts: datetime
    cpu_percent: float = Field(ge=0, le=100)
    memory_percent: float = Field(ge=0, le=100)
    load1: float | None = Field(default=None, ge=0)
    load5: float | None = Field(default=None, ge=0)
    load15: float | None = Field(default=None, ge=0)
    nic_tx_bps: float | None = Field(default=None, ge=0)
    connections: int | None = Field(default=None, ge=0)


class UtilizationBatch(_Wire):
    # The mirror is known from the agent's token; samples oldest first.
    samples: list[UtilizationSample] = Field(min_length=1, max_length=10_000)


class SamplesAck(_Wire):
    accepted: int = Field(ge=0)
    mirror: str | None = None


# --- coordinator -> campus: UDP announcement (paper 004, 3.2.4) -------------------


class Announcement(_Wire):
    kind: Literal["pftp-coordinator"] = "pftp-coordinator"
    url: str
    priority: int = Field(default=100, description="lower wins, like DNS SRV")
    interval_s: float = Field(gt=0)
    name: str = ""
    version: int = 1
