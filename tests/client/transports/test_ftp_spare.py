"""FtpFetcher's second connection (keep_spare) and the next range begun ahead on it
(start_next), against real servers (pyftpdlib, vsftpd, pure-ftpd) behind a relay
that delays each direction (``pftp_lab.ftp_proxy``) and logs which session said what.

What is checked: every byte is right whatever connection carried it; the next range
really starts on the other session (before the first one's ABOR is answered, or
before the first range's last byte was read); the former connection is resynced and
kept as the next spare; nothing is left open after close(); a server that refuses a
second connection, a stale spare and an unexpected offset all fall back to the
one-connection path without a wrong byte.
"""

from __future__ import annotations

import functools
import socket
import threading
import time
from collections.abc import Callable

import pytest
from pftp_client.transports import ftp as ftp_module
from pftp_client.transports.base import RangeEnd, RangeNotHonoured
from pftp_client.transports.ftp import FtpFetcher
from pftp_lab.ftp_proxy import FtpDelayProxy

from .helpers import Collector, fetch, payload, with_test_timeouts

fetcher = functools.partial(with_test_timeouts, FtpFetcher)
SIZE = 2_000_000


def wait_for(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


def spare_ready(f: FtpFetcher) -> Callable[[], bool]:
    return lambda: f._spare is not None and f._spare.armed() and not f._spares_coming


def served(server, relay, seed: int, delay: float) -> tuple[bytes, FtpDelayProxy, str]:
    """The test file on ``server`` and a relay before it: (data, proxy, its URL)."""
    data = payload(SIZE, seed=seed)
    server.put("f.bin", data)
    proxy, base = relay(server, one_way_delay=delay)
    return data, proxy, base + "f.bin"


def ready_spare(f: FtpFetcher) -> None:
    f.keep_spare()
    wait_for(spare_ready(f))


def session_of(proxy: FtpDelayProxy, side: str, text: str) -> int:
    return next(s for s, sd, t in proxy.session_lines if sd == side and t == text)


def index_of(
    proxy: FtpDelayProxy, session: int, side: str, prefix: str, after: int = -1
) -> int:
    return next(
        i for i, (s, sd, t) in enumerate(proxy.session_lines)
        if i > after and s == session and sd == side and t.startswith(prefix)
    )


def test_an_early_stop_hands_the_next_range_to_the_spare(ftp_server, relay) -> None:
    data, proxy, url = served(ftp_server, relay, 31, 0.02)
    with fetcher(url) as f:
        assert fetch(f, 100_000, 200_000) == data[100_000:200_000]  # REST probe, first range
        ready_spare(f)
        # (this one starts on the first session: its port came with the resync)
        assert fetch(f, 300_000, 400_000) == data[300_000:400_000]
        # ...and stopped early (ABOR): this range went to the spare at once
        assert fetch(f, 600_000, 700_000) == data[600_000:700_000]
        assert f.spare_switches >= 1
        # the former connection was resynced in the background and became the spare
        wait_for(spare_ready(f))
        assert fetch(f, 900_000, SIZE) == data[900_000:]  # to the end: no ABOR
        assert fetch(f, 1_000, 2_000) == data[1_000:2_000]  # after a 226: the spare again
        assert f.spare_switches >= 2
        assert proxy.control_connections == 2  # never more than the two
    wait_for(lambda: proxy.open_controls == 0)
    first = session_of(proxy, "C", "REST 300000")
    second = session_of(proxy, "C", "REST 600000")
    assert first != second
    # the next range's REST went out before the first session's ABOR was answered
    abort = index_of(proxy, first, "C", "ABOR", after=index_of(proxy, first, "C", "REST 300000"))
    answered = next(
        i for i, (s, sd, _t) in enumerate(proxy.session_lines) if i > abort and s == first
        and sd == "S"
    )
    assert index_of(proxy, second, "C", "REST 600000") < answered


def test_the_next_range_begins_before_this_one_ends(ftp_server, relay) -> None:
    data, proxy, url = served(ftp_server, relay, 32, 0.02)
    with fetcher(url) as f:
        assert fetch(f, 10, 20) == data[10:20]
        ready_spare(f)
        assert f.can_start_next()
        began: list[bool] = []

        class Ahead(Collector):
            def __call__(self, offset: int, block: memoryview, arrival_ns: int) -> None:
                super().__call__(offset, block, arrival_ns)
                if not began and offset + len(block) >= 500_000:
                    began.append(f.start_next(1_200_000))
                time.sleep(0.002)  # (the range must still run when the next begins)

        sink = Ahead(100_000)
        assert f.fetch(100_000, RangeEnd(800_000), sink, threading.Event()) == 700_000
        assert bytes(sink.data) == data[100_000:800_000] and began == [True]
        assert not f.can_start_next()  # one at a time
        assert fetch(f, 1_200_000, 1_900_000) == data[1_200_000:1_900_000]
        assert f.overlapped == 1
        # the connection before is resynced and kept: the next range can begin ahead too
        wait_for(spare_ready(f))
        assert f.can_start_next()
        assert proxy.control_connections == 2
    wait_for(lambda: proxy.open_controls == 0)
    first = session_of(proxy, "C", "REST 100000")
    second = session_of(proxy, "C", "REST 1200000")
    assert first != second
    # RETR of the next range went out while the first still ran (before its ABOR)
    abort = index_of(proxy, first, "C", "ABOR", after=index_of(proxy, first, "C", "REST 100000"))
    assert index_of(proxy, second, "C", "RETR") < abort


def test_a_next_range_begun_for_another_offset_is_dropped_not_delivered(
    ftp_server, relay
) -> None:
    data, _proxy, url = served(ftp_server, relay, 33, 0.005)
    with fetcher(url) as f:
        assert fetch(f, 1, 2) == data[1:2]
        ready_spare(f)
        assert f.start_next(1_500_000)
        assert fetch(f, 400_000, 450_000) == data[400_000:450_000]
        assert f.overlapped == 0
        assert fetch(f, 1_500_000, 1_600_000) == data[1_500_000:1_600_000]
        assert fetch(f, 0, 1000) == data[:1000]


def test_close_leaves_no_connection_behind(ftp_server, relay) -> None:
    data, proxy, url = served(ftp_server, relay, 34, 0.01)
    f = fetcher(url)
    assert fetch(f, 5, 50) == data[5:50]
    ready_spare(f)
    assert f.start_next(1_000_000)
    f.close()
    wait_for(lambda: proxy.open_controls == 0)
    assert not f.can_start_next()
    f.keep_spare()  # closed: nothing happens
    time.sleep(0.2)
    assert proxy.control_connections == 2


def test_a_server_that_refuses_a_second_connection(start_pyftpd, relay) -> None:
    from pyftpdlib.handlers import FTPHandler

    class OneEach(FTPHandler):
        """pyftpdlib's own max_cons_per_ip = 1 (a server attribute the fixture
        does not expose): 421 to a second session from the same address."""

        def handle(self) -> None:
            if self.server.ip_map.count(self.remote_ip) > 1:
                self.handle_max_cons_per_ip()
                return
            super().handle()

    server = start_pyftpd(handler=OneEach)
    data, _proxy, url = served(server, relay, 35, 0.005)
    with fetcher(url) as f:
        assert fetch(f, 100, 200) == data[100:200]
        f.keep_spare()
        wait_for(lambda: f._spare_off and not f._spares_coming)
        assert not f.can_start_next() and not f.start_next(1_000_000)
        f.keep_spare()  # not asked again
        assert not f._spares_coming
        assert fetch(f, 300_000, 400_000) == data[300_000:400_000]
        assert f.spare_switches == 0 and f.reconnects == 0


def test_a_stale_spare_is_not_used(pyftpd_server, relay, monkeypatch) -> None:
    monkeypatch.setattr(ftp_module, "_PASSIVE_MAX_AGE", 0.2)
    data, _proxy, url = served(pyftpd_server, relay, 36, 0.005)
    with fetcher(url) as f:
        assert fetch(f, 100, 200) == data[100:200]
        ready_spare(f)
        time.sleep(0.3)
        assert not f.can_start_next()
        assert fetch(f, 300_000, 400_000) == data[300_000:400_000]
        assert f.spare_switches == 0
        f.keep_spare()  # armed again: a new port and data connection on the same session
        wait_for(spare_ready(f))
        assert fetch(f, 500_000, 600_000) == data[500_000:600_000]
        assert f.spare_switches == 1


def test_a_data_connection_closed_before_its_transfer_is_not_used() -> None:
    ours, theirs = socket.socketpair()
    ctrl_sock, _peer = socket.socketpair()
    ctrl = ftp_module._Control(ctrl_sock, timeout=1.0)
    try:
        ctrl.data_ready = (ours, time.monotonic())
        assert ctrl.armed()
        theirs.close()  # the server gave the connection up
        assert ctrl.take_data() is None and ctrl.data_ready is None
        fresh, other = socket.socketpair()
        ctrl.data_ready = (fresh, time.monotonic())
        assert ctrl.take_data() is fresh  # open and silent: used
        fresh.close()
        other.close()
    finally:
        ctrl.close()
        _peer.close()


def test_the_spare_checks_rest_for_a_flow_that_only_read_from_zero(ftp_server, relay) -> None:
    """A flow whose ranges all started at byte 0 never needed REST; its spare checks it
    (REST size-1 must give one byte) while it gets ready, so the next range at an offset
    can begin ahead."""
    data, _proxy, url = served(ftp_server, relay, 37, 0.005)
    with fetcher(url) as f:
        assert fetch(f, 0, 300_000) == data[:300_000]
        assert f.rest_honoured is None
        ready_spare(f)
        assert f.rest_honoured is True and f.can_start_next()
        assert f.start_next(1_000_000)
        assert fetch(f, 1_000_000, 1_100_000) == data[1_000_000:1_100_000]
        assert f.overlapped == 1


def test_a_spare_that_finds_rest_ignored_turns_the_fetcher_away(start_pyftpd, relay) -> None:
    from pyftpdlib.handlers import FTPHandler

    class IgnoresRest(FTPHandler):
        """Says 350 but never moves the start: the quirk that corrupts files."""

        def ftp_REST(self, line: str) -> None:
            self.respond(f"350 Restarting at position {line}.")

    server = start_pyftpd(handler=IgnoresRest)
    data, _proxy, url = served(server, relay, 38, 0.005)
    with fetcher(url) as f:
        assert fetch(f, 0, 100_000) == data[:100_000]
        f.keep_spare()
        wait_for(lambda: f._spare_off and not f._spares_coming)
        assert f.rest_honoured is False and not f.can_start_next()
        with pytest.raises(RangeNotHonoured):
            fetch(f, 500_000, 600_000)
