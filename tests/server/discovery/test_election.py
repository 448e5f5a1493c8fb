"""The primary/backup rule (paper 004, 3.2.3-3.2.4) as pure logic, with a fake clock."""

from __future__ import annotations

import math

import pytest
from pftp_coordinator.discovery.election import Election, outranks
from pftp_wire.models import Announcement


def ann(url: str, priority: int, interval_s: float = 1.0, name: str = "") -> Announcement:
    return Announcement(url=url, priority=priority, interval_s=interval_s, name=name)


PRIMARY = ann("http://10.0.0.1:8470", 10)
BACKUP = ann("http://10.0.0.2:8470", 20)


def test_lower_priority_number_wins_and_url_breaks_ties() -> None:
    assert outranks(PRIMARY, BACKUP)
    assert not outranks(BACKUP, PRIMARY)
    a, b = ann("http://a", 5), ann("http://b", 5)
    assert outranks(a, b) and not outranks(b, a)
    assert not outranks(a, a)


def test_listens_one_interval_before_first_announcement() -> None:
    e = Election(PRIMARY, started_at=100.0)
    assert not e.should_announce(100.5)
    assert e.next_change(100.5) == pytest.approx(101.0)
    assert e.should_announce(101.0)
    assert math.isinf(e.next_change(101.0))


def test_backup_stays_silent_while_primary_announces() -> None:
    e = Election(BACKUP, started_at=0.0, misses=3)
    for t in (0.2, 1.2, 2.2, 3.2, 4.2):
        e.heard(PRIMARY, t)
        assert not e.should_announce(t + 0.5)


def test_backup_takes_over_after_misses_intervals_of_silence() -> None:
    e = Election(BACKUP, started_at=0.0, misses=3)
    e.heard(PRIMARY, 5.0)  # last announcement of the primary; its interval is 1 s
    assert not e.should_announce(7.9)
    assert e.next_change(7.9) == pytest.approx(8.0)
    assert e.should_announce(8.0)


def test_backup_steps_back_when_primary_returns() -> None:
    e = Election(BACKUP, started_at=0.0, misses=3)
    assert e.should_announce(1.0)
    e.heard(PRIMARY, 20.0)
    assert not e.should_announce(20.0)
    assert e.better_alive(20.0) is not None
    assert e.better_alive(20.0).announcement.url == PRIMARY.url


def test_primary_keeps_announcing_when_a_backup_is_heard() -> None:
    e = Election(PRIMARY, started_at=0.0)
    e.heard(BACKUP, 0.5)
    assert e.should_announce(1.0)
    assert math.isinf(e.next_change(1.0))  # worse peers never change our decision


def test_uses_the_peers_own_interval() -> None:
    slow_primary = ann("http://10.0.0.1:8470", 10, interval_s=10.0)
    e = Election(BACKUP, started_at=0.0, misses=2)
    e.heard(slow_primary, 1.0)
    assert not e.should_announce(20.9)
    assert e.should_announce(21.0)


def test_own_datagrams_are_ignored() -> None:
    e = Election(PRIMARY, started_at=0.0)
    assert not e.heard(PRIMARY.model_copy(), 0.1)
    assert e.peers == {}


def test_forget_silent_drops_dead_peers() -> None:
    e = Election(BACKUP, started_at=0.0, misses=3)
    e.heard(PRIMARY, 1.0)
    e.forget_silent(3.9)
    assert e.peers
    e.forget_silent(4.0)
    assert e.peers == {}


def test_three_coordinators_only_the_best_live_one_announces() -> None:
    third = ann("http://10.0.0.3:8470", 30)
    backup, last = (Election(BACKUP, started_at=0.0), Election(third, started_at=0.0))
    for t in (1.0, 2.0):
        for e in (backup, last):
            e.heard(PRIMARY, t)
        last.heard(BACKUP, t)
    assert not backup.should_announce(2.5) and not last.should_announce(2.5)
    # primary dies after t=2: the backup takes over at 5.0; the third stays silent because
    # the backup (better than it) is heard.
    assert backup.should_announce(5.0)
    last.heard(BACKUP, 5.0)
    assert not last.should_announce(5.5)


def test_rejects_zero_misses() -> None:
    with pytest.raises(ValueError, match="misses"):
        Election(PRIMARY, started_at=0.0, misses=0)
