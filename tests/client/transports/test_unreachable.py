"""transports.base.unreachable: which failures say the network cannot be reached
(the engine then asks whether that is the client's own network, engine._outage_s)."""

from __future__ import annotations

import errno
import os
import socket

import pytest
from pftp_client.transports.base import TransferError, TransientError, unreachable


def _wrapped(exc: BaseException) -> TransferError:
    try:
        try:
            raise exc
        except OSError as inner:
            raise TransientError(f"connecting: {inner}") from inner
    except TransferError as outer:
        return outer


@pytest.mark.parametrize("code", [errno.ENETUNREACH, errno.EHOSTUNREACH, errno.ENETDOWN])
def test_an_unreachable_network_is_found_through_the_wrapping(code: int) -> None:
    assert unreachable(_wrapped(OSError(code, os.strerror(code))))


def test_the_message_alone_is_enough() -> None:
    # (a transport that kept only the text: "[Errno 113] No route to host")
    assert unreachable(TransientError(f"data connection: [Errno 113] {os.strerror(113)}"))


@pytest.mark.parametrize("exc", [
    ConnectionRefusedError(errno.ECONNREFUSED, os.strerror(errno.ECONNREFUSED)),
    ConnectionResetError(errno.ECONNRESET, os.strerror(errno.ECONNRESET)),
    TimeoutError("timed out"),
    socket.gaierror(socket.EAI_NONAME, "Name or service not known"),
])
def test_other_failures_are_not(exc: OSError) -> None:
    assert not unreachable(_wrapped(exc))
    assert not unreachable(TransientError("421 Too many connections"))


def test_a_cycle_in_the_chain_ends() -> None:
    a, b = TransientError("a"), TransientError("b")
    a.__context__, b.__context__ = b, a
    assert not unreachable(a)
