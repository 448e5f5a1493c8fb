"""The coordinator's one settings object: env vars (PFTP_*), then a TOML config file.

Precedence: explicit env var > config file (PFTP_COORDINATOR_CONFIG, else the older
PFTP_CONFIG, else /etc/pftp/coordinator.toml) > defaults. Validated once at start; a
bad value stops the program with a message.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from pftp_wire import ANNOUNCE_PORT
from pydantic import BaseModel, Field, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

DEFAULT_CONFIG_PATH = Path("/etc/pftp/coordinator.toml")
# Preferred first: PFTP_COORDINATOR_CONFIG tells the coordinator's file apart from the
# client's on a host running both; PFTP_CONFIG is kept for existing deployments.
CONFIG_ENV_VARS = ("PFTP_COORDINATOR_CONFIG", "PFTP_CONFIG")
DEV_ADMIN_TOKEN = "change-me"


class RankingWeights(BaseModel):
    """Weights of the optimization variables in the weighted average (paper 004, 3.2.2).

    Direct variables: bigger is better (eq. 1); inverse: smaller is better (paper 001,
    eq. 2-3). Weights need not sum to 1: they are normalised over the variables a
    mirror set actually has data for.
    """

    bandwidth: float = Field(default=3.0, ge=0)  # direct: available/bottleneck bandwidth
    rtt: float = Field(default=1.0, ge=0)  # inverse
    loss: float = Field(default=1.0, ge=0)  # inverse
    cpu: float = Field(default=0.5, ge=0)  # inverse: mirror CPU utilization
    memory: float = Field(default=0.25, ge=0)  # inverse: mirror memory utilization
    demand: float = Field(default=0.5, ge=0)  # inverse: fewer replicas = scarcer
    throughput: float = Field(default=3.0, ge=0)  # direct: client-reported history
    predicted_time: float = Field(default=2.0, ge=0)  # inverse: paper 004 eq. 3


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="PFTP_", env_nested_delimiter="__", extra="ignore"
    )

    # Storage: PostgreSQL when a URL is given; SQLite in data_dir otherwise.
    database_url: str | None = None
    data_dir: Path = (
        Path(os.environ.get("XDG_DATA_HOME", str(Path.home() / ".local/share"))) / "pftp"
    )

    # HTTP API
    host: str = "127.0.0.1"
    port: int = Field(default=8470, ge=1, le=65535)
    admin_token: str = DEV_ADMIN_TOKEN
    environment: str = "development"  # "production" refuses the default admin token
    public_url: str | None = None  # what announcements advertise

    # Ranking and selection
    weights: RankingWeights = Field(default_factory=RankingWeights)
    probe_half_life_s: float = Field(default=1800.0, gt=0)  # old measurements count less
    stale_after_s: float = Field(default=6 * 3600.0, gt=0)  # beyond: ignored
    # Smaller shares are not worth a connection's set-up; the client still rebalances.
    min_portion_bytes: int = Field(default=256 * 1024, ge=1)
    max_mirrors: int = Field(default=8, ge=1)
    backup_count: int = Field(default=3, ge=0)
    balanced_threshold_rps: float = Field(default=50.0, gt=0)  # above: balanced mode
    snapshot_refresh_s: float = Field(default=2.0, gt=0)  # ranking-input cache freshness
    # Rankings of recently asked (file, protocols), kept while the ranking inputs are
    # unchanged (per worker; ~6 kB and ~60 GC-tracked objects each with ~18 holders).
    # Off by default: it pays only when a few files take most requests; with
    # uniform traffic it was a net loss (cyclic-GC passes over the cached objects
    # raised the p99, see notes/ranking.md).
    plan_cache_size: int = Field(default=0, ge=0)
    # Mirror pairs a client saw behind one congested link are not assigned together
    # for this long after the last such report (paper 001, Shared-Con-Algo).
    congestion_penalty_s: float = Field(default=1800.0, gt=0)

    # Scheduler
    scheduler_enabled: bool = True
    probe_interval_s: float = Field(default=300.0, gt=0)
    probe_jitter_s: float = Field(default=30.0, ge=0)
    probe_timeout_s: float = Field(default=10.0, gt=0)
    probe_concurrency: int = Field(default=8, ge=1)
    # Throughput reads at once (probes/read_gate.py). Reads side by side share the
    # coordinator's own access link: lab, selection-table1 (8 mirrors of 2-24 Mbit/s
    # behind 40 Mbit/s), 8 at once read the 16 Mbit/s mirror as 12.9 and the
    # 12 Mbit/s one as 20.1 (its shaper's bucket, filled while the link was shared,
    # let through at once at the end), and clients were sent to the wrong pair.
    probe_read_concurrency: int = Field(default=1, ge=1)
    # A throughput read waits this long for the downloads this coordinator assigned
    # to the mirror to end (active_downloads.py), then is skipped this round: read
    # beside them it slows them and reads low. 0: skipped at once while any run.
    probe_busy_wait_s: float = Field(default=30.0, ge=0)
    # ... and for none to have begun or ended there for this long: downloads that
    # follow one another leave a mirror idle for a moment only.
    probe_quiet_s: float = Field(default=10.0, ge=0)
    # A download counts as running until its report, or at most twice its expected
    # time (at least 30 s) and never longer than this (a client that never reports).
    active_download_max_s: float = Field(default=600.0, gt=0)
    throughput_probe_bytes: int = Field(default=512 * 1024, ge=1024)
    # A read goes on past throughput_probe_bytes, up to this, while its connection is
    # still in slow start: on a far path 512 kB are mostly ramp (probes/throughput.py).
    throughput_probe_max_bytes: int = Field(default=4 * 1024 * 1024, ge=1024)
    # When one read looks held below its path's rate by the server (a per-connection
    # limit), the probe reads over up to this many connections at once to learn how
    # many clients should open (probes/service.py); 1 turns that off. 8: what a client
    # opens to one mirror at most (lab: with 4, a mirror holding each connection to
    # 1 MB/s behind a 50 Mbit/s link was told 4, which carried 31 Mbit/s, and its
    # clients found the rest a second later with a trial of their own).
    probe_max_connections: int = Field(default=8, ge=1, le=64)
    # A far fast mirror (one connection's slow start at least ~1 s: 50 Mbit/s at
    # 250 ms) is advised up to this many connections at once, which ramp together
    # log2(n) round trips sooner (pftp_wire.tcp_model.ramp_connections); 1 turns
    # that off.
    ramp_max_connections: int = Field(default=4, ge=1, le=16)
    scan_interval_s: float = Field(default=3600.0, gt=0)
    predictor_refit_interval_s: float = Field(default=600.0, gt=0)
    retention_interval_s: float = Field(default=3600.0, gt=0)
    retention_days: float = Field(default=30.0, gt=0)  # raw samples kept this long
    down_after_failures: int = Field(default=3, ge=1)

    # Discovery (paper 004, 3.2.3-3.2.4)
    announce_enabled: bool = False
    announce_interval_s: float = Field(default=2.0, gt=0)  # clients listen 2.5 s
    announce_priority: int = 100
    announce_address: str = "255.255.255.255"  # comma-separated broadcast addresses
    announce_port: int = Field(default=ANNOUNCE_PORT, ge=1, le=65535)
    # A backup takes over after this many announcement intervals without a better one.
    announce_takeover_misses: int = Field(default=3, ge=1)

    log_level: str = "INFO"
    log_json: bool = False

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        path = config_path(os.environ)
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        if path.is_file():
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=path))
        return tuple(sources)

    @field_validator("database_url")
    @classmethod
    def _normalise_db_url(cls, v: str | None) -> str | None:
        # Accept what admins paste (postgres://, postgresql://) and pin the driver.
        if not v:
            return None
        for prefix in ("postgres://", "postgresql://"):
            if v.startswith(prefix):
                return "postgresql+psycopg://" + v[len(prefix) :]
        return v

    @model_validator(mode="after")
    def _refuse_default_secret(self) -> Settings:
        if self.environment == "production" and self.admin_token == DEV_ADMIN_TOKEN:
            raise ValueError("PFTP_ADMIN_TOKEN must be set to a secret in production")
        return self

    @property
    def effective_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{self.data_dir / 'coordinator.db'}"


def config_path(env: Mapping[str, str]) -> Path:
    """The TOML file to read: the first non-empty CONFIG_ENV_VARS entry, else the default."""
    for key in CONFIG_ENV_VARS:
        if env.get(key):
            return Path(env[key])
    return DEFAULT_CONFIG_PATH


def load_config_file(path: Path) -> dict[str, Any]:
    """Parse a TOML config file, with the file name in the error."""
    try:
        return tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"cannot read config file {path}: {exc}") from exc


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
