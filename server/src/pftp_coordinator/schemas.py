"""Admin schemas (admin <-> coordinator). Client/agent messages live in pftp_wire."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field


class MirrorCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200)
    urls: list[str] = Field(min_length=1, description="base URLs, one per protocol")
    region: str | None = Field(default=None, max_length=100)
    asn: int | None = Field(default=None, ge=0)
    notes: str | None = None
    enabled: bool = True


class MirrorUpdate(BaseModel):
    """Only the fields present in the body change; ``urls`` replaces the whole set."""

    model_config = ConfigDict(extra="forbid")

    urls: list[str] | None = Field(default=None, min_length=1)
    region: str | None = Field(default=None, max_length=100)
    asn: int | None = Field(default=None, ge=0)
    notes: str | None = None
    enabled: bool | None = None


class MirrorScore(BaseModel):
    """The ranking's current view of a mirror (for a generic, widely held file)."""

    suitability: float | None = None
    expected_bps: float | None = None
    per_variable: dict[str, float] = Field(default_factory=dict)
    inputs: dict[str, float | None] = Field(default_factory=dict)


class MirrorRead(BaseModel):
    name: str
    urls: dict[str, str]
    region: str | None
    asn: int | None
    enabled: bool
    notes: str | None
    state: str
    last_probe_at: datetime | None
    replicas: int = 0
    score: MirrorScore | None = None


class FileCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=1024)
    size: int = Field(ge=0)
    sha256: str
    piece_size: int | None = Field(default=None, gt=0)
    piece_sha256: list[str] | None = None


class FileRead(BaseModel):
    name: str
    size: int
    sha256: str
    piece_size: int | None
    pieces: int = 0
    replicas: int = 0


class ReplicaCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    mirror: str = Field(min_length=1)
    file: str = Field(min_length=1)
    path: str | None = Field(
        default=None, description="relative to the mirror's base URLs; default: the file name"
    )


class ReplicaRead(BaseModel):
    mirror: str
    file: str
    path: str
    present: bool
    usable: bool
    size_seen: int | None
    verified_at: datetime | None
