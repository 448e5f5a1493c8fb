"""The first GET of an http:// mirror, begun before httpx is loaded (the head start,
pftp_client.early), and what it shares with HttpFetcher's ranges begun ahead.

httpx takes ~0.1 s to import; FTP mirrors get their first request out ~20 ms after
exec, HTTP ones had theirs only after that import. ``HeadGet`` needs only the
standard library: its TCP handshake is under way while ``http.client`` loads
(~30 ms), and its request goes out while the probe thread loads httpx for the
fetcher that takes it over (``HttpFetcher.adopt_head``). Its answer is checked as
HttpFetcher checks any range (206 from the offset asked for, identity encoding,
Content-Range; 200 only from byte 0) before a byte is queued. Anything else (a
redirect, an error status, a chunked or compressed body) ends it with
``HeadUnusable`` and the mirror is asked again by httpx, as before: a head start
never decides how an odd server is treated.

Only http(s):// URLs without credentials, with no proxy set in the environment
(httpx would use it; this socket would not); https trusts what an HttpFetcher
with its default ``verify`` trusts (tls_context), as the early probes' fetchers do.
"""

from __future__ import annotations

import os
import queue
import socket
import threading
import time
from urllib.parse import urljoin, urlsplit

from pftp_client.transports.base import RangeNotHonoured
from pftp_client.transports.connect import connect

TYPE_CHECKING = False  # (typing.TYPE_CHECKING without importing typing: ~2 ms sooner)
if TYPE_CHECKING:
    import http.client  # (loaded in the thread while the handshake travels: _connect)
    import ssl
    from collections.abc import Callable

    from pftp_client.lazy import LazyLogger

__all__ = ["AheadReader", "HeadGet", "HeadUnusable", "parse_content_range", "usable"]

# A range begun ahead is read at most this far ahead of the fetch that takes it
# over; then TCP's flow control holds the server.
AHEAD_BUFFER_BYTES = 4 * 1024 * 1024
_READ_BYTES = 64 * 1024
_MAX_REDIRECTS = 10  # (httpx's default, as HttpFetcher's)
_HEADERS = {"Accept-Encoding": "identity", "User-Agent": "pftp-client"}
_PROXY_ENV = ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY")

_CONTENT_RANGE = r"^\s*bytes\s+(\d+)-(\d+)/(\d+|\*)\s*$"


def parse_content_range(value: str) -> tuple[int, int, int | None]:
    """``bytes 100-199/1000`` -> (100, 199, 1000); total None for ``*``."""
    import re  # (cached compiled by re; not needed before the first answer)

    m = re.match(_CONTENT_RANGE, value, re.IGNORECASE)
    if not m:
        raise RangeNotHonoured(f"unparsable Content-Range {value!r}")
    first, last = int(m.group(1)), int(m.group(2))
    total = None if m.group(3) == "*" else int(m.group(3))
    if last < first or (total is not None and last >= total):
        raise RangeNotHonoured(f"inconsistent Content-Range {value!r}")
    return first, last, total


def strong_validator(etag: str | None, last_modified: str | None) -> str | None:
    """What to send as If-Range: a strong ETag, else Last-Modified, else None."""
    if etag and not etag.startswith("W/"):
        return etag
    return last_modified or None


def usable(url: str) -> bool:
    """Whether a HeadGet may serve ``url`` (module doc)."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - property access validates the port
    except ValueError:
        return False
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname or "@" in parts.netloc:
        return False
    return not proxy_in_env(https=scheme == "https")


def proxy_in_env(https: bool) -> bool:
    """Is a proxy for http:// (or, with ``https``, for https:// too) set in the
    environment? httpx's trust_env reads these same variables."""
    names = _PROXY_ENV + (("https_proxy", "HTTPS_PROXY") if https else ())
    return any(os.environ.get(name) for name in names)


_tls_lock = threading.Lock()
_tls: ssl.SSLContext | None = None


def tls_context() -> ssl.SSLContext:
    """What an HttpFetcher with its default ``verify`` trusts (httpx's
    create_ssl_context): SSL_CERT_FILE or SSL_CERT_DIR from the environment, else
    certifi's bundle. One for all heads (loading the bundle takes ~10 ms)."""
    global _tls
    with _tls_lock:
        if _tls is None:
            import ssl

            if os.environ.get("SSL_CERT_FILE"):
                _tls = ssl.create_default_context(cafile=os.environ["SSL_CERT_FILE"])
            elif os.environ.get("SSL_CERT_DIR"):
                _tls = ssl.create_default_context(capath=os.environ["SSL_CERT_DIR"])
            else:
                import certifi

                _tls = ssl.create_default_context(cafile=certifi.where())
        return _tls


def _log() -> LazyLogger:
    from pftp_client.lazy import LazyLogger  # (logging loads with the CLI, not here)

    return LazyLogger(__name__)


class HeadUnusable(Exception):
    """The head start cannot serve this mirror; ask it again the usual way."""


class AheadReader:
    """Chunks of one HTTP response read by a thread ahead of the fetch that takes
    them over (``chunks``: (bytes, arrival_ns), then None at the body's end or the
    exception that ended it), at most ``limit`` bytes queued. ``head``: the
    transfer runs to the end of the file (a head start), and its arrivals are
    sampled for the lead start's judge until it is ``claimed``."""

    def __init__(self, offset: int | None, limit: int, *, head: bool) -> None:
        self.offset = offset
        self.limit = limit
        self.head = head
        self.requested_at = time.monotonic()
        self.checked = threading.Event()  # its response was checked (or failed)
        self.claimed = False  # a fetch took it over
        self.chunks: queue.Queue[tuple[bytes, int] | BaseException | None] = queue.Queue()
        self._arrivals: list[tuple[float, int]] = []  # (time, bytes so far), heads only
        self._room = threading.Semaphore(0)
        self._queued = 0
        self._got = 0
        self._lock = threading.Lock()
        self._stopped = threading.Event()

    def _queue(self, chunk: bytes, arrival_ns: int) -> None:
        """Queue a chunk; block while ``limit`` bytes wait for the fetch."""
        self.chunks.put((chunk, arrival_ns))
        self._got += len(chunk)
        with self._lock:
            self._queued += len(chunk)
            full = self._queued >= self.limit
            if self.head and not self.claimed:
                self._note_arrival(arrival_ns / 1e9, self._got)
        while full and not self._stopped.is_set():
            self._room.acquire(timeout=0.25)
            with self._lock:
                full = self._queued >= self.limit

    def _note_arrival(self, t: float, got: int, min_gap_s: float = 0.005) -> None:
        """Lock held: a (time, bytes so far) sample, at most every ``min_gap_s``
        (the lead start's verdict needs a few per round trip, not one per chunk)."""
        if self._arrivals and t - self._arrivals[-1][0] < min_gap_s:
            self._arrivals[-1] = (self._arrivals[-1][0], got)
        else:
            self._arrivals.append((t, got))

    def arrivals(self) -> list[tuple[float, int]]:
        with self._lock:
            return list(self._arrivals)

    def taken(self, n: int) -> None:
        with self._lock:
            self._queued -= n
        self._room.release()

    def stop(self) -> None:
        """The fetch is done with it (or it was never taken): the reader closes the
        response at its next chunk; nobody waits for that."""
        self._stopped.set()
        self._room.release()


class HeadGet(AheadReader):
    """``GET`` with ``Range: bytes=offset-`` on a connection of its own, begun at
    once in a thread (module doc). ``offset`` None: the offset depends on the size,
    which comes from ``size_hint(wait_s)`` (another mirror's answer, waited for at
    most ``wait_s``) when it has one by the time the connection is up, else from a
    HEAD on it; ``offset_for(size)`` then gives the offset, or None for no transfer
    (the size alone was wanted). The wait is ``hint_wait_s``, by default half the
    connection's handshake: a HEAD costs this path's round trip, so an answer due
    sooner than that is worth waiting for, and one that does not come costs at most
    half of it (lab, wide-area over nginx, a start slowed by other imports: the 80 ms
    mirror was up 13 ms before the 20 ms one's answer, and its HEAD put its data a
    round trip later).

    After ``checked``: ``error`` (a HeadUnusable or OSError: the mirror is to be
    asked again the usual way), or ``total`` (the file size), ``validator`` (for
    If-Range), ``sock`` (for the path's RTT) and ``offset`` (None: no transfer).
    ``result()`` waits for that."""

    def __init__(
        self,
        url: str,
        offset: int | None,
        *,
        timeout: float,
        limit: int = AHEAD_BUFFER_BYTES,
        offset_for: Callable[[int], int | None] | None = None,
        size_hint: Callable[[float], int | None] | None = None,
        hint_wait_s: float | None = None,
    ) -> None:
        super().__init__(offset, limit, head=True)
        self.url = url
        self.timeout = timeout
        self.total: int | None = None
        self.validator: str | None = None
        self.last_modified: str | None = None  # (with the validator)
        self.sock: socket.socket | None = None
        self.error: BaseException | None = None
        self._offset_for = offset_for
        self._size_hint = size_hint
        self._hint_wait_s = hint_wait_s
        self._handshake_s = 0.0  # (the last connection's round trip, _connect)
        threading.Thread(target=self._run, name="pftp-http-head", daemon=True).start()

    def _checked(self, error: BaseException | None = None) -> None:
        self.error = error
        self.checked.set()

    def result(self, timeout: float) -> BaseException | None:
        """Waits (at most ``timeout``) until its answer is checked: None when it is
        good, else why not (the transfer is then stopped)."""
        if not self.checked.wait(timeout):
            self.stop()
            return TimeoutError(f"no answer within {timeout:g}s")
        if self.error is not None:
            self.stop()
        return self.error

    # ------------------------------------------------------------------ thread

    def _run(self) -> None:
        conn = None
        url = self.url
        try:
            for _ in range(_MAX_REDIRECTS + 1):
                parts = urlsplit(url)
                path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
                tls = parts.scheme.lower() == "https"
                host = parts.hostname or ""
                sock = self._connect(host, parts.port or (443 if tls else 80), tls)
                import http.client  # (loaded while the handshake travels: _connect)

                if tls:
                    # (wrap_socket detaches the TCP socket it is given: only the
                    # wrapper reads its TCP_INFO, the path's RTT and losses, after)
                    sock = tls_context().wrap_socket(sock, server_hostname=host)
                    conn = http.client.HTTPSConnection(host, parts.port, timeout=self.timeout)
                else:
                    conn = http.client.HTTPConnection(host, parts.port, timeout=self.timeout)
                conn.sock = sock
                self.sock = sock
                if self.offset is None:
                    wait = (self._handshake_s / 2 if self._hint_wait_s is None
                            else self._hint_wait_s)
                    size = self._size_hint(wait) if self._size_hint is not None else None
                    if size is None:
                        _log().debug("%s: no size from the first mirror within %.3f s: HEAD",
                                     self.url, wait)
                        size = self._head(conn, path)
                    self.total = size
                    self.offset = self._offset_for(size) if self._offset_for is not None else None
                    if self.offset is None:
                        self._checked()
                        return
                self.requested_at = time.monotonic()
                conn.request("GET", path, headers={**_HEADERS, "Range": f"bytes={self.offset}-"})
                resp = conn.getresponse()
                location = resp.getheader("Location")
                if resp.status in (301, 302, 303, 307, 308) and location:
                    # (as httpx's follow_redirects: the fetcher asks the first URL again
                    # for later ranges and is redirected the same way)
                    url = urljoin(url, location)
                    conn.close()
                    conn = None
                    if not usable(url):
                        raise HeadUnusable(f"redirected to {url}")
                    continue
                try:
                    self._check(resp)
                except BaseException as exc:
                    self._checked(exc)
                    raise
                self._checked()
                self._read(resp)
                self.chunks.put(None)
                return
            raise HeadUnusable(f"more than {_MAX_REDIRECTS} redirects")
        except BaseException as exc:  # (handed to the fetch, which raises it)
            if not self.checked.is_set():
                self._checked(exc)
            self.chunks.put(exc)
        finally:
            if conn is not None:  # (not reused: httpx makes its own)
                conn.close()

    def _connect(self, host: str, port: int, tls: bool) -> socket.socket:
        """A TCP connection (the host's addresses tried as connect.connect does),
        its handshake overlapping the import of http.client (and for TLS, the
        loading of its trust: tls_context)."""

        def meanwhile() -> None:
            import http.client  # noqa: F401 - loaded while the SYN travels

            if tls:
                tls_context()

        sock = connect(host, port, self.timeout, started=meanwhile)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        from pftp_client.transports.window import smoothed_rtt

        self._handshake_s = smoothed_rtt(sock) or 0.0  # (the SYN's round trip)
        return sock

    def _head(self, conn: http.client.HTTPConnection, path: str) -> int:
        conn.request("HEAD", path, headers=_HEADERS)
        resp = conn.getresponse()
        resp.read()
        length = resp.getheader("Content-Length")
        if resp.status != 200 or length is None or not length.isdigit() or resp.will_close:
            raise HeadUnusable(f"HEAD answered {resp.status} {resp.reason}")
        self.validator = strong_validator(resp.getheader("ETag"), resp.getheader("Last-Modified"))
        self.last_modified = resp.getheader("Last-Modified")
        return int(length)

    def _check(self, resp: http.client.HTTPResponse) -> None:
        """As HttpFetcher._check_response, for the answers it accepts; anything else
        is HeadUnusable (httpx asks again and decides)."""
        encoding = (resp.getheader("Content-Encoding") or "identity").strip().lower()
        if encoding not in ("", "identity") or resp.chunked:
            raise HeadUnusable(f"{encoding} or chunked body")
        if resp.status == 206:
            if "multipart/" in (resp.getheader("Content-Type") or "").lower():
                raise HeadUnusable("multipart answer to a single range")
            first, _last, total = parse_content_range(resp.getheader("Content-Range") or "")
            if first != self.offset or total is None:
                raise HeadUnusable(f"Content-Range from {first}, asked from {self.offset}")
        elif resp.status == 200 and self.offset == 0:
            length = resp.getheader("Content-Length")
            if length is None or not length.isdigit():
                raise HeadUnusable("200 without Content-Length")
            total = int(length)
        else:
            raise HeadUnusable(f"GET from {self.offset} answered {resp.status} {resp.reason}")
        if self.total is not None and total != self.total:
            raise HeadUnusable(f"size {total}, expected {self.total}")
        self.total = total
        validator = strong_validator(resp.getheader("ETag"), resp.getheader("Last-Modified"))
        if validator:
            self.validator, self.last_modified = validator, resp.getheader("Last-Modified")

    def _read(self, resp: http.client.HTTPResponse) -> None:
        while not self._stopped.is_set():
            chunk = resp.read1(_READ_BYTES)
            if not chunk:
                if resp.length:  # (http.client counts what the body still owes)
                    raise ConnectionError(f"body ended {resp.length} bytes short")
                return
            self._queue(chunk, time.monotonic_ns())
