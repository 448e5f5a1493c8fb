"""FTP range reader: ``REST offset`` + ``RETR`` over a passive data connection,
stopping exactly at a movable end (paper 001, 2.3; paper 004: byte-oriented, no
byte lost, none written at the wrong offset).

Why a small client over sockets and not ``ftplib``: the flow needs exact
control that ftplib hides or gets wrong for us. ftplib accepts any 2xx/3xx
reply to ``REST`` (we require 350, anything else means the server would send
from the wrong offset), uses EPSV only on IPv6, reads one reply after ``ABOR``
(servers send one, two or three, in different orders), and its ``retrbinary``
allocates a new bytes object per block. Here the data socket is read with
``recv_into`` into one reused buffer, the end is re-read after every receive,
and after an early stop the control connection is resynchronised with a
``NOOP`` so it can carry the next range.

Round trips (RFC 959 allows a client to send commands before earlier replies
arrive; the server answers them in order). Where it is safe, commands are
written together and their replies read afterwards, one per command:
``USER``+``PASS``+``TYPE I``+``SIZE``+``EPSV`` as soon as the connection is up,
before the greeting; ``REST n``+``RETR`` while the data connection is being
connected; and ``NOOP``+``EPSV`` after an abort, so the next range finds its
passive port ready. Nothing is pipelined behind ``RETR``/``ABOR`` (see
``_login``, ``_start_retr`` and ``_abort`` for the servers that would pair
replies wrongly). A byte reaches the sink only after REST was answered
350 and RETR 1xx, as before. ``pipeline=False`` (or a greeting from a server
known to mishandle pipelining, or a pipelined exchange that loses replies)
falls back to one command at a time.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import socket
import struct
import threading
import time
from collections import namedtuple
from collections.abc import Callable

from pftp_client.lazy import LazyLogger
from pftp_client.path_check import peer_address
from pftp_client.plain_url import plain_url_parts
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
)
from pftp_client.transports.connect import connect
from pftp_client.transports.window import (
    committed_bytes,
    out_of_order_counts,
    received_bytes,
    smoothed_rtt,
)

__all__ = ["FtpFetcher", "FtpReply", "FtpTarget", "ftp_target", "parse_epsv", "parse_pasv"]

# Words of a 530 that means "full for now", not "wrong login" (_check_login).
_FULL_SERVER_WORDS = ("maximum", "too many", "try again", "try later", "limit", "busy")

log = LazyLogger(__name__)  # (logging is not imported before the first connect)

RECV_BUFSIZE = 256 * 1024
# How often a blocked receive wakes up to look at the cancel event and its end
# (lowered under a silent transfer when its path is back: Engine._path_answered).
_POLL_SECONDS = 0.1
# Longest reply line we accept (RFC 959 has no limit; 8 KiB is generous).
_MAX_LINE = 8192
# Replies to read while resynchronising after an abort before giving up.
_MAX_DRAIN_REPLIES = 8
# Bytes compared by the REST probe when the server does not implement SIZE.
_PROBE_BYTES = 4096
# A passive port obtained ahead of its transfer (pipelined after login or after an
# abort) is used only while younger than this. pyftpdlib closes an unused passive
# listener after 30 s and then writes an unsolicited "421 Passive data channel timed
# out"; vsftpd and pure-ftpd keep it until the next EPSV/PASV/transfer.
_PASSIVE_MAX_AGE = 10.0
# A head transfer (FtpFetcher.start_head) is read into memory up to this much until
# its fetch takes it over; then the kernel's flow control holds the rest.
HEAD_BUFFER_BYTES = 4 * 1024 * 1024
# Greetings of servers that lftp (ftp:auto-sync-mode) knows to mishandle pipelined
# commands: with these we send one command at a time.
_SYNC_ONLY_GREETINGS = ("icrosoft FTP Service", "MadGoat", "MikroTik")
# Each reply to the pipelined login (FtpFetcher._login) comes within this (or ten
# round trips, if longer), or the server is taken to have lost the early commands.
_BATCH_REPLY_MIN_S = 3.0
# Kernel receive timestamps (SO_TIMESTAMPNS, Linux value when the module lacks it).
_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
DEFAULT_TIMEOUT_S = 30.0  # connect and reply; ClientSettings.timeout has the same default
_TS_ANCILLARY = socket.CMSG_SPACE(16) if hasattr(socket, "CMSG_SPACE") else 0


# ---------------------------------------------------------------- pure parsing


# Named tuples, not dataclasses or typing.NamedTuple: this module is on the way to
# the first connect (early.py), where dataclasses (inspect, ~10 ms) and typing
# (~4 ms) would be loaded for them alone.
class FtpReply(namedtuple("FtpReply", "code text")):
    __slots__ = ()
    code: int
    text: str  # every line of the reply, joined with "\n"

    @property
    def kind(self) -> int:
        """First digit: 1 preliminary, 2 done, 3 more needed, 4 transient, 5 permanent."""
        return self.code // 100

    def __str__(self) -> str:
        return self.text.replace("\n", " | ")


class FtpTarget(namedtuple("FtpTarget", "host port user password path")):
    __slots__ = ()
    host: str
    port: int
    user: str | None  # None: take it from netrc or log in anonymously
    password: str | None
    path: str  # as sent after RETR/SIZE: relative to the login directory unless it starts with /


def ftp_target(url: str) -> FtpTarget:
    """Split an ftp:// URL (RFC 1738 section 3.2) into what the client sends.

    The path is percent-decoded segment by segment and made relative to the
    login directory (``ftp://h/pub/f`` -> ``pub/f``); ``%2F`` at the start
    makes it absolute (``ftp://h/%2Fsrv/f`` -> ``/srv/f``). A ``;type=`` suffix
    is dropped (we always transfer in binary).
    """
    parts = plain_url_parts(url)
    unquote: Callable[[str], str] = str  # (a plain URL has no "%" to decode)
    if parts is None:
        import functools
        import urllib.parse

        # Bytes that are not UTF-8 (a Latin-1 file name, %E9) go to the server as
        # they are: send_batch encodes with surrogateescape. "replace" sent U+FFFD.
        unquote = functools.partial(urllib.parse.unquote, errors="surrogateescape")
        split = urllib.parse.urlsplit(url)
        try:
            parts = (split.scheme, split.hostname, split.port, split.path,
                     split.username, split.password)
        except ValueError as exc:
            raise ValueError(f"URL has an invalid port: {url!r}") from exc
    scheme, hostname, port, raw_path, username, password = parts
    if scheme.lower() != "ftp":
        raise ValueError(f"not an ftp:// URL: {url!r}")
    if not hostname:
        raise ValueError(f"FTP URL has no host: {url!r}")
    raw_path = raw_path.split(";type=")[0]
    segments = [unquote(s) for s in raw_path.lstrip("/").split("/")]
    path = "/".join(segments)
    if not path or path.endswith("/"):
        raise ValueError(f"FTP URL does not name a file: {url!r}")
    for field_value in (path, unquote(username or ""), unquote(password or "")):
        if "\r" in field_value or "\n" in field_value or "\0" in field_value:
            raise ValueError(f"FTP URL contains a control character: {url!r}")
    return FtpTarget(
        host=hostname,
        port=port or 21,
        user=unquote(username) if username is not None else None,
        password=unquote(password) if password is not None else None,
        path=path,
    )


def parse_epsv(text: str) -> int:
    """Port from a 229 reply: ``229 Entering Extended Passive Mode (|||6446|)`` (RFC 2428):
    the first ``(dddNd)`` with d any one character and N 1-5 digits. (Without re:
    this runs on the way to the first byte, and re costs ~3 ms to load.)"""
    start = text.find("(")
    while start >= 0:
        d = text[start + 1 : start + 2]
        if d and text[start + 2 : start + 4] == d + d:
            end = text.find(d + ")", start + 4)
            digits = text[start + 4 : end] if end > 0 else ""
            if 1 <= len(digits) <= 5 and digits.isdigit() and digits.isascii():
                if 0 < int(digits) < 65536:
                    return int(digits)
                break
        start = text.find("(", start + 1)
    raise TransientError(f"unparsable EPSV reply: {text!r}")


def parse_pasv(text: str) -> tuple[str, int]:
    """Address and port from a 227 reply: ``227 Entering Passive Mode (h1,h2,h3,h4,p1,p2)``."""
    import re  # (rare: EPSV is tried first)

    m = re.search(r"(\d{1,3}),(\d{1,3}),(\d{1,3}),(\d{1,3}),(\d{1,3}),(\d{1,3})", text)
    if not m:
        raise TransientError(f"unparsable PASV reply: {text!r}")
    nums = [int(g) for g in m.groups()]
    if any(n > 255 for n in nums) or nums[4] * 256 + nums[5] == 0:
        raise TransientError(f"invalid PASV reply: {text!r}")
    return ".".join(map(str, nums[:4])), nums[4] * 256 + nums[5]


def error_for_reply(what: str, reply: FtpReply) -> TransferError:
    """4xx -> TransientError, 5xx (and anything unexpected) -> PermanentError."""
    message = f"{what}: {reply}"
    if reply.kind == 4:
        return TransientError(message)
    return PermanentError(message)


# ------------------------------------------------------------ control channel


# TCP keepalive on control connections, after this long idle and then as often
# (curl's default for every connection). A control connection says nothing while
# its transfer runs, which takes minutes for a large range, and a NAT gateway or
# firewall forgets an idle flow (AWS NAT gateways after 350 s, many home routers
# sooner): the transfer's final reply then never comes, and the fetcher waits out
# its timeout before it logs in again for the next range.
KEEPALIVE_S = 60


def keep_alive(sock: socket.socket, idle_s: int = KEEPALIVE_S) -> None:
    """Turn on TCP keepalive probes on ``sock`` after ``idle_s`` of silence, every
    ``idle_s`` then (where the platform lets the times be set)."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name in ("TCP_KEEPIDLE", "TCP_KEEPINTVL"):
        option = getattr(socket, name, None)
        if option is not None:
            sock.setsockopt(socket.IPPROTO_TCP, option, idle_s)


class _ControlLost(Exception):
    """The control connection is gone (EOF, reset, 421, no reply in time). Safe to
    reconnect and retry as long as no data of the current range has been delivered.

    ``blames_pipelining``: it happened while replies to a pipelined write were
    still due, in a way that a server losing pipelined commands would cause (no
    reply at all in time, or the connection closed after part of the batch was
    answered). The fetcher then continues one command at a time."""

    def __init__(self, message: str, *, blames_pipelining: bool = False) -> None:
        super().__init__(message)
        self.blames_pipelining = blames_pipelining


# Replies of other commands (a transfer's start and end, ABOR, SIZE/MDTM, the
# passive ports).
_OTHER_COMMANDS_REPLIES = frozenset({125, 150, 213, 225, 226, 227, 229})


def _check_in_step(command: str, reply: FtpReply) -> None:
    """Raise ``_ControlLost`` when ``reply`` cannot be ``command``'s: one due to an
    earlier command (or an unsolicited one) is still unread, and every later reply
    would be paired with the wrong command. Read as the command's own, it would
    pass for a refusal: REST or EPSV refused (PASV then reads EPSV's 229), a
    permanent error for RETR. Nothing was delivered yet: reconnecting is safe."""
    if command == "MDTM":
        wrong = reply.code != 213 and reply.kind not in (4, 5)
    elif command == "RETR":
        wrong = reply.kind in (2, 3)  # (a transfer's start is 1xx, a refusal 4xx/5xx)
    elif command == "REST":
        wrong = reply.code in _OTHER_COMMANDS_REPLIES
    else:  # EPSV, PASV (a 227 to EPSV is left to the fallback: PASV's form, not a stray)
        own = 229 if command == "EPSV" else 227
        wrong = reply.code in _OTHER_COMMANDS_REPLIES and reply.code not in (own, 227)
    if wrong:
        raise _ControlLost(f"{reply} cannot answer {command}: replies out of step")


def _abor_reply(reply: FtpReply) -> bool:
    """Whether ``reply`` is ABOR's own (225; 226 naming the abort: vsftpd "ABOR
    successful", proftpd "Abort successful", pure-ftpd "Since you see this ABOR
    must've succeeded"), not the transfer's (226 "Transfer complete", 426, 451)."""
    return reply.code == 225 or (reply.code == 226 and "abor" in reply.text.lower())


class _Control:
    """One logged-in control connection: send commands, read (multi-line) replies.

    ``send_batch`` writes several commands at once (RFC 959 pipelining); the
    caller then reads exactly one reply per command, plus the final reply of a
    transfer command after its 1xx.
    """

    def __init__(self, sock: socket.socket, timeout: float) -> None:
        self.sock = sock
        self.timeout = timeout
        self.rfile = sock.makefile("rb")
        self.typed = False  # TYPE I accepted on this connection
        # MDTM answered on it and no RETR since: the next RETR need not ask again
        self.version_fresh = False
        # A passive port already obtained (EPSV/PASV reply read) for the next
        # transfer, and when; see _PASSIVE_MAX_AGE.
        self.passive: tuple[int, float] | None = None
        # A data connection already connected to such a port (a spare's, see
        # FtpFetcher.keep_spare), and when: the transfer's first byte then comes one
        # round trip after RETR instead of two.
        self.data_ready: tuple[socket.socket, float] | None = None
        self._batch = 0  # commands in the last write
        self._unanswered = 0  # of those, how many have no reply yet

    def send(self, command: str) -> None:
        self.send_batch([command])

    def send_batch(self, commands: list[str]) -> None:
        for command in commands:
            if "\r" in command or "\n" in command:
                raise ValueError(f"control character in FTP command {command!r}")
            log.debug(">> %s", "PASS ****" if command.startswith("PASS ") else command)
        wire = "".join(c + "\r\n" for c in commands).encode("utf-8", "surrogateescape")
        self._batch = self._unanswered = len(commands)
        try:
            self.sock.sendall(wire)
        except OSError as exc:
            raise _ControlLost(f"sending {commands[0].split()[0]}: {exc}") from exc

    def replies_due(self, n: int) -> None:
        """The last batch's ``n`` replies are all still due (its commands went out
        before the greeting, which ``reply`` counted as one of them)."""
        self._batch = self._unanswered = n

    def _lost(self, message: str, *, timed_out: bool) -> _ControlLost:
        pending = self._batch > 1 and self._unanswered > 0
        partly = self._unanswered < self._batch
        return _ControlLost(message, blames_pipelining=pending and (timed_out or partly))

    def _line(self) -> str:
        try:
            line = self.rfile.readline(_MAX_LINE + 2)
        except TimeoutError as exc:
            waited = self.sock.gettimeout()
            raise self._lost(f"no reply within {waited:g}s", timed_out=True) from exc
        except OSError as exc:
            raise self._lost(f"reading reply: {exc}", timed_out=False) from exc
        if not line:
            raise self._lost("server closed the control connection", timed_out=False)
        if not line.endswith(b"\n"):
            raise _ControlLost("reply line too long")
        return line.decode("utf-8", "replace").rstrip("\r\n")

    def reply(self, timeout: float | None = None) -> FtpReply:
        """Read one complete reply (RFC 959 4.2: ``123-`` ... ``123 `` multi-line form)."""
        self.sock.settimeout(self.timeout if timeout is None else timeout)
        first = self._line()
        if len(first) < 3 or not first[:3].isdigit() or first[3:4] not in ("", " ", "-"):
            raise _ControlLost(f"malformed reply line {first!r}")
        code = first[:3]
        lines = [first]
        if first[3:4] == "-":
            while True:
                line = self._line()
                lines.append(line)
                if line[:3] == code and line[3:4] in ("", " "):
                    break
        reply = FtpReply(int(code), "\n".join(lines))
        log.debug("<< %s", reply)
        if self._unanswered:
            self._unanswered -= 1
        if reply.code == 421:  # service closing the control connection
            raise _ControlLost(str(reply))
        return reply

    def command(self, command: str) -> FtpReply:
        self.send(command)
        return self.reply()

    def exchange(self, commands: list[str], *, pipelined: bool) -> list[FtpReply]:
        """One reply per command, in order: all commands in one write when
        ``pipelined``, else each sent after the previous reply arrived. Only for
        commands that get exactly one reply (not transfers)."""
        if not pipelined:
            return [self.command(c) for c in commands]
        self.send_batch(commands)
        return [self.reply() for _ in commands]

    def take_passive(self) -> int | None:
        """The passive port obtained ahead of time, if still fresh; used once."""
        ready, self.passive = self.passive, None
        if ready is None or time.monotonic() - ready[1] > _PASSIVE_MAX_AGE:
            return None
        return ready[0]

    def take_data(self) -> socket.socket | None:
        """The data connection connected ahead of time, if still fresh and open;
        used once (a stale or closed one is reset)."""
        ready, self.data_ready = self.data_ready, None
        if ready is None:
            return None
        sock, since = ready
        if time.monotonic() - since <= _PASSIVE_MAX_AGE:
            poller = select.poll()
            poller.register(sock, select.POLLIN | select.POLLERR | select.POLLHUP)
            if not poller.poll(0):  # nothing may come (or close) before RETR
                return sock
        _rst_close(sock)
        return None

    def armed(self) -> bool:
        """A passive port or a connected data connection waits, fresh enough to use."""
        now = time.monotonic()
        return any(
            ready is not None and now - ready[1] <= _PASSIVE_MAX_AGE
            for ready in (self.passive, self.data_ready)
        )

    def close(self) -> None:
        if self.data_ready is not None:
            _rst_close(self.data_ready[0])
            self.data_ready = None
        for closer in (self.rfile.close, self.sock.close):
            try:
                closer()
            except OSError:
                continue  # already broken; closing is best effort by nature


def _quit(ctrl: _Control) -> None:
    """Say QUIT (without waiting for the answer) and close."""
    try:
        ctrl.sock.settimeout(1.0)
        ctrl.send("QUIT")
    except (_ControlLost, OSError):
        pass  # the connection is being discarded either way
    ctrl.close()


def _mdtm_validator(reply: FtpReply) -> str | None:
    """``MDTM <time>`` from a 213 reply (RFC 3659 3.1), else None."""
    stamp = reply.text.split("\n")[-1][4:].strip() if reply.code == 213 else ""
    return f"MDTM {stamp}" if stamp.replace(".", "").isdigit() else None


def _peer_address(sock: socket.socket) -> str | None:
    try:
        return str(sock.getpeername()[0])
    except OSError:
        return None


def _peer_of(ctrl: _Control) -> tuple:
    """The server's address on ``ctrl`` (where its passive ports are). A control
    connection reset or shut down meanwhile (the server's timeout, an interrupt
    that came as an ABOR ended) is lost like any other: _with_reconnect logs in
    again. A raw OSError here stopped a whole download (flap-long, ENOTCONN)."""
    try:
        return ctrl.sock.getpeername()
    except OSError as exc:
        raise _ControlLost(f"control connection gone: {exc}") from exc


def _rst_close(sock: socket.socket) -> None:
    """Close with RST instead of FIN: the server's next write then fails at once
    instead of filling socket buffers nobody reads, so it answers 426 promptly."""
    # A socket that is already dead refuses the option; close() still releases it.
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


class _HeadReader:
    """Reads a head transfer (FtpFetcher.start_head) into memory until a fetch
    takes it over. Left unread, its socket would close the TCP window, and a
    receive queue over its memory budget is pruned by the kernel: the sender
    then stalls for a retransmission timeout (seen in the lab: 0.3-0.7 s)."""

    def __init__(
        self, ctrl: _Control, data: socket.socket, offset: int, limit: int, requested_at: float
    ) -> None:
        self.ctrl = ctrl
        self.data = data
        self.offset = offset  # of the stream's first byte
        self.requested_at = requested_at  # time.monotonic() when RETR went out
        self.buf = bytearray(limit)
        self.marks: list[tuple[int, int]] = []  # (end of a receive in buf, arrival_ns)
        self.got = 0
        self.ended = False  # the stream ended (EOF or error) before the buffer filled
        self._wake_r, self._wake_w = os.pipe()
        self._thread = threading.Thread(target=self._run, name="pftp-head", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        poller = select.poll()
        poller.register(self.data, select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        view = memoryview(self.buf)
        try:
            while self.got < len(self.buf):
                if any(fd == self._wake_r for fd, _ in poller.poll()):
                    return
                n = self.data.recv_into(view[self.got :])
                if n == 0:
                    self.ended = True
                    return  # EOF: the fetch's own receive sees it again
                self.got += n
                self.marks.append((self.got, time.monotonic_ns()))
        except OSError as exc:
            # the fetch's own receive on this socket meets the failure again
            self.ended = True
            log.debug("head transfer: %s", exc)
        finally:
            view.release()

    def arrivals(self, min_gap_s: float = 0.005) -> list[tuple[float, int]]:
        """(time.monotonic() of a receive, bytes so far), at most one per
        ``min_gap_s``, the last receive always included: the lead judge's samples."""
        out: list[tuple[float, int]] = []
        marks = list(self.marks)  # (appended to by the reader thread)
        for i, (got, t_ns) in enumerate(marks):
            t = t_ns / 1e9
            if not out or t - out[-1][0] >= min_gap_s or i == len(marks) - 1:
                out.append((t, got))
        return out

    def stop(self) -> None:
        """Stop reading (at once: the reader waits on the wake-up pipe too)."""
        os.write(self._wake_w, b"x")
        self._thread.join()
        os.close(self._wake_r)
        os.close(self._wake_w)


class _NextTransfer:
    """The next range's transfer started ahead on the spare connection
    (FtpFetcher.start_next): a thread sends REST + RETR and then reads the data
    into memory (a _HeadReader) until the fetch for that offset takes it over."""

    def __init__(self, fetcher: FtpFetcher, ctrl: _Control, offset: int, limit: int) -> None:
        self.ctrl = ctrl
        self.offset = offset
        self.head: _HeadReader | None = None
        self.error: BaseException | None = None
        self._given_up = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(
            target=self._run, args=(fetcher, limit), name=f"pftp-next-{fetcher.target.host}",
            daemon=True,
        )
        self._thread.start()

    def _run(self, fetcher: FtpFetcher, limit: int) -> None:
        requested_at = time.monotonic()
        try:
            ctrl, data = fetcher._start_retr(self.ctrl, self.offset)
        except BaseException as exc:  # (reported to the fetch that looks for it)
            self.error = exc
            return
        with self._lock:
            if self._given_up:
                _rst_close(data)
                return
            self.head = _HeadReader(ctrl, data, self.offset, limit, requested_at)

    def started(self, timeout: float) -> _HeadReader | None:
        """Wait for the start; the reader (stopped: the caller reads on), or None
        when the start failed or took too long (the connection is then closed)."""
        self._thread.join(timeout)
        with self._lock:
            head = self.head
            self._given_up = head is None
        if head is None:
            if self.error is not None:
                log.info("overlapped start at %d failed: %s", self.offset, self.error)
            self.ctrl.close()  # (a start still under way fails on it)
            return None
        head.stop()
        return head


# -------------------------------------------------------------------- fetcher


class FtpFetcher:
    """``RangeFetcher`` for ftp:// URLs; keeps its control connection between ranges.

    Not thread-safe: one fetcher serves one flow. ``close`` may be called from
    another thread to tear the connections down; a running ``fetch`` then fails.
    ``pipeline=False`` sends one command at a time (see the module docstring).
    """

    def __init__(
        self,
        url: str,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        stall_timeout: float = 15.0,
        netrc_file: str | os.PathLike[str] | None = None,
        verify_rest: bool = True,
        bufsize: int = RECV_BUFSIZE,
        pipeline: bool = True,
    ) -> None:
        self.url = url
        self.target = ftp_target(url)
        if timeout <= 0 or stall_timeout <= 0:
            raise ValueError("timeout and stall_timeout must be positive")
        self.timeout = timeout
        self.stall_timeout = stall_timeout
        self.netrc_file = netrc_file
        self.verify_rest = verify_rest
        # Cleared for good (for this fetcher) when the server turns out not to
        # cope with pipelined commands; see _ControlLost.blames_pipelining.
        self.pipeline = pipeline
        self._buf = bytearray(bufsize)
        self._view = memoryview(self._buf)
        # receives that waited for data, and the bytes they returned (waited_reads)
        self.waits = [0, 0]
        self._ctrl: _Control | None = None
        self._epsv_refused = False
        self._size: int | None = None
        self._size_known = False
        # The file's version as the server gives it (MDTM, asked along with the
        # first SIZE), and who is told before the first byte is handed over
        # (validators.ValidatorBook.vet; set by the downloader).
        self.validator: str | None = None
        self._validator_known = False
        # The server address that gave it: every later RETR to that address asks
        # MDTM again in the same write (no round trip), and a new time there means
        # the file was replaced during the download (a mirror's sync renames the new
        # copy in: a running transfer keeps the old file, the next RETR gets the
        # new one). Other addresses behind one name may be other machines, with
        # their own times: not compared.
        self._validator_peer: str | None = None
        self.rechecks = 0  # MDTM asked again before a RETR (tests)
        self.vet: Vet | None = None
        self._vetted = False
        # None: not probed yet; True: honours REST; False: ignores it.
        self._rest_honoured: bool | None = None
        # (address, port) of a server another fetcher found honouring REST
        # (trust_rest): this one skips its probe when it reaches the same one
        self._rest_trusted: tuple[str, int] | None = None
        self._closed = False
        self._ever_connected = False
        self._lock = threading.Lock()
        # The server's control address (peer_address), and the control connection
        # an ABOR waits on (interrupt).
        self._peer: tuple[int, tuple] | None = None
        self._aborting: _Control | None = None
        self._interrupted: _Control | None = None
        self.reconnects = 0  # control connections opened after the first; for reports/tests
        # The transfer in progress, for committed_end (read from other threads).
        self._active: tuple[socket.socket, int] | None = None  # (data socket, its offset)
        # A transfer from byte 0 started ahead of its fetch (start_head).
        self._head: _HeadReader | None = None
        # Once a fetch took it over: (its RETR's time.monotonic(), [(time, bytes so far)]).
        self.head_history: tuple[float, list[tuple[float, int]]] | None = None
        # A head from byte 0 taken over: its first bytes (head_bytes).
        self._head_prefix: bytes | None = None
        self._head_prefix_final = True  # no more bytes will come into the prefix
        self._recv_pos = 0
        # A second control connection to the same server, logged in, with its data
        # connection connected ahead (keep_spare). The next range starts on it at
        # once while the last one's ABOR and resync finish on the other, which then
        # becomes the spare: a switch costs one round trip instead of three or four.
        self._spare: _Control | None = None
        self._spares_coming = 0  # threads making or recycling one
        self._spare_off = False  # the server would not take a second connection
        self.spare_switches = 0  # ranges started on a spare (for reports and tests)
        # The next range's transfer, started on the spare before this one ends
        # (start_next): its slow start overlaps the end of this one.
        self._next: _NextTransfer | None = None
        self.overlapped = 0  # ranges whose transfer start_next began (reports/tests)
        # When True, arrival_ns passed to the sink is the kernel's receive time of
        # the data (SO_TIMESTAMPNS, converted to the time.monotonic_ns() scale)
        # instead of the clock read after the receive: the shared-congestion
        # detector's "app-kernel" source. Off by default: plain recv_into, no cost.
        self.kernel_timestamps = False

    # ----------------------------------------------------------- public API

    def fetch(self, offset: int, end: RangeEnd, sink: DataSink, cancel: threading.Event) -> int:
        if offset < 0:
            raise ValueError(f"negative offset {offset}")
        if cancel.is_set():
            raise Cancelled("cancelled before the transfer started")
        if offset >= end.value:
            return 0
        self._vet()  # (the login may have come with a probe or a head start)
        nxt, self._next = self._next, None
        if nxt is not None:
            started = nxt.started(self.timeout)
            if started is not None and nxt.offset == offset:
                return self._take_next(started, end, sink, cancel)
            if started is not None:  # (the engine went elsewhere: not expected)
                self._ready_spare_async(started.ctrl, started.data, accepted=started.got > 0)
        head = self._head
        if head is not None and head.offset == offset:
            if offset > 0 and not self.rest_honoured:
                # started before REST was checked, and its bytes never showed it
                # (confirm_rest): not trusted; the probe below decides
                self._settle_head()
            elif self._take_head(fetching=True) is head:
                return self._fetch_head(head, end, sink, cancel)
        if offset > 0:
            self._require_rest(cancel)
            if self._size is not None and offset >= self._size:
                raise PermanentError(
                    f"{self._where()}: offset {offset} is beyond the file size {self._size}"
                )
        self._prefer_spare()
        ctrl, data = self._with_reconnect(lambda c: self._start_retr(c, offset))
        try:
            self._vet()
        except FileChanged:
            self._abort(ctrl, data, accepted=False)
            raise
        delivered, _eof = self._receive(ctrl, data, offset, end, sink, cancel)
        return delivered

    def _vet(self) -> None:
        """Tell ``vet`` the file's version once it is known (raises FileChanged)."""
        if self.vet is not None and self._validator_known and not self._vetted:
            self.vet(self.url, self.validator)
            self._vetted = True

    def start_head(
        self, offset: int = 0, limit: int = HEAD_BUFFER_BYTES, *, rest_checked_later: bool = False
    ) -> None:
        """Start the transfer from ``offset`` now, ahead of its fetch: up to ``limit``
        bytes are read into memory meanwhile, and the first ``fetch`` at that offset
        takes the transfer over. Any other use of the connection aborts it first.
        For the entry point's head start (pftp_client.early): the data flows while
        the engine's modules load. An offset past 0 needs REST checked first
        (``prepare``), or the data would not be trusted; with
        ``rest_checked_later`` the caller checks it from the first bytes instead
        (``confirm_rest``), and a fetch does not take over a head that was not
        confirmed so."""
        if self._head is not None:
            return
        size = self._known_size(passive=True)  # (the passive port rides with SIZE)
        if size == 0 or (size is not None and offset >= size):
            return  # nothing to send
        if offset > 0 and not self.rest_honoured and (
            self._rest_honoured is False or not rest_checked_later
        ):
            raise RangeNotHonoured(f"{self._where()}: REST not checked before a head start")
        requested_at = time.monotonic()
        ctrl, data = self._with_reconnect(lambda c: self._start_retr(c, offset))
        with self._lock:
            if self._closed:
                _rst_close(data)
                return
            self._head = _HeadReader(ctrl, data, offset, limit, requested_at)

    def head_bytes(self, limit: int) -> tuple[bytes, bool] | None:
        """The first bytes (at most ``limit``) of the head transfer read so far, and
        whether that is all there will be (the head was taken over: what it had read
        by then; or its stream ended). None without a head transfer from byte 0.
        Thread-safe; for confirm_rest on other mirrors."""
        head = self._head
        if head is None:
            prefix = self._head_prefix
            if prefix is None:
                return None
            return prefix[:limit], self._head_prefix_final or len(prefix) >= limit
        if head.offset != 0:
            return None
        buf = head.buf  # (emptied by the fetch that takes the head over)
        got = min(head.got, len(buf), limit)
        return bytes(buf[:got]), got < limit and head.ended

    @property
    def rest_honoured(self) -> bool | None:
        """Whether the server honours REST (None: not checked yet). Without
        verify_rest it is taken on trust, until the server refuses it."""
        if self._rest_honoured is False:
            return False
        return True if not self.verify_rest else self._rest_honoured

    @property
    def rest_proof(self) -> tuple[str, int] | None:
        """(address, port) of the server this fetcher found honouring REST, for
        trust_rest; None when it has not checked (or could not). Thread-safe."""
        return self._server() if self._rest_honoured is True else None

    def trust_rest(self, proof: tuple[str, int]) -> bool:
        """Take another fetcher's REST check (its rest_proof) for this one: a
        mirror's extra connections skip the probe's two round trips, and a head
        transfer started with ``rest_checked_later`` may be taken over. Taken only
        when this one reaches the same address and port (a name that resolves to
        several servers is probed on each): at its next REST check, or at once
        when it is connected already. True when REST counts as honoured now.
        Thread-safe."""
        self._rest_trusted = proof
        if self._rest_honoured is None and self._server() == proof:
            self._rest_honoured = True
        return self._rest_honoured is True

    def confirm_rest(self, reference: bytes, need: int) -> bool | None:
        """REST checked from the data, for a head transfer started with
        ``rest_checked_later``: ``reference`` holds the file's first bytes (from
        another mirror's transfer from 0). A server that ignores REST sends from
        byte 0, so a byte that differs from the reference shows that it honoured
        it: True (remembered: the head may be taken over). False once ``need``
        bytes compared equal (a repeated prefix, or a server sending from 0: the
        caller leaves it to ``prepare``'s probe); None until then. A mirror whose
        bytes differ because they are wrong is caught as any corrupt mirror is
        (the hashes). Thread-safe."""
        if self._rest_honoured is not None:
            return self._rest_honoured
        head = self._head
        if head is None or head.offset == 0:
            return None
        buf = head.buf  # (emptied by the fetch that takes the head over)
        k = min(head.got, len(buf), len(reference))
        if k and buf[:k] != reference[:k]:
            self._rest_honoured = True
            return True
        return False if k >= need else None

    def head_progress(self) -> tuple[float, list[tuple[float, int]], float | None] | None:
        """While a head transfer waits for its fetch: (time.monotonic() of its RETR,
        [(arrival time, bytes so far)], the control connection's smoothed RTT in
        seconds or None); None otherwise. Thread-safe."""
        head = self._head
        if head is None:
            return None
        try:
            rtt = smoothed_rtt(head.ctrl.sock)
        except OSError:
            rtt = None
        return head.requested_at, head.arrivals(), rtt

    def path_rtt(self) -> float | None:
        """The control connection's smoothed RTT in seconds (the data connections
        take the same path); None without a connection or a measurement. Thread-safe."""
        ctrl = self._ctrl
        if ctrl is None:
            return None
        try:
            return smoothed_rtt(ctrl.sock)
        except OSError:
            return None

    def _take_head(self, *, fetching: bool = False) -> _HeadReader | None:
        """Detach the head transfer. A head from byte 0 leaves its first bytes in
        the head prefix at once (head_bytes, for the other mirrors' REST checks; a
        moment without either made them give up); with ``fetching`` the fetch that
        takes it over adds the bytes still to come (_fetch_head)."""
        with self._lock:
            head, self._head = self._head, None
            if head is not None and head.offset == 0:
                self._keep_prefix(head, final=not fetching)
        if head is not None:
            head.stop()
            if head.offset == 0:
                self._keep_prefix(head, final=not fetching)  # (what came meanwhile)
        return head

    def _keep_prefix(self, head: _HeadReader, *, final: bool) -> None:
        self._head_prefix = bytes(head.buf[: min(head.got, _PROBE_BYTES)])
        self._head_prefix_final = final or head.ended or len(self._head_prefix) >= _PROBE_BYTES

    def _settle_head(self) -> None:
        """Abort a head transfer that nobody took (before another command)."""
        head = self._take_head()
        if head is not None:
            self._abort(head.ctrl, head.data, accepted=head.got > 0)

    def _fetch_head(
        self, head: _HeadReader, end: RangeEnd, sink: DataSink, cancel: threading.Event
    ) -> int:
        """``fetch`` at the head transfer's offset: what it read first, then the rest
        of the stream."""
        data = head.data
        if self.kernel_timestamps:
            # Switched on after the connect: what is queued already has no time, and
            # _receive then takes the receive call's clock.
            with contextlib.suppress(OSError):
                data.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
        # For the engine's lead judge: this flow's arrivals before the fetch.
        self.head_history = (head.requested_at, head.arrivals())
        base = head.offset
        if base == 0 and not self._head_prefix_final:
            # Taken over before its first bytes came (a far first mirror): keep what
            # the fetch reads next (head_bytes), or the others' checks would have
            # nothing to compare and start again after a probe.
            sink = self._prefix_keeper(sink)
        try:
            return self._read_head(head, end, sink, cancel)
        finally:
            self._head_prefix_final = True  # (whatever the prefix holds by now)

    def _read_head(
        self, head: _HeadReader, end: RangeEnd, sink: DataSink, cancel: threading.Event
    ) -> int:
        ctrl, data, base = head.ctrl, head.data, head.offset
        done = 0  # bytes of the buffer delivered
        view = memoryview(head.buf)
        try:
            for stop, arrival_ns in head.marks:
                if cancel.is_set() or self._closed:
                    raise Cancelled(f"{self._where()}: cancelled at byte {base + done}")
                if end.value == self._size and self._size_known and base + stop > end.value:
                    raise self._past_size(end.value)  # (before the last byte is handed over)
                done += end.deliver(sink, base + done, view[done:stop], arrival_ns)
                if done < stop:  # the end was lowered below what was read
                    self._abort(ctrl, data, prepare_next=True)
                    return done
        except BaseException:
            self._abort(ctrl, data, accepted=head.got > 0)
            raise
        finally:
            view.release()
            head.buf = bytearray()
        delivered, _eof = self._receive(
            ctrl, data, base + done, end, sink, cancel, stream_start=base
        )
        return done + delivered

    def _prefix_keeper(self, sink: DataSink) -> DataSink:
        """``sink``, copying the file's first bytes into the head prefix as they pass."""
        kept = bytearray(self._head_prefix or b"")

        def keep(offset: int, block: memoryview, arrival_ns: int) -> None:
            if offset == len(kept) < _PROBE_BYTES:
                kept.extend(block[: _PROBE_BYTES - offset])
                self._head_prefix = bytes(kept)
                if len(kept) >= _PROBE_BYTES:
                    self._head_prefix_final = True
            sink(offset, block, arrival_ns)

        return keep

    def committed_end(self, rate: float | None = None) -> int | None:
        """The file offset up to which the server is most likely sending already
        in the running transfer (window.committed_bytes; ``rate`` in bytes/s):
        an end lowered to this or beyond throws nothing away. None when no
        transfer is running. Thread-safe."""
        active = self._active
        extra = self._ask_data_socket(active, lambda sock: committed_bytes(sock, rate))
        return None if active is None or extra is None else max(self._recv_pos, active[1]) + extra

    def prepare(self, cancel: threading.Event) -> None:
        """Do now what the first transfer at an offset would do first: log in and
        check that the server honours REST (``_require_rest``). A standby flow
        calls this while it waits, so that when it joins, its first request is
        the transfer itself. Raises like ``fetch``."""
        self._require_rest(cancel)

    def arrived_end(self) -> int | None:
        """The file offset up to which the running transfer's bytes have reached
        the kernel, read by us or not (window.received_bytes). None when no
        transfer is running or the kernel does not say. Thread-safe."""
        active = self._active
        got = self._ask_data_socket(active, received_bytes)
        return None if active is None or got is None else active[1] + got

    def waited_reads(self) -> tuple[int, int]:
        """(receives that waited for data, bytes they returned) over this
        fetcher's life (streams.burst_bytes reads how data arrive from them)."""
        return self.waits[0], self.waits[1]

    def out_of_order(self) -> tuple[int, int] | None:
        """(segments out of order, segments) on the running transfer's data
        connection so far (window.out_of_order_counts); None when no transfer runs
        or the kernel does not say. Thread-safe (the engine's monitor asks)."""
        active = self._active
        if active is None:
            return None
        try:
            return out_of_order_counts(active[0])
        except (OSError, ValueError):
            return None

    @staticmethod
    def _ask_data_socket(
        active: tuple[socket.socket, int] | None, ask: Callable[[socket.socket], int | None]
    ) -> int | None:
        """``ask`` the running transfer's socket (from another thread); None when
        there is none or it was closed under us (nothing more will come)."""
        if active is None:
            return None
        try:
            return ask(active[0])
        except (OSError, ValueError):
            return None

    def size(self, *, passive: bool = False) -> int | None:
        """``SIZE`` in binary mode; None when the server does not implement it.
        Raises PermanentError when the file does not exist (550). With ``passive``
        (a transfer follows) the first SIZE brings a passive port along: one round
        trip fewer to that transfer's first byte."""
        return self._known_size(passive=passive)

    def _known_size(self, *, passive: bool = False) -> int | None:
        """``size()``; with ``passive`` the first SIZE brings a passive port along."""
        if not self._size_known:
            self._size = self._with_reconnect(lambda c: self._query_size(c, passive=passive))
            self._size_known = True
        return self._size

    def close(self) -> None:
        with self._lock:
            self._closed = True
            ctrl, self._ctrl = self._ctrl, None
            spare, self._spare = self._spare, None
            nxt, self._next = self._next, None
        if nxt is not None:
            started = nxt.started(0.0)  # (a start under way fails on the closed connection)
            if started is not None:
                _rst_close(started.data)
            _quit(nxt.ctrl)
        head = self._take_head()
        if head is not None:
            _rst_close(head.data)
        for c in (ctrl, spare):
            if c is not None:
                _quit(c)

    def __enter__(self) -> FtpFetcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------ control session

    def _with_reconnect(self, step):
        """Run ``step(ctrl)`` on the control connection; if the server had
        dropped it (idle timeout, restart), reconnect once and run it again.
        Only used for steps that deliver nothing, so a retry is harmless. When
        the loss points at pipelining, the retry sends one command at a time."""
        self._settle_head()
        for attempt in (1, 2):
            ctrl = self._control()
            try:
                return step(ctrl)
            except _ControlLost as exc:
                self._drop_control(ctrl)
                self._note_pipelining_failure(exc)
                if attempt == 2:
                    raise TransientError(
                        f"{self._where()}: control connection lost: {exc}"
                    ) from exc
        raise AssertionError("unreachable")

    def _note_pipelining_failure(self, exc: _ControlLost) -> None:
        if self.pipeline and exc.blames_pipelining:
            self.pipeline = False
            log.warning(
                "%s: replies to pipelined commands went missing (%s); "
                "sending one command at a time from now on",
                self._where(),
                exc,
            )

    def _control(self) -> _Control:
        if self._closed:
            raise Cancelled("fetcher is closed")
        if self._ctrl is None:
            ctrl = self._connect()
            with self._lock:
                if self._closed:
                    ctrl.close()
                    raise Cancelled("fetcher is closed")
                if self._ever_connected:
                    self.reconnects += 1
                self._ever_connected = True
                self._ctrl = ctrl
                self._peer = peer_address(ctrl.sock) or self._peer
        return self._ctrl

    def peer_address(self) -> tuple[int, tuple] | None:
        """(family, address) of the server's control port as last connected: where
        path_check.PathCheck tries new connections. Thread-safe."""
        return self._peer

    def interrupt(self) -> None:
        """An ABOR under way gives up at once and the control connection is dropped
        (the next range logs in again). For a transfer cut while its path was down:
        the ABOR went out then, and its answer waits on TCP's backoff, seconds
        after the path is back (Engine._path_answered). Thread-safe; nothing to do
        when no ABOR is waiting."""
        with self._lock:  # (held: an ABOR that ends meanwhile is not handed on shut)
            ctrl = self._interrupted = self._aborting
            if ctrl is not None:
                with contextlib.suppress(OSError):  # (closed meanwhile: the ABOR is over)
                    ctrl.sock.shutdown(socket.SHUT_RDWR)

    def _drop_control(self, ctrl: _Control | None = None) -> None:
        with self._lock:
            if ctrl is None or self._ctrl is ctrl:
                ctrl, self._ctrl = self._ctrl, None
        if ctrl is not None:
            ctrl.close()

    def _where(self) -> str:
        host = f"[{self.target.host}]" if ":" in self.target.host else self.target.host
        return f"ftp://{host}:{self.target.port}/{self.target.path}"

    def _credentials(self) -> tuple[str, str]:
        t = self.target
        if t.user is not None and t.password is not None:
            return t.user, t.password
        entry = self._netrc_entry()
        if t.user is not None:  # user in the URL, password from netrc if it is for that login
            if entry and entry[0] == t.user:
                return t.user, entry[1]
            return t.user, ""
        if entry:
            return entry
        return "anonymous", "pftp@"

    def _netrc_entry(self) -> tuple[str, str] | None:
        if not self.netrc_file and not os.path.isfile(
            os.path.join(os.path.expanduser("~"), ".netrc")  # (netrc's default)
        ):
            return None  # (netrc loads re and shlex: not on the way to the first connect)
        import netrc

        try:
            rc = netrc.netrc(os.fspath(self.netrc_file) if self.netrc_file else None)
        except FileNotFoundError:
            if self.netrc_file:
                raise PermanentError(f"netrc file {self.netrc_file} does not exist") from None
            return None
        except netrc.NetrcParseError as exc:
            where = f" ({exc.filename}, line {exc.lineno})" if exc.lineno else ""
            hint = " (chmod 600 it)" if "permissive" in exc.msg else ""
            raise PermanentError(f"cannot use netrc: {exc.msg}{where}{hint}") from exc
        auth = rc.authenticators(self.target.host)
        if auth is None:
            return None
        login, _account, password = auth
        return login, password or ""

    def _connect(self) -> _Control:
        """Connect and log in; a pipelined login that loses replies is retried
        once on a new connection, one command at a time."""
        while True:
            t = self.target
            try:
                # An ASCII name as bytes: getaddrinfo would load the idna codec
                # (~2 ms, on the way to the first connect) to encode it as itself.
                host = t.host.encode() if t.host.isascii() else t.host
                # (every address of the name, staggered: connect.py)
                sock = connect(host, t.port, self.timeout)
            except TimeoutError as exc:
                raise TransientError(f"{self._where()}: connect timed out") from exc
            except OSError as exc:
                raise TransientError(f"{self._where()}: cannot connect: {exc}") from exc
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            keep_alive(sock)
            ctrl = _Control(sock, self.timeout)
            pipelined = self.pipeline
            try:
                self._login(ctrl)
            except _ControlLost as exc:
                ctrl.close()
                self._note_pipelining_failure(exc)
                if pipelined and not self.pipeline:
                    continue
                raise TransientError(
                    f"{self._where()}: connection lost during login: {exc}"
                ) from exc
            except BaseException:
                ctrl.close()
                raise
            return ctrl

    def _login(self, ctrl: _Control) -> None:
        """Greeting, USER, PASS, TYPE I; pipelined, with the first transfer's setup.

        Pipelined (``_login_batch``), ``USER``, ``PASS``, ``TYPE I``, ``SIZE`` (while
        the size is unknown) and ``EPSV`` go out in one write as soon as the
        connection is up, before the greeting: the server reads them after it
        greets, and every reply is in one round trip after the greeting instead of
        three (a far mirror's first byte comes two round trips sooner). Servers
        read their input in order whatever the login step (vsftpd peeks up to the
        end of each line, so its post-login process finds the rest; pure-ftpd,
        proftpd and pyftpdlib keep one buffer per session).

        If ``USER`` already logged us in (230, e.g. vsftpd's anonymous login
        without a password), ``PASS`` is answered 503 or 2xx ("already logged in")
        and that reply is dropped; any other answer leaves the login state unclear,
        so we start over one command at a time. A refused login is reported with
        the first 530: pyftpdlib delays a failed ``PASS``'s reply and answers the
        commands behind it first, and either way it is a refusal.
        """
        user, password = self._credentials()
        batch = self._login_batch(ctrl, user, password) if self.pipeline else []
        try:
            greeting = ctrl.reply()
            while greeting.code == 120:  # "service ready in nnn minutes"
                greeting = ctrl.reply()
        except _ControlLost as exc:
            # Nothing at all from the server: not the pipelined commands' fault (a
            # server that accepts and never speaks would cost a second timeout).
            raise _ControlLost(f"no greeting: {exc}") from exc
        if greeting.code != 220:
            raise error_for_reply(f"{self._where()}: greeting", greeting)
        if self.pipeline and any(g in greeting.text for g in _SYNC_ONLY_GREETINGS):
            self.pipeline = False
            log.info("%s: server known to mishandle pipelining; not pipelining", self._where())
            if batch:  # (already sent: start over on a new connection)
                raise _ControlLost("pipelined login to a server that mishandles it")
        if batch:
            ctrl.replies_due(len(batch))
            self._read_login_batch(ctrl, batch, user)
            return
        reply = ctrl.command(f"USER {user}")
        if reply.code == 331:
            reply = ctrl.command(f"PASS {password}")
        self._check_login(reply, user)
        self._check_type(ctrl, ctrl.command("TYPE I"))

    def _login_batch(self, ctrl: _Control, user: str, password: str) -> list[str]:
        """Send the pipelined login and the first transfer's setup (``_login``)."""
        batch = [f"USER {user}", f"PASS {password}", "TYPE I"]
        if not self._size_known:
            batch += [f"SIZE {self.target.path}", *self._mdtm_command()]
        passive = self._passive_command(ctrl)
        if passive:
            batch.append(passive)
        ctrl.send_batch(batch)
        return batch

    def _read_login_batch(self, ctrl: _Control, batch: list[str], user: str) -> None:
        """The replies to ``_login_batch``; all but PASS's within ``_batch_timeout``:
        a server that threw the early commands away costs that, not the reply
        timeout, before the fallback to one command at a time
        (``_ControlLost.blames_pipelining``)."""
        timeout = self._batch_timeout(ctrl)
        # (PASS may take seconds: servers delay a failed login's reply on purpose)
        reply, pass_reply = ctrl.reply(timeout), ctrl.reply()
        if reply.code == 331:
            reply = pass_reply
        elif reply.code in (230, 202) and not (pass_reply.kind == 2 or pass_reply.code == 503):
            raise _ControlLost(
                f"USER answered {reply.code} but the pipelined PASS {pass_reply.code}",
                blames_pipelining=True,
            )
        self._check_login(reply, user)
        for command in batch[2:]:
            answer = ctrl.reply(timeout)
            if command == "TYPE I":
                self._check_type(ctrl, answer)
            elif command.startswith("SIZE "):
                self._absorb_size(answer)
            elif command.startswith("MDTM "):
                self._absorb_mdtm(answer, ctrl)
            else:
                self._absorb_passive(ctrl, command, answer)

    def _batch_timeout(self, ctrl: _Control) -> float:
        """How long to wait for each reply to the pipelined login: several round
        trips (the handshake's RTT), at least _BATCH_REPLY_MIN_S, at most the reply
        timeout."""
        try:
            rtt = smoothed_rtt(ctrl.sock) or 0.0
        except OSError:
            rtt = 0.0
        return min(self.timeout, max(_BATCH_REPLY_MIN_S, 10 * rtt))

    def _check_login(self, reply: FtpReply, user: str) -> None:
        if reply.code == 332:
            raise PermanentError(f"{self._where()}: server wants an ACCT, not supported")
        if reply.code == 530 and any(w in reply.text.lower() for w in _FULL_SERVER_WORDS):
            # proftpd's MaxClients and wu-ftpd's class limits refuse with 530: the
            # server is full for now, the login itself is fine (asked again later)
            raise TransientError(f"{self._where()}: server full: {reply}")
        if reply.code not in (230, 202):
            raise error_for_reply(f"{self._where()}: login as {user!r} refused", reply)

    def _check_type(self, ctrl: _Control, reply: FtpReply) -> None:
        if reply.code != 200:
            raise error_for_reply(f"{self._where()}: TYPE I refused", reply)
        ctrl.typed = True

    def _exchange(self, ctrl: _Control, commands: list[str]) -> list[FtpReply]:
        """Replies to ``commands`` (each answered by exactly one reply). On a fresh
        pipelined connection ``TYPE I`` and, while the size is unknown, ``SIZE``
        ride along in the same write: the first exchange costs one round trip."""
        setup: list[str] = []
        if not ctrl.typed:
            setup.append("TYPE I")
            if not self._size_known and not any(c.startswith("SIZE ") for c in commands):
                setup += [f"SIZE {self.target.path}", *self._mdtm_command()]
        replies = ctrl.exchange(setup + commands, pipelined=self.pipeline)
        for command, reply in zip(setup, replies, strict=False):
            if command == "TYPE I":
                self._check_type(ctrl, reply)
            elif command.startswith("MDTM "):
                self._absorb_mdtm(reply, ctrl)
            else:
                self._absorb_size(reply)
        return replies[len(setup) :]

    def _mdtm_command(self) -> list[str]:
        """``MDTM`` (RFC 3659) while the file's version is unknown: it rides with the
        first SIZE, so it costs no round trip (pipelined)."""
        return [] if self._validator_known else [f"MDTM {self.target.path}"]

    def _absorb_mdtm(self, reply: FtpReply, ctrl: _Control) -> None:
        """The file's modification time as its version; none when the server does
        not say (MDTM not implemented, or refused for this file)."""
        self.validator = _mdtm_validator(reply)
        self._validator_known = True
        self._validator_peer = _peer_address(ctrl.sock) if self.validator else None
        ctrl.version_fresh = True

    def _recheck_command(self, ctrl: _Control) -> list[str]:
        """``MDTM`` again before a RETR to the server that gave the version."""
        fresh, ctrl.version_fresh = ctrl.version_fresh, False
        if fresh or self.validator is None or self._validator_peer is None:
            return []
        if _peer_address(ctrl.sock) != self._validator_peer:
            return []
        return [f"MDTM {self.target.path}"]

    def _changed_since(self, reply: FtpReply) -> str | None:
        """The message for a version that moved since the first one, else None (a
        refused MDTM tells nothing: the transfer goes on)."""
        _check_in_step("MDTM", reply)
        self.rechecks += 1
        now = _mdtm_validator(reply)
        if now is None or now == self.validator:
            return None
        return (
            f"{self._where()}: the file changed on the server during the download "
            f"({self.validator} at first, {now} now); its new bytes are not mixed "
            "with the old ones"
        )

    def _absorb_size(self, reply: FtpReply) -> None:
        """Cache a SIZE reply that came along with other commands. Errors are not
        raised here: ``size()`` asks again and reports them."""
        if reply.code in (500, 501, 502, 504):
            self._size, self._size_known = None, True
        elif reply.code == 213:
            with contextlib.suppress(TransientError):
                self._size, self._size_known = self._size_from_reply(reply), True

    def _size_from_reply(self, reply: FtpReply) -> int | None:
        if reply.code == 213:
            try:
                return int(reply.text.split("\n")[-1][4:].strip())
            except ValueError as exc:
                raise TransientError(f"{self._where()}: unparsable SIZE reply {reply}") from exc
        if reply.code in (500, 501, 502, 504):
            return None  # SIZE not implemented (RFC 3659 is an extension)
        if reply.code == 550:
            raise PermanentError(f"{self._where()}: file not found ({reply})")
        raise error_for_reply(f"{self._where()}: SIZE", reply)

    def _query_size(self, ctrl: _Control, *, passive: bool = False) -> int | None:
        """SIZE; with ``passive`` (a transfer follows) an EPSV/PASV rides along.
        Nothing to ask when both came with the pipelined login."""
        if self._size_known:
            return self._size
        mdtm = self._mdtm_command()
        commands = [f"SIZE {self.target.path}", *mdtm]
        wants_port = passive and self.pipeline and not ctrl.armed()
        extra = self._passive_command(ctrl) if wants_port else None
        if extra:
            commands.append(extra)
        replies = self._exchange(ctrl, commands)
        if mdtm:
            self._absorb_mdtm(replies[1], ctrl)
        if extra:
            self._absorb_passive(ctrl, extra, replies[-1])
        return self._size_from_reply(replies[0])

    # ------------------------------------------------------------ transfers

    def _passive_command(self, ctrl: _Control) -> str | None:
        """EPSV (RFC 2428), or PASV once EPSV was refused (IPv4 only)."""
        if not self._epsv_refused:
            return "EPSV"
        return "PASV" if ctrl.sock.family == socket.AF_INET else None

    def _absorb_passive(self, ctrl: _Control, command: str, reply: FtpReply) -> None:
        """Keep the port of a passive reply obtained ahead of its transfer. A
        failure is not raised here: ``_open_data`` asks again and reports it;
        replies out of step are (``_ControlLost``)."""
        _check_in_step(command, reply)
        try:
            if command == "EPSV" and reply.code == 229:
                ctrl.passive = (parse_epsv(reply.text), time.monotonic())
            elif command == "PASV" and reply.code == 227:
                ctrl.passive = (parse_pasv(reply.text)[1], time.monotonic())
            elif command == "EPSV" and reply.kind == 5:
                self._epsv_refused = True
        except TransientError as exc:
            log.debug("%s: passive reply not usable: %s", self._where(), exc)

    def _passive_port(self, ctrl: _Control) -> int:
        """Passive port for the next transfer: EPSV first, PASV when refused (IPv4 only).
        We always connect to the control connection's peer address and ignore
        the address in a 227 reply: it is often a private address behind NAT,
        and trusting it would allow FTP bounce tricks (ftplib does the same)."""
        if not self._epsv_refused:
            reply = self._exchange(ctrl, ["EPSV"])[0]
            _check_in_step("EPSV", reply)
            if reply.code == 229:
                return parse_epsv(reply.text)
            if reply.kind == 4:
                raise error_for_reply(f"{self._where()}: EPSV", reply)
            self._epsv_refused = True
        if ctrl.sock.family != socket.AF_INET:
            raise PermanentError(f"{self._where()}: server refused EPSV on IPv6")
        reply = self._exchange(ctrl, ["PASV"])[0]
        _check_in_step("PASV", reply)
        if reply.code != 227:
            raise error_for_reply(f"{self._where()}: PASV", reply)
        return parse_pasv(reply.text)[1]

    def _open_data(self, ctrl: _Control) -> tuple[socket.socket, bool]:
        """Start connecting the passive data connection (non-blocking; finished by
        ``_finish_connect``). Returns the socket and whether its port was
        obtained ahead of time (such a port may have gone stale)."""
        data = ctrl.take_data()
        if data is not None:
            data.setblocking(False)  # (connected: _finish_connect returns at once)
            return data, True
        port = ctrl.take_passive()
        ahead = port is not None
        while True:
            if port is None:
                port = self._passive_port(ctrl)
            peer = _peer_of(ctrl)
            data = self._data_socket(ctrl)
            data.setblocking(False)
            err = data.connect_ex((peer[0], port, *peer[2:]))
            if err in (0, errno.EINPROGRESS, errno.EAGAIN):
                return data, ahead
            data.close()
            if ahead:  # the early port is gone; ask for a new one
                port, ahead = None, False
                continue
            raise TransientError(
                f"{self._where()}: data connection to port {port}: {os.strerror(err)}"
            )

    def _data_socket(self, ctrl: _Control) -> socket.socket:
        data = socket.socket(ctrl.sock.family, socket.SOCK_STREAM)
        if self.kernel_timestamps:
            try:  # before connect: every segment of the transfer gets its time
                data.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
            except OSError as exc:
                log.debug("%s: no SO_TIMESTAMPNS (%s); receive-call times used", self._where(), exc)
        return data

    def _finish_connect(self, data: socket.socket) -> None:
        """Wait for the data connection started by ``_open_data``; raises OSError."""
        poller = select.poll()
        poller.register(data, select.POLLOUT)
        if not poller.poll(self.timeout * 1000):
            raise TimeoutError("connect timed out")
        err = data.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err:
            raise OSError(err, os.strerror(err))
        data.settimeout(self.timeout)

    def _retr_failed(self, reply: FtpReply, offset: int) -> TransferError:
        if offset > 0 and reply.kind in (4, 5) and "restart" in reply.text.lower():
            # REST accepted, then RETR refused for it: proftpd with AllowRetrieveRestart
            # off ("451 f: Restart not permitted, try again"). Retrying cannot help;
            # from byte 0 it still serves (ranges elsewhere).
            self._rest_honoured = False
            return RangeNotHonoured(
                f"{self._where()}: server does not transfer from REST {offset} ({reply})"
            )
        if reply.code == 550:
            return PermanentError(f"{self._where()}: file not found or not readable ({reply})")
        return error_for_reply(f"{self._where()}: RETR", reply)

    def _rest_failed(self, reply: FtpReply, offset: int) -> TransferError:
        if reply.kind == 4:
            return error_for_reply(f"{self._where()}: REST {offset}", reply)
        # 500/502/504 (not implemented) or a 2xx/3xx that is not 350:
        # RETR would start at byte 0. Never trust it.
        self._rest_honoured = False
        return RangeNotHonoured(f"{self._where()}: server refused REST {offset} ({reply})")

    def _start_retr(self, ctrl: _Control, offset: int) -> tuple[_Control, socket.socket]:
        """Open the data connection, position it (REST, RFC 3659 section 5) and start RETR.
        REST goes right before RETR: RFC 959 says the restart marker must be
        immediately followed by the transfer command.

        Pipelined, the data connection is connected while ``REST n`` and ``RETR``
        travel in one write: passive servers accept the connection whether it
        arrives before or after RETR (tested: pyftpdlib, vsftpd, pure-ftpd, proftpd), so
        the first byte comes two round trips after the passive reply instead of
        three. The price is that RETR is already on its way when REST is
        refused; the server then sends from byte 0. Nothing is read from the
        data connection before both replies are in: a refused REST resets it,
        and a started RETR is aborted like any early stop (``_abort``), so the
        control connection stays in step or is dropped.
        """
        data, ahead = self._open_data(ctrl)
        try:
            if not self.pipeline:
                return ctrl, self._start_retr_sync(ctrl, data, offset)
            recheck = self._recheck_command(ctrl)
            commands = [*recheck, *([f"REST {offset}"] if offset > 0 else [])]
            ctrl.send_batch([*commands, f"RETR {self.target.path}"])
            changed = self._changed_since(ctrl.reply()) if recheck else None
            if offset > 0:
                rest = ctrl.reply()
                _check_in_step("REST", rest)
                if rest.code != 350:
                    retr = ctrl.reply()
                    _check_in_step("RETR", retr)
                    if retr.kind == 1:  # the transfer started (from byte 0): stop it
                        self._abort(ctrl, data, accepted=False)
                    raise self._rest_failed(rest, offset)
            try:
                # Before RETR's reply: some servers (pure-ftpd) send their 1xx only
                # once the connection is accepted, and a connect that fails must
                # not be mistaken for a server that lost a pipelined command.
                self._finish_connect(data)
            except OSError as exc:
                message = f"data connection to {self._where()} failed: {exc}"
                answer = self._answer_after_failed_connect(ctrl)
                if answer is not None and answer.kind in (4, 5) and answer.code not in (425, 426):
                    # RETR refused on its own (a missing file): the control
                    # connection is in step. (proftpd closes its passive port when
                    # it refuses RETR, resetting a connection still in its backlog.)
                    raise self._retr_failed(answer, offset) from exc
                # The server waits for a connection that will not come (and may not
                # read the control connection meanwhile): start over on a new one.
                self._drop_control(ctrl)
                if ahead:  # an early port may have gone stale: worth one retry
                    raise _ControlLost(message) from exc
                raise TransientError(message) from exc
            retr = ctrl.reply()
            _check_in_step("RETR", retr)
            if retr.kind != 1:
                raise self._retr_failed(retr, offset)
        except BaseException:
            _rst_close(data)
            raise
        if changed is not None:
            # (the flow stops for good: the connections are closed, not brought back
            # in step with ABOR, whose two replies could hold it up to the reply
            # timeout while the other mirrors finish its range)
            _rst_close(data)
            self._drop_control(ctrl)
            raise FileChanged(changed)
        return ctrl, data

    def _answer_after_failed_connect(self, ctrl: _Control) -> FtpReply | None:
        """RETR's reply when it comes within a few round trips of a data connection
        that failed, else None (the server may wait for that connection until its
        own timeout: pure-ftpd answers only once it is accepted)."""
        rtt = self.path_rtt() or 0.0
        try:
            return ctrl.reply(timeout=min(self.timeout, max(0.5, 4 * rtt)))
        except _ControlLost:
            return None

    def _start_retr_sync(self, ctrl: _Control, data: socket.socket, offset: int) -> socket.socket:
        """One command at a time, as RFC 959 clients classically do."""
        try:
            self._finish_connect(data)
        except OSError as exc:
            raise TransientError(f"{self._where()}: data connection failed: {exc}") from exc
        for command in self._recheck_command(ctrl):
            changed = self._changed_since(ctrl.command(command))
            if changed is not None:
                raise FileChanged(changed)
        if offset > 0:
            reply = ctrl.command(f"REST {offset}")
            _check_in_step("REST", reply)
            if reply.code != 350:
                raise self._rest_failed(reply, offset)
        reply = ctrl.command(f"RETR {self.target.path}")
        _check_in_step("RETR", reply)
        if reply.kind != 1:
            raise self._retr_failed(reply, offset)
        return data

    def _receive(
        self,
        ctrl: _Control,
        data: socket.socket,
        offset: int,
        end: RangeEnd,
        sink: DataSink,
        cancel: threading.Event,
        *,
        stream_start: int | None = None,
    ) -> tuple[int, bool]:
        """Read the data connection into ``sink`` until ``end`` (re-read after
        every receive) or EOF; then leave the control connection ready for the
        next command. Returns (bytes delivered, whether the server hit EOF).
        ``stream_start``: the file offset of the connection's first byte, when
        some were read before (a head transfer); ``offset`` is where it is now."""
        pos = offset
        view = self._view
        eof = False
        # a byte came: the server accepted the data connection (see _abort)
        received = stream_start is not None and offset > stream_start
        data.settimeout(min(_POLL_SECONDS, self.stall_timeout))
        last_byte = time.monotonic()
        # When the range runs to the end of the file the server is about to
        # close the data connection by itself; reading that EOF avoids an ABOR.
        expect_eof_at = self._size if self._size_known else None
        kernel_ts = self.kernel_timestamps and _TS_ANCILLARY > 0
        if kernel_ts:
            # SO_TIMESTAMPNS gives CLOCK_REALTIME; the engine and the detector use
            # time.monotonic_ns(). One offset per transfer keeps each flow's times
            # on one scale (a clock step mid-transfer would shift them all alike).
            realtime_minus_mono = time.time_ns() - time.monotonic_ns()
        self._recv_pos = pos
        self._active = (data, offset if stream_start is None else stream_start)
        try:
            while True:
                if cancel.is_set() or self._closed:
                    raise Cancelled(f"{self._where()}: cancelled at byte {pos}")
                want = min(len(view), end.value - pos)
                if want <= 0:
                    if pos != expect_eof_at:
                        break
                    want = 1  # read the EOF that must follow the last byte
                elif end.value == expect_eof_at and want < len(view):
                    # one byte more: a byte past the reported size is caught before
                    # the file's last bytes are handed over (the engine finishes then)
                    want += 1
                called = time.monotonic_ns()
                try:
                    if kernel_ts:
                        n, ancdata, _flags, _addr = data.recvmsg_into([view[:want]], _TS_ANCILLARY)
                    else:
                        n = data.recv_into(view, want)
                except TimeoutError:
                    if time.monotonic() - last_byte >= self.stall_timeout:
                        raise StallError(
                            f"{self._where()}: no data for {self.stall_timeout:g}s at byte {pos}"
                        ) from None
                    continue
                except OSError as exc:
                    raise PrematureEnd(
                        f"{self._where()}: data connection failed at byte {pos}: {exc}"
                    ) from exc
                arrival = time.monotonic_ns()
                if n == 0:
                    eof = True
                    break
                received = True
                if arrival - called > WAITED_NS:
                    self.waits[0] += 1
                    self.waits[1] += n
                last_byte = arrival / 1e9
                if kernel_ts:
                    for level, kind, cdata in ancdata:
                        if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS:
                            sec, nsec = struct.unpack_from("qq", cdata)
                            # never later than our own clock read (clock noise)
                            arrival = min(arrival, sec * 1_000_000_000 + nsec - realtime_minus_mono)
                if end.value == expect_eof_at and pos + n > expect_eof_at:
                    raise self._past_size(expect_eof_at)
                got = end.deliver(sink, pos, view[:n], arrival)
                pos += got
                self._recv_pos = pos
                if got < n:
                    break  # the end was lowered under us
        except BaseException:
            self._abort(ctrl, data, accepted=received)
            raise
        finally:
            self._active = None
        if not eof:
            # An early stop between ranges: the flow normally asks for its next
            # range at once, so the passive port for it comes with the resync
            # (or the next range goes to the spare while this connection resyncs).
            going_on = not (cancel.is_set() or self._closed)
            if not (received or self._accept_shown(ctrl, data)):
                self._abandon(ctrl, data)
            elif not (going_on and self._switch_to_spare(ctrl, data)):
                self._abort(ctrl, data, prepare_next=going_on)
            return pos - offset, False
        data.close()
        self._finish(ctrl, pos, end)
        return pos - offset, True

    def _past_size(self, size: int) -> PermanentError:
        """The server sent bytes beyond the size it reported: SIZE is wrong (a
        32-bit SIZE of a file over 4 GiB, a file still growing). A file cut at the
        reported size would be wrong; the mirror is not used."""
        return PermanentError(
            f"{self._where()}: the server sends more than the {size} bytes its SIZE "
            "reported (wrong SIZE, or the file is growing); not used"
        )

    def _finish(self, ctrl: _Control, pos: int, end: RangeEnd) -> None:
        """After the server closed the data connection: read its final reply and
        decide whether the stream ended early."""
        try:
            reply = ctrl.reply()
        except _ControlLost as exc:
            self._drop_control(ctrl)
            if pos < end.value:
                raise PrematureEnd(
                    f"{self._where()}: server went away at byte {pos} (before {end.value}): {exc}"
                ) from exc
            return  # we have every byte we wanted; the next fetch reconnects
        if pos < end.value:
            raise PrematureEnd(
                f"{self._where()}: data ended at byte {pos} before {end.value} ({reply})"
            )

    def _abort(
        self,
        ctrl: _Control,
        data: socket.socket,
        *,
        prepare_next: bool = False,
        accepted: bool = True,
    ) -> bool:
        """Stop a transfer we no longer want and resynchronise the control connection.

        The data socket is reset first, then ABOR is sent. RFC 959 servers then
        send two replies: the transfer's own final reply and ABOR's (426 + 226
        while sending; 226 + 225/226 when the transfer had already finished;
        vsftpd: 426 "failure writing" + 225). Some send only ABOR's: pyftpdlib
        before its first byte (225), pure-ftpd whose transfer the reset ended
        (226 "Since you see this ABOR must've succeeded"). The transfer's reply
        always comes first, so once ABOR's own is read (225, or 226 naming the
        abort) nothing else is due; waiting for a second reply there cost
        pure-ftpd's control connection and 10 s. Then NOOP goes out and anything
        up to its 200 is discarded, so a server that counts differently cannot
        leave a stale reply to be mistaken for the next command's. NOOP is not
        pipelined behind ABOR: pure-ftpd reads ABOR inside its transfer loop and
        throws away the rest of that read.
        With ``prepare_next`` (and pipelining on), EPSV/PASV for the next range
        goes out in the same write as NOOP; its reply is the one after the 200.
        If anything fails, the control connection is dropped instead: the next
        fetch logs in again, which costs a round trip or two but can never
        pair a reply with the wrong command. True when the connection is usable.

        ``accepted=False``: no byte has come on ``data``, so the server may not
        have accepted it yet, and a server can keep a transfer it had not
        started across ABOR: pyftpdlib then sends that file on the next data
        connection, with an unsolicited 226, and the next range would read bytes
        of another offset. ABOR waits for the first byte (``_accept_shown``);
        without one the control connection is dropped instead.
        """
        if not accepted and not self._accept_shown(ctrl, data):
            self._abandon(ctrl, data)
            return False
        _rst_close(data)
        deadline = time.monotonic() + min(self.timeout, 10.0)

        def next_reply() -> FtpReply:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _ControlLost("abort took too long")
            return ctrl.reply(timeout=remaining)

        with self._lock:
            self._aborting = ctrl
        usable = False
        try:
            ctrl.send("ABOR")
            if not _abor_reply(next_reply()):
                next_reply()  # that was the transfer's; ABOR's follows
            passive = self._passive_command(ctrl) if prepare_next and self.pipeline else None
            ctrl.send_batch(["NOOP", passive] if passive else ["NOOP"])
            for _ in range(_MAX_DRAIN_REPLIES):
                if next_reply().code == 200:
                    break
            else:
                raise _ControlLost("no NOOP reply")
            if passive:
                self._absorb_passive(ctrl, passive, next_reply())
            usable = True
        except _ControlLost as exc:
            if self._interrupted is not ctrl:  # (our own doing: no fault of the server's)
                self._note_pipelining_failure(exc)
            log.info("%s: control connection dropped after abort: %s", self._where(), exc)
        finally:
            with self._lock:
                self._aborting = None
                # (interrupted as its last reply came in: the socket may be shut)
                usable = usable and self._interrupted is not ctrl
        if usable:
            return True
        self._drop_control(ctrl)
        return False

    def _abandon(self, ctrl: _Control, data: socket.socket) -> None:
        """Stop a transfer the server may not have accepted (see ``_abort``)."""
        _rst_close(data)
        log.debug("%s: no byte before the stop: a new control connection", self._where())
        self._drop_control(ctrl)

    def _accept_shown(self, ctrl: _Control, data: socket.socket) -> bool:
        """Whether a byte (or the server's close) comes on ``data`` within a few
        round trips: only a connection the server accepted carries one. Soon, when
        the transfer runs: its first byte left one round trip after RETR."""
        if self._closed:
            return False  # (nothing follows on this connection: no need to wait)
        try:
            rtt = smoothed_rtt(ctrl.sock) or 0.0
        except OSError:
            return False
        poller = select.poll()
        poller.register(data, select.POLLIN)
        events = poller.poll(1000 * min(self.timeout, max(0.5, 4 * rtt)))
        return bool(events) and not events[0][1] & (select.POLLERR | select.POLLNVAL)

    # ------------------------------------------------------------ the spare

    def keep_spare(self) -> None:
        """Have a second control connection ready for the next range: logged in,
        with a passive port and its data connection connected. The next range then
        starts on it (REST + RETR, first byte one round trip later) while this
        range's ABOR and resync finish on the other connection in the background,
        which then becomes the spare in turn. Call it when a switch to another
        range is near; idempotent, returns at once, thread-safe. A server that
        refuses the second connection is not asked again; the fetcher then works
        on one connection as before."""
        with self._lock:
            if self._closed or self._spare_off or self._spares_coming:
                return
            if self._spare is not None and self._spare.armed():
                return
            stale, self._spare = self._spare, None  # (armed again on its session)
        self._ready_spare_async(stale, None)

    def _ready_spare_async(
        self, ctrl: _Control | None, data: socket.socket | None, *, accepted: bool = True
    ) -> None:
        with self._lock:
            self._spares_coming += 1
        threading.Thread(
            target=self._ready_spare, args=(ctrl, data, accepted),
            name=f"pftp-spare-{self.target.host}", daemon=True,
        ).start()

    def _ready_spare(
        self, ctrl: _Control | None, data: socket.socket | None, accepted: bool = True
    ) -> None:
        """Thread: make ``ctrl`` the armed spare, after aborting its transfer
        ``data`` (a former control connection), or a new connection when None.
        Dropped if any step fails; a new connection failing turns spares off."""
        fresh, ready = ctrl is None, False
        try:
            if ctrl is not None and data is not None and not self._abort(
                ctrl, data, prepare_next=True, accepted=accepted
            ):
                return  # (_abort closed it)
            if ctrl is None:
                ctrl = self._connect()
            if self._rest_honoured is None and self.verify_rest:
                self._check_rest_on(ctrl)
            self._arm(ctrl)
            ready = True
        except (TransferError, _ControlLost, OSError) as exc:
            if ctrl is not None:
                ctrl.close()
            if fresh:
                self._spare_off = True
            log.info("%s: no spare connection (%s)%s", self._where(), exc,
                     "; working on one" if fresh else "")
        finally:
            with self._lock:
                self._spares_coming -= 1
                kept = ready and not self._closed and self._spare is None
                if kept:
                    self._spare = ctrl
            if ready and not kept:
                _quit(ctrl)  # closed meanwhile, or one is there already

    def _check_rest_on(self, ctrl: _Control) -> None:
        """``_require_rest``'s check (``REST size-1`` must yield exactly one byte),
        on the spare while it gets ready: a flow whose ranges so far all started
        at byte 0 can then begin its next one ahead (``can_start_next``). Only
        with the size known; otherwise the first fetch at an offset checks."""
        size = self._size if self._size_known else None
        if size is None or size < 2:
            return
        # (not _read_probe: its _receive publishes the transfer as the running one
        # to committed_end, and the primary's range runs meanwhile)
        ctrl, data = self._start_retr(ctrl, size - 1)
        got = b""
        try:
            data.settimeout(self.timeout)
            while len(got) < 2:
                chunk = data.recv(2 - len(got))
                if not chunk:
                    break
                got += chunk
        except OSError as exc:
            self._abort(ctrl, data, accepted=bool(got))
            raise TransientError(f"{self._where()}: REST check on the spare: {exc}") from exc
        if len(got) != 1:  # nothing (try later), or more: the server ignores REST
            self._abort(ctrl, data, accepted=bool(got))
            if got:
                self._rest_honoured = False
            raise TransientError(f"{self._where()}: REST check on the spare read {len(got)} bytes")
        data.close()
        self._finish(ctrl, 1, RangeEnd(1))  # the transfer's 226
        self._rest_honoured = True

    def _arm(self, ctrl: _Control) -> None:
        """Passive port and a connected data connection on an idle control
        connection (raises like a transfer's start)."""
        if ctrl.data_ready is not None:
            _rst_close(ctrl.data_ready[0])
            ctrl.data_ready = None
        port = ctrl.take_passive()
        if port is None:
            port = self._passive_port(ctrl)
        peer = _peer_of(ctrl)
        data = self._data_socket(ctrl)
        try:
            data.settimeout(self.timeout)
            data.connect((peer[0], port, *peer[2:]))
        except BaseException:
            data.close()
            raise
        ctrl.data_ready = (data, time.monotonic())

    def _take_spare(self) -> _Control | None:
        with self._lock:
            spare = self._spare
            if spare is None or self._closed or not spare.armed():
                return None
            self._spare = None
            return spare

    def _switch_to_spare(self, ctrl: _Control, data: socket.socket) -> bool:
        """After an early stop: make the spare the control connection and finish
        the abort of ``ctrl`` in the background. False when no spare is ready."""
        if self._next is not None:
            spare = None  # the next range's connection takes over in its fetch
        else:
            spare = self._take_spare()
            if spare is None:
                return False
        _rst_close(data)  # the server's sends fail from now on: its 426 comes early
        self._hand_over(spare, ctrl, data)
        if spare is not None:
            self.spare_switches += 1
        return True

    def _hand_over(
        self, new: _Control | None, old: _Control | None, data: socket.socket | None = None
    ) -> None:
        """``new`` becomes the control connection; ``old`` (its transfer ``data``
        aborted first) is made the spare in the background."""
        with self._lock:
            closed = self._closed
            if not closed and self._ctrl is old:
                self._ctrl = new
        if closed and new is not None:
            _quit(new)  # (close() has run: the caller's next step fails as cancelled)
        if old is not None and old is not new:
            self._ready_spare_async(old, data)

    def can_start_next(self) -> bool:
        """Could start_next begin a transfer now (a spare is armed, REST checked)?"""
        spare = self._spare
        return (
            self._next is None and self._head is None and self._rest_honoured is True
            and spare is not None and spare.armed() and not self._closed
        )

    def ahead_round_trips(self) -> int:
        """Round trips from a start_next transfer's REST + RETR to its first byte:
        one when the spare's data connection is already connected, else two (the
        data connection's handshake travels with the commands)."""
        spare = self._spare
        return 1 if spare is not None and spare.data_ready is not None else 2

    def start_next(self, offset: int, end: int | None = None) -> bool:
        """Begin the next range's transfer (from ``offset``) on the spare now,
        while this range still runs; the next ``fetch`` at ``offset`` takes it
        over. Its data connection's slow start then overlaps the end of the
        range before instead of following it (on a far path, ~0.3 s of a
        40 Mbit/s mirror per range). Up to 4 MiB are read ahead into
        memory (at most to ``end``, when given). Returns at once; False when no
        spare was ready (nothing started). Only from the thread that fetches."""
        if not self.can_start_next() or (end is not None and end <= offset):
            return False
        limit = HEAD_BUFFER_BYTES if end is None else min(HEAD_BUFFER_BYTES, end - offset)
        spare = self._take_spare()
        if spare is None:
            return False
        self._next = _NextTransfer(self, spare, offset, limit)
        return True

    def _take_next(
        self, head: _HeadReader, end: RangeEnd, sink: DataSink, cancel: threading.Event
    ) -> int:
        """``fetch`` of a range start_next began: its connection becomes the
        control connection (the one before is kept as the spare), then as a head."""
        self._hand_over(head.ctrl, self._ctrl)
        self.overlapped += 1
        return self._read_head(head, end, sink, cancel)

    def _prefer_spare(self) -> None:
        """Before a transfer: when the control connection has no passive port
        waiting (the last range ran to its end, or the connection was lost) and
        the spare has, start on the spare; the other gets its port meanwhile."""
        ctrl = self._ctrl
        if self._head is not None or (ctrl is not None and ctrl.armed()):
            return
        spare = self._take_spare()
        if spare is None:
            return
        self._hand_over(spare, ctrl)
        self.spare_switches += 1

    # -------------------------------------------------------- REST probing

    def _require_rest(self, cancel: threading.Event) -> None:
        """Make sure ``REST`` really moves the start before trusting a 350.

        Some servers answer 350 and still send from byte 0. Probe once per
        fetcher: with the size known, ``REST size-1`` must yield exactly one
        byte (a server ignoring REST sends the whole file; we stop at the
        second byte). Without SIZE, compare the bytes after ``REST 1`` with
        bytes 1.. of a read from 0; a prefix that is constant cannot tell the
        two apart, so we refuse rather than guess.

        Cost, pipelined: the probe's EPSV rides with TYPE I and SIZE, and its
        REST+RETR with its data connect, so it adds two round trips plus the
        EPSV of the real transfer (three in all; it was SIZE + EPSV + connect +
        REST + RETR = five). Not done: sending the real transfer's EPSV before
        the probe's data has come. A second EPSV closes the first passive
        listener (pyftpdlib, vsftpd and pure-ftpd all refuse the connection
        then), and an EPSV queued behind the probe's RETR is executed by
        pyftpdlib during the transfer, which closes the data channel and loses
        the transfer's 226 (tested), so it would save one round trip at the
        price of pairing replies wrongly on such servers.
        """
        if self._rest_honoured is False:
            raise RangeNotHonoured(f"{self._where()}: server ignores or refuses REST")
        if self._rest_honoured or not self.verify_rest:
            return
        size = self._known_size(passive=True)
        if self._rest_trusted is not None and self._server() == self._rest_trusted:
            self._rest_honoured = True  # (the same server, checked by another fetcher)
            return
        if size is not None:
            if size < 2:
                self._rest_honoured = True  # no offset > 0 can be inside the file
                return
            tail = self._read_probe(size - 1, 2, cancel)
            honoured = len(tail) == 1
            if not tail:
                raise TransientError(f"{self._where()}: REST probe returned no data")
        else:
            head = self._read_probe(0, _PROBE_BYTES + 1, cancel)
            shifted = self._read_probe(1, _PROBE_BYTES, cancel)
            k = min(len(shifted), len(head) - 1)
            if k <= 0:
                raise RangeNotHonoured(f"{self._where()}: cannot verify REST on a file this small")
            if head[:k] == head[1 : k + 1]:
                raise RangeNotHonoured(
                    f"{self._where()}: cannot verify REST (no SIZE, constant file prefix)"
                )
            honoured = shifted[:k] == head[1 : k + 1]
        self._rest_honoured = honoured
        if not honoured:
            raise RangeNotHonoured(f"{self._where()}: server answers 350 to REST but ignores it")

    def _server(self) -> tuple[str, int] | None:
        """(address, port) of the server the control connection reached."""
        ctrl = self._ctrl
        if ctrl is None:
            return None
        try:
            peer = ctrl.sock.getpeername()
        except OSError:
            return None
        return str(peer[0]), int(peer[1])

    def _read_probe(self, offset: int, limit: int, cancel: threading.Event) -> bytes:
        """Up to ``limit`` bytes from ``offset``, collected in memory (probes only)."""
        got = bytearray()

        def collect(_pos: int, block: memoryview, _t: int) -> None:
            got.extend(block)

        ctrl, data = self._with_reconnect(lambda c: self._start_retr(c, offset))
        # A short file ends before the limit: that is the answer we want.
        with contextlib.suppress(PrematureEnd):
            self._receive(ctrl, data, offset, RangeEnd(offset + limit), collect, cancel)
        return bytes(got)
