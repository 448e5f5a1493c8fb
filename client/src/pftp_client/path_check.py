"""Is a silent flow's path up again? New TCP connections to its server tell.

A link that goes down for a moment leaves the transfer's connection in TCP's
retransmission backoff: the server tries again 0.2, 0.4, 0.8, 1.6 s ... after the
try before, so the connection stays silent for up to as long again after the link
is back (sweep "flap", a 40 Mbit/s mirror whose link went down three times for
0.64 s: silent 0.35, 0.77 and 1.44 s after each). A new connection's handshake
gets through as soon as the path does.

The tries overlap: a new one starts every wait (0.25 s or 3 round trips at
first, growing to MAX_WAIT_S) while those before are still pending, so a try
whose SYN was lost does not hold the next one up: the path back is seen within a
wait and a round trip (one try at a time, each waiting up to a second, saw it up
to a second late: blackhole-back, silent 2.5 s in three runs, 3.5 s in the fourth).

A check that failed first and then got through says the path was down and is up
again: the engine renews the flow's transfer on a new connection
(Engine._path_answered). One that gets through at once says nothing about the
old connection: the silence is the server's (a pause, a stall, a frozen process),
and the rules for those go on. The check ends once the flow is heard from again.
"""

from __future__ import annotations

import errno
import select
import socket
import threading
import time
from collections.abc import Callable

from pftp_client.lazy import LazyLogger

# (the transports import this module on the way to the first connect: logging
# loads only when a check logs, pftp_client.lazy)
_LOG = LazyLogger(__name__)

# A check's second try starts this long (or 3 round trips) after its first; each
# wait after is 1.5 times longer, up to MAX_WAIT_S: a long outage costs two SYNs a
# second. A try not through within PENDING_S (or 3 round trips) is given up
# before the kernel sends its SYN again (after 1 s).
MIN_WAIT_S = 0.25
MAX_WAIT_S = 0.5
PENDING_S = 0.9

Address = tuple[int, tuple]  # (address family, socket address)

_IN_PROGRESS = {errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EALREADY}


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
    """New connections to ``address``, a wait apart, while ``quiet()``, until one
    is accepted: then ``answered(failures, started)`` with the count of the tries
    before it that had not got through (refused, unreachable, given up or still
    pending) and the clock when the one that did began. Runs on its own thread
    (``start``); ``stop`` ends it within a wait."""

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
        pending_s: float = PENDING_S,
        late_s: float | None = None,
    ) -> None:
        self.address = address
        self.first_wait_s = min(max_wait_s, max(min_wait_s, 3 * rtt_s))
        self.max_wait_s = max_wait_s
        self.pending_s = max(pending_s, 3 * rtt_s)
        # a try through only after this long waited for the path (_through)
        self.late_s = self.first_wait_s if late_s is None else late_s
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
        pending: dict[int, tuple[socket.socket, float, int]] = {}  # fd -> (sock, began, try)
        poller = select.poll()
        try:
            self._tries(pending, poller)
        finally:
            for sock, _began, _n in pending.values():
                sock.close()

    def _tries(self, pending: dict[int, tuple[socket.socket, float, int]],
               poller: select.poll) -> None:
        family, sockaddr = self.address
        wait = self.first_wait_s
        next_at = self._clock()
        while not self._stopped.is_set() and self._quiet():
            now = self._clock()
            if now >= next_at:
                try:
                    sock = socket.socket(family, socket.SOCK_STREAM)
                except OSError as exc:  # (out of descriptors: no try, the next a wait later)
                    _LOG.debug("path check to %s: no socket: %s", self.address[1], exc)
                    next_at = now + wait
                    continue
                self.tries += 1
                sock.setblocking(False)
                err = sock.connect_ex(sockaddr)
                if err == 0:
                    self._through(sock, now, self.tries, pending)
                    return
                if err in _IN_PROGRESS:
                    pending[sock.fileno()] = (sock, now, self.tries)
                    poller.register(sock, select.POLLOUT)
                else:  # (refused or unreachable at once)
                    self._not_through(sock, now, self.tries)
                next_at = now + wait
                wait = min(self.max_wait_s, wait * 1.5)
                continue
            for fd, (sock, began, n) in list(pending.items()):
                if now - began >= self.pending_s:
                    poller.unregister(fd)
                    del pending[fd]
                    self._not_through(sock, began, n)
            due = min([next_at, *(b + self.pending_s for _s, b, _n in pending.values())])
            timeout_ms = max(0.0, due - now) * 1000
            if not pending:
                self._stopped.wait(timeout_ms / 1000)
                continue
            for fd, _event in poller.poll(timeout_ms):
                sock, began, n = pending.pop(fd)
                poller.unregister(fd)
                if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
                    self._through(sock, began, n, pending)
                    return
                self._not_through(sock, began, n)

    def _not_through(self, sock: socket.socket, began: float, n: int) -> None:
        sock.close()
        self.failures += 1
        _LOG.debug("path check %d to %s: not through after %.3f s", n, self.address[1],
                   self._clock() - began)

    def _through(self, sock: socket.socket, began: float, n: int,
                 pending: dict[int, tuple[socket.socket, float, int]]) -> None:
        """Try ``n`` got through: the tries begun before it and still pending count
        as failed (each began a wait or more earlier and has had no answer), and
        so does this one if it took longer than the first wait: its SYN waited for
        the path (a router holds packets while it looks for a neighbour that went
        away, and lets them go once it answers: the lab's link-down mirrors, where
        a check's first try went through 0.6-0.9 s late and read as no outage)."""
        sock.close()
        took = self._clock() - began
        self.failures += sum(1 for _s, _b, k in pending.values() if k < n)
        if took > self.late_s:
            self.failures += 1
        _LOG.debug("path check %d to %s: through after %.3f s (%d not)", n, self.address[1],
                   took, self.failures)
        if not self._stopped.is_set():
            self._answered(self.failures, began)
