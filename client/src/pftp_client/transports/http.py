"""HTTP(S) range reader over httpx: ``Range: bytes=offset-(end-1)`` on a keep-alive
client, checking that the server really sent the range before a byte is delivered.

A server that ignores ``Range`` answers 200 with the whole file; for offset > 0
those bytes start at 0, so they are never delivered (``RangeNotHonoured``). A
server whose file changed between requests is caught by ``If-Range`` (it then
answers 200) and by the total in ``Content-Range``.
"""

from __future__ import annotations

import contextlib
import http.client
import queue
import socket
import ssl
import threading
import time
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

import httpcore
import httpx
from pftp_client.path_check import peer_address
from pftp_client.transports.base import (
    WAITED_NS,
    Cancelled,
    DataSink,
    FileChanged,
    PermanentError,
    PrematureEnd,
    RangeEnd,
    RangeNotHonoured,
    StallError,
    TransferError,
    TransientError,
    Vet,
    shown,
)
from pftp_client.transports.connect import connect
from pftp_client.transports.http_head import (
    AHEAD_BUFFER_BYTES,
    AheadReader,
    HeadGet,
    parse_content_range,
    proxy_in_env,
    strong_validator,
    tls_context,
)

__all__ = ["HttpFetcher", "parse_content_range", "status_error"]

# Idle pooled connections are closed after this (httpx's default). A spare
# connection warmed by keep_spare counts as ready for _WARM_FOR_S of it.
_KEEPALIVE_EXPIRY_S = 5.0
_WARM_FOR_S = 4.0
# How often a fetch waiting on a range begun ahead looks at its end and the cancel.
_POLL_S = 0.1


class _StaggeredBackend(httpcore.SyncBackend):
    """httpcore's blocking network backend, its TCP connections made as
    connect.connect makes them: every address of the name, staggered (httpcore
    tries them one after the other, each for the whole connect timeout)."""

    def connect_tcp(
        self, host: str, port: int, timeout: float | None = None,
        local_address: str | None = None, socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        if local_address is not None:
            return super().connect_tcp(host, port, timeout, local_address, socket_options)
        from httpcore._backends.sync import SyncStream

        try:
            sock = connect(host, port, timeout if timeout is not None else _NO_TIMEOUT_S)
        except TimeoutError as exc:
            raise httpcore.ConnectTimeout(str(exc)) from exc
        except OSError as exc:
            raise httpcore.ConnectError(str(exc)) from exc
        if timeout is None:
            sock.settimeout(None)
        for option in socket_options or ():
            sock.setsockopt(*option)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return SyncStream(sock)


_NO_TIMEOUT_S = 86400.0


def _transport(verify: ssl.SSLContext | str | bool, limits: httpx.Limits) -> httpx.HTTPTransport:
    """httpx's transport with the staggered connections (_StaggeredBackend). Its
    pool takes a backend only when built, and httpx builds it with the default
    one: the pool is replaced by one built as httpx builds it (0.28), with ours."""
    context = verify if isinstance(verify, ssl.SSLContext) else httpx.create_ssl_context(verify)
    transport = httpx.HTTPTransport(verify=context, limits=limits)
    transport._pool = httpcore.ConnectionPool(
        ssl_context=context,
        max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry,
        network_backend=_StaggeredBackend(),
    )
    return transport


# Statuses where trying the same mirror again later may work.
_TRANSIENT_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504, 507, 509})


def status_error(url: str, status: int, reason: str = "") -> TransferError:
    """429/503/5xx and friends -> TransientError; 404 and other 4xx -> PermanentError."""
    message = f"{url}: HTTP {status} {reason}".rstrip()
    if status in _TRANSIENT_STATUS:
        return TransientError(message)
    if status in (404, 410):
        return PermanentError(f"{message} (file not found)")
    return PermanentError(message)


class HttpFetcher:
    """``RangeFetcher`` for http:// and https:// URLs (one keep-alive connection per flow).

    Cancellation is checked between received chunks; a server that sends
    nothing at all is noticed after ``stall_timeout`` (httpx read timeout), so
    an engine that needs a faster stop on a silent server calls ``close``.
    """

    def __init__(
        self,
        url: str,
        *,
        timeout: float = 30.0,
        stall_timeout: float = 15.0,
        verify: ssl.SSLContext | str | bool = True,
        max_redirects: int = 10,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s):// URL with a host: {url!r}")
        if timeout <= 0 or stall_timeout <= 0:
            raise ValueError("timeout and stall_timeout must be positive")
        self.url = url
        self.stall_timeout = stall_timeout
        if verify is True:
            # (one context for every fetcher: httpx builds its own per client, for
            # http:// too, loading the CA bundle each time: ~35 ms of CPU under the
            # GIL, for each of up to 8 connections per mirror)
            verify = tls_context()
        limits = httpx.Limits(keepalive_expiry=_KEEPALIVE_EXPIRY_S)
        self._client = httpx.Client(
            follow_redirects=True,
            max_redirects=max_redirects,
            # (httpx reads proxies from the environment only for its own transport;
            # either scheme's: a redirect may change it)
            **({} if proxy_in_env(https=True) else {"transport": _transport(verify, limits)}),
            verify=verify,
            limits=limits,
            timeout=httpx.Timeout(timeout, read=stall_timeout),
            # Ranges count bytes of the stored file, not of a compressed rendering.
            headers={"Accept-Encoding": "identity", "User-Agent": "pftp-client"},
        )
        self._validator: str | None = None  # strong ETag or Last-Modified, sent as If-Range
        # Told the validator before the first byte is handed over (FtpFetcher.vet).
        self.vet: Vet | None = None
        self._answered = False  # a response was checked: the validator is what it is
        self._modified: str | None = None  # Last-Modified with the validator
        self._vetted = False
        self._total: int | None = None
        self._closed = False
        self._sock: socket.socket | None = None  # the last response's, for path_rtt
        self._rtt: float | None = None  # the last RTT read from one (path_rtt)
        self._peer: tuple[int, tuple] | None = None  # its server's address (peer_address)
        self._reading: socket.socket | None = None  # the one fetch reads (interrupt)
        # (time.monotonic() of a head start's GET, its (arrival, bytes so far)) once a
        # fetch took it over: the engine's lead judge reads on from them, as FTP's
        self.head_history: tuple[float, list[tuple[float, int]]] | None = None
        # The next range, begun on a second connection before this one ends.
        self._next: AheadReader | None = None
        self.overlapped = 0  # ranges begun ahead and taken over (reports and tests)
        # receives that waited for data, and the bytes they returned (waited_reads)
        self.waits = [0, 0]
        self._lock = threading.Lock()
        self._warm_at = float("-inf")  # when keep_spare's HEAD left a connection idle
        self._warming = False

    # ----------------------------------------------------------- public API

    def fetch(self, offset: int, end: RangeEnd, sink: DataSink, cancel: threading.Event) -> int:
        if offset < 0:
            raise ValueError(f"negative offset {offset}")
        if cancel.is_set():
            raise Cancelled("cancelled before the transfer started")
        if self._closed:
            raise Cancelled("fetcher is closed")
        last = end.value - 1
        if last < offset:
            return 0
        nxt, self._next = self._next, None
        if nxt is not None:
            if nxt.offset == offset:
                if not nxt.head:
                    self.overlapped += 1
                return self._take_next(nxt, end, sink, cancel)
            nxt.stop()  # (the engine went elsewhere: not expected)
        pos = offset
        try:
            with self._client.stream(
                "GET", self.url, headers=self._range_headers(offset, last)
            ) as resp:
                self._check_response(resp, offset)
                self._keep_socket(resp)
                self._vet()
                with self._lock:
                    self._reading = self._sock
                called = time.monotonic_ns()
                for chunk in resp.iter_raw():
                    arrival = time.monotonic_ns()
                    if arrival - called > WAITED_NS:  # (the socket had nothing queued)
                        self.waits[0] += 1
                        self.waits[1] += len(chunk)
                    if cancel.is_set():
                        raise Cancelled(f"{self.url}: cancelled at byte {pos}")
                    got = end.deliver(sink, pos, memoryview(chunk), arrival)
                    pos += got
                    if got < len(chunk) or pos >= end.value:
                        # Done or end lowered: leaving the block closes the response
                        # (and, if the body is not finished, its connection).
                        return pos - offset
                    called = time.monotonic_ns()
        except httpx.HTTPError as exc:
            if pos >= end.value:  # (its end was lowered, and the read interrupted)
                return pos - offset
            raise self._error_at(exc, pos, offset) from exc
        finally:
            with self._lock:
                self._reading = None
        if pos < end.value:
            raise PrematureEnd(f"{self.url}: body ended at byte {pos} before {end.value}")
        return pos - offset

    def _range_headers(self, offset: int, last: int | None) -> dict[str, str]:
        """``last`` None: to the end of the file (a head start, the size unknown)."""
        headers = {"Range": f"bytes={offset}-{'' if last is None else last}"}
        if self._validator:
            headers["If-Range"] = self._validator
        return headers

    def _keep_socket(self, resp: httpx.Response) -> None:
        stream = resp.extensions.get("network_stream")
        sock = stream.get_extra_info("socket") if stream is not None else None
        if isinstance(sock, socket.socket):
            self._sock = sock
            self._peer = peer_address(sock) or self._peer
            self.path_rtt()  # (read while it is open: the path's RTT outlives it)

    def peer_address(self) -> tuple[int, tuple] | None:
        """(family, address) of the server the last response came from (after any
        redirect): where path_check.PathCheck tries new connections. Thread-safe."""
        return self._peer

    def interrupt(self) -> None:
        """The response ``fetch`` reads is shut down, so that a read waiting on a
        silent connection returns at once: for a range cut while its path was down
        (Engine._path_answered), whose connection would stay silent through TCP's
        backoff. The fetch then ends without error when it has all its (lowered)
        end asks for. Thread-safe; nothing to do between responses."""
        with self._lock:
            sock = self._reading
        if sock is not None:
            with contextlib.suppress(OSError):  # (closed meanwhile: nothing to wake)
                sock.shutdown(socket.SHUT_RDWR)

    def waited_reads(self) -> tuple[int, int]:
        """(reads that waited for data, bytes they returned) over this fetcher's
        life (streams.burst_bytes reads how data arrive from them)."""
        return self.waits[0], self.waits[1]

    def path_rtt(self) -> float | None:
        """The last response's connection's smoothed RTT in seconds; once that
        connection is closed (a head start's, when its range is done), the last
        one read from it (None without any). Thread-safe."""
        from pftp_client.transports.window import smoothed_rtt

        sock = self._sock
        if sock is not None:
            try:
                rtt = smoothed_rtt(sock)
            except (OSError, ValueError):
                rtt = None
            if rtt:
                self._rtt = rtt
        return self._rtt

    def out_of_order(self) -> tuple[int, int] | None:
        """(segments out of order, segments) on the last response's connection so
        far (window.out_of_order_counts): the receiver's view of the path's loss,
        as FtpFetcher.out_of_order's. None without one or where the kernel does not
        say. Thread-safe (the engine's monitor asks)."""
        from pftp_client.transports.window import out_of_order_counts

        sock = self._sock
        if sock is None:
            return None
        try:
            return out_of_order_counts(sock)
        except (OSError, ValueError):
            return None

    def keep_spare(self) -> None:
        """Have a second connection open and idle in the client's pool (a HEAD on
        it, from a thread) for the next range's GET (start_next): that GET's first
        byte then comes one round trip after it instead of after a TCP (and TLS)
        handshake too. The pool closes idle connections after
        ``_KEEPALIVE_EXPIRY_S``; one older than ``_WARM_FOR_S`` is warmed again.
        Idempotent, returns at once, thread-safe."""
        with self._lock:
            now = time.monotonic()
            if self._closed or self._warming or now - self._warm_at < _WARM_FOR_S / 2:
                return
            self._warming = True
        threading.Thread(target=self._warm, name="pftp-http-spare", daemon=True).start()

    def _warm(self) -> None:
        try:
            resp = self._client.head(self.url)
            if resp.headers.get("Connection", "").lower() != "close":  # (any status)
                with self._lock:
                    self._warm_at = time.monotonic()
        except httpx.HTTPError as exc:  # (the GET begun ahead connects itself)
            from pftp_client.lazy import LazyLogger

            LazyLogger(__name__).info("%s: no warm spare connection (%s)", self.url, exc)
        finally:
            with self._lock:
                self._warming = False

    def ahead_round_trips(self) -> int:
        """Round trips from a start_next GET to its first byte: one on the warm
        spare (keep_spare), else a handshake too (two with TLS)."""
        if time.monotonic() - self._warm_at < _WARM_FOR_S:
            return 1
        return 3 if self.url[:6].lower() == "https:" else 2

    # ------------------------------------------------------- head start

    def start_head(
        self, offset: int = 0, limit: int = AHEAD_BUFFER_BYTES, *, rest_checked_later: bool = False
    ) -> None:
        """Begin the transfer from ``offset`` to the end of the file now, ahead of its
        fetch (pftp_client.early, as FtpFetcher.start_head): up to ``limit`` bytes
        are read into memory until the first ``fetch`` at that offset takes it over.
        Its response is checked like any other (206 from that offset) before a byte
        is delivered, and its Content-Range total answers ``size`` (no HEAD).
        ``rest_checked_later`` is for FTP (HTTP checks every range)."""
        if self._next is None and not self._closed:
            self._next = _NextRange(self, offset, None, limit, head=True)

    def adopt_head(self, head: HeadGet) -> None:
        """Take over what a head start begun before httpx was loaded (early.py)
        learned, once its answer was checked good (``head.result``): the size and
        the validator, and its transfer when it began one: the first ``fetch`` at
        its offset reads on from its chunks, as from ``start_head``'s."""
        if head.error is not None or not head.checked.is_set():
            raise ValueError("only a head start with a good answer can be taken over")
        if self._validator is None:
            self._validator, self._modified = head.validator, head.last_modified
        self._answered = True
        self._check_total(head.total)
        if head.offset is None:
            return
        if self._next is not None or self._closed:
            head.stop()
            return
        self._next = head
        self._sock = head.sock  # (the path's RTT, as a response's: _keep_socket)
        if head.sock is not None:
            self._peer = peer_address(head.sock) or self._peer
        self.path_rtt()

    def head_progress(self) -> tuple[float, list[tuple[float, int]], float | None] | None:
        """While a head transfer waits for its fetch: (time.monotonic() of its GET,
        [(arrival time, bytes so far)], the path's RTT or None); None otherwise
        (lead.judge_start reads it, as FtpFetcher.head_progress). Thread-safe."""
        nxt = self._next
        if nxt is None or not nxt.head or nxt.claimed:
            return None
        return nxt.requested_at, nxt.arrivals(), self.path_rtt()

    def head_bytes(self, limit: int) -> tuple[bytes, bool] | None:
        """FTP mirrors compare their first bytes with the leader's to check REST;
        an HTTP leader keeps none (they then check REST by a probe)."""
        return None

    @property
    def rest_honoured(self) -> bool:
        """Every HTTP range is checked from its response (206 and Content-Range)."""
        return True

    def prepare(self, cancel: threading.Event) -> None:
        """Nothing to do ahead of the first range (FTP checks REST here)."""

    def can_start_next(self) -> bool:
        return self._next is None and not self._closed

    def start_next(self, offset: int, end: int) -> bool:
        """Begin the range [offset, end) on a second connection now, while the
        current range still runs; the next ``fetch`` at ``offset`` takes it over
        (see FtpFetcher.start_next). Its response is checked like any other
        before a byte is delivered. Returns at once. Only from the thread that
        fetches."""
        if not self.can_start_next() or end <= offset:
            return False
        self._next = _NextRange(self, offset, end)
        return True

    def _take_next(
        self, nxt: AheadReader, end: RangeEnd, sink: DataSink, cancel: threading.Event
    ) -> int:
        """``fetch`` of a range begun ahead: its reader thread's chunks, in order."""
        pos = offset = nxt.offset
        if nxt.head and not nxt.claimed:
            self.head_history = (nxt.requested_at, nxt.arrivals())
        nxt.claimed = True
        try:
            last = time.monotonic()
            while pos < end.value:
                if cancel.is_set() or self._closed:
                    raise Cancelled(f"{self.url}: cancelled at byte {pos}")
                try:
                    # (a short wait: an end lowered under a silent transfer is seen)
                    item = nxt.chunks.get(timeout=_POLL_S)
                except queue.Empty:
                    if time.monotonic() - last >= self.stall_timeout:
                        raise StallError(
                            f"{self.url}: no data for {self.stall_timeout:g}s at byte {pos}"
                        ) from None
                    continue
                last = time.monotonic()
                if isinstance(item, BaseException):
                    if isinstance(item, TransferError):
                        raise item
                    raise self._error_at(item, pos, offset) from item
                if item is None:
                    break
                chunk, arrival = item
                nxt.taken(len(chunk))
                if not self._vetted:
                    self._vet()
                got = end.deliver(sink, pos, memoryview(chunk), arrival)
                pos += got
                if got < len(chunk):
                    break
        finally:
            nxt.stop()
        if pos < end.value:
            raise PrematureEnd(f"{self.url}: body ended at byte {pos} before {end.value}")
        return pos - offset

    @property
    def validator(self) -> str | None:
        return self._validator

    def _vet(self) -> None:
        """Tell ``vet`` the file's version once a response showed it (raises
        FileChanged)."""
        if self.vet is not None and self._answered and not self._vetted:
            self.vet(self.url, self._validator)
            self._vetted = True

    def _error_at(self, exc: BaseException, pos: int, offset: int) -> TransferError:
        """An httpx error met at byte ``pos`` of a range from ``offset``, as ours
        (a fetch's own request, or one begun ahead and handed over)."""
        # (OSError, TimeoutError, http.client's: a head start's own socket, HeadGet)
        if isinstance(exc, (httpx.ReadTimeout, TimeoutError)):
            return StallError(f"{self.url}: no data for {self.stall_timeout:g}s at byte {pos}")
        cert = _cert_failure(exc)
        if cert is not None:
            # Asking again cannot help: the certificate is the same next time.
            return _untrusted(self.url, cert)
        if isinstance(
            exc, (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.WriteError)
        ):
            return TransientError(f"{self.url}: cannot connect: {exc}")
        if isinstance(
            exc, (httpx.RemoteProtocolError, httpx.ReadError, OSError, http.client.HTTPException)
        ):
            if pos == offset:
                return TransientError(f"{self.url}: connection failed: {exc}")
            return PrematureEnd(f"{self.url}: connection broke at byte {pos}: {exc}")
        if isinstance(exc, httpx.TooManyRedirects):
            return PermanentError(f"{self.url}: too many redirects")
        if isinstance(exc, httpx.UnsupportedProtocol):
            return PermanentError(f"{self.url}: redirected to an unsupported URL: {exc}")
        if self._closed:
            return Cancelled(f"{self.url}: fetcher closed during transfer")
        return TransientError(f"{self.url}: {type(exc).__name__}: {exc}")

    def size(self, *, passive: bool = False) -> int | None:
        """Content-Length from HEAD (or the total of a one-byte ranged GET when
        HEAD is refused); None when the server does not say. With a head transfer
        started, its response's total answers (``passive`` is for FTP)."""
        nxt = self._next
        if self._total is None and nxt is not None and nxt.head:
            nxt.checked.wait(self._client.timeout.connect or 30.0)
        if self._total is not None:
            return self._total
        try:
            resp = self._client.head(self.url)
            if resp.status_code in (405, 501):
                resp = self._client.get(self.url, headers={"Range": "bytes=0-0"})
                if resp.status_code == 206:
                    self._total = parse_content_range(resp.headers.get("Content-Range", ""))[2]
                    return self._total
        except httpx.HTTPError as exc:
            cert = _cert_failure(exc)
            if cert is not None:
                raise _untrusted(self.url, cert) from exc
            raise TransientError(f"{self.url}: size query failed: {exc}") from exc
        if resp.status_code != 200:
            raise status_error(self.url, resp.status_code, resp.reason_phrase)
        encoding = resp.headers.get("Content-Encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):  # (its length is the encoded body's: _check_response)
            raise PermanentError(f"{self.url}: server sends the file {encoding}-encoded")
        self._remember_validator(resp)
        length = resp.headers.get("Content-Length")
        if length is not None and length.isdigit():
            self._total = int(length)
        return self._total

    def close(self) -> None:
        self._closed = True
        nxt, self._next = self._next, None
        if nxt is not None:
            nxt.stop()
        self._client.close()

    def __enter__(self) -> HttpFetcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --------------------------------------------------------------- checks

    def _check_response(self, resp: httpx.Response, offset: int) -> None:
        """Raise unless the body that follows starts exactly at ``offset``."""
        status = resp.status_code
        encoding = resp.headers.get("Content-Encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            raise PermanentError(f"{self.url}: server sent a {encoding}-encoded body")
        if status == 206:
            if "multipart/" in resp.headers.get("Content-Type", "").lower():
                raise RangeNotHonoured(f"{self.url}: multipart answer to a single range")
            first, _last, total = parse_content_range(resp.headers.get("Content-Range", ""))
            if first != offset:
                raise RangeNotHonoured(
                    f"{self.url}: asked for byte {offset}, got range from {first}"
                )
            self._check_total(total)
        elif status == 200:
            if offset > 0:
                modified = resp.headers.get("Last-Modified")
                if self._validator and modified and self._modified not in (None, modified):
                    # If-Range did not match, and the modification time moved too
                    # (an ETag alone also differs between the servers behind one
                    # name): the file changed during the download
                    raise FileChanged(
                        f"{shown(self.url)}: the file changed during the download "
                        f"(modified {self._modified} before, {modified} now)"
                    )
                # Whole file from byte 0 (Range ignored).
                raise RangeNotHonoured(
                    f"{self.url}: HTTP 200 instead of 206 for a range at {offset}"
                )
            length = resp.headers.get("Content-Length")
            self._check_total(int(length) if length and length.isdigit() else None)
        elif status == 416:
            raise PermanentError(f"{self.url}: range from byte {offset} is beyond the file (416)")
        else:
            raise status_error(self.url, status, resp.reason_phrase)
        self._remember_validator(resp)
        self._answered = True

    def expect_size(self, size: int) -> None:
        """The file's size as the plan has it (the coordinator's, or the mirrors'
        majority): an answer for a file of another size (an HTML error page sent
        with 200, another version of the file) is refused before its first byte."""
        if self._total is not None and self._total != size:
            raise PermanentError(
                f"{self.url}: the server's file has {self._total} bytes, expected {size}"
            )
        self._total = size

    def _check_total(self, total: int | None) -> None:
        if total is None:
            return
        if self._total is not None and total != self._total:
            raise PermanentError(
                f"{self.url}: the server's file has {total} bytes, expected {self._total} "
                "(another version, or an error page)"
            )
        self._total = total

    def _remember_validator(self, resp: httpx.Response) -> None:
        if self._validator:
            return
        self._modified = resp.headers.get("Last-Modified")
        # (If-Range needs a strong validator)
        self._validator = strong_validator(
            resp.headers.get("ETag"), resp.headers.get("Last-Modified")
        )


class _NextRange(AheadReader):
    """A range's GET sent ahead on its own connection (HttpFetcher.start_next): a
    thread checks the response and queues its chunks, at most AHEAD_BUFFER_BYTES
    ahead of the fetch that takes them; then ``None`` (body complete) or the
    exception that ended it. ``head``: a head start (start_head), to the end of
    the file."""

    def __init__(
        self, fetcher: HttpFetcher, offset: int, end: int | None,
        limit: int = AHEAD_BUFFER_BYTES, *, head: bool = False,
    ) -> None:
        super().__init__(offset, limit, head=head)
        self._thread = threading.Thread(
            target=self._run, args=(fetcher, end), name="pftp-http-next", daemon=True
        )
        self._thread.start()

    def _run(self, fetcher: HttpFetcher, end: int | None) -> None:
        assert self.offset is not None
        headers = fetcher._range_headers(self.offset, None if end is None else end - 1)
        try:
            with fetcher._client.stream("GET", fetcher.url, headers=headers) as resp:
                try:
                    fetcher._check_response(resp, self.offset)
                    fetcher._keep_socket(resp)  # (this connection carries the flow next)
                finally:
                    self.checked.set()
                for chunk in resp.iter_raw():
                    if self._stopped.is_set():
                        return  # (leaving the block closes the unfinished response)
                    self._queue(chunk, time.monotonic_ns())
            self.chunks.put(None)
        except BaseException as exc:  # (handed to the fetch, which raises it)
            self.checked.set()
            self.chunks.put(exc)


def _cert_failure(exc: BaseException) -> ssl.SSLCertVerificationError | None:
    """The certificate check that failed behind ``exc`` (httpx wraps it), if any."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, ssl.SSLCertVerificationError):
            return cur
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return None


def certificate_refusal(url: str, exc: BaseException) -> PermanentError | None:
    """A failed certificate check behind ``exc`` as the error to report, or None."""
    cert = _cert_failure(exc)
    return None if cert is None else _untrusted(url, cert)


def _untrusted(url: str, cert: ssl.SSLCertVerificationError) -> PermanentError:
    return PermanentError(
        f"{url}: the server's certificate is not trusted ({cert.verify_message or cert}); "
        "a private CA can be given with SSL_CERT_FILE or SSL_CERT_DIR"
    )
