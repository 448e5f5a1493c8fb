"""Finding the coordinator without configuration (paper 004, 3.2.4).

Order of ``discover_coordinators``:
1. coordinators the user configured (option, env, config file: gathered by the caller,
   passed as ``configured``), in the order given;
2. DNS SRV records ``_pftp._tcp.<campus domain>`` (domain from the client config, else the
   ``search``/``domain`` lines of /etc/resolv.conf), by SRV priority then weight (RFC 2782);
3. only when nothing was found so far: listen briefly on the fixed UDP port for the
   coordinators' periodic broadcast announcements; best (lowest) priority first.

Duplicates are dropped, keeping the first position. The client tries the list in order.

SRV target and port give the coordinator's HTTP API: ``http://target:port``, or
``https://target`` when the port is 443.
"""

from __future__ import annotations

import logging
import random
import socket
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import dns.exception
import dns.rdatatype
import dns.resolver
from pftp_wire.models import ANNOUNCE_PORT, Announcement
from pydantic import ValidationError

log = logging.getLogger(__name__)

SRV_SERVICE = "_pftp._tcp"
RESOLV_CONF = Path("/etc/resolv.conf")
DEFAULT_LISTEN_S = 2.5  # a little more than the default announce interval (2 s)
AFTER_FIRST_S = 0.3  # once one announcement arrived, wait this long for better ones

__all__ = [
    "SRV_SERVICE",
    "SrvTarget",
    "campus_domains",
    "discover_coordinators",
    "listen_for_announcements",
    "order_srv",
    "srv_coordinators",
    "srv_url",
]


@dataclass(frozen=True)
class SrvTarget:
    priority: int
    weight: int
    port: int
    target: str


def campus_domains(resolv_conf: Path = RESOLV_CONF) -> list[str]:
    """Domains from resolv.conf: the ``search`` list, or ``domain`` when there is no search
    line (resolv.conf(5): the last of the two wins; we keep both, search first)."""
    try:
        text = resolv_conf.read_text()
    except OSError:
        return []
    search: list[str] = []
    domain: list[str] = []
    for line in text.splitlines():
        parts = line.split("#", 1)[0].split(";", 1)[0].split()
        if not parts:
            continue
        if parts[0] == "search":
            search = parts[1:]
        elif parts[0] == "domain" and len(parts) > 1:
            domain = [parts[1]]
    out: list[str] = []
    for d in [*search, *domain]:
        d = d.rstrip(".")
        if d and d not in out:
            out.append(d)
    return out


def order_srv(records: Iterable[SrvTarget], rng: random.Random | None = None) -> list[SrvTarget]:
    """RFC 2782 order: ascending priority; within a priority, weighted random selection
    (weight 0 records are picked last). A target of "." means "no service": dropped."""
    rng = rng or random.Random()
    usable = [r for r in records if r.target not in (".", "")]
    out: list[SrvTarget] = []
    for prio in sorted({r.priority for r in usable}):
        group = sorted((r for r in usable if r.priority == prio), key=lambda r: r.weight)
        while group:
            total = sum(r.weight for r in group)
            if total == 0:
                out.extend(group)
                break
            pick = rng.uniform(0, total)
            running = 0
            for i, r in enumerate(group):
                running += r.weight
                if running >= pick and r.weight > 0:
                    out.append(group.pop(i))
                    break
    return out


def srv_url(record: SrvTarget) -> str:
    host = record.target.rstrip(".")
    if ":" in host:
        host = f"[{host}]"
    if record.port == 443:
        return f"https://{host}"
    return f"http://{host}:{record.port}"


def _resolver(
    nameservers: Sequence[str] | None, port: int, timeout: float
) -> dns.resolver.Resolver:
    if nameservers:
        res = dns.resolver.Resolver(configure=False)
        res.nameservers = list(nameservers)
        res.port = port
    else:
        res = dns.resolver.Resolver()
    res.timeout = timeout
    res.lifetime = timeout
    return res


def srv_coordinators(
    domains: Sequence[str],
    *,
    nameservers: Sequence[str] | None = None,
    dns_port: int = 53,
    timeout: float = 2.0,
    rng: random.Random | None = None,
) -> list[str]:
    """Coordinator URLs from ``_pftp._tcp.<domain>`` for each domain, in order."""
    res = _resolver(nameservers, dns_port, timeout)
    urls: list[str] = []
    for domain in domains:
        qname = f"{SRV_SERVICE}.{domain.rstrip('.')}."
        try:
            answer = res.resolve(qname, dns.rdatatype.SRV, search=False)
        except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer):
            log.debug("no SRV record %s", qname)
            continue
        except (dns.resolver.NoNameservers, dns.exception.Timeout) as exc:
            log.info("SRV lookup of %s failed: %s", qname, exc)
            continue
        records = [SrvTarget(r.priority, r.weight, r.port, r.target.to_text()) for r in answer]
        urls.extend(srv_url(r) for r in order_srv(records, rng))
    return urls


def listen_for_announcements(
    seconds: float = DEFAULT_LISTEN_S,
    *,
    port: int = ANNOUNCE_PORT,
    bind_address: str = "",
    after_first_s: float = AFTER_FIRST_S,
) -> list[Announcement]:
    """Announcements heard within ``seconds`` (returns ``after_first_s`` after the first
    one), best priority first, one per URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    best: dict[str, Announcement] = {}
    try:
        # The coordinator may listen on the same port on this host: share it.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if hasattr(socket, "SO_REUSEPORT"):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        try:
            sock.bind((bind_address, port))
        except OSError as exc:
            log.info("cannot listen for coordinator announcements on UDP %d: %s", port, exc)
            return []
        deadline = time.monotonic() + seconds
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            sock.settimeout(left)
            try:
                data, _addr = sock.recvfrom(4096)
            except TimeoutError:
                break
            try:
                ann = Announcement.model_validate_json(data)
            except ValidationError:
                continue
            if not best:
                deadline = min(deadline, time.monotonic() + after_first_s)
            known = best.get(ann.url)
            if known is None or ann.priority < known.priority:
                best[ann.url] = ann
    finally:
        sock.close()
    return sorted(best.values(), key=lambda a: (a.priority, a.url))


def _dedup(urls: Iterable[str]) -> list[str]:
    out: list[str] = []
    for u in urls:
        u = u.rstrip("/")
        if u and u not in out:
            out.append(u)
    return out


def discover_coordinators(
    configured: Sequence[str] = (),
    *,
    domain: str | None = None,
    use_srv: bool = True,
    resolv_conf: Path = RESOLV_CONF,
    nameservers: Sequence[str] | None = None,
    dns_port: int = 53,
    dns_timeout: float = 2.0,
    listen_s: float = DEFAULT_LISTEN_S,
    announce_port: int = ANNOUNCE_PORT,
    rng: random.Random | None = None,
) -> list[str]:
    """Coordinator base URLs to try, in order (see the module docstring).

    ``listen_s=0`` disables listening for broadcasts; ``use_srv=False`` skips DNS.
    """
    urls = list(configured)
    if use_srv:
        domains = [domain] if domain else campus_domains(resolv_conf)
        if domains:
            urls += srv_coordinators(
                domains, nameservers=nameservers, dns_port=dns_port, timeout=dns_timeout, rng=rng
            )
    if not _dedup(urls) and listen_s > 0:
        urls += [a.url for a in listen_for_announcements(listen_s, port=announce_port)]
    found = _dedup(urls)
    log.debug("coordinators to try: %s", found)
    return found
