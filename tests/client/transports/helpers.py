"""What the transport tests share: payloads, an order-checking sink, one range."""

from __future__ import annotations

import random
import threading

from pftp_client.transports.base import RangeEnd, RangeFetcher

FTP_SERVERS = ["pyftpd_server", "vsftpd_server", "pureftpd_server", "proftpd_server"]
SIZES = [0, 1, 7, 65_537, 3_000_017]


def payload(size: int, seed: int = 1) -> bytes:
    return random.Random(seed).randbytes(size)


class Collector:
    """A sink that checks offsets are contiguous and keeps the bytes and arrival times."""

    def __init__(self, start: int) -> None:
        self.start = start
        self.data = bytearray()
        self.arrivals: list[int] = []
        self.flowing = threading.Event()

    def __call__(self, offset: int, block: memoryview, arrival_ns: int) -> None:
        assert offset == self.start + len(self.data), "sink called out of order"
        assert arrival_ns > 0
        self.data += block
        self.arrivals.append(arrival_ns)
        self.flowing.set()


def fetch(f: RangeFetcher, offset: int, end: int) -> bytes:
    sink = Collector(offset)
    assert f.fetch(offset, RangeEnd(end), sink, threading.Event()) == len(sink.data)
    return bytes(sink.data)


def with_test_timeouts(cls: type, url: str, **kw):
    kw.setdefault("timeout", 20.0)
    kw.setdefault("stall_timeout", 10.0)
    return cls(url, **kw)
