"""The UDP side of discovery: one socket on the announcement port, one thread.

The thread listens for other coordinators' announcements, asks ``Election`` whether this
coordinator should announce, and if so broadcasts its ``Announcement`` (JSON) every
``interval_s``. Broadcast datagrams reach every socket bound to the port on the segment,
including other coordinators and clients on the same host (SO_REUSEADDR/SO_REUSEPORT).
"""

from __future__ import annotations

import logging
import math
import socket
import threading
import time
from collections.abc import Callable, Sequence

from pftp_wire.models import Announcement
from pydantic import ValidationError

from pftp_coordinator import metrics
from pftp_coordinator.discovery.election import DEFAULT_MISSES, Election

log = logging.getLogger(__name__)

MAX_DATAGRAM = 2048  # an announcement is ~150 bytes; anything larger is not ours
_MAX_WAIT_S = 0.25  # so stop() returns quickly


def open_announce_socket(port: int, bind_address: str = "") -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if hasattr(socket, "SO_REUSEPORT"):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
        sock.bind((bind_address, port))
    except OSError as exc:
        sock.close()
        raise OSError(
            f"cannot open the discovery socket on UDP port {port}: {exc}"
        ) from exc
    return sock


def parse_announcement(data: bytes) -> Announcement | None:
    """The announcement in a datagram, or None when it is not a valid P-FTP one."""
    if len(data) > MAX_DATAGRAM:
        return None
    try:
        return Announcement.model_validate_json(data)
    except ValidationError:
        return None


class Announcer:
    """Runs the election and the periodic broadcast in a daemon thread."""

    def __init__(
        self,
        announcement: Announcement,
        *,
        port: int,
        broadcast_addresses: Sequence[str],
        misses: int = DEFAULT_MISSES,
        startup_listen_s: float | None = None,
        bind_address: str = "",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not broadcast_addresses:
            raise ValueError("at least one broadcast address is needed")
        self.announcement = announcement
        self.port = port
        self.broadcast_addresses = list(broadcast_addresses)
        self._clock = clock
        self._election = Election(
            announcement, started_at=clock(), misses=misses, startup_listen_s=startup_listen_s
        )
        self._sock = open_announce_socket(port, bind_address)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._active = False
        self._sent = 0
        self._send_errors: dict[str, str] = {}
        self._heard_better = False  # a better coordinator was heard at some point
        self._thread = threading.Thread(target=self._run, name="pftp-announcer", daemon=True)

    # --- public -----------------------------------------------------------------------
    def start(self) -> Announcer:
        log.info(
            "discovery: listening on UDP %d, announcing %s with priority %d every %.1fs to %s",
            self.port,
            self.announcement.url,
            self.announcement.priority,
            self.announcement.interval_s,
            ",".join(self.broadcast_addresses),
        )
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        self._sock.close()
        metrics.ANNOUNCER_ACTIVE.set(0)

    @property
    def active(self) -> bool:
        """True while this coordinator is the one announcing."""
        with self._lock:
            return self._active

    @property
    def sent(self) -> int:
        with self._lock:
            return self._sent

    def peers(self) -> list[Announcement]:
        with self._lock:
            return [p.announcement for p in self._election.peers.values()]

    # --- thread -----------------------------------------------------------------------
    def _run(self) -> None:
        next_send = 0.0
        payload = self.announcement.model_dump_json().encode()
        while not self._stop.is_set():
            now = self._clock()
            with self._lock:
                self._election.forget_silent(now)
                want = self._election.should_announce(now)
                better = self._election.better_alive(now)
                changed = want != self._active
                self._active = want
            if changed:
                self._log_transition(want, better)
                if want:
                    next_send = now  # take over by broadcasting at once (paper 004, 3.2.4)
            self._heard_better = self._heard_better or better is not None
            if want and now >= next_send:
                self._broadcast(payload)
                next_send = now + self.announcement.interval_s
            with self._lock:
                wake = self._election.next_change(now)
            if want:
                wake = min(wake, next_send)
            wait = _MAX_WAIT_S if math.isinf(wake) else min(_MAX_WAIT_S, max(0.0, wake - now))
            self._receive(max(wait, 0.005))

    def _receive(self, timeout: float) -> None:
        self._sock.settimeout(timeout)
        try:
            data, addr = self._sock.recvfrom(MAX_DATAGRAM + 1)
        except TimeoutError:
            return
        except OSError as exc:
            if not self._stop.is_set():
                log.warning("discovery: receive failed: %s", exc)
                self._stop.wait(_MAX_WAIT_S)
            return
        ann = parse_announcement(data)
        if ann is None:
            log.debug("discovery: ignored a datagram from %s that is no announcement", addr[0])
            return
        with self._lock:
            self._election.heard(ann, self._clock())

    def _broadcast(self, payload: bytes) -> None:
        for address in self.broadcast_addresses:
            try:
                self._sock.sendto(payload, (address, self.port))
            except OSError as exc:
                # Log once per distinct error, not every interval.
                if self._send_errors.get(address) != str(exc):
                    log.error(
                        "discovery: cannot broadcast to %s:%d: %s (set announce_address to the "
                        "subnet's broadcast address, e.g. 10.0.0.255)",
                        address, self.port, exc,
                    )
                    self._send_errors[address] = str(exc)
                continue
            self._send_errors.pop(address, None)
            with self._lock:
                self._sent += 1
            metrics.ANNOUNCEMENTS_SENT.inc()

    def _log_transition(self, active: bool, better: object) -> None:
        metrics.ANNOUNCER_ACTIVE.set(1 if active else 0)
        if active:
            if self._heard_better:
                metrics.ANNOUNCER_TAKEOVERS.inc()
                log.warning(
                    "discovery: no better coordinator heard for %d intervals; taking over as %s",
                    self._election.misses, self.announcement.url,
                )
            else:
                log.info("discovery: announcing as %s", self.announcement.url)
        else:
            url = getattr(getattr(better, "announcement", None), "url", "?")
            log.warning("discovery: better coordinator %s is announcing; standing by", url)
