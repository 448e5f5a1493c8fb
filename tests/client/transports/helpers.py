"""What the transport tests share: payloads, an order-checking sink, one range, a
fetch on its own thread."""

from __future__ import annotations

import random
import threading
import time

from pftp_client.transports.base import RangeEnd, RangeFetcher, TransferError

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


def fetch_in_thread(
    f: RangeFetcher, offset: int, end: RangeEnd, sink: Collector
) -> tuple[threading.Thread, dict[str, object]]:
    """``f.fetch`` started on a thread; the dict gets its result ("n") or its
    TransferError ("error") once it returns."""
    result: dict[str, object] = {}

    def run() -> None:
        try:
            result["n"] = f.fetch(offset, end, sink, threading.Event())
        except TransferError as exc:
            result["error"] = exc

    t = threading.Thread(target=run)
    t.start()
    return t, result


def until_quiet(sink: Collector, quiet_s: float = 0.5) -> int:
    """Wait until ``sink`` has had no block for ``quiet_s`` (what a stopped server's
    socket buffers held has come); the bytes it holds then."""
    seen, quiet_since = len(sink.data), time.monotonic()
    while time.monotonic() - quiet_since < quiet_s:
        time.sleep(0.05)
        if len(sink.data) != seen:
            seen, quiet_since = len(sink.data), time.monotonic()
    return seen


def nginx_requests(server, at_least: int = 0, wait_s: float = 5.0) -> list[tuple[str, str, str]]:
    """nginx's access log: (connection number, method, Range header) per request.
    nginx writes a request's line when the request ends, and a GET the client cut
    short ends only once nginx sees the close: so wait up to ``wait_s`` for
    ``at_least`` lines (a loaded machine, CI: the line came after the assertion)."""
    deadline = time.monotonic() + wait_s
    while True:
        log = server.access_log
        lines = log.read_text().splitlines() if log.exists() else []
        if len(lines) >= at_least or time.monotonic() >= deadline:
            return [(f[0], f[2], f[3]) for f in (line.split() for line in lines)]
        time.sleep(0.02)
