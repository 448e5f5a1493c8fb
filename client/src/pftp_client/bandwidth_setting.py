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
    if env.get("PFTP_ACCESS_BANDWIDTH"):
        return parse_bandwidth(env["PFTP_ACCESS_BANDWIDTH"]), "env PFTP_ACCESS_BANDWIDTH"
    if configured:
        return parse_bandwidth(configured), "config file"
    return None, "not configured"
