"""Client settings: command-line option > environment > config file.

Config file: ``$PFTP_CLIENT_CONFIG``, else ``$XDG_CONFIG_HOME/pftp/client.toml``, else
``~/.config/pftp/client.toml``. Keys (all optional)::

    coordinator = "http://coordinator.campus.example:8000"   # or a list
    access_bandwidth = "100M"        # bits/s; see access_bandwidth.py
    timeout = 30                     # seconds, connect/reply
    stall_timeout = 15               # seconds without a byte = failed flow
    max_connections = 8              # per mirror; more than 1 only where they pay
    domain = "campus.example"        # for DNS SRV discovery
    cross_check = true               # no SHA-256 known: compare spots between mirrors
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path


class SettingsError(ValueError):
    pass


@dataclass
class ClientSettings:
    """Settings from the config file and the environment (module doc)."""

    coordinators: list[str] = field(default_factory=list)
    access_bandwidth: str | None = None
    timeout: float = 30.0
    stall_timeout: float = 15.0
    max_connections: int = 8
    domain: str | None = None
    cross_check: bool = True
    source: str = "defaults"
    unknown: list[str] = field(default_factory=list)  # keys of the file nobody reads


KNOWN_KEYS = (
    "coordinator", "access_bandwidth", "timeout", "stall_timeout", "max_connections", "domain",
    "cross_check",
)


def config_path(env: Mapping[str, str] = os.environ) -> Path:
    # Not PFTP_CONFIG: a host running a coordinator too would hand us its file.
    if env.get("PFTP_CLIENT_CONFIG"):
        return Path(env["PFTP_CLIENT_CONFIG"])
    base = Path(env["XDG_CONFIG_HOME"]) if env.get("XDG_CONFIG_HOME") else Path.home() / ".config"
    return base / "pftp" / "client.toml"


def _number(raw: dict, key: str, default: float, path: Path) -> float:
    value = raw.get(key, default)
    if (
        not isinstance(value, int | float)
        or isinstance(value, bool)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise SettingsError(f"{path}: {key} must be a positive number, got {value!r}")
    return float(value)


def load_settings(env: Mapping[str, str] = os.environ, path: Path | None = None) -> ClientSettings:
    path = path or config_path(env)
    settings = ClientSettings()
    if path.exists():
        import tomllib  # only when there is a file to read (~4 ms of start-up otherwise)

        try:
            raw = tomllib.loads(path.read_text())
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise SettingsError(f"cannot read config file {path}: {exc}") from exc
        coord = raw.get("coordinator", [])
        coords = [coord] if isinstance(coord, str) else coord
        if not isinstance(coords, list) or not all(isinstance(c, str) for c in coords):
            raise SettingsError(f"{path}: coordinator must be a URL or a list of URLs")
        for c in coords:
            _check_coordinator(c, f"{path}: coordinator")
        bw = raw.get("access_bandwidth")
        if bw is not None and not isinstance(bw, str | int):
            raise SettingsError(f'{path}: access_bandwidth must be like "100M"')
        if bw is not None:
            _check_bandwidth(str(bw), f"{path}: access_bandwidth")
        domain = raw.get("domain")
        if domain is not None and not isinstance(domain, str):
            raise SettingsError(f'{path}: domain must be a DNS name like "campus.example"')
        conns = raw.get("max_connections", 8)
        if isinstance(conns, bool) or not isinstance(conns, int) or not 1 <= conns <= 16:
            raise SettingsError(f"{path}: max_connections must be a whole number from 1 to 16")
        cross = raw.get("cross_check", True)
        if not isinstance(cross, bool):
            raise SettingsError(f"{path}: cross_check must be true or false, got {cross!r}")
        settings = ClientSettings(
            coordinators=coords,
            cross_check=cross,
            max_connections=conns,
            access_bandwidth=str(bw) if bw is not None else None,
            timeout=_number(raw, "timeout", 30.0, path),
            stall_timeout=_number(raw, "stall_timeout", 15.0, path),
            domain=domain,
            source=str(path),
            # (a typo such as "timout" would otherwise be ignored without a word)
            unknown=sorted(k for k in raw if k not in KNOWN_KEYS),
        )
    if env.get("PFTP_ACCESS_BANDWIDTH"):
        _check_bandwidth(env["PFTP_ACCESS_BANDWIDTH"], "PFTP_ACCESS_BANDWIDTH")
    if env.get("PFTP_COORDINATOR"):
        _check_coordinator(env["PFTP_COORDINATOR"], "PFTP_COORDINATOR")
        settings.coordinators = [env["PFTP_COORDINATOR"], *settings.coordinators]
    return settings


def _check_bandwidth(text: str, where: str) -> None:
    from pftp_client.bandwidth_setting import parse_bandwidth

    try:
        parse_bandwidth(text)
    except ValueError as exc:
        raise SettingsError(f"{where}: {exc}") from None


def _check_coordinator(url: str, where: str) -> None:
    if not coordinator_url_ok(url):
        raise SettingsError(f"{where}: {url!r} is not an http:// or https:// URL")


def coordinator_url_ok(url: str) -> bool:
    """http(s)://host[:port][/path] (what coordinator.py can POST to)."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url.strip())
        parts.port  # noqa: B018 (raises ValueError on a bad port)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)
