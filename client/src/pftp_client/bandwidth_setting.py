"""A configured access bandwidth: the figure and its units, nothing else.

Kept apart from access_bandwidth.py (the gateway probe, its state file and
history) so that reading the setting costs no imports beyond ``re``: the entry
point's head start (early.py) decides with it before the CLI has loaded."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

_UNITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}


def parse_bandwidth(text: str) -> int:
    """'100M' -> 100_000_000 (bits/s). Accepts an optional 'bps'/'bit/s' suffix."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([kKmMgGtT]?)\s*(?:bps|bit/s|b/s)?\s*", text)
    if not m:
        raise ValueError(f"bad bandwidth {text!r}: use bits per second, e.g. 100M or 1.5G")
    value = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    if value <= 0:
        raise ValueError(f"bandwidth must be > 0, got {text!r}")
    return value


def configured_access_bandwidth(
    configured: str | None = None, env: Mapping[str, str] = os.environ
) -> tuple[int | None, str]:
    """(bits/s or None, source) from the environment or the config file only."""
    source = "env PFTP_ACCESS_BANDWIDTH" if env.get("PFTP_ACCESS_BANDWIDTH") else "config file"
    text = env.get("PFTP_ACCESS_BANDWIDTH") or configured
    if not text:
        return None, "not configured"
    try:
        return parse_bandwidth(text), source
    except ValueError as exc:
        raise ValueError(f"{source.removeprefix('env ')}: {exc}") from None


def probe_setting(env: Mapping[str, str]) -> tuple[bool, str | None]:
    """PFTP_ACCESS_PROBE -> (probe enabled, hop to probe instead of the gateway).
    (Here, not in access_bandwidth.py: download() checks it before the first
    connect, where that module's imports would cost start-up time.)"""
    setting = env.get("PFTP_ACCESS_PROBE", "").strip()
    if setting.lower() in ("off", "0", "no", "false"):
        return False, None
    if not setting:
        return True, None
    import ipaddress

    try:
        return True, str(ipaddress.IPv4Address(setting))
    except ValueError:
        raise ValueError(
            f"PFTP_ACCESS_PROBE={setting!r}: use 'off' or the IPv4 address of the hop to probe"
        ) from None
