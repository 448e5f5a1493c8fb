"""Agent settings: command line > PFTP_AGENT_* env vars > config file > defaults.

The config file is INI with one ``[agent]`` section (see pftp-agent.conf.sample),
by default /etc/pftp/agent.conf, or PFTP_AGENT_CONFIG / --config.
"""

from __future__ import annotations

import configparser
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

DEFAULT_CONFIG = Path("/etc/pftp/agent.conf")
DEFAULT_PORTS = (20, 21, 80, 443)


class ConfigError(ValueError):
    """Bad or missing setting; the message names it."""


@dataclass(frozen=True)
class AgentConfig:
    coordinator_url: str = ""
    token: str = ""
    interval_s: float = 15.0
    buffer_size: int = 2000  # samples kept while the coordinator is away (~8 h at 15 s)
    batch_size: int = 200
    timeout_s: float = 10.0
    backoff_max_s: float = 300.0
    ports: tuple[int, ...] = field(default=DEFAULT_PORTS)
    nic: str = ""  # empty: all interfaces except loopback

    def validated(self) -> AgentConfig:
        if not self.coordinator_url.startswith(("http://", "https://")):
            raise ConfigError(
                "coordinator_url must be an http(s) URL "
                "(config 'coordinator_url' or PFTP_AGENT_COORDINATOR_URL)"
            )
        if not self.token:
            raise ConfigError(
                "token is required (config 'token' or PFTP_AGENT_TOKEN); "
                "create one with: pftp-coordinator agent token MIRROR"
            )
        if self.interval_s < 1:
            raise ConfigError("interval_s must be >= 1")
        if self.buffer_size < 1 or self.batch_size < 1:
            raise ConfigError("buffer_size and batch_size must be >= 1")
        return self


def _coerce(name: str, raw: str) -> object:
    kinds = {f.name: f.type for f in fields(AgentConfig)}
    if name not in kinds:
        raise ConfigError(f"unknown setting {name!r}; known: {', '.join(sorted(kinds))}")
    kind = str(kinds[name])
    try:
        if kind == "float":
            return float(raw)
        if kind == "int":
            return int(raw)
        if name == "ports":
            return tuple(int(p) for p in raw.replace(",", " ").split())
    except ValueError as exc:
        raise ConfigError(f"{name}: cannot read {raw!r}: {exc}") from exc
    return raw.strip()


def from_file(path: Path) -> dict[str, object]:
    parser = configparser.ConfigParser()
    try:
        with path.open() as fh:
            parser.read_file(fh)
    except (OSError, configparser.Error) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from exc
    if not parser.has_section("agent"):
        raise ConfigError(f"{path}: no [agent] section")
    return {k: _coerce(k, v) for k, v in parser.items("agent")}


def from_env(env: Mapping[str, str]) -> dict[str, object]:
    out: dict[str, object] = {}
    for f in fields(AgentConfig):
        key = f"PFTP_AGENT_{f.name.upper()}"
        if key in env:
            out[f.name] = _coerce(f.name, env[key])
    return out


def load(
    config_path: Path | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, object] | None = None,
) -> AgentConfig:
    env = os.environ if env is None else env
    path = config_path or Path(env.get("PFTP_AGENT_CONFIG", str(DEFAULT_CONFIG)))
    values: dict[str, object] = {}
    if path.is_file():
        values.update(from_file(path))
    elif config_path is not None:
        raise ConfigError(f"config file {path} does not exist")
    values.update(from_env(env))
    values.update({k: v for k, v in (overrides or {}).items() if v is not None})
    return replace(AgentConfig(), **values).validated()  # type: ignore[arg-type]
