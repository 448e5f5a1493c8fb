"""Coordinator discovery and failover (paper 004, 3.2.3-3.2.4).

`start_announcer(settings)` is what the API lifespan calls when ``announce_enabled``:
it starts a thread that broadcasts this coordinator's ``Announcement`` on the fixed UDP
port while no better coordinator (lower ``announce_priority``) is heard, and stands by
otherwise. Clients find coordinators with ``pftp_client.discovery``.
"""

from __future__ import annotations

import logging
import os
import socket

from pftp_wire.models import Announcement

from pftp_coordinator.config import Settings
from pftp_coordinator.discovery.announcer import Announcer
from pftp_coordinator.discovery.election import Election, outranks

log = logging.getLogger(__name__)

__all__ = ["Announcer", "Election", "advertised_url", "outranks", "start_announcer"]

_WILDCARD_HOSTS = {"", "0.0.0.0", "::", "[::]"}


def _outbound_address(broadcast: str, port: int) -> str | None:
    """The local address the kernel would send ``broadcast`` from (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
        try:
            probe.connect((broadcast, port))
        except OSError:
            return None
        host = probe.getsockname()[0]
    return None if host in _WILDCARD_HOSTS else host


def broadcast_addresses(settings: Settings) -> list[str]:
    """``announce_address`` may list several addresses, comma-separated (one per subnet)."""
    out = [a.strip() for a in settings.announce_address.split(",") if a.strip()]
    if not out:
        raise ValueError("announce_address is empty; set e.g. 255.255.255.255 or 10.0.0.255")
    return out


def advertised_url(settings: Settings) -> str:
    """What clients should use: ``public_url`` when set (recommended), else host:port."""
    if settings.public_url:
        return settings.public_url.rstrip("/")
    host = settings.host
    if host in _WILDCARD_HOSTS:
        found = _outbound_address(broadcast_addresses(settings)[0], settings.port)
        host = found or socket.getfqdn()
        log.warning(
            "discovery: public_url is not set; announcing http://%s:%d (set PFTP_PUBLIC_URL "
            "to what clients should use)", host, settings.port,
        )
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{settings.port}"


def start_announcer(settings: Settings) -> Announcer:
    """Start announcing (and listening for better coordinators); returns it for ``.stop()``."""
    announcement = Announcement(
        url=advertised_url(settings),
        priority=settings.announce_priority,
        interval_s=settings.announce_interval_s,
        name=f"{socket.gethostname()}:{os.getpid()}",
    )
    return Announcer(
        announcement,
        port=settings.announce_port,
        broadcast_addresses=broadcast_addresses(settings),
        misses=settings.announce_takeover_misses,
    ).start()
