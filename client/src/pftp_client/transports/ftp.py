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
"""

from __future__ import annotations

import contextlib
import logging
import netrc
import os
import re
import socket
import struct
import threading
import time
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from pftp_client.transports.base import (
    Cancelled,
    DataSink,
    PermanentError,
    PrematureEnd,
    RangeEnd,
    RangeNotHonoured,
    StallError,
    TransferError,
    TransientError,
)

__all__ = ["FtpFetcher", "FtpReply", "FtpTarget", "ftp_target", "parse_epsv", "parse_pasv"]

log = logging.getLogger(__name__)

RECV_BUFSIZE = 256 * 1024
# How often a blocked receive wakes up to look at the cancel event.
_POLL_SECONDS = 0.25
# Longest reply line we accept (RFC 959 has no limit; 8 KiB is generous).
_MAX_LINE = 8192
# Replies to read while resynchronising after an abort before giving up.
_MAX_DRAIN_REPLIES = 8
# Bytes compared by the REST probe when the server does not implement SIZE.
_PROBE_BYTES = 4096
# Kernel receive timestamps (SO_TIMESTAMPNS, Linux value when the module lacks it).
_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
_TS_ANCILLARY = socket.CMSG_SPACE(16) if hasattr(socket, "CMSG_SPACE") else 0


# ---------------------------------------------------------------- pure parsing


@dataclass(frozen=True)
class FtpReply:
    code: int
    text: str  # every line of the reply, joined with "\n"

    @property
    def kind(self) -> int:
        """First digit: 1 preliminary, 2 done, 3 more needed, 4 transient, 5 permanent."""
        return self.code // 100

    def __str__(self) -> str:
        return self.text.replace("\n", " | ")


@dataclass(frozen=True)
class FtpTarget:
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
    parts = urlsplit(url)
    if parts.scheme.lower() != "ftp":
        raise ValueError(f"not an ftp:// URL: {url!r}")
    if not parts.hostname:
        raise ValueError(f"FTP URL has no host: {url!r}")
    try:
        port = parts.port or 21
    except ValueError as exc:
        raise ValueError(f"FTP URL has an invalid port: {url!r}") from exc
    raw_path = parts.path.split(";type=")[0]
    segments = [unquote(s) for s in raw_path.lstrip("/").split("/")]
    path = "/".join(segments)
    if not path or path.endswith("/"):
        raise ValueError(f"FTP URL does not name a file: {url!r}")
    for field_value in (path, unquote(parts.username or ""), unquote(parts.password or "")):
        if "\r" in field_value or "\n" in field_value or "\0" in field_value:
            raise ValueError(f"FTP URL contains a control character: {url!r}")
    return FtpTarget(
        host=parts.hostname,
        port=port,
        user=unquote(parts.username) if parts.username is not None else None,
        password=unquote(parts.password) if parts.password is not None else None,
        path=path,
    )


_EPSV_RE = re.compile(r"\((.)\1\1(\d{1,5})\1\)")
_PASV_RE = re.compile(r"(\d{1,3}),(\d{1,3}),(\d{1,3}),(\d{1,3}),(\d{1,3}),(\d{1,3})")


def parse_epsv(text: str) -> int:
    """Port from a 229 reply: ``229 Entering Extended Passive Mode (|||6446|)`` (RFC 2428)."""
    m = _EPSV_RE.search(text)
    if not m or not 0 < int(m.group(2)) < 65536:
        raise TransientError(f"unparsable EPSV reply: {text!r}")
    return int(m.group(2))


def parse_pasv(text: str) -> tuple[str, int]:
    """Address and port from a 227 reply: ``227 Entering Passive Mode (h1,h2,h3,h4,p1,p2)``."""
    m = _PASV_RE.search(text)
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


class _ControlLost(Exception):
    """The control connection is gone (EOF, reset, 421). Safe to reconnect and
    retry as long as no data of the current range has been delivered."""


class _Control:
    """One logged-in control connection: send a command, read a (multi-line) reply."""

    def __init__(self, sock: socket.socket, timeout: float) -> None:
        self.sock = sock
        self.timeout = timeout
        self.rfile = sock.makefile("rb")

    def send(self, command: str) -> None:
        if "\r" in command or "\n" in command:
            raise ValueError(f"control character in FTP command {command!r}")
        log.debug(">> %s", "PASS ****" if command.startswith("PASS ") else command)
        try:
            self.sock.sendall(command.encode("utf-8", "surrogateescape") + b"\r\n")
        except OSError as exc:
            raise _ControlLost(f"sending {command.split()[0]}: {exc}") from exc

    def _line(self) -> str:
        try:
            line = self.rfile.readline(_MAX_LINE + 2)
        except TimeoutError as exc:
            raise _ControlLost(f"no reply within {self.timeout:g}s") from exc
        except OSError as exc:
            raise _ControlLost(f"reading reply: {exc}") from exc
        if not line:
            raise _ControlLost("server closed the control connection")
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
        if reply.code == 421:  # service closing the control connection
            raise _ControlLost(str(reply))
        return reply

    def command(self, command: str) -> FtpReply:
        self.send(command)
        return self.reply()

    def close(self) -> None:
        for closer in (self.rfile.close, self.sock.close):
            try:
                closer()
            except OSError:
                continue  # already broken; closing is best effort by nature


def _rst_close(sock: socket.socket) -> None:
    """Close with RST instead of FIN: the server's next write then fails at once
    instead of filling socket buffers nobody reads, so it answers 426 promptly."""
    # A socket that is already dead refuses the option; close() still releases it.
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


# -------------------------------------------------------------------- fetcher


class FtpFetcher:
    """``RangeFetcher`` for ftp:// URLs; keeps its control connection between ranges.

    Not thread-safe: one fetcher serves one flow. ``close`` may be called from
    another thread to tear the connections down; a running ``fetch`` then fails.
    """

    def __init__(
        self,
        url: str,
        *,
        timeout: float = 30.0,
        stall_timeout: float = 15.0,
        netrc_file: str | os.PathLike[str] | None = None,
        verify_rest: bool = True,
        bufsize: int = RECV_BUFSIZE,
    ) -> None:
        self.url = url
        self.target = ftp_target(url)
        if timeout <= 0 or stall_timeout <= 0:
            raise ValueError("timeout and stall_timeout must be positive")
        self.timeout = timeout
        self.stall_timeout = stall_timeout
        self.netrc_file = netrc_file
        self.verify_rest = verify_rest
        self._buf = bytearray(bufsize)
        self._view = memoryview(self._buf)
        self._ctrl: _Control | None = None
        self._epsv_refused = False
        self._size: int | None = None
        self._size_known = False
        # None: not probed yet; True: honours REST; False: ignores it.
        self._rest_honoured: bool | None = None
        self._closed = False
        self._ever_connected = False
        self._lock = threading.Lock()
        self.reconnects = 0  # control connections opened after the first; for reports/tests
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
        if offset > 0:
            self._require_rest(cancel)
            if self._size is not None and offset >= self._size:
                raise PermanentError(
                    f"{self._where()}: offset {offset} is beyond the file size {self._size}"
                )
        ctrl, data = self._with_reconnect(lambda c: self._start_retr(c, offset))
        delivered, _eof = self._receive(ctrl, data, offset, end, sink, cancel)
        return delivered

    def size(self) -> int | None:
        """``SIZE`` in binary mode; None when the server does not implement it.
        Raises PermanentError when the file does not exist (550)."""
        if not self._size_known:
            self._size = self._with_reconnect(self._query_size)
            self._size_known = True
        return self._size

    def close(self) -> None:
        with self._lock:
            self._closed = True
            ctrl, self._ctrl = self._ctrl, None
        if ctrl is not None:
            try:
                ctrl.sock.settimeout(1.0)
                ctrl.send("QUIT")
            except (_ControlLost, OSError):
                pass  # the connection is being discarded either way
            ctrl.close()

    def __enter__(self) -> FtpFetcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------ control session

    def _with_reconnect(self, step):
        """Run ``step(ctrl)`` on the control connection; if the server had
        dropped it (idle timeout, restart), reconnect once and run it again.
        Only used for steps that deliver nothing, so a retry is harmless."""
        for attempt in (1, 2):
            ctrl = self._control()
            try:
                return step(ctrl)
            except _ControlLost as exc:
                self._drop_control(ctrl)
                if attempt == 2:
                    raise TransientError(
                        f"{self._where()}: control connection lost: {exc}"
                    ) from exc
        raise AssertionError("unreachable")

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
        return self._ctrl

    def _drop_control(self, ctrl: _Control | None = None) -> None:
        with self._lock:
            if ctrl is None or self._ctrl is ctrl:
                ctrl, self._ctrl = self._ctrl, None
        if ctrl is not None:
            ctrl.close()

    def _where(self) -> str:
        return f"ftp://{self.target.host}:{self.target.port}/{self.target.path}"

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
        try:
            rc = netrc.netrc(os.fspath(self.netrc_file) if self.netrc_file else None)
        except FileNotFoundError:
            if self.netrc_file:
                raise PermanentError(f"netrc file {self.netrc_file} does not exist") from None
            return None
        except netrc.NetrcParseError as exc:
            raise PermanentError(f"cannot use netrc: {exc}") from exc
        auth = rc.authenticators(self.target.host)
        if auth is None:
            return None
        login, _account, password = auth
        return login, password or ""

    def _connect(self) -> _Control:
        t = self.target
        try:
            sock = socket.create_connection((t.host, t.port), timeout=self.timeout)
        except TimeoutError as exc:
            raise TransientError(f"{self._where()}: connect timed out") from exc
        except OSError as exc:
            raise TransientError(f"{self._where()}: cannot connect: {exc}") from exc
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        ctrl = _Control(sock, self.timeout)
        try:
            self._login(ctrl)
        except _ControlLost as exc:
            ctrl.close()
            raise TransientError(f"{self._where()}: connection lost during login: {exc}") from exc
        except BaseException:
            ctrl.close()
            raise
        return ctrl

    def _login(self, ctrl: _Control) -> None:
        greeting = ctrl.reply()
        while greeting.code == 120:  # "service ready in nnn minutes"
            greeting = ctrl.reply()
        if greeting.code != 220:
            raise error_for_reply(f"{self._where()}: greeting", greeting)
        user, password = self._credentials()
        reply = ctrl.command(f"USER {user}")
        if reply.code == 331:
            reply = ctrl.command(f"PASS {password}")
        if reply.code == 332:
            raise PermanentError(f"{self._where()}: server wants an ACCT, not supported")
        if reply.code not in (230, 202):
            raise error_for_reply(f"{self._where()}: login as {user!r} refused", reply)
        reply = ctrl.command("TYPE I")
        if reply.code != 200:
            raise error_for_reply(f"{self._where()}: TYPE I refused", reply)

    def _query_size(self, ctrl: _Control) -> int | None:
        reply = ctrl.command(f"SIZE {self.target.path}")
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

    # ------------------------------------------------------------ transfers

    def _open_data(self, ctrl: _Control) -> socket.socket:
        """Passive data connection: EPSV (RFC 2428) first, PASV when refused (IPv4 only).
        We always connect to the control connection's peer address and ignore
        the address in a 227 reply: it is often a private address behind NAT,
        and trusting it would allow FTP bounce tricks (ftplib does the same)."""
        peer = ctrl.sock.getpeername()
        family = ctrl.sock.family
        port = None
        if not self._epsv_refused:
            reply = ctrl.command("EPSV")
            if reply.code == 229:
                port = parse_epsv(reply.text)
            elif reply.kind == 4:
                raise error_for_reply(f"{self._where()}: EPSV", reply)
            else:
                self._epsv_refused = True
        if port is None:
            if family != socket.AF_INET:
                raise PermanentError(f"{self._where()}: server refused EPSV on IPv6")
            reply = ctrl.command("PASV")
            if reply.code != 227:
                raise error_for_reply(f"{self._where()}: PASV", reply)
            _addr, port = parse_pasv(reply.text)
        data = socket.socket(family, socket.SOCK_STREAM)
        data.settimeout(self.timeout)
        if self.kernel_timestamps:
            try:  # before connect: every segment of the transfer gets its time
                data.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
            except OSError as exc:
                log.debug("%s: no SO_TIMESTAMPNS (%s); receive-call times used", self._where(), exc)
        try:
            data.connect((peer[0], port, *peer[2:]))
        except OSError as exc:
            data.close()
            raise TransientError(f"{self._where()}: data connection to port {port}: {exc}") from exc
        return data

    def _start_retr(self, ctrl: _Control, offset: int) -> tuple[_Control, socket.socket]:
        """Open the data connection, position it (REST, RFC 3659 section 5) and start RETR.
        REST goes right before RETR: RFC 959 says the restart marker must be
        immediately followed by the transfer command."""
        data = self._open_data(ctrl)
        try:
            if offset > 0:
                reply = ctrl.command(f"REST {offset}")
                if reply.code != 350:
                    if reply.kind == 4:
                        raise error_for_reply(f"{self._where()}: REST {offset}", reply)
                    # 500/502/504 (not implemented) or a 2xx/3xx that is not 350:
                    # RETR would start at byte 0. Never trust it.
                    self._rest_honoured = False
                    raise RangeNotHonoured(
                        f"{self._where()}: server refused REST {offset} ({reply})"
                    )
            reply = ctrl.command(f"RETR {self.target.path}")
            if reply.kind != 1:
                if reply.code == 550:
                    raise PermanentError(
                        f"{self._where()}: file not found or not readable ({reply})"
                    )
                raise error_for_reply(f"{self._where()}: RETR", reply)
        except BaseException:
            _rst_close(data)
            raise
        return ctrl, data

    def _receive(
        self,
        ctrl: _Control,
        data: socket.socket,
        offset: int,
        end: RangeEnd,
        sink: DataSink,
        cancel: threading.Event,
    ) -> tuple[int, bool]:
        """Read the data connection into ``sink`` until ``end`` (re-read after
        every receive) or EOF; then leave the control connection ready for the
        next command. Returns (bytes delivered, whether the server hit EOF)."""
        pos = offset
        view = self._view
        eof = False
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
        try:
            while True:
                if cancel.is_set() or self._closed:
                    raise Cancelled(f"{self._where()}: cancelled at byte {pos}")
                want = min(len(view), end.value - pos)
                if want <= 0:
                    if pos != expect_eof_at:
                        break
                    want = 1  # read the EOF that must follow the last byte
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
                last_byte = arrival / 1e9
                if kernel_ts:
                    for level, kind, cdata in ancdata:
                        if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS:
                            sec, nsec = struct.unpack_from("qq", cdata)
                            # never later than our own clock read (clock noise)
                            arrival = min(arrival, sec * 1_000_000_000 + nsec - realtime_minus_mono)
                got = end.deliver(sink, pos, view[:n], arrival)
                pos += got
                if got < n:
                    break  # the end was lowered under us (or the server sends past the file size)
        except BaseException:
            self._abort(ctrl, data)
            raise
        if not eof:
            self._abort(ctrl, data)
            return pos - offset, False
        data.close()
        self._finish(ctrl, pos, end)
        return pos - offset, True

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

    def _abort(self, ctrl: _Control, data: socket.socket) -> None:
        """Stop a transfer we no longer want and resynchronise the control connection.

        The data socket is reset first, then ABOR is sent. RFC 959 servers then
        send two replies, whatever the timing: the transfer's own final reply
        and ABOR's (426 + 226 while sending; 226 + 225/226 when the transfer had
        already finished; vsftpd: 426 "failure writing" + 225). We read those
        two, then send NOOP and discard anything up to its 200, so a server
        that counts differently cannot leave a stale reply to be mistaken for
        the next command's. NOOP is not pipelined behind ABOR: pure-ftpd reads
        ABOR inside its transfer loop and throws away the rest of that read.
        If anything fails, the control connection is dropped instead: the next
        fetch logs in again, which costs a round trip or two but can never
        pair a reply with the wrong command.
        """
        _rst_close(data)
        deadline = time.monotonic() + min(self.timeout, 10.0)

        def next_reply() -> FtpReply:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _ControlLost("abort took too long")
            return ctrl.reply(timeout=remaining)

        try:
            ctrl.send("ABOR")
            next_reply()
            next_reply()
            ctrl.send("NOOP")
            for _ in range(_MAX_DRAIN_REPLIES):
                if next_reply().code == 200:
                    return
            raise _ControlLost("no NOOP reply")
        except _ControlLost as exc:
            log.info("%s: control connection dropped after abort: %s", self._where(), exc)
        self._drop_control(ctrl)

    # -------------------------------------------------------- REST probing

    def _require_rest(self, cancel: threading.Event) -> None:
        """Make sure ``REST`` really moves the start before trusting a 350.

        Some servers answer 350 and still send from byte 0. Probe once per
        fetcher: with the size known, ``REST size-1`` must yield exactly one
        byte (a server ignoring REST sends the whole file; we stop at the
        second byte). Without SIZE, compare the bytes after ``REST 1`` with
        bytes 1.. of a read from 0; a prefix that is constant cannot tell the
        two apart, so we refuse rather than guess.
        """
        if self._rest_honoured is False:
            raise RangeNotHonoured(f"{self._where()}: server ignores REST")
        if self._rest_honoured or not self.verify_rest:
            return
        size = self.size()
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
