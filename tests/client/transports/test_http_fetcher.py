"""HttpFetcher against a real nginx (Range honoured, ignored, throttled, TLS)."""

from __future__ import annotations

import contextlib
import functools
import ssl
import threading
import time

import psutil
import pytest
from pftp_client.transports.base import (
    Cancelled,
    PermanentError,
    PrematureEnd,
    RangeEnd,
    RangeNotHonoured,
    StallError,
    TransferError,
    TransientError,
)
from pftp_client.transports.http import HttpFetcher, parse_content_range, status_error

from .helpers import (
    SIZES,
    Collector,
    fetch,
    fetch_in_thread,
    payload,
    until_quiet,
    with_test_timeouts,
)

fetcher = functools.partial(with_test_timeouts, HttpFetcher)


@pytest.mark.parametrize("size", SIZES)
def test_whole_file_every_size(nginx_server, size: int) -> None:
    data = payload(size, seed=size)
    nginx_server.put("f.bin", data)
    with fetcher(nginx_server.url("f.bin")) as f:
        assert f.size() == size
        assert fetch(f, 0, size) == data


def test_ranges_on_one_keep_alive_client(nginx_server) -> None:
    data = payload(3_000_017)
    nginx_server.put("d/f.bin", data)
    with fetcher(nginx_server.url("d/f.bin")) as f:
        for start, end in [(0, 1), (1, 2), (100, 70_000), (1_234_567, 2_000_001),
                           (3_000_016, 3_000_017), (0, 3_000_017)]:  # fmt: skip
            assert fetch(f, start, end) == data[start:end], (start, end)


def test_redirect_is_followed_with_the_range(nginx_server) -> None:
    data = payload(100_000)
    nginx_server.put("f.bin", data)
    with fetcher(nginx_server.url("f.bin", prefix="moved/")) as f:
        assert fetch(f, 5000, 6000) == data[5000:6000]


def test_200_instead_of_206_is_never_written_at_an_offset(nginx_server) -> None:
    data = payload(500_000)
    nginx_server.put("f.bin", data)
    with fetcher(nginx_server.url("f.bin", prefix="norange/")) as f:
        sink = Collector(1000)
        with pytest.raises(RangeNotHonoured):
            f.fetch(1000, RangeEnd(2000), sink, threading.Event())
        assert sink.data == b""
        # from byte 0 the body is the file: accepted, but only up to the end
        assert fetch(f, 0, 1234) == data[:1234]
        assert fetch(f, 0, len(data)) == data


def test_missing_file_and_statuses(nginx_server) -> None:
    with fetcher(nginx_server.url("absent.bin")) as f:
        with pytest.raises(PermanentError) as info:
            fetch(f, 0, 10)
        assert not info.value.transient
        with pytest.raises(PermanentError):
            f.size()
    nginx_server.put("f.bin", b"x" * 10)
    for prefix in ("busy/", "ratelimited/"):
        with fetcher(nginx_server.url("f.bin", prefix=prefix)) as f:
            with pytest.raises(TransientError) as info:
                fetch(f, 0, 10)
            assert info.value.transient


def test_range_beyond_file(nginx_server) -> None:
    nginx_server.put("f.bin", b"0123456789")
    with fetcher(nginx_server.url("f.bin")) as f:
        with pytest.raises(PermanentError, match="416"):
            fetch(f, 20, 30)
        sink = Collector(5)
        with pytest.raises(PrematureEnd):
            f.fetch(5, RangeEnd(30), sink, threading.Event())
        assert bytes(sink.data) == b"56789"


def test_end_lowered_concurrently(start_nginx) -> None:
    server = start_nginx(slow_rate="1m")
    data = payload(4_000_000, seed=9)
    server.put("f.bin", data)
    with fetcher(server.url("f.bin", prefix="slow/")) as f:
        end = RangeEnd(len(data))
        sink = Collector(333)
        result: dict[str, object] = {}

        def run() -> None:
            result["n"] = f.fetch(333, end, sink, threading.Event())

        t = threading.Thread(target=run)
        t.start()
        assert sink.flowing.wait(30)
        new_end = end.lower_to(333 + len(sink.data) + 200_000)
        t.join(60)
        assert result["n"] == new_end - 333
        assert bytes(sink.data) == data[333:new_end]
        assert fetch(f, 0, 10) == data[:10]  # the client is still usable


def test_server_killed_mid_transfer(start_nginx) -> None:
    server = start_nginx(slow_rate="500k")
    data = payload(20_000_000, seed=2)
    server.put("f.bin", data)
    f = fetcher(server.url("f.bin", prefix="slow/"), stall_timeout=5.0, timeout=10.0)
    sink = Collector(4321)
    caught: list[Exception] = []

    def run() -> None:
        try:
            f.fetch(4321, RangeEnd(len(data)), sink, threading.Event())
        except TransferError as exc:
            caught.append(exc)

    t = threading.Thread(target=run)
    t.start()
    try:
        assert sink.flowing.wait(30)
        server.kill()
        t.join(60)
    finally:
        f.close()
    assert caught and isinstance(caught[0], PrematureEnd | StallError), caught
    got = bytes(sink.data)
    assert 0 < len(got) < len(data) - 4321
    assert got == data[4321 : 4321 + len(got)]


def test_cancel(start_nginx) -> None:
    server = start_nginx(slow_rate="2m")
    data = payload(5_000_000)
    server.put("f.bin", data)
    with fetcher(server.url("f.bin", prefix="slow/")) as f:
        cancel = threading.Event()

        def sink(offset: int, block: memoryview, _t: int) -> None:
            cancel.set()

        with pytest.raises(Cancelled):
            f.fetch(0, RangeEnd(len(data)), sink, cancel)
        assert fetch(f, 7, 9) == data[7:9]


def test_connection_refused_is_transient(nginx_server) -> None:
    nginx_server.kill()
    with fetcher(nginx_server.url("f.bin"), timeout=5.0) as f, pytest.raises(TransientError):
        fetch(f, 0, 10)


def test_https(start_nginx) -> None:
    server = start_nginx(tls=True)
    data = payload(1_000_003)
    server.put("f.bin", data)
    ctx = ssl.create_default_context(cafile=str(server.ca_file))
    with fetcher(server.url("f.bin"), verify=ctx) as f:
        assert f.size() == len(data)
        assert fetch(f, 999_000, 1_000_003) == data[999_000:]
    # An untrusted certificate is not asked again (it is the same next time), and
    # the message says how to trust a private CA.
    with fetcher(server.url("f.bin")) as f, pytest.raises(PermanentError, match="SSL_CERT_FILE"):
        fetch(f, 0, 10)
    with fetcher(server.url("f.bin")) as f, pytest.raises(PermanentError, match="not trusted"):
        f.size()


def test_fetchers_share_one_tls_context(start_nginx, monkeypatch) -> None:
    """httpx builds an SSL context per client by default, loading the CA bundle each
    time (~35 ms of CPU, for http:// URLs too); every fetcher with the default
    trust shares the heads' one (http_head.tls_context), which still honours
    SSL_CERT_FILE, and a fetcher given its own keeps it."""
    from pftp_client.transports import http_head

    server = start_nginx(tls=True)
    data = payload(300_001)
    server.put("f.bin", data)
    monkeypatch.setenv("SSL_CERT_FILE", str(server.ca_file))
    monkeypatch.setattr(http_head, "_tls", None)  # (built again from this environment)
    with fetcher(server.url("f.bin")) as a, fetcher(server.url("f.bin")) as b:
        # (httpx's pool holds the context its connections wrap their sockets with)
        shared = http_head.tls_context()
        assert a._client._transport._pool._ssl_context is shared
        assert b._client._transport._pool._ssl_context is shared
        assert fetch(a, 0, 300_001) == data and fetch(b, 1000, 2000) == data[1000:2000]
    own = ssl.create_default_context(cafile=str(server.ca_file))
    with fetcher(server.url("f.bin"), verify=own) as c:
        assert c._client._transport._pool._ssl_context is own
        assert fetch(c, 5, 10) == data[5:10]


def test_ipv6_loopback(start_nginx, ipv6_loopback) -> None:
    server = start_nginx(host=ipv6_loopback)
    data = payload(100_000)
    server.put("f.bin", data)
    with fetcher(server.url("f.bin")) as f:
        assert fetch(f, 99, 100_000) == data[99:]


def test_pure_helpers() -> None:
    assert parse_content_range("bytes 100-199/1000") == (100, 199, 1000)
    assert parse_content_range("bytes 0-0/*") == (0, 0, None)
    for bad in ("", "bytes 5-4/10", "bytes 0-10/10", "items 0-1/2"):
        with pytest.raises(RangeNotHonoured):
            parse_content_range(bad)
    assert status_error("u", 503).transient
    assert status_error("u", 429).transient
    assert not status_error("u", 404).transient
    assert not status_error("u", 403).transient
    with pytest.raises(ValueError):
        HttpFetcher("ftp://x/y")


def test_the_paths_rtt_outlives_the_connection_it_was_read_on(nginx_server) -> None:
    # (a head start's connection closes when its range is done: the tail still
    # costs a switch on this path in its round trips)
    nginx_server.put("f.bin", payload(100_000, seed=7))
    with fetcher(nginx_server.url("f.bin")) as f:
        assert f.path_rtt() is None  # nothing asked yet
        fetch(f, 0, 50_000)
        rtt = f.path_rtt()
        assert rtt is not None and rtt > 0
    assert f.path_rtt() == rtt  # its connections are closed now


def test_interrupt_ends_a_silent_transfer_whose_end_was_lowered(start_nginx) -> None:
    """A transfer gone silent (nginx's workers stopped: as a link down) and cut where it
    is: ``interrupt`` (Engine._path_answered, once the path is back) ends the waiting
    read at once, and the fetch returns what it delivered, without error. Without it,
    the read would wait for the stall timeout."""
    server = start_nginx(slow_rate="1m")
    data = payload(4_000_000, seed=12)
    server.put("f.bin", data)
    f = fetcher(server.url("f.bin", prefix="slow/"), stall_timeout=20.0, timeout=20.0)
    sink = Collector(100)
    end = RangeEnd(len(data))
    t, result = fetch_in_thread(f, 100, end, sink)
    workers = [psutil.Process(pid) for pid in server.session_pids()]
    try:
        assert sink.flowing.wait(30)
        for w in workers:
            w.suspend()
        pos = 100 + until_quiet(sink)
        end.lower_to(pos)
        t.join(0.5)
        assert t.is_alive()  # (a lowered end alone does not wake a silent read)
        began = time.monotonic()
        f.interrupt()
        t.join(10)
        took = time.monotonic() - began
    finally:
        for w in workers:
            with contextlib.suppress(psutil.NoSuchProcess):
                w.resume()
        t.join(30)
        f.close()
    assert "error" not in result, result
    assert result["n"] == pos - 100 and took < 5.0
    assert bytes(sink.data) == data[100:pos]
    f.interrupt()  # (between responses: nothing to do)
