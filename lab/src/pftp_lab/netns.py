"""Thin wrappers over `ip netns`, `ip link` and `tc`: the lab's only side effects on the network.

Everything here acts inside namespaces the lab created (commands take the namespace name);
nothing touches the host's own interfaces or routes.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterable, Sequence

SBIN_PATH = "/usr/local/sbin:/usr/sbin:/sbin"


class LabError(RuntimeError):
    """The lab could not be built or driven; the message says what to do."""


def env_with_sbin(env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment with the sbin directories on PATH (servers and `ip` live there)."""
    out = dict(os.environ if env is None else env)
    path = out.get("PATH", "/usr/bin:/bin")
    missing = [p for p in SBIN_PATH.split(":") if p not in path.split(":")]
    out["PATH"] = ":".join([path, *missing]) if missing else path
    return out


def find_tool(name: str, *extra: str, prefer_extra: bool = False) -> str | None:
    """Absolute path of a system tool: on PATH (sbin dirs included) or at one of `extra`."""
    found = shutil.which(name, path=env_with_sbin()["PATH"])
    if found and not prefer_extra:
        return found
    for candidate in extra:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return found


def require_root() -> None:
    if os.geteuid() != 0:
        raise LabError(
            "pftp_lab needs root: it creates network namespaces, veth links and tc qdiscs. "
            "Run as root (CI does), e.g. `sudo .venv/bin/python -m pytest -m lab`; "
            "tests marked @pytest.mark.lab are skipped for other users."
        )
    for tool in ("ip", "tc"):
        if find_tool(tool) is None:
            raise LabError(f"pftp_lab needs `{tool}` (Debian package iproute2); not found on PATH")


def sh(argv: Sequence[str], *, check: bool = True, timeout: float = 30.0) -> str:
    """Run a short administrative command; raise LabError with its stderr when it fails."""
    try:
        proc = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, env=env_with_sbin()
        )
    except subprocess.TimeoutExpired as exc:
        raise LabError(f"timed out after {timeout}s: {' '.join(argv)}") from exc
    if check and proc.returncode != 0:
        raise LabError(f"`{' '.join(argv)}` failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def list_namespaces() -> list[str]:
    out = sh(["ip", "netns", "list"], check=False)
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def add_namespace(name: str) -> None:
    sh(["ip", "netns", "add", name])
    sh(["ip", "-n", name, "link", "set", "lo", "up"])


def namespace_pids(name: str) -> list[int]:
    out = sh(["ip", "netns", "pids", name], check=False)
    return [int(tok) for tok in out.split() if tok.isdigit()]


def kill_pids(pids: Iterable[int], sig: int = signal.SIGKILL) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            continue
        except PermissionError as exc:  # not ours: say so instead of ignoring it
            raise LabError(f"cannot signal pid {pid}: {exc}") from exc


def kill_namespace_processes(name: str, *, rounds: int = 20) -> None:
    """SIGKILL every process in the namespace until none is left (servers fork per session)."""
    for _ in range(rounds):
        pids = namespace_pids(name)
        if not pids:
            return
        kill_pids(pids)
        time.sleep(0.05)


def delete_namespace(name: str) -> None:
    kill_namespace_processes(name)
    if name in list_namespaces():
        sh(["ip", "netns", "del", name], check=False)


def add_veth(name_a: str, ns_a: str, name_b: str, ns_b: str) -> None:
    """A veth pair created directly inside the two namespaces (never in the host's)."""
    sh(["ip", "link", "add", name_a, "netns", ns_a, "type", "veth", "peer", "name", name_b,
        "netns", ns_b])
    for name, ns in ((name_a, ns_a), (name_b, ns_b)):
        sh(["ip", "-n", ns, "link", "set", name, "up"])


def add_address(ns: str, dev: str, cidr: str) -> None:
    sh(["ip", "-n", ns, "addr", "add", cidr, "dev", dev])


def add_route(ns: str, dest: str, via: str) -> None:
    sh(["ip", "-n", ns, "route", "replace", dest, "via", via])


def enable_forwarding(ns: str) -> None:
    sh(["ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.ip_forward=1"])


def tbf_args(rate_bps: int, min_burst: int = 0) -> list[str]:
    """tbf parameters for a rate: burst at least 32 kB (one MTU is not enough, see DESIGN.md
    'lab'), larger at high rates so the 1-tick timer does not cap throughput; at least
    ``min_burst`` bytes."""
    if rate_bps <= 0:
        raise LabError(f"rate must be positive, got {rate_bps} bit/s")
    burst = max(32 * 1024, rate_bps // 8 // 100, min_burst)  # >= 10 ms worth of bytes
    return ["rate", f"{int(rate_bps)}bit", "burst", str(burst), "latency", "80ms"]


def tbf_burst(ns: str, dev: str) -> int | None:
    """The burst (bytes) of the tbf at the root of `dev`, None without one."""
    out = sh(["tc", "-j", "-n", ns, "qdisc", "show", "dev", dev], check=False)
    try:
        qdiscs = json.loads(out or "[]")
    except ValueError:
        return None
    for q in qdiscs:
        if q.get("kind") == "tbf" and q.get("root"):
            burst = q.get("options", {}).get("burst")
            return int(burst) if burst is not None else None
    return None


# The burst set on each (namespace, device) by this process (set_shaping).
_bursts: dict[tuple[str, str], int] = {}
# The longest packet a tbf can have queued: a GSO/GRO packet (64 KiB) and its
# headers. A rate cut keeps the burst it had up to this, not more: a 1 Gbit/s
# link's 1.25 MB bucket kept at 21 Mbit/s let 0.5 s bursts through (lab r30).
LONGEST_PACKET = 64 * 1024 + 2048


def set_shaping(ns: str, dev: str, rate_bps: int | None) -> None:
    """Shape the egress of `dev` to `rate_bps` (None removes the shaping).

    A rate change keeps the tbf's burst at least what it was (and 1 KiB over what tc
    reports, which rounds), up to LONGEST_PACKET: the packets already queued were
    let in against the old burst (a forwarded GRO packet up to it), and tbf never
    sends one longer than its bucket: the queue behind it then stalled for good (lab
    r16, the access link cut from 49.8 to 35.4 Mbit/s while full: 1210 packets
    stuck, every connect of the client "No route to host" once its gateway's ARP
    replies queued behind them)."""
    if rate_bps is None:
        sh(["tc", "-n", ns, "qdisc", "del", "dev", dev, "root"], check=False)
        _bursts.pop((ns, dev), None)
        return
    floor = _bursts.get((ns, dev))
    if floor is None:  # (shaped by another process: what tc says, rounded down)
        before = tbf_burst(ns, dev)
        floor = before + 1024 if before is not None else 0
    args = tbf_args(rate_bps, min(floor, LONGEST_PACKET))
    sh(["tc", "-n", ns, "qdisc", "replace", "dev", dev, "root", "tbf", *args])
    _bursts[(ns, dev)] = int(args[args.index("burst") + 1])



def shaping_of(ns: str, dev: str) -> str:
    """`tc qdisc show` for the device (for tests and debugging)."""
    return sh(["tc", "-n", ns, "qdisc", "show", "dev", dev])
