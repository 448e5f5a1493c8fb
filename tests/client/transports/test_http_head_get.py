"""HeadGet (transports/http_head.py): the first GET of an http:// mirror, sent before
httpx is loaded, against real nginx, and its hand-over to HttpFetcher (adopt_head).
What could go wrong: a byte delivered from the wrong offset, a HEAD or a second GET
that was meant to be saved, an odd answer taken instead of handed back to httpx, a
mirror that is down asked twice."""

from __future__ import annotations

import os
import socket
import threading
import time

import pytest
from pftp_client import early
from pftp_client.transports.base import PrematureEnd, RangeEnd
from pftp_client.transports.http import HttpFetcher
from pftp_client.transports.http_head import HeadGet, HeadUnusable, usable
from pftp_client.transports.window import smoothed_rtt

from .helpers import Collector, nginx_requests


def _taken_over(head: HeadGet, url: str, at: int, end: int) -> bytes:
    assert head.result(20.0) is None
    with HttpFetcher(url, timeout=20.0) as f:
        f.adopt_head(head)
        assert f.size() == head.total
        sink = Collector(at)
        assert f.fetch(at, RangeEnd(end), sink, threading.Event()) == end - at
        assert f.head_progress() is None  # taken over
        return bytes(sink.data)


@pytest.mark.parametrize("at", [0, 1, 777_777])
def test_one_get_gives_the_size_and_the_bytes(nginx_server, at) -> None:
    data = os.urandom(1_000_003)
    nginx_server.put("f.bin", data)
    url = nginx_server.url("f.bin")
    head = HeadGet(url, at, timeout=20.0)
    assert _taken_over(head, url, at, len(data)) == data[at:]
    assert head.total == len(data)
    assert [(m, r) for _c, m, r in nginx_requests(nginx_server, 1)] == [("GET", f"bytes={at}-")]


def test_a_followers_size_from_the_leader_saves_its_head(nginx_server) -> None:
    """Given the size (the first mirror's answer), the GET goes out at the offset
    it implies with no HEAD; without it, a HEAD first on the same connection."""
    data = os.urandom(600_001)
    nginx_server.put("f.bin", data)
    url = nginx_server.url("f.bin")
    offsets: list[int] = []

    def offset_for(size: int) -> int:
        offsets.append(size)
        return size // 3

    head = HeadGet(url, None, timeout=20.0, offset_for=offset_for, size_hint=lambda _w: len(data))
    assert _taken_over(head, url, len(data) // 3, len(data)) == data[len(data) // 3 :]
    assert offsets == [len(data)]
    log = nginx_requests(nginx_server, 1)
    assert [(m, r) for _c, m, r in log] == [("GET", f"bytes={len(data) // 3}-")]

    nginx_server.access_log.write_text("")
    head = HeadGet(url, None, timeout=20.0, offset_for=offset_for, size_hint=lambda _w: None)
    third, half = len(data) // 3, len(data) // 2
    assert _taken_over(head, url, third, half) == data[third:half]
    log = nginx_requests(nginx_server, 2)
    assert [(m, r) for _c, m, r in log] == [("HEAD", "-"), ("GET", f"bytes={len(data) // 3}-")]
    assert log[0][0] == log[1][0]  # one connection


def test_a_follower_waits_for_the_leaders_size_a_little_not_for_ever(nginx_server) -> None:
    """Its connection up before the first mirror answered: the follower waits for
    that answer up to ``hint_wait_s`` (by default half its own round trip, what a
    HEAD would cost it at least) and then GETs with no HEAD; an answer that does
    not come in that time leaves it to its HEAD."""
    import threading
    import time

    data = os.urandom(300_001)
    nginx_server.put("f.bin", data)
    url = nginx_server.url("f.bin")
    third = len(data) // 3
    answered = threading.Event()
    waits: list[float] = []

    def leaders_size(wait_s: float) -> int | None:
        waits.append(wait_s)
        return len(data) if answered.wait(wait_s) else None

    threading.Timer(0.2, answered.set).start()
    head = HeadGet(url, None, timeout=20.0, offset_for=lambda size: third,
                   size_hint=leaders_size, hint_wait_s=5.0)
    assert _taken_over(head, url, third, len(data)) == data[third:]
    assert waits == [5.0]
    assert [(m, r) for _c, m, r in nginx_requests(nginx_server, 1)] == [("GET", f"bytes={third}-")]

    nginx_server.access_log.write_text("")
    answered.clear()
    begun = time.monotonic()
    head = HeadGet(url, None, timeout=20.0, offset_for=lambda size: third,
                   size_hint=leaders_size, hint_wait_s=0.3)
    assert _taken_over(head, url, third, len(data)) == data[third:]
    assert 0.3 <= time.monotonic() - begun < 5.0
    assert [(m, r) for _c, m, r in nginx_requests(nginx_server, 2)] == [("HEAD", "-"),
                                                              ("GET", f"bytes={third}-")]
    # by default the wait is half the handshake's round trip (loopback: ~0)
    waits.clear()
    head = HeadGet(url, None, timeout=20.0, offset_for=lambda size: third,
                   size_hint=leaders_size)
    assert _taken_over(head, url, third, len(data)) == data[third:]
    assert len(waits) == 1 and 0.0 <= waits[0] < 0.01


def test_the_size_alone(nginx_server) -> None:
    data = os.urandom(1234)
    nginx_server.put("f.bin", data)
    head = HeadGet(nginx_server.url("f.bin"), None, timeout=20.0, offset_for=lambda size: None)
    assert head.result(20.0) is None
    assert (head.total, head.offset) == (len(data), None)
    with HttpFetcher(nginx_server.url("f.bin"), timeout=20.0) as f:
        f.adopt_head(head)
        assert f.size() == len(data)
    assert [m for _c, m, _r in nginx_requests(nginx_server, 1)] == ["HEAD"]


def test_a_wrong_size_hint_is_caught_by_the_answer(nginx_server) -> None:
    """Another mirror's size that this one's file does not have: its Content-Range
    total says so, and nothing is taken over."""
    data = os.urandom(50_000)
    nginx_server.put("f.bin", data)
    head = HeadGet(nginx_server.url("f.bin"), None, timeout=20.0,
                   offset_for=lambda size: 1000, size_hint=lambda _w: len(data) + 1)
    assert isinstance(head.result(20.0), HeadUnusable)
    with HttpFetcher(nginx_server.url("f.bin"), timeout=20.0) as f, pytest.raises(ValueError):
        f.adopt_head(head)


def test_a_redirect_is_followed(nginx_server) -> None:
    data = os.urandom(300_000)
    nginx_server.put("f.bin", data)
    url = nginx_server.url("f.bin", prefix="moved/")
    head = HeadGet(url, 1000, timeout=20.0)
    assert _taken_over(head, url, 1000, 200_000) == data[1000:200_000]


@pytest.mark.parametrize("prefix, at", [("norange/", 5), ("busy/", 0), ("nothere/", 0)])
def test_odd_answers_are_handed_back(nginx_server, prefix, at) -> None:
    """Range ignored at an offset, 503, 404: HeadUnusable, nothing queued (httpx asks
    again and decides how the mirror is treated)."""
    nginx_server.put("f.bin", os.urandom(10_000))
    head = HeadGet(nginx_server.url("f.bin", prefix=prefix), at, timeout=20.0)
    assert isinstance(head.result(20.0), HeadUnusable)
    item = head.chunks.get(timeout=5)
    assert isinstance(item, HeadUnusable)


def test_a_body_that_breaks_off_is_a_premature_end() -> None:
    """A server that promises the rest of the file and closes after 5000 bytes: the
    fetch that took the head over delivers those bytes and says where it broke."""
    data = os.urandom(20_000)
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(4096)
            conn.sendall(b"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 100-19999/20000"
                         b"\r\nContent-Length: 19900\r\n\r\n" + data[100:5100])

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}/f.bin"
    try:
        head = HeadGet(url, 100, timeout=10.0)
        assert head.result(10.0) is None
        with HttpFetcher(url, timeout=10.0) as f:
            f.adopt_head(head)
            sink = Collector(100)
            with pytest.raises(PrematureEnd, match="at byte 5100"):
                f.fetch(100, RangeEnd(20_000), sink, threading.Event())
            assert bytes(sink.data) == data[100:5100]
    finally:
        listener.close()
        thread.join(5)


def test_a_mirror_that_is_down_is_asked_once(clean_env) -> None:
    """Refused: the early probe reports it at once, without a second try by httpx."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/f.bin"
    probe = early.EarlyProbe(url, timeout=5.0, slot=0, slots=1)
    started = time.monotonic()
    _url, fetcher, size, error = probe.result()
    assert fetcher is None and size is None
    assert "cannot connect" in error and "refused" in error.lower()
    assert time.monotonic() - started < 5.0


def test_usable_only_for_http_without_credentials_or_proxy(monkeypatch) -> None:
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY", "https_proxy",
                 "HTTPS_PROXY"):
        monkeypatch.delenv(name, raising=False)
    assert usable("http://127.0.0.1:8080/a/b.iso?x=1")
    assert usable("https://example.org/b.iso")
    assert not usable("ftp://example.org/b.iso")
    assert not usable("http://user:pw@example.org/b.iso")
    assert not usable("http://example.org:99999/b.iso")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy:3128")
    assert not usable("https://127.0.0.1:8080/b.iso")
    assert usable("http://127.0.0.1:8080/b.iso")
    monkeypatch.setenv("http_proxy", "http://proxy:3128")
    assert not usable("http://127.0.0.1:8080/b.iso")


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    early.discard_all()
    monkeypatch.delenv("PFTP_ACCESS_BANDWIDTH", raising=False)
    monkeypatch.setenv("PFTP_CLIENT_CONFIG", str(tmp_path / "none.toml"))
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    yield
    early.discard_all()


def test_https_with_the_trust_an_http_fetcher_has(start_nginx, monkeypatch) -> None:
    """Over TLS, trusting what httpx trusts by default (here SSL_CERT_FILE names the
    test server's certificate); without that trust the handshake fails, and that is
    a connection error (the early probe reports it), not an answer to hand back."""
    from pftp_client.transports import http_head

    server = start_nginx(tls=True)
    data = os.urandom(400_000)
    server.put("f.bin", data)
    url = server.url("f.bin")
    assert url.startswith("https://") and usable(url)
    monkeypatch.setattr(http_head, "_tls", None)
    monkeypatch.setenv("SSL_CERT_FILE", str(server.ca_file))
    # (a buffer smaller than the body: the reader waits with its connection open,
    # instead of reading all 400 kB and closing it before the checks below)
    head = HeadGet(url, 1234, timeout=20.0, limit=64 * 1024)
    assert head.result(20.0) is None
    # the connection it reads from, the TLS one (wrap_socket detached the TCP
    # socket it began with): the path's RTT and losses come from its TCP_INFO
    assert head.sock is not None and head.sock.fileno() >= 0
    assert smoothed_rtt(head.sock) is not None
    assert _taken_over(head, url, 1234, len(data)) == data[1234:]
    assert [(m, r) for _c, m, r in nginx_requests(server, 1)] == [("GET", "bytes=1234-")]

    monkeypatch.setattr(http_head, "_tls", None)
    monkeypatch.delenv("SSL_CERT_FILE")
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    head = HeadGet(url, 0, timeout=20.0)
    why = head.result(20.0)
    assert isinstance(why, OSError) and "certificate verify failed" in str(why)
