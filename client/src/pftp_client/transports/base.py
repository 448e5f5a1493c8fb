"""The contract between the download engine and a protocol (FTP, HTTP).

One ``RangeFetcher`` belongs to one flow (one mirror connection). It may keep its
control connection open between ranges (FTP) or reuse a keep-alive connection
(HTTP). The engine calls ``fetch`` repeatedly with the next piece of work.

Ranges can shrink while they are being fetched: another flow may steal the end
of this one (tail handling, paper 000) or the engine may cut a slow flow short
(paper 001, Slow-Server-Algo). The fetcher therefore re-reads ``end.value``
after every receive and stops as soon as it has delivered everything below it.
It must never deliver a byte at or beyond the current end, and never a byte at
the wrong offset (a server that ignores REST/Range is detected, not trusted).
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable

TYPE_CHECKING = False  # (typing.TYPE_CHECKING without importing typing)
if TYPE_CHECKING:
    from pftp_client.transports.fetcher import RangeFetcher

# A receive that took longer than this found its socket empty and waited for data
# (one that finds data queued returns in microseconds). What such receives return
# says how the data arrive (streams.burst_bytes): segment by segment at a bottleneck's
# pace, or in bursts from a sender that pauses.
WAITED_NS = 50_000


class TransferError(Exception):
    """Base for every transport failure; ``transient`` says whether a retry on the
    same mirror may succeed (4xx FTP replies, 503, timeouts) or not."""

    transient: bool = False

    def __init__(self, message: str, *, transient: bool | None = None) -> None:
        super().__init__(message)
        if transient is not None:
            self.transient = transient


class TransientError(TransferError):
    transient = True


# What a connect or send fails with when this host has no way toward the network:
# its link down, no route, no neighbour answering for its gateway (ARP).
_UNREACHABLE = (errno.ENETUNREACH, errno.EHOSTUNREACH, errno.ENETDOWN)
_UNREACHABLE_TEXT = tuple(os.strerror(n) for n in _UNREACHABLE)


def unreachable(exc: BaseException) -> bool:
    """Does ``exc``, or an error it was raised from, say the network is unreachable
    (ENETUNREACH, EHOSTUNREACH, ENETDOWN)? Transports wrap the OSError; its text
    is checked too, for those that kept only the message."""
    stack: list[BaseException | None] = [exc]
    seen: set[int] = set()
    while stack:
        e = stack.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in _UNREACHABLE:
            return True
        if any(text in str(e) for text in _UNREACHABLE_TEXT):
            return True
        stack += [e.__cause__, e.__context__]
    return False


class PermanentError(TransferError):
    """File missing, login refused, protocol unsupported: do not retry here."""


class RangeNotHonoured(PermanentError):
    """The server ignored REST or Range (would send bytes from the wrong offset)."""


class StallError(TransientError):
    """No byte arrived for longer than the stall timeout."""


class PrematureEnd(TransientError):
    """The server closed the data stream before the assigned end."""


class Cancelled(TransferError):
    """The engine asked this flow to stop (dropped for congestion, shutdown)."""


class Refusal(str):
    """A reason that asking the mirror again will not change (a PermanentError's:
    a missing file, a refused login), as a probe reports it (``reason``)."""

    __slots__ = ()


def shown(url: str) -> str:
    """``url`` for messages: without the password of its user info."""
    scheme, sep, rest = url.partition("://")
    netloc, slash, path = rest.partition("/")
    userinfo, at, host = netloc.rpartition("@")
    if not sep or not at or ":" not in userinfo:
        return url
    return f"{scheme}://{userinfo.split(':', 1)[0]}:***@{host}{slash}{path}"


_PASSWORD_IN_URL = None


def redacted(text: str) -> str:
    """``text`` with the password of every URL in it masked as ``shown`` does."""
    global _PASSWORD_IN_URL
    if "@" not in text:
        return text
    if _PASSWORD_IN_URL is None:
        import re

        _PASSWORD_IN_URL = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://[^/:@\s]*):[^@/\s]*@")
    return _PASSWORD_IN_URL.sub(r"\1:***@", text)


def reason(exc: BaseException) -> str:
    """``str(exc)``, marked a Refusal when retrying cannot help."""
    return Refusal(exc) if isinstance(exc, PermanentError) else str(exc)


class FileChanged(PermanentError):
    """The mirror's copy is not the one an interrupted download began with: its
    validator (HTTP ETag or Last-Modified, FTP MDTM) changed. Its bytes must not be
    mixed with the ones kept."""


class RangeEnd:
    """Exclusive end of the range being fetched; lowered concurrently by the engine.

    Only ``lower_to`` changes it, so it can only shrink, which is what makes
    lock-free reads in the fetcher's receive loop safe.
    """

    # A plain class, not a dataclass: this module is on the way to the first
    # connect (early.py), and dataclasses loads inspect (~10 ms).
    __slots__ = ("_lock", "value")

    def __init__(self, value: int) -> None:
        self.value = value
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"RangeEnd(value={self.value})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RangeEnd) and other.value == self.value

    __hash__ = None  # type: ignore[assignment]  # mutable, like the dataclass it was

    def lower_to(self, new_end: int) -> int:
        """Lower the end to ``new_end`` if that is below the current end (any
        floor, e.g. "not below what was already received", is the caller's
        business); returns the end actually in force."""
        with self._lock:
            if new_end < self.value:
                self.value = new_end
            return self.value

    def deliver(self, sink: DataSink, offset: int, block: memoryview, arrival_ns: int) -> int:
        """Pass the part of ``block`` (which starts at ``offset``) that lies below
        the end, as read just before the call, to ``sink``; return its length
        (0 when the end is at or below ``offset``). Fetchers hand every block
        over through this, so the clipping rule lives in one place.

        No lock is held while ``sink`` runs (a sink that takes the engine's
        lock while another thread holding that lock calls ``lower_to`` must not
        deadlock). Hence the precise guarantee: a block is clipped to the end
        in force when its delivery starts; a ``lower_to`` that lands while that
        sink call is running affects the next block. The engine's sink, which
        owns the ranges, checks against its own records under its own lock.
        """
        count = min(len(block), self.value - offset)
        if count <= 0:
            return 0
        sink(offset, block[:count], arrival_ns)
        return count


# sink(offset, data, arrival_ns): called for each received block, in order.
# arrival_ns is time.monotonic_ns() taken right after the receive call returned;
# the shared-congestion detector uses these as application-level timestamps.
DataSink = Callable[[int, memoryview, int], None]

# vet(url, validator): called by a fetcher once it knows what its server says
# about the file's version (validator None: the server says nothing), before it
# hands over a byte. Raises FileChanged to stop the fetcher's transfers
# (validators.ValidatorBook.vet).
Vet = Callable[[str, "str | None"], None]


def __getattr__(name: str) -> object:
    # RangeFetcher lives in fetcher.py: its Protocol base loads typing (~4 ms), and
    # this module is on the way to the first connect (early.py).
    if name == "RangeFetcher":
        from pftp_client.transports.fetcher import RangeFetcher

        return RangeFetcher
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def open_fetcher(
    url: str, *, timeout: float = 30.0, stall_timeout: float = 15.0
) -> RangeFetcher:
    """Create a fetcher for ``url`` by scheme (ftp://, http://, https://)."""
    from pftp_client.transports.registry import fetcher_for_url

    return fetcher_for_url(url, timeout=timeout, stall_timeout=stall_timeout)
