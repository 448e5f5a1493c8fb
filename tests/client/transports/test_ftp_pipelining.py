"""FtpFetcher's pipelined commands against real servers (pyftpdlib, vsftpd, pure-ftpd,
proftpd).

What is checked: the commands really travel together (seen by a relay in front of
the server, ``pftp_lab.ftp_proxy``), every reply is paired with its command on the
success and the error paths, a refused REST never lets a byte of the transfer
that RETR started from 0 through, and the fetcher falls back to one command at a
time for servers that lose pipelined commands.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import random
import socket
import threading
import time
from typing import ClassVar

import pytest
from pftp_client.transports import ftp as ftp_module
from pftp_client.transports.base import (
    Cancelled,
    PermanentError,
    RangeEnd,
    RangeNotHonoured,
)
from pftp_client.transports.ftp import FtpFetcher
from pyftpdlib.handlers import FTPHandler

from .helpers import Collector, fetch, payload, with_test_timeouts

fetcher = functools.partial(with_test_timeouts, FtpFetcher)


class SlowSink(Collector):
    def __call__(self, offset: int, block: memoryview, arrival_ns: int) -> None:
        super().__call__(offset, block, arrival_ns)
        time.sleep(0.003)


def first_reply_after(lines: list[tuple[str, str]], index: int) -> int:
    return next(j for j in range(index + 1, len(lines)) if lines[j][0] == "S")


def position(lines: list[tuple[str, str]], side: str, prefix: str, start: int = 0) -> int:
    return next(
        i
        for i in range(start, len(lines))
        if lines[i][0] == side and lines[i][1].startswith(prefix)
    )


def sent_before_reply(lines: list[tuple[str, str]], first: str, then: str, start: int = 0) -> bool:
    """Was command ``then`` sent before the first reply to command ``first`` came?"""
    i = position(lines, "C", first, start)
    return position(lines, "C", then, i) < first_reply_after(lines, i)


# ------------------------------------------------------------- on the wire


def test_commands_travel_together(ftp_server, relay) -> None:
    data = payload(3_000_000, seed=11)
    ftp_server.put("f.bin", data)
    proxy, base = relay(ftp_server, one_way_delay=0.03)
    with fetcher(base + "f.bin") as f:
        assert fetch(f, 100_000, 200_000) == data[100_000:200_000]  # probe, then the range
        assert fetch(f, 2_000_000, 2_000_100) == data[2_000_000:2_000_100]
        assert f.pipeline and f.reconnects == 0
        assert f.validator is not None and f.validator.startswith("MDTM 20")
    lines = list(proxy.lines)
    commands = [text for side, text in lines if side == "C"]
    assert commands[0].startswith("USER ") and commands[1].startswith("PASS ")
    # MDTM (the file's version, validators.py) rides along: no round trip of its own
    assert commands[2:6] == ["TYPE I", "SIZE f.bin", "MDTM f.bin", "EPSV"]
    # the login and the first transfer's setup in one write (see _login)
    assert sent_before_reply(lines, "USER ", "EPSV")
    probe = position(lines, "C", f"REST {len(data) - 1}")
    assert sent_before_reply(lines, "REST", "RETR", probe)
    real = position(lines, "C", "REST 100000")
    assert sent_before_reply(lines, "REST", "RETR", real)
    abort = position(lines, "C", "ABOR", real)
    assert not sent_before_reply(lines, "ABOR", "NOOP", abort)  # see FtpFetcher._abort
    assert sent_before_reply(lines, "NOOP", "EPSV", abort)
    # the next range uses the port that came with the resync: no EPSV of its own
    after = [text for side, text in lines[abort:] if side == "C"]
    # and MDTM asked again with REST + RETR (a copy replaced meanwhile is caught)
    assert after[:6] == ["ABOR", "NOOP", "EPSV", "MDTM f.bin", "REST 2000000", "RETR f.bin"]
    assert sent_before_reply(lines, "MDTM", "RETR", abort)
    # nothing rides behind RETR
    for i, (side, text) in enumerate(lines):
        if side == "C" and text.startswith("RETR"):
            later = [j for j in range(i + 1, len(lines)) if lines[j][0] == "C"]
            assert not later or first_reply_after(lines, i) < later[0]


def test_login_brings_the_size_and_the_first_transfers_passive_port(ftp_server, relay) -> None:
    """The pipelined login carries TYPE I, SIZE and EPSV: early.EarlyProbe's size
    query then costs no round trip of its own, and the REST check (or the transfer)
    after it sends no EPSV of its own."""
    data = payload(500_000, seed=13)
    ftp_server.put("f.bin", data)
    proxy, base = relay(ftp_server, one_way_delay=0.01)
    with fetcher(base + "f.bin") as f:
        assert f.size(passive=True) == len(data)
        assert len(proxy.commands()) == 6  # the login batch, nothing after it
        f.prepare(threading.Event())  # the REST check: REST size-1 + RETR
        assert fetch(f, 200_000, 300_000) == data[200_000:300_000]
    commands = proxy.commands()
    assert commands[2:6] == ["TYPE I", "SIZE f.bin", "MDTM f.bin", "EPSV"]
    assert sent_before_reply(list(proxy.lines), "USER ", "EPSV")
    assert commands[6:8] == [f"REST {len(data) - 1}", "RETR f.bin"]


def test_one_command_at_a_time_when_asked(ftp_server, relay) -> None:
    data = payload(1_000_000, seed=12)
    ftp_server.put("f.bin", data)
    proxy, base = relay(ftp_server, one_way_delay=0.01)
    with fetcher(base + "f.bin", pipeline=False) as f:
        assert fetch(f, 10, 300_000) == data[10:300_000]
        assert fetch(f, 500_000, 600_000) == data[500_000:600_000]
    lines = list(proxy.lines)
    commands = [i for i, (side, _) in enumerate(lines) if side == "C"]
    for a, b in itertools.pairwise(commands):
        assert any(side == "S" for side, _ in lines[a:b]), lines[a][1]


# ----------------------------------------------------------- correctness


@pytest.mark.parametrize("pipeline", [True, False])
def test_many_ranges_at_many_offsets(ftp_server, pipeline: bool) -> None:
    size = 2_000_003
    data = payload(size, seed=13)
    ftp_server.put("f.bin", data)
    rng = random.Random(14)
    ranges = [(0, 1), (size - 1, size), (1, size), (size - 70_000, size)]
    for _ in range(30):
        start = rng.randrange(size)
        ranges.append((start, min(size, start + rng.choice([1, 17, 4096, 65_537, 400_000]))))
    with fetcher(ftp_server.url("f.bin"), pipeline=pipeline) as f:
        control = None
        for start, end in ranges:
            assert fetch(f, start, end) == data[start:end], (start, end)
            control = control or f._ctrl.sock.getsockname()
        assert f.reconnects == 0
        assert f._ctrl.sock.getsockname() == control
        assert f.pipeline is pipeline


def test_abort_mid_range_then_next_range(ftp_server) -> None:
    data = payload(8_000_000, seed=15)
    ftp_server.put("big.bin", data)
    with fetcher(ftp_server.url("big.bin"), bufsize=16_384) as f:
        end = RangeEnd(len(data))
        sink = SlowSink(5_000)
        done = threading.Event()

        def run() -> None:
            f.fetch(5_000, end, sink, threading.Event())
            done.set()

        t = threading.Thread(target=run)
        t.start()
        assert sink.flowing.wait(30)
        end.lower_to(5_000 + len(sink.data) + 50_000)
        t.join(60)
        assert done.is_set()
        assert bytes(sink.data) == data[5_000 : end.value]
        assert f._ctrl is not None and f._ctrl.passive is not None  # prepared for the next range
        for start in (7_000_000, 0, 123_456):
            assert fetch(f, start, start + 100_000) == data[start : start + 100_000]
        assert f.reconnects == 0


def test_cancelled_range_prepares_no_port(pyftpd_server) -> None:
    data = payload(4_000_000, seed=16)
    pyftpd_server.put("f.bin", data)
    with fetcher(pyftpd_server.url("f.bin"), bufsize=16_384) as f:
        cancel = threading.Event()

        def sink(offset: int, block: memoryview, _t: int) -> None:
            cancel.set()

        with pytest.raises(Cancelled):
            f.fetch(0, RangeEnd(len(data)), sink, cancel)
        assert f._ctrl.passive is None
        assert fetch(f, 9, 99) == data[9:99]
        assert f.reconnects == 0


class ShortPassiveTimeout(FTPHandler.passive_dtp):
    timeout = 1  # pyftpdlib's default is 30 s; then "421 Passive data channel timed out"


def test_prepared_port_that_went_stale(start_pyftpd) -> None:
    server = start_pyftpd(handler=type("H", (FTPHandler,), {"passive_dtp": ShortPassiveTimeout}))
    data = payload(2_000_000, seed=17)
    server.put("f.bin", data)
    with fetcher(server.url("f.bin")) as f:
        assert fetch(f, 0, 100_000) == data[:100_000]  # aborted: port prepared
        time.sleep(2.5)  # the server closes it and says 421
        assert fetch(f, 1_000_000, 1_100_000) == data[1_000_000:1_100_000]
        assert f.reconnects <= 1
        assert fetch(f, 5, 10) == data[5:10]


def test_prepared_port_too_old_is_not_used(pyftpd_server, relay, monkeypatch) -> None:
    monkeypatch.setattr(ftp_module, "_PASSIVE_MAX_AGE", 0.0)
    data = payload(1_000_000, seed=18)
    pyftpd_server.put("f.bin", data)
    proxy, base = relay(pyftpd_server)
    with fetcher(base + "f.bin") as f:
        assert fetch(f, 0, 100_000) == data[:100_000]
        assert fetch(f, 0, 100_000) == data[:100_000]
        assert f.reconnects == 0
    commands = proxy.commands()
    abort = commands.index("ABOR")
    assert commands[abort : abort + 4] == ["ABOR", "NOOP", "EPSV", "EPSV"]


# ------------------------------------------------------ errors stay paired


def test_missing_file_then_created(ftp_server) -> None:
    ftp_server.put("other.bin", b"x")
    with fetcher(ftp_server.url("late.bin")) as f:
        for _ in range(2):
            with pytest.raises(PermanentError, match="not found"):
                f.size()
            with pytest.raises(PermanentError, match="not found"):
                fetch(f, 0, 10)
            with pytest.raises(PermanentError, match="not found"):
                fetch(f, 10, 20)
        data = payload(50_000, seed=19)
        ftp_server.put("late.bin", data)
        assert f.size() == len(data)
        assert fetch(f, 0, 10) == data[:10]
        assert fetch(f, 100, 50_000) == data[100:]
        assert f.reconnects == 0


class PassivePortNobodyListensOn(FTPHandler):
    """Its EPSV names a port nobody listens on, as when proftpd, refusing RETR, closes
    its passive port with our connection still in its backlog (a reset)."""

    def ftp_EPSV(self, line: str) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.respond(f"229 Entering extended passive mode (|||{port}|).")


def test_retr_refused_while_its_data_connection_failed(start_pyftpd) -> None:
    """The data connection fails, but RETR's own answer (550) explains it: the file
    is reported missing and the control connection kept, not dropped and retried."""
    server = start_pyftpd(handler=PassivePortNobodyListensOn)
    server.put("other.bin", b"x")
    with fetcher(server.url("late.bin")) as f:
        for _ in range(2):
            with pytest.raises(PermanentError, match="not found"):
                fetch(f, 0, 10)
        assert f.reconnects == 0


def wrong_login_url(server) -> str:
    if server.kind == "pure-ftpd":
        return server.base_url.replace("s3cret%20pw", "wrong") + "f.bin"
    # vsftpd is anonymous only (530 to USER, then 503 to the pipelined PASS);
    # pyftpdlib's handler here answers 331 then 530
    return f"ftp://mallory:wrong@{server.host}:{server.port}/f.bin"


def test_refused_login_reports_the_login_reply(ftp_server) -> None:
    ftp_server.put("f.bin", b"abc")
    with fetcher(wrong_login_url(ftp_server)) as f:
        with pytest.raises(PermanentError, match="login") as info:
            fetch(f, 0, 3)
        assert "530" in str(info.value)
        assert f.pipeline  # a refused login is not a pipelining problem
    with fetcher(ftp_server.url("f.bin")) as f:
        assert fetch(f, 1, 3) == b"bc"


def test_user_logged_in_without_password(vsftpd_server, relay) -> None:
    """vsftpd (no_anon_password) answers USER with 230 and the pipelined PASS with
    "230 Already logged in"; that second reply must not be taken for TYPE's."""
    data = payload(10_000, seed=20)
    vsftpd_server.put("f.bin", data)
    proxy, base = relay(vsftpd_server)
    with fetcher(base + "f.bin") as f:
        assert fetch(f, 0, 10_000) == data
        assert f.pipeline and f.size() == 10_000
    replies = [text for side, text in proxy.lines if side == "S"]
    assert replies[1].startswith("230") and replies[2].startswith("230")


def refuse_rest(command: str) -> str:
    """Make a real server refuse REST: it receives an unknown command (500)."""
    return "XRST" + command[4:] if command.startswith("REST ") else command


@pytest.mark.parametrize("verify_rest", [False, True])
def test_rest_refused_by_real_server(ftp_server, relay, verify_rest: bool) -> None:
    """RETR is already on its way when the 500 for REST arrives: the server then
    sends from byte 0. Not a byte of it may reach the sink, and the control
    connection must carry on in step. (The file is larger than what the relay and
    the socket buffers hold, so the transfer is still running at the abort.)"""
    data = payload(24_000_000, seed=21)
    ftp_server.put("f.bin", data)
    _proxy, base = relay(ftp_server, rewrite_command=refuse_rest)
    with fetcher(base + "f.bin", verify_rest=verify_rest) as f:
        for _ in range(2):
            sink = Collector(1_000)
            with pytest.raises(RangeNotHonoured, match="REST"):
                f.fetch(1_000, RangeEnd(2_000_000), sink, threading.Event())
            assert sink.data == b""
        assert fetch(f, 0, 2_000_000) == data[:2_000_000]
        assert fetch(f, 0, len(data)) == data
        assert f.reconnects == 0


# ----------------------------------------------------------- fall back


class LosesPipelinedPass(FTPHandler):
    """Throws away whatever arrived after USER in the same read."""

    def ftp_USER(self, line: str) -> None:
        super().ftp_USER(line)
        self.ac_in_buffer = b""


class LosesPipelinedRetr(FTPHandler):
    """Throws away whatever arrived after REST in the same read."""

    def ftp_REST(self, line: str) -> None:
        super().ftp_REST(line)
        self.ac_in_buffer = b""


@pytest.mark.parametrize("handler", [LosesPipelinedPass, LosesPipelinedRetr])
def test_server_losing_pipelined_commands(start_pyftpd, handler) -> None:
    server = start_pyftpd(handler=handler)
    data = payload(300_000, seed=22)
    server.put("f.bin", data)
    with fetcher(server.url("f.bin"), timeout=3.0) as f:
        assert fetch(f, 1234, 300_000) == data[1234:]
        assert f.pipeline is False
        assert fetch(f, 0, 1000) == data[:1000]
        assert fetch(f, 7, 99) == data[7:99]


class MikroTikBanner(FTPHandler):
    def handle(self) -> None:
        self.banner = "MikroTik 6.49 FTP server ready"  # the fixture sets its own per class
        super().handle()


def test_server_known_to_mishandle_pipelining(start_pyftpd, relay) -> None:
    server = start_pyftpd(handler=MikroTikBanner)
    data = payload(200_000, seed=23)
    server.put("f.bin", data)
    proxy, base = relay(server)
    with fetcher(base + "f.bin") as f:
        assert fetch(f, 10, 200_000) == data[10:]
        assert fetch(f, 0, 10) == data[:10]
        assert f.pipeline is False
    # The login went out before the greeting named the server; that connection
    # was dropped, and the next one sends one command at a time.
    sessions = {n for n, _side, _text in proxy.session_lines}
    assert len(sessions) == 2
    later = max(sessions)
    lines = [(side, text) for n, side, text in proxy.session_lines if n == later]
    assert "MikroTik" in lines[0][1]
    commands = [i for i, (side, _) in enumerate(lines) if side == "C"]
    for a, b in itertools.pairwise(commands):
        assert any(side == "S" for side, _ in lines[a:b]), lines[a][1]


class NotesEarlyInput(FTPHandler):
    """Looks, before it greets, whether commands are already waiting."""

    early_input: ClassVar[list[bytes]] = []

    def handle(self) -> None:
        time.sleep(0.3)  # (blocks this test server's loop: one client at a time)
        try:
            waiting = self.socket.recv(4096, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except BlockingIOError:
            waiting = b""
        NotesEarlyInput.early_input.append(waiting)
        super().handle()


class DropsEarlyInput(FTPHandler):
    """Throws away whatever the client sent before the greeting."""

    def handle(self) -> None:
        time.sleep(0.3)
        with contextlib.suppress(BlockingIOError):
            self.socket.recv(65536, socket.MSG_DONTWAIT)
        super().handle()


def test_login_goes_out_before_the_greeting(start_pyftpd) -> None:
    """USER, PASS, TYPE I, SIZE and EPSV are in the server's socket before it greets:
    a far mirror's first byte comes two round trips sooner."""
    NotesEarlyInput.early_input = []
    server = start_pyftpd(handler=NotesEarlyInput)
    data = payload(100_000, seed=24)
    server.put("f.bin", data)
    with fetcher(server.url("f.bin")) as f:
        assert fetch(f, 0, len(data)) == data
        assert f.pipeline
    early = NotesEarlyInput.early_input[0].decode()
    assert early.split("\r\n")[:6] == ["USER anonymous", "PASS pftp@", "TYPE I",
                                       "SIZE f.bin", "MDTM f.bin", "EPSV"]


def test_server_dropping_input_sent_before_its_greeting(start_pyftpd) -> None:
    """No reply to the early USER: the fetcher falls back to one command at a time
    after the short wait for the login batch's replies, not after the reply timeout."""
    server = start_pyftpd(handler=DropsEarlyInput)
    data = payload(100_000, seed=25)
    server.put("f.bin", data)
    began = time.monotonic()
    with fetcher(server.url("f.bin"), timeout=60.0) as f:
        assert fetch(f, 10, len(data)) == data[10:]
        assert f.pipeline is False
    assert time.monotonic() - began < 30.0  # (the reply timeout is 60 s)
