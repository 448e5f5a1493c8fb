"""FtpFetcher.start_head: a transfer from byte 0 started ahead of its fetch
(pftp_client.early), against pyftpdlib in-process and vsftpd."""

from __future__ import annotations

import os
import threading
import time
from typing import Any, ClassVar

import pytest
from pftp_client.transports.base import RangeEnd
from pftp_client.transports.ftp import FtpFetcher
from pyftpdlib.handlers import FTPHandler


class Recording(FTPHandler):
    """Keeps every command the server received, in order (class-wide)."""

    commands: ClassVar[list[str]] = []

    def pre_process_command(self, line: str, cmd: str, arg: str) -> Any:
        Recording.commands.append(cmd)
        return super().pre_process_command(line, cmd, arg)


def _collect() -> tuple[bytearray, Any]:
    got = bytearray()
    where: list[int] = []

    def sink(pos: int, block: memoryview, _t: int) -> None:
        assert pos == len(got), f"block at {pos}, expected {len(got)}"
        where.append(pos)
        got.extend(block)

    return got, sink


@pytest.fixture
def recording_server(start_pyftpd):
    Recording.commands = []
    return start_pyftpd(handler=Recording)


def _wait_buffered(f: FtpFetcher, at_least: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while f._head is not None and f._head.got < at_least:
        assert time.monotonic() < deadline, "the head transfer read nothing"
        time.sleep(0.01)


def test_fetch_from_zero_takes_the_head_over(recording_server) -> None:
    data = os.urandom(3 * 1024 * 1024 + 17)
    recording_server.put("f.bin", data)
    with FtpFetcher(recording_server.url("f.bin")) as f:
        f.start_head(limit=256 * 1024)
        _wait_buffered(f, 256 * 1024)  # read into memory up to the limit, then held
        assert f._head is not None and f._head.got == 256 * 1024
        got, sink = _collect()
        n = f.fetch(0, RangeEnd(len(data)), sink, threading.Event())
        assert n == len(data) and bytes(got) == data
        assert f.reconnects == 0
        # the fetch sent nothing: one RETR in all, no REST, no ABOR
        assert Recording.commands.count("RETR") == 1
        assert "REST" not in Recording.commands and "ABOR" not in Recording.commands
        # the connection stays usable: a range after the head
        got2 = bytearray()
        f.fetch(1000, RangeEnd(5000), lambda p, b, t: got2.extend(b), threading.Event())
        assert bytes(got2) == data[1000:5000]


def test_a_lowered_end_inside_what_was_read_stops_there(recording_server) -> None:
    data = os.urandom(2 * 1024 * 1024)
    recording_server.put("f.bin", data)
    with FtpFetcher(recording_server.url("f.bin")) as f:
        f.start_head(limit=512 * 1024)
        _wait_buffered(f, 512 * 1024)
        got, sink = _collect()
        n = f.fetch(0, RangeEnd(100_000), sink, threading.Event())
        assert n == 100_000 and bytes(got) == data[:100_000]
        assert "ABOR" in Recording.commands  # the rest of the stream was stopped
        got2 = bytearray()
        f.fetch(100_000, RangeEnd(300_000), lambda p, b, t: got2.extend(b), threading.Event())
        assert bytes(got2) == data[100_000:300_000]


def test_another_first_request_aborts_the_head(recording_server) -> None:
    data = os.urandom(1024 * 1024)
    recording_server.put("f.bin", data)
    with FtpFetcher(recording_server.url("f.bin")) as f:
        f.start_head()
        got = bytearray()
        f.fetch(500_000, RangeEnd(600_000), lambda p, b, t: got.extend(b), threading.Event())
        assert bytes(got) == data[500_000:600_000]
        assert f._head is None
        cmds = Recording.commands
        assert cmds.index("ABOR") < cmds.index("REST")  # aborted before the REST probe


def test_prepare_after_a_head_start_keeps_the_connection_in_step(vsftpd_server) -> None:
    data = os.urandom(700_001)
    vsftpd_server.put("f.bin", data)
    with FtpFetcher(vsftpd_server.url("f.bin")) as f:
        f.start_head()
        f.prepare(threading.Event())  # the REST probe: needs the connection, aborts the head
        got = bytearray()
        f.fetch(0, RangeEnd(len(data)), lambda p, b, t: got.extend(b), threading.Event())
        assert bytes(got) == data
        assert f.reconnects == 0


def test_head_over_vsftpd_with_kernel_timestamps(vsftpd_server) -> None:
    data = os.urandom(2 * 1024 * 1024 + 3)
    vsftpd_server.put("f.bin", data)
    with FtpFetcher(vsftpd_server.url("f.bin")) as f:
        # (before the head starts: it may have read the whole file by the fetch, and
        # the kernel stamps each segment when it came)
        before = time.monotonic_ns()
        f.start_head()
        f.kernel_timestamps = True  # switched on by the engine after the probe
        times: list[int] = []
        got = bytearray()

        def sink(pos: int, block: memoryview, t: int) -> None:
            got.extend(block)
            times.append(t)

        f.fetch(0, RangeEnd(len(data)), sink, threading.Event())
        assert bytes(got) == data
        assert all(t <= time.monotonic_ns() for t in times) and times[-1] >= before


def test_empty_file_starts_no_head(recording_server) -> None:
    recording_server.put("empty.bin", b"")
    with FtpFetcher(recording_server.url("empty.bin")) as f:
        f.start_head()
        assert f._head is None and f.size() == 0
        assert "RETR" not in Recording.commands


def test_close_with_an_unread_head_releases_everything(recording_server) -> None:
    data = os.urandom(4 * 1024 * 1024)
    recording_server.put("f.bin", data)
    f = FtpFetcher(recording_server.url("f.bin"))
    f.start_head(limit=64 * 1024)
    head = f._head
    assert head is not None
    f.close()
    assert f._head is None and head.data.fileno() == -1
    assert not head._thread.is_alive()
    with pytest.raises(OSError):
        os.fstat(head._wake_r)  # the wake-up pipe is closed too


def test_a_head_at_an_offset_needs_rest_checked_and_is_taken_there(recording_server) -> None:
    from pftp_client.transports.base import RangeNotHonoured

    data = os.urandom(1_500_000)
    recording_server.put("f.bin", data)
    with FtpFetcher(recording_server.url("f.bin")) as f:
        with pytest.raises(RangeNotHonoured):
            f.start_head(500_000)  # REST not checked yet: its data could not be trusted
        f.prepare(threading.Event())
        f.start_head(500_000, limit=64 * 1024)
        progress = f.head_progress()
        assert progress is not None and progress[0] <= time.monotonic()
        _wait_buffered(f, 64 * 1024)
        requested_at, samples, rtt = f.head_progress()
        assert samples[-1][1] == 64 * 1024 and samples[0][0] >= requested_at
        assert rtt is None or 0 < rtt < 1.0  # the control connection's smoothed RTT
        got = bytearray()
        retrs = Recording.commands.count("RETR")
        n = f.fetch(500_000, RangeEnd(900_000), lambda p, b, t: got.extend(b), threading.Event())
        assert n == 400_000 and bytes(got) == data[500_000:900_000]
        assert Recording.commands.count("RETR") == retrs  # the head's own RETR served it
        assert f.head_progress() is None


def test_a_head_past_the_end_is_not_started(recording_server) -> None:
    recording_server.put("f.bin", b"x" * 1000)
    with FtpFetcher(recording_server.url("f.bin")) as f:
        f.prepare(threading.Event())
        f.start_head(1000)
        assert f.head_progress() is None


class IgnoresRest(FTPHandler):
    """Answers 350 to REST and sends from byte 0 all the same."""

    def ftp_REST(self, line: str) -> None:
        self.respond(f"350 Restarting at position {line}.")


def _reference(data: bytes, n: int = 4096) -> bytes:
    return data[:n]  # what a transfer from byte 0 on another mirror brings


def test_a_head_checked_from_its_data_is_taken_over_without_the_probe(
    recording_server,
) -> None:
    """rest_checked_later: the transfer starts at once; its first bytes differ from
    the file's first bytes, which shows REST was honoured: no REST probe is sent
    (the one at size-1), and the fetch takes the transfer over."""
    data = os.urandom(1_500_000)
    recording_server.put("f.bin", data)
    with FtpFetcher(recording_server.url("f.bin")) as f:
        f.start_head(500_000, rest_checked_later=True)
        assert f.confirm_rest(b"", 4096) is None  # nothing to compare with yet
        _wait_buffered(f, 4096)
        assert f.confirm_rest(_reference(data), 4096) is True
        assert f.rest_honoured is True
        got = bytearray()
        n = f.fetch(500_000, RangeEnd(900_000), lambda p, b, t: got.extend(b), threading.Event())
        assert n == 400_000 and bytes(got) == data[500_000:900_000]
        assert Recording.commands.count("RETR") == 1 and Recording.commands.count("REST") == 1


def test_equal_bytes_cannot_confirm_and_the_fetch_falls_back_to_the_probe(
    recording_server,
) -> None:
    """A file whose bytes at the offset equal its first bytes (here: zeros) cannot
    show REST from the data: confirm_rest says False, the fetch does not take the
    unconfirmed transfer over, it aborts it, probes REST and starts again."""
    data = bytes(1_000_000) + os.urandom(1000)
    recording_server.put("f.bin", data)
    with FtpFetcher(recording_server.url("f.bin")) as f:
        f.start_head(300_000, rest_checked_later=True)
        _wait_buffered(f, 4096)
        assert f.confirm_rest(_reference(data), 4096) is False
        assert f.rest_honoured is None
        got = bytearray()
        n = f.fetch(300_000, RangeEnd(len(data)), lambda p, b, t: got.extend(b),
                    threading.Event())
        assert n == len(data) - 300_000 and bytes(got) == data[300_000:]
        assert "ABOR" in Recording.commands  # the unconfirmed transfer was stopped
        assert Recording.commands.count("RETR") == 3  # it, the probe, the transfer
        assert f.rest_honoured is True


def test_a_server_ignoring_rest_never_gets_its_head_trusted(start_pyftpd) -> None:
    """A server that answers 350 and sends from 0: its first bytes equal the
    reference, so the transfer is never confirmed; the fetch's probe finds the lie
    and nothing is delivered."""
    from pftp_client.transports.base import RangeNotHonoured

    server = start_pyftpd(handler=IgnoresRest)
    data = os.urandom(600_000)
    server.put("f.bin", data)
    with FtpFetcher(server.url("f.bin")) as f:
        f.start_head(200_000, rest_checked_later=True)
        _wait_buffered(f, 4096)
        assert f.confirm_rest(_reference(data), 4096) is False
        got = bytearray()
        with pytest.raises(RangeNotHonoured):
            f.fetch(200_000, RangeEnd(len(data)), lambda p, b, t: got.extend(b),
                    threading.Event())
        assert not got and f.rest_honoured is False
        with pytest.raises(RangeNotHonoured):  # and no later head at an offset either
            f.start_head(200_000, rest_checked_later=True)


def test_a_head_taken_over_before_its_first_bytes_still_shows_them_to_the_others(
    recording_server,
) -> None:
    """A far first mirror: the engine takes its transfer from 0 over before a byte has
    come. The other mirrors' REST checks compare with its first bytes (head_bytes):
    the fetch keeps them as they pass, and until then says more will come, instead
    of an empty final prefix that made every other mirror start again."""
    data = os.urandom(300_000)
    recording_server.put("f.bin", data)
    with FtpFetcher(recording_server.url("f.bin")) as f:
        f._head_prefix, f._head_prefix_final = b"", False  # a takeover with nothing read
        got, sink = _collect()
        keep = f._prefix_keeper(sink)
        assert f.head_bytes(4096) == (b"", False)  # nothing yet, but more will come
        keep(0, memoryview(data[:1000]), 0)
        assert f.head_bytes(4096) == (data[:1000], False)
        assert f.head_bytes(500) == (data[:500], True)  # enough for a shorter check
        keep(1000, memoryview(data[1000:70_000]), 0)
        assert f.head_bytes(4096) == (data[:4096], True)
        keep(70_000, memoryview(data[70_000:80_000]), 0)
        assert f._head_prefix == data[:4096] and bytes(got) == data[:80_000]
        # and through a real takeover: the head at 0, fetched at once
        f2 = FtpFetcher(recording_server.url("f.bin"))
        try:
            f2.start_head()
            n = f2.fetch(0, RangeEnd(len(data)), lambda p, b, t: None, threading.Event())
            assert n == len(data)
            prefix, final = f2.head_bytes(4096)
            assert final and prefix == data[:4096]
        finally:
            f2.close()
