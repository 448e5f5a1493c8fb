"""The receive-window bound (transports/window.py) on real kernel sockets."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest
from pftp_client.transports.window import WindowBound, committed_bytes, queued_bytes

SENT = 100_000


@pytest.fixture
def loaded_pair() -> Iterator[socket.socket]:
    """A connected client socket with exactly SENT bytes waiting in its queue."""
    srv = socket.create_server(("127.0.0.1", 0))
    cli = socket.create_connection(srv.getsockname())
    peer, _ = srv.accept()
    peer.sendall(b"x" * SENT)
    deadline = time.monotonic() + 5
    while queued_bytes(cli) < SENT and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        yield cli
    finally:
        for s in (cli, peer, srv):
            s.close()


def _clamp(sock: socket.socket) -> int:
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_WINDOW_CLAMP)


def test_queue_and_window_are_counted_as_committed(loaded_pair: socket.socket) -> None:
    assert queued_bytes(loaded_pair) == SENT
    # the sender may still send the advertised window on top of what is queued
    assert committed_bytes(loaded_pair) >= SENT
    # a known rate caps the in-flight part (once the kernel has an RTT), never the queue
    assert SENT <= committed_bytes(loaded_pair, rate=1.0) <= committed_bytes(loaded_pair)


def test_clamp_is_what_the_range_still_lacks_in_whole_segments(
    loaded_pair: socket.socket,
) -> None:
    bound = WindowBound(loaded_pair)
    mss = bound.mss
    left = SENT + 5 * mss + 1  # 5 segments and a byte beyond what is queued
    bound.update(left)
    assert _clamp(loaded_pair) == 6 * mss
    bound.update(SENT - 10)  # everything it lacks is queued already: one segment
    assert _clamp(loaded_pair) == mss


def test_far_from_the_end_the_window_is_left_alone(loaded_pair: socket.socket) -> None:
    before = _clamp(loaded_pair)
    bound = WindowBound(loaded_pair)
    bound.update(1 << 40)
    assert _clamp(loaded_pair) == before
