"""What the server is already sending (transports/window.py), on real kernel sockets."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest
from pftp_client.transports.window import committed_bytes, queued_bytes, received_bytes

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


def test_queue_and_window_are_counted_as_committed(loaded_pair: socket.socket) -> None:
    assert queued_bytes(loaded_pair) == SENT
    # the sender may still send the advertised window on top of what is queued
    assert committed_bytes(loaded_pair) >= SENT
    # a known rate caps the in-flight part (once the kernel has an RTT), never the queue
    assert SENT <= committed_bytes(loaded_pair, rate=1.0) <= committed_bytes(loaded_pair)


def test_received_counts_what_the_kernel_got_read_or_not(loaded_pair: socket.socket) -> None:
    """The lead-start verdict reads this, so a reader waiting for the CPU does not
    look like a stalled transfer."""
    assert received_bytes(loaded_pair) == SENT  # nothing read yet
    got = 0
    while got < 30_000:
        got += len(loaded_pair.recv(30_000 - got))
    assert received_bytes(loaded_pair) == SENT  # reading does not change it
    assert queued_bytes(loaded_pair) == SENT - 30_000


def test_received_on_a_closed_socket_raises() -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.close()
    with pytest.raises(OSError):  # the fetcher turns this into "no transfer running"
        received_bytes(sock)
