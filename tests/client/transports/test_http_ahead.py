"""HttpFetcher.start_next against a real nginx: the next range's GET goes out on a
second connection while the range before still runs, and the fetch at that offset
takes its checked response over. Every byte right; a 200 instead of 206, a range
begun for another offset, a lowered end and close() all lose nothing and deliver
nothing wrong."""

from __future__ import annotations

import functools
import ssl
import threading
import time

import pytest
from pftp_client.transports.base import RangeEnd, RangeNotHonoured
from pftp_client.transports.http import AHEAD_BUFFER_BYTES, HttpFetcher

from .helpers import Collector, fetch, payload, with_test_timeouts

fetcher = functools.partial(with_test_timeouts, HttpFetcher)


class BeginsAhead(Collector):
    """Begins the next range once ``at`` bytes of this one have come."""

    def __init__(self, f: HttpFetcher, start: int, at: int, nxt: tuple[int, int]) -> None:
        super().__init__(start)
        self.f, self.at, self.nxt = f, at, nxt
        self.began: list[bool] = []

    def __call__(self, offset: int, block: memoryview, arrival_ns: int) -> None:
        super().__call__(offset, block, arrival_ns)
        if not self.began and len(self.data) >= self.at:
            self.began.append(self.f.start_next(*self.nxt))


def test_the_next_range_is_requested_before_this_one_ends(start_nginx) -> None:
    server = start_nginx(slow_rate="2m")  # (the first range must still run)
    data = payload(3_000_000, seed=41)
    server.put("f.bin", data)
    with fetcher(server.url("f.bin", prefix="slow/")) as f:
        assert f.can_start_next()
        sink = BeginsAhead(f, 100_000, 50_000, (1_000_000, 1_600_000))
        assert f.fetch(100_000, RangeEnd(500_000), sink, threading.Event()) == 400_000
        assert bytes(sink.data) == data[100_000:500_000] and sink.began == [True]
        assert not f.can_start_next()  # one at a time
        began = time.monotonic()
        assert fetch(f, 1_000_000, 1_600_000) == data[1_000_000:1_600_000]
        assert f.overlapped == 1
        # it had been coming meanwhile: 600 kB at 2 MB/s would take 0.3 s from scratch
        print("taken over in", time.monotonic() - began)
        assert f.path_rtt() is not None
        assert fetch(f, 0, 10) == data[:10]  # the client goes on as before


def test_a_lowered_end_stops_a_range_begun_ahead(nginx_server) -> None:
    data = payload(2_000_000, seed=42)
    nginx_server.put("f.bin", data)
    with fetcher(nginx_server.url("f.bin")) as f:
        sink = BeginsAhead(f, 0, 1, (700_000, 2_000_000))
        assert f.fetch(0, RangeEnd(300_000), sink, threading.Event()) == 300_000
        assert sink.began == [True]
        assert fetch(f, 700_000, 900_000) == data[700_000:900_000]
        assert fetch(f, 950_000, 1_000_000) == data[950_000:1_000_000]


def test_a_range_begun_for_another_offset_is_dropped(nginx_server) -> None:
    data = payload(2_000_000, seed=43)
    nginx_server.put("f.bin", data)
    with fetcher(nginx_server.url("f.bin")) as f:
        assert f.start_next(1_500_000, 2_000_000)
        assert fetch(f, 10_000, 20_000) == data[10_000:20_000]
        assert f.overlapped == 0
        assert fetch(f, 1_500_000, 2_000_000) == data[1_500_000:]


def test_a_200_to_a_range_begun_ahead_delivers_nothing(nginx_server) -> None:
    data = payload(500_000, seed=44)
    nginx_server.put("f.bin", data)
    with fetcher(nginx_server.url("f.bin", prefix="norange/")) as f:
        assert f.start_next(1000, 2000)
        sink = Collector(1000)
        with pytest.raises(RangeNotHonoured):
            f.fetch(1000, RangeEnd(2000), sink, threading.Event())
        assert sink.data == b""
        assert fetch(f, 0, 1234) == data[:1234]


def test_reading_ahead_is_bounded_and_close_stops_it(nginx_server) -> None:
    size = 3 * AHEAD_BUFFER_BYTES
    data = payload(size, seed=45)
    nginx_server.put("f.bin", data)
    f = fetcher(nginx_server.url("f.bin"))
    try:
        assert f.start_next(0, size)
        nxt = f._next
        assert nxt is not None
        time.sleep(1.0)  # loopback: the whole file would be in memory by now if unbounded
        assert nxt._queued < AHEAD_BUFFER_BYTES + 1024 * 1024
        assert fetch(f, 0, size) == data
    finally:
        f.close()
    assert f._next is None and not f.can_start_next()


def test_the_range_begun_ahead_goes_out_on_the_warm_spare_connection(start_nginx) -> None:
    """keep_spare leaves a second connection idle in the pool (a HEAD on it): the
    GET begun ahead then needs no handshake (one round trip to its first byte),
    and the engine plans its lead with that."""
    server = start_nginx(slow_rate="2m")
    data = payload(3_000_000, seed=46)
    server.put("f.bin", data)
    with fetcher(server.url("f.bin", prefix="slow/")) as f:
        assert f.ahead_round_trips() == 2  # nothing warm yet: handshake + request

        class WarmsThenBegins(BeginsAhead):
            def __call__(self, offset: int, block: memoryview, arrival_ns: int) -> None:
                if not self.began and len(self.data) >= 20_000:
                    f.keep_spare()  # (idempotent: one HEAD; begins once it is warm)
                    if f.ahead_round_trips() == 1:
                        self.at = 0
                super().__call__(offset, block, arrival_ns)

        sink = WarmsThenBegins(f, 0, 10**9, (1_000_000, 1_600_000))
        assert f.fetch(0, RangeEnd(600_000), sink, threading.Event()) == 600_000
        assert sink.began == [True]
        assert fetch(f, 1_000_000, 1_600_000) == data[1_000_000:1_600_000]
        assert f.overlapped == 1
    log = [line.split() for line in server.access_log.read_text().splitlines()]
    heads = [entry for entry in log if entry[2] == "HEAD"]
    assert len(heads) == 1
    ahead = next(entry for entry in log if entry[3:] == ["bytes=1000000-1599999"])
    assert ahead[0] == heads[0][0]  # the same connection
    assert int(ahead[1]) == int(heads[0][1]) + 1  # its next request


def test_https_without_a_warm_spare_counts_the_tls_handshake(start_nginx) -> None:
    server = start_nginx(tls=True)
    context = ssl.create_default_context(cafile=str(server.ca_file))
    with fetcher(server.url("f.bin"), verify=context) as f:
        assert f.ahead_round_trips() == 3
