"""Who announces: the primary/backup rule of paper 004, 3.2.3-3.2.4, as pure logic.

Every coordinator listens on the announcement port. One announces while no better one
(lower priority number; equal priority: smaller URL) has been heard within
``misses`` of that one's own announced intervals. So a backup stays silent while the
primary announces, takes over "by immediately broadcasting its address" once the primary
has missed ``misses`` announcements, and steps back as soon as the primary is heard again.

A coordinator that just started listens for ``startup_listen_s`` before its first
announcement, so a backup does not flap while it learns that a primary exists.
Times are plain floats from a monotonic clock passed in by the caller.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from pftp_wire.models import Announcement

DEFAULT_MISSES = 3


@dataclass(frozen=True)
class HeardPeer:
    announcement: Announcement
    last_heard: float

    def silent_after(self, misses: int) -> float:
        """Monotonic time after which this peer counts as gone."""
        return self.last_heard + misses * self.announcement.interval_s


def peer_key(ann: Announcement) -> tuple[str, str]:
    return (ann.url, ann.name)


def outranks(a: Announcement, b: Announcement) -> bool:
    """True when ``a`` should announce instead of ``b`` (lower priority number wins, as in
    DNS SRV; ties broken by URL so exactly one of two equal peers stays silent)."""
    return (a.priority, a.url) < (b.priority, b.url)


@dataclass
class Election:
    me: Announcement
    started_at: float
    misses: int = DEFAULT_MISSES
    startup_listen_s: float | None = None  # None: one own interval
    peers: dict[tuple[str, str], HeardPeer] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.misses < 1:
            raise ValueError(f"misses must be >= 1, got {self.misses}")
        if self.startup_listen_s is None:
            self.startup_listen_s = self.me.interval_s

    def heard(self, ann: Announcement, now: float) -> bool:
        """Record an announcement; returns False for our own (looped back) datagrams."""
        if peer_key(ann) == peer_key(self.me):
            return False
        self.peers[peer_key(ann)] = HeardPeer(ann, now)
        return True

    def forget_silent(self, now: float) -> None:
        self.peers = {k: p for k, p in self.peers.items() if p.silent_after(self.misses) > now}

    def better_alive(self, now: float) -> HeardPeer | None:
        """The best live peer that outranks us, if any."""
        alive = [
            p for p in self.peers.values()
            if p.silent_after(self.misses) > now and outranks(p.announcement, self.me)
        ]
        if not alive:
            return None
        return min(alive, key=lambda p: (p.announcement.priority, p.announcement.url))

    def in_startup(self, now: float) -> bool:
        assert self.startup_listen_s is not None
        return now < self.started_at + self.startup_listen_s

    def should_announce(self, now: float) -> bool:
        return not self.in_startup(now) and self.better_alive(now) is None

    def next_change(self, now: float) -> float:
        """Earliest time at which ``should_announce`` may change without new datagrams."""
        assert self.startup_listen_s is not None
        times = [self.started_at + self.startup_listen_s]
        times += [
            p.silent_after(self.misses) for p in self.peers.values()
            if outranks(p.announcement, self.me)
        ]
        future = [t for t in times if t > now]
        return min(future) if future else math.inf
