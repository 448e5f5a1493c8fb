"""The client's access bandwidth, sent with the request (paper 004, 3.3; paper
001, 2.2.3: the coordinator selects mirrors until their aggregate rate reaches
it, so the P-FTP flows do not congest the client's own link).

Method, first that gives an answer:
1. configuration: ``PFTP_ACCESS_BANDWIDTH`` in the environment, else
   ``access_bandwidth`` in the config file (bits/s, suffixes k/M/G, e.g. "100M");
2. the link speed of the interface that carries the default route
   (/proc/net/route, then /sys/class/net/<dev>/speed, Mbit/s): the rate of the
   first hop toward the gateway, free to read and never adds traffic;
3. unknown (null): the coordinator then does not cap the selection.
We do not probe actively (packet trains to the gateway) because the number
would be noisy and cost traffic on every download; a campus admin who knows a
shared uplink is slower than the NIC sets the value in the config file.
Virtual interfaces report -1 or nothing and count as unknown.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

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


def default_route_interface(route_table: Path = Path("/proc/net/route")) -> str | None:
    try:
        lines = route_table.read_text().splitlines()[1:]
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if len(fields) >= 2 and fields[1] == "00000000":
            return fields[0]
    return None


def interface_speed_bps(dev: str, sys_net: Path = Path("/sys/class/net")) -> int | None:
    try:
        mbit = int((sys_net / dev / "speed").read_text().strip())
    except (OSError, ValueError):
        return None
    return mbit * 1_000_000 if mbit > 0 else None


def access_bandwidth(
    configured: str | None = None,
    env: Mapping[str, str] = os.environ,
    route_table: Path = Path("/proc/net/route"),
    sys_net: Path = Path("/sys/class/net"),
) -> tuple[int | None, str]:
    """(bits/s or None, where the figure came from)."""
    if env.get("PFTP_ACCESS_BANDWIDTH"):
        return parse_bandwidth(env["PFTP_ACCESS_BANDWIDTH"]), "env PFTP_ACCESS_BANDWIDTH"
    if configured:
        return parse_bandwidth(configured), "config file"
    dev = default_route_interface(route_table)
    if dev is not None:
        speed = interface_speed_bps(dev, sys_net)
        if speed is not None:
            return speed, f"link speed of {dev}"
    return None, "unknown"
