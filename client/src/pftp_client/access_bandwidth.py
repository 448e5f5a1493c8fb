"""The client's access bandwidth, sent with the request (paper 004, 3.3; paper
001, 2.2.3): the coordinator takes mirrors until their rates cover it (paper 004,
3.2.2), so the P-FTP flows do not congest the client's own link.

First source that gives an answer:
1. configuration: ``PFTP_ACCESS_BANDWIDTH`` in the environment, else
   ``access_bandwidth`` in the config file (bits/s, suffixes k/M/G, e.g. "100M");
2. a measurement: a packet train of ICMP echoes to the default gateway (paper 004,
   3.3: "measures the available bandwidth to its Internet Gateway ... Ping
   messages"; see packet_train.py), at most ~0.5 s, cached for a few minutes in
   the state file so repeated downloads do not probe again. The interface's
   nominal link speed (/sys/class/net/<dev>/speed) only caps it: a gigabit NIC
   behind a 20 Mbit/s uplink still says 1 Gbit/s, a veth 10 Gbit/s;
3. history: the best aggregate rate of this client's recent downloads through the
   same gateway. It is also a floor under the measurement: the link carried at
   least that much, while a train can read low (asymmetric links: the echo
   requests go up the slower uplink; see notes/access-bandwidth.md);
4. unknown (None): the coordinator then takes up to max_mirrors.

``PFTP_ACCESS_PROBE``: "off" disables the train; an IPv4 address probes that hop
instead of the default gateway (e.g. the ISP's router behind a home router, when
the home LAN is not the bottleneck).

State file: ``$XDG_CACHE_HOME/pftp/access_bandwidth.json`` (else ``~/.cache/...``),
keyed by interface, gateway and the gateway's MAC address (two home routers both
at 192.168.1.1 are different links).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import struct
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pftp_client.bandwidth_setting import configured_access_bandwidth, probe_setting

log = logging.getLogger(__name__)

PROBE_TTL_S = 300.0  # a measurement is reused this long
FAILED_PROBE_TTL_S = 60.0  # a failed one too, so a silent gateway costs 0.5 s once a minute
HISTORY_MAX_AGE_S = 7 * 24 * 3600.0
HISTORY_KEEP = 20
HISTORY_MIN_BYTES = 1 << 20  # smaller downloads end before their flows reach full rate
HISTORY_MIN_SECONDS = 0.5

# probe(target, mtu, cap_bps) -> (bits/s or None, how it went)
Probe = Callable[[str, int, float | None], tuple[float | None, str]]


# ------------------------------------------------------------------ the first hop


@dataclass(frozen=True)
class DefaultRoute:
    """The IPv4 default route: its interface and next hop."""

    dev: str
    gateway: str | None  # None: a point-to-point default route (no next hop to ping)


def default_route(route_table: Path = Path("/proc/net/route")) -> DefaultRoute | None:
    """The IPv4 default route with the lowest metric."""
    try:
        lines = route_table.read_text().splitlines()[1:]
    except OSError:
        return None
    best: tuple[int, DefaultRoute] | None = None
    for line in lines:
        f = line.split()
        if len(f) < 7 or f[1] != "00000000" or f[3] not in ("0001", "0003"):  # RTF_UP[|GATEWAY]
            continue
        try:
            gw_raw, metric = int(f[2], 16), int(f[6])
        except ValueError:
            continue
        gw = socket.inet_ntoa(struct.pack("<I", gw_raw)) if gw_raw else None
        if best is None or metric < best[0]:
            best = (metric, DefaultRoute(f[0], gw))
    return best[1] if best else None


def default_route_interface(route_table: Path = Path("/proc/net/route")) -> str | None:
    route = default_route(route_table)
    return route.dev if route else None


def interface_speed_bps(dev: str, sys_net: Path = Path("/sys/class/net")) -> int | None:
    """Nominal link speed (an upper cap only); virtual NICs say -1 or nothing."""
    try:
        mbit = int((sys_net / dev / "speed").read_text().strip())
    except (OSError, ValueError):
        return None
    return mbit * 1_000_000 if mbit > 0 else None


def interface_mtu(dev: str, sys_net: Path = Path("/sys/class/net")) -> int:
    try:
        return int((sys_net / dev / "mtu").read_text().strip())
    except (OSError, ValueError):
        return 1500


def neighbour_mac(ip: str, arp_table: Path = Path("/proc/net/arp")) -> str | None:
    try:
        lines = arp_table.read_text().splitlines()[1:]
    except OSError:
        return None
    for line in lines:
        f = line.split()
        if len(f) >= 4 and f[0] == ip and f[3] != "00:00:00:00:00:00":
            return f[3]
    return None


# ------------------------------------------------------------------ state file


def state_path(env: Mapping[str, str] = os.environ) -> Path:
    base = Path(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return base / "pftp" / "access_bandwidth.json"


def load_state(path: Path) -> dict[str, Any]:
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        return {"probes": {}, "history": []}
    except (OSError, ValueError) as exc:
        log.warning("ignoring unreadable state file %s: %s", path, exc)
        return {"probes": {}, "history": []}
    if not isinstance(raw, dict):
        return {"probes": {}, "history": []}
    probes = raw.get("probes") if isinstance(raw.get("probes"), dict) else {}
    history = raw.get("history") if isinstance(raw.get("history"), list) else []
    return {"probes": probes, "history": history}


def save_state(path: Path, state: dict[str, Any]) -> None:
    """Atomic replace; a read-only home only costs the cache (logged)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # unique per process, thread and call, like tempfile.mkstemp (which costs
        # ~3 ms of imports at the end of every download)
        tmp = path.parent / (
            f".access_bandwidth.{os.getpid()}.{threading.get_ident()}.{time.monotonic_ns()}.tmp"
        )
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "w") as out:
                json.dump(state, out)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
    except OSError as exc:
        log.warning("cannot write state file %s: %s", path, exc)


def link_key(route: DefaultRoute, target: str, arp_table: Path = Path("/proc/net/arp")) -> str:
    mac = neighbour_mac(target, arp_table)
    return f"{route.dev} via {target}" + (f" ({mac})" if mac else "")


def cached_probe(state: dict[str, Any], key: str, now: float) -> dict[str, Any] | None:
    entry = state["probes"].get(key)
    if not isinstance(entry, dict) or not isinstance(entry.get("at"), int | float):
        return None
    ttl = PROBE_TTL_S if entry.get("bps") else FAILED_PROBE_TTL_S
    return entry if 0 <= now - entry["at"] < ttl else None


def history_best(state: dict[str, Any], key: str, now: float) -> tuple[int | None, int]:
    """(best recent aggregate download rate through this link, how many downloads)."""
    rates = [
        int(h["bps"])
        for h in state["history"]
        if isinstance(h, dict)
        and h.get("key") == key
        and isinstance(h.get("bps"), int | float)
        and isinstance(h.get("at"), int | float)
        and 0 <= now - h["at"] < HISTORY_MAX_AGE_S
        and h["bps"] > 0
    ]
    return (max(rates), len(rates)) if rates else (None, 0)


# ------------------------------------------------------------------ the answer


def packet_train_probe(target: str, mtu: int, cap_bps: float | None) -> tuple[float | None, str]:
    """The default probe: packet_train.measure, every failure a (None, reason)."""
    from pftp_client.packet_train import ProbeUnavailable, measure

    try:
        m = measure(target, mtu=mtu, cap_bps=cap_bps)
    except ProbeUnavailable as exc:
        return None, f"packet train not possible: {exc.strerror}"
    except OSError as exc:
        return None, f"packet train to {target} failed: {exc}"
    return m.estimate.rate_bps, m.describe()


def access_bandwidth(
    configured: str | None = None,
    env: Mapping[str, str] = os.environ,
    route_table: Path = Path("/proc/net/route"),
    sys_net: Path = Path("/sys/class/net"),
    *,
    state_file: Path | None = None,
    arp_table: Path = Path("/proc/net/arp"),
    probe: Probe = packet_train_probe,
    now: Callable[[], float] = time.time,
) -> tuple[int | None, str]:
    """(bits/s or None, where the figure came from): config > packet train >
    history > unknown; history also floors the measurement (module doc)."""
    bw, source = configured_access_bandwidth(configured, env)
    if bw:
        return bw, source

    enabled, hop = probe_setting(env)
    route = default_route(route_table)
    if route is None:
        log.info("access bandwidth unknown: no IPv4 default route")
        return None, "unknown (no IPv4 default route)"
    target = hop or route.gateway
    key = link_key(route, target or route.dev, arp_table)
    path = state_file or state_path(env)
    state = load_state(path)
    t = now()

    measured: int | None = None
    if not enabled:
        how = "probe disabled by PFTP_ACCESS_PROBE"
    elif target is None:
        how = f"default route on {route.dev} has no gateway to probe"
    else:
        hit = cached_probe(state, key, t)
        if hit is not None:
            measured = int(hit["bps"]) if hit.get("bps") else None
            how = f"cached {t - hit['at']:.0f} s ago: {hit.get('how', '')}"
        else:
            cap = interface_speed_bps(route.dev, sys_net)
            rate, how = probe(target, interface_mtu(route.dev, sys_net), cap)
            measured = int(rate) if rate else None
            key = link_key(route, target, arp_table)  # the train filled the ARP entry
            state["probes"] = {
                k: v for k, v in state["probes"].items() if cached_probe(state, k, t)
            }
            state["probes"][key] = {"at": t, "bps": measured, "how": how}
            save_state(path, state)

    best, n = history_best(state, key, t)
    if measured is not None and best is not None and best > measured:
        bw, source = best, f"{how}; raised to the best of {n} recent download(s)"
    elif measured is not None:
        bw, source = measured, how
    elif best is not None:
        bw, source = best, f"best of {n} recent download(s) via {key} ({how})"
    else:
        bw, source = None, f"unknown ({how})"
    log.info("access bandwidth %s: %s", f"{bw / 1e6:.1f} Mbit/s" if bw else "unknown", source)
    return bw, source


def record_download(
    size_bytes: int,
    seconds: float,
    env: Mapping[str, str] = os.environ,
    route_table: Path = Path("/proc/net/route"),
    *,
    state_file: Path | None = None,
    arp_table: Path = Path("/proc/net/arp"),
    now: Callable[[], float] = time.time,
) -> int | None:
    """Remember a finished download's aggregate rate for the link it came through
    (the history above). Small or instant downloads say nothing and are skipped.
    Returns the rate recorded (bits/s) or None."""
    if size_bytes < 0 or seconds < 0:
        raise ValueError(f"size and seconds must be >= 0, got {size_bytes}, {seconds}")
    if size_bytes < HISTORY_MIN_BYTES or seconds < HISTORY_MIN_SECONDS:
        return None
    route = default_route(route_table)
    if route is None:
        return None
    _enabled, hop = probe_setting(env)
    key = link_key(route, hop or route.gateway or route.dev, arp_table)
    bps = int(size_bytes * 8 / seconds)
    path = state_file or state_path(env)
    state = load_state(path)
    t = now()
    kept = [
        h
        for h in state["history"]
        if isinstance(h, dict)
        and isinstance(h.get("at"), int | float)
        and 0 <= t - h["at"] < HISTORY_MAX_AGE_S
    ]
    state["history"] = [*kept, {"at": t, "key": key, "bps": bps}][-HISTORY_KEEP:]
    save_state(path, state)
    return bps
