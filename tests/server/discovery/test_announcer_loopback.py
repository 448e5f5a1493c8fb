"""Real UDP announcers on loopback: broadcast to 127.255.255.255 on an ephemeral port.

A primary and a backup coordinator announcer, plus a plain listening socket standing in
for a client. Waits poll with generous deadlines (the machine is shared); nothing asserts
on speed.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator

import pytest
from pftp_coordinator.config import Settings
from pftp_coordinator.discovery import advertised_url, broadcast_addresses, start_announcer
from pftp_coordinator.discovery.announcer import Announcer, open_announce_socket
from pftp_wire.models import ANNOUNCE_PORT, Announcement

LOOP_BROADCAST = "127.255.255.255"
INTERVAL = 0.3


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(cond: Callable[[], bool], timeout: float = 20.0, step: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(step)
    return cond()


class Listener:
    """What a client sees: every announcement broadcast on the port."""

    def __init__(self, port: int) -> None:
        self.sock = open_announce_socket(port)
        self.sock.settimeout(0.1)

    def drain(self, seconds: float) -> list[Announcement]:
        out: list[Announcement] = []
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                data, _ = self.sock.recvfrom(4096)
            except TimeoutError:
                continue
            out.append(Announcement.model_validate_json(data))
        return out

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def port() -> int:
    return free_udp_port()


@pytest.fixture
def started() -> Iterator[list[Announcer]]:
    running: list[Announcer] = []
    yield running
    for a in running:
        a.stop()


def make(url: str, priority: int, port: int, **kw: float) -> Announcer:
    ann = Announcement(url=url, priority=priority, interval_s=INTERVAL, name=url)
    return Announcer(ann, port=port, broadcast_addresses=[LOOP_BROADCAST], misses=4, **kw)


def test_backup_silent_then_takes_over_then_steps_back(port: int, started: list[Announcer]) -> None:
    listener = Listener(port)
    try:
        primary = make("http://primary:8470", 10, port).start()
        started.append(primary)
        assert wait_for(lambda: primary.active and primary.sent >= 1)
        backup = make("http://backup:8470", 20, port, startup_listen_s=1.0).start()
        started.append(backup)

        # Backup hears the primary and stays silent.
        assert wait_for(lambda: any(p.url == "http://primary:8470" for p in backup.peers()))
        heard = listener.drain(2.0)
        assert backup.sent == 0 and not backup.active
        assert {a.url for a in heard} == {"http://primary:8470"}

        # Primary goes away: the backup announces within a few intervals.
        primary.stop()
        started.remove(primary)
        stopped_at = time.monotonic()
        assert wait_for(lambda: backup.active and backup.sent >= 1)
        took = time.monotonic() - stopped_at
        print(f"takeover after {took:.2f}s (interval {INTERVAL}s, misses 4)")
        assert any(a.url == "http://backup:8470" for a in listener.drain(2.0))

        # Primary returns: the backup steps back.
        again = make("http://primary:8470", 10, port).start()
        started.append(again)
        assert wait_for(lambda: not backup.active)
        sent_when_back = backup.sent
        listener.drain(1.0)  # flush what was in flight during the handover
        later = listener.drain(1.5)
        assert backup.sent == sent_when_back
        assert later and {a.url for a in later} == {"http://primary:8470"}
    finally:
        listener.close()


def test_invalid_datagrams_are_ignored(port: int, started: list[Announcer]) -> None:
    backup = make("http://backup:8470", 20, port, startup_listen_s=0.5).start()
    started.append(backup)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
        for junk in (b"not json", b'{"kind": "other", "url": "x"}', b"\xff" * 3000):
            s.sendto(junk, (LOOP_BROADCAST, port))
    assert wait_for(lambda: backup.active and backup.sent >= 1)
    assert backup.peers() == []


def test_start_announcer_from_settings() -> None:
    # The real port (7461) on loopback, with a priority that never outranks anyone else's.
    settings = Settings(
        announce_enabled=True,
        announce_interval_s=0.3,
        announce_priority=65000,
        announce_address=LOOP_BROADCAST,
        public_url="http://coordinator.example:8470/",
    )
    listener = Listener(ANNOUNCE_PORT)
    announcer = start_announcer(settings)
    try:
        got: list[Announcement] = []
        assert wait_for(
            lambda: got.extend(
                a for a in listener.drain(0.3) if a.url == "http://coordinator.example:8470"
            ) or bool(got)
        )
        assert got[0].priority == 65000 and got[0].interval_s == pytest.approx(0.3)
    finally:
        announcer.stop()
        listener.close()


def test_advertised_url_and_addresses() -> None:
    s = Settings(host="10.1.2.3", port=9000, announce_address="10.1.2.255, 10.9.0.255")
    assert advertised_url(s) == "http://10.1.2.3:9000"
    assert broadcast_addresses(s) == ["10.1.2.255", "10.9.0.255"]
    with pytest.raises(ValueError, match="announce_address"):
        broadcast_addresses(Settings(announce_address=" , "))
    wild = advertised_url(Settings(host="0.0.0.0", announce_address=LOOP_BROADCAST))
    assert wild.startswith("http://") and wild.endswith(":8470")
