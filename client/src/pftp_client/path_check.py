"""Is a silent flow's path up again? New TCP connections to its server tell.

A link that goes down for a moment leaves the transfer's connection in TCP's
retransmission backoff: the server tries again 0.2, 0.4, 0.8, 1.6 s ... after the
try before, so the connection stays silent for up to as long again after the link
is back (sweep "flap", a 40 Mbit/s mirror whose link went down three times for
0.64 s: silent 0.35, 0.77 and 1.44 s after each). A new connection's handshake
gets through as soon as the path does.

A check that failed first and then got through says the path was down and is up
again: the engine renews the flow's transfer on a new connection
(Engine._path_answered). One that gets through at once says nothing about the
old connection: the silence is the server's (a pause, a stall, a frozen process),
and the rules for those go on. The check ends once the flow is heard from again.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable

from pftp_client.lazy import LazyLogger

# (the transports import this module on the way to the first connect: logging
# loads only when a check logs, pftp_client.lazy)
_LOG = LazyLogger(__name__)

# A check's first connection waits this long (or 3 round trips) before it counts
# as failed; each one after waits 1.5 times longer, up to MAX_WAIT_S: a link back
# is seen within about a second, and a long outage costs a SYN a second.
MIN_WAIT_S = 0.25
MAX_WAIT_S = 1.0

Address = tuple[int, tuple]  # (address family, socket address)


def peer_address(sock: socket.socket) -> Address | None:
    """The address ``sock`` is connected to, as ``probe`` takes it; None when it
    is not connected."""
    try:
        return sock.family, sock.getpeername()
    except OSError:
        return None


def probe(address: Address, timeout: float) -> bool:
    """Whether a TCP connection to ``address`` is accepted within ``timeout``. It
    is closed at once (FIN: the server sees a client that left)."""
    family, sockaddr = address
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(sockaddr)
        return True
    except OSError:  # (timed out, refused, unreachable: the path is not there yet)
        return False
    finally:
        sock.close()


class PathCheck:
    """New connections to ``address`` one after another, while ``quiet()``, until
    one is accepted: then ``answered(failures, started)`` with the count of those
    that were not before it and the clock when the one that was began. Runs on its
    own thread (``start``); ``stop`` ends it at the next connection."""

    def __init__(
        self,
        address: Address,
        *,
        rtt_s: float,
        quiet: Callable[[], bool],
        answered: Callable[[int, float], None],
        name: str = "pftp-path-check",
        clock: Callable[[], float] = time.monotonic,
        min_wait_s: float = MIN_WAIT_S,
        max_wait_s: float = MAX_WAIT_S,
    ) -> None:
        self.address = address
        self.first_wait_s = min(max_wait_s, max(min_wait_s, 3 * rtt_s))
        self.max_wait_s = max_wait_s
        self._quiet = quiet
        self._answered = answered
        self._clock = clock
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.tries = 0
        self.failures = 0  # tries that did not get through (so far: the path is down)

    def start(self) -> PathCheck:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def _run(self) -> None:
        wait = self.first_wait_s
        while not self._stopped.is_set() and self._quiet():
            began = self._clock()
            self.tries += 1
            ok = probe(self.address, wait)
            _LOG.debug("path check %d to %s: %s after %.3f s", self.tries, self.address[1],
                       "through" if ok else "not through", self._clock() - began)
            if ok:
                if not self._stopped.is_set():
                    self._answered(self.failures, began)
                return
            self.failures += 1
            # (refused or unreachable at once: the next try a whole wait later)
            self._stopped.wait(max(0.0, wait - (self._clock() - began)))
            wait = min(self.max_wait_s, wait * 1.5)
