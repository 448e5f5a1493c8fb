"""path_check: new TCP connections tell whether a silent flow's path is up again.
Real sockets on loopback: a port nobody listens on refuses (the path is "down"),
and a listener opened on it later is the path coming back."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from pftp_client.path_check import MAX_WAIT_S, PENDING_S, PathCheck, peer_address, probe


def _listener(port: int = 0) -> socket.socket:
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", port))
    srv.listen(8)
    return srv


@pytest.fixture
def free_port() -> Iterator[int]:
    """A loopback port with no listener (taken from one just closed)."""
    srv = _listener()
    port = srv.getsockname()[1]
    srv.close()
    yield port


def _answers() -> tuple[list[tuple[int, float]], threading.Event, Callable[[int, float], None]]:
    got: list[tuple[int, float]] = []
    done = threading.Event()

    def answered(failures: int, began: float) -> None:
        got.append((failures, began))
        done.set()

    return got, done, answered


def test_probe_tells_a_listening_port_from_a_closed_one(free_port: int) -> None:
    srv = _listener()
    try:
        assert probe((socket.AF_INET, srv.getsockname()), 1.0)
        # the probe's connection was closed: the server reads its end at once
        conn, _ = srv.accept()
        conn.settimeout(1.0)
        assert conn.recv(1) == b""
        conn.close()
    finally:
        srv.close()
    assert not probe((socket.AF_INET, ("127.0.0.1", free_port)), 1.0)


def test_peer_address_of_a_connected_socket_and_of_one_that_is_not() -> None:
    srv = _listener()
    cli = socket.create_connection(srv.getsockname(), timeout=1.0)
    try:
        assert peer_address(cli) == (socket.AF_INET, srv.getsockname())
    finally:
        cli.close()
        srv.close()
    alone = socket.socket()
    try:
        assert peer_address(alone) is None
    finally:
        alone.close()


def test_a_path_that_comes_back_is_answered_after_the_tries_that_failed(
    free_port: int,
) -> None:
    got, done, answered = _answers()
    check = PathCheck(
        (socket.AF_INET, ("127.0.0.1", free_port)), rtt_s=0.0, quiet=lambda: True,
        answered=answered, min_wait_s=0.05, max_wait_s=0.1,
    ).start()
    time.sleep(0.3)
    assert not done.is_set()
    back = time.monotonic()
    srv = _listener(free_port)
    try:
        assert done.wait(2.0)
    finally:
        check.stop()
        check.join(2.0)
        srv.close()
    (failures, began), = got
    assert failures >= 2 and failures == check.tries - 1
    # the try that got through began no earlier than one wait before the path came back
    assert began >= back - 0.1 - 0.02


def test_a_path_up_all_along_is_answered_with_no_failure() -> None:
    got, done, answered = _answers()
    srv = _listener()
    try:
        check = PathCheck((socket.AF_INET, srv.getsockname()), rtt_s=0.0,
                          quiet=lambda: True, answered=answered).start()
        assert done.wait(2.0)
        check.join(2.0)
    finally:
        srv.close()
    assert [f for f, _ in got] == [0]


def test_a_flow_heard_from_again_ends_the_check(free_port: int) -> None:
    got, _done, answered = _answers()
    quiet = threading.Event()
    quiet.set()
    check = PathCheck(
        (socket.AF_INET, ("127.0.0.1", free_port)), rtt_s=0.0, quiet=quiet.is_set,
        answered=answered, min_wait_s=0.05, max_wait_s=0.05,
    ).start()
    time.sleep(0.2)
    quiet.clear()
    check.join(1.0)
    tries = check.tries
    srv = _listener(free_port)
    try:
        time.sleep(0.2)
    finally:
        srv.close()
    assert got == [] and tries >= 2 and check.tries == tries


def test_the_wait_between_tries_grows_to_its_ceiling(free_port: int) -> None:
    got, _done, answered = _answers()
    check = PathCheck(
        (socket.AF_INET, ("127.0.0.1", free_port)), rtt_s=0.1, quiet=lambda: True,
        answered=answered,
    )
    # the first wait is 3 round trips (at least MIN_WAIT_S), then x1.5 up to MAX_WAIT_S;
    # a try is given up after PENDING_S or 3 round trips
    assert check.first_wait_s == pytest.approx(0.3)
    assert check.pending_s == pytest.approx(PENDING_S)
    far = PathCheck((socket.AF_INET, ("127.0.0.1", free_port)), rtt_s=0.6,
                    quiet=lambda: True, answered=answered)
    assert far.first_wait_s == pytest.approx(MAX_WAIT_S) and far.pending_s == pytest.approx(1.8)
    check = PathCheck(
        (socket.AF_INET, ("127.0.0.1", free_port)), rtt_s=0.0, quiet=lambda: True,
        answered=answered, min_wait_s=0.04, max_wait_s=0.09,
    ).start()
    time.sleep(0.5)
    check.stop()
    check.join(1.0)
    # 0.04, 0.06, 0.09, 0.09, ...: 5-7 tries in 0.5 s (not 12 at the first wait)
    assert 4 <= check.tries <= 8 and got == []


class _FullListener:
    """A listener whose accept queue is full: the kernel drops new SYNs, as a path
    that is down does (no answer at all, not a refusal). ``make_room`` is the path
    back: the fillers go (one still in SYN_SENT would take the room again) and the
    queue is drained."""

    def __init__(self) -> None:
        self.srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.srv.bind(("127.0.0.1", 0))
        self.srv.listen(0)
        self.address = (socket.AF_INET, self.srv.getsockname())
        self.fillers = []
        for _ in range(2):
            c = socket.socket()
            c.setblocking(False)
            c.connect_ex(self.srv.getsockname())
            self.fillers.append(c)
        time.sleep(0.05)

    def make_room(self) -> None:
        for c in self.fillers:
            c.close()
        self.srv.setblocking(False)
        while True:
            try:
                self.srv.accept()[0].close()
            except BlockingIOError:
                break

    def close(self) -> None:
        self.srv.close()
        for c in self.fillers:
            c.close()


def test_a_try_with_no_answer_does_not_hold_the_next_one_up() -> None:
    """Tries whose SYNs are dropped stay pending (up to pending_s) while new ones
    start a wait apart: once the path is back, the next try gets through within a
    wait, not after the pending one gives up; those pending count as failed."""
    full = _FullListener()
    got, done, answered = _answers()
    check = PathCheck(
        full.address, rtt_s=0.0, quiet=lambda: True,
        answered=answered, min_wait_s=0.1, max_wait_s=0.1, pending_s=5.0,
    )
    try:
        assert not probe(full.address, 0.2), "the queue is not full"
        check.start()
        time.sleep(0.45)
        # tries went on a wait apart, all still pending (none given up, none refused)
        assert not done.is_set() and check.tries >= 4 and check.failures == 0
        back = time.monotonic()
        full.make_room()  # the path is back
        assert done.wait(2.0)
        seen = time.monotonic() - back
    finally:
        check.stop()
        check.join(2.0)
        full.close()
    (failures, began), = got
    assert failures >= 3 and failures == check.tries - 1
    # (a single try at a time would have waited out its 5 s)
    assert seen < 0.5 and began >= back - 0.11


def test_a_try_through_only_late_counts_as_failed() -> None:
    """A try whose SYN was dropped and got through on the kernel's retransmission
    (1 s later, once the queue had room: as a router lets a held SYN go once the
    link is back) waited for the path: it counts as failed, so the check reads an
    outage, though it was the only try."""
    full = _FullListener()
    got, done, answered = _answers()
    check = PathCheck(
        full.address, rtt_s=0.0, quiet=lambda: True,
        answered=answered, min_wait_s=3.0, max_wait_s=3.0, pending_s=5.0, late_s=0.5,
    )
    try:
        check.start()
        time.sleep(0.3)
        full.make_room()  # before the first try's SYN is sent again
        assert done.wait(2.5)
    finally:
        check.stop()
        check.join(2.0)
        full.close()
    assert got[0][0] == 1 and check.tries == 1
