"""Scheme dispatch, URL validation and the pure FTP reply/URL parsers (no network)."""

from __future__ import annotations

import threading

import pytest
from pftp_client.transports.base import RangeEnd, TransientError, open_fetcher
from pftp_client.transports.ftp import FtpFetcher, ftp_target, parse_epsv, parse_pasv
from pftp_client.transports.http import HttpFetcher
from pftp_client.transports.registry import fetcher_for_url


def test_dispatch_by_scheme() -> None:
    f = fetcher_for_url("ftp://h.example/pub/f.iso", timeout=3, stall_timeout=2)
    assert isinstance(f, FtpFetcher) and f.timeout == 3 and f.stall_timeout == 2
    for url in ("http://h.example/f", "HTTPS://h.example/f"):
        h = fetcher_for_url(url, timeout=3, stall_timeout=2)
        assert isinstance(h, HttpFetcher)
        h.close()
    assert isinstance(open_fetcher("ftp://[::1]:2121/f"), FtpFetcher)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("", "non-empty"),
        ("sftp://h/f", "unsupported scheme"),
        ("file:///etc/passwd", "unsupported scheme"),
        ("h.example/f", "no scheme"),
        ("ftp:///f", "no host"),
        ("ftp://h:99999/f", "malformed"),
        ("ftp://h:port/f", "malformed"),
        ("ftp://h/f\r\nDELE x", "control characters"),
        ("ftp://h/", "does not name a file"),
        ("ftp://h/dir/", "does not name a file"),
        ("ftp://[::1/f", "malformed"),
    ],
)
def test_bad_urls_are_clear_value_errors(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        fetcher_for_url(url)


def test_ftp_target_decoding() -> None:
    t = ftp_target("ftp://us%40er:p%3Ass%20w@[::1]:2121/pub/a%20b/f%23.bin;type=i")
    assert (t.host, t.port, t.user, t.password) == ("::1", 2121, "us@er", "p:ss w")
    assert t.path == "pub/a b/f#.bin"
    assert ftp_target("ftp://h/%2Fsrv/f").path == "/srv/f"
    anon = ftp_target("ftp://h/f")
    assert (anon.user, anon.password, anon.port) == (None, None, 21)
    with pytest.raises(ValueError, match="control character"):
        ftp_target("ftp://h/a%0D%0ADELE%20b")
    # a name percent-encoded in another charset (Latin-1 %E9) reaches the server
    # as the same bytes, not as U+FFFD
    latin = ftp_target("ftp://h/caf%E9.bin").path
    assert latin.encode("utf-8", "surrogateescape") == b"caf\xe9.bin"


def test_a_bad_ftp_url_is_a_usage_error_before_any_connection() -> None:
    from pftp_client.plan import PlanError, check_url

    with pytest.raises(PlanError, match="does not name a file"):
        check_url("ftp://h/")
    with pytest.raises(PlanError, match="control character"):
        check_url("ftp://h/a%0D%0ADELE%20b")
    assert check_url("ftp://h/pub/f.bin") == "ftp://h/pub/f.bin"


# Plain URLs take plain_url.py's split (no urllib.parse before the first connect);
# the others urlsplit's. Both must give what urlsplit gives.
@pytest.mark.parametrize(
    "url",
    [
        "ftp://h/f",
        "ftp://10.77.10.2/data.bin",
        "FTP://Mirror.Example.ORG:2121/pub/Debian/f.iso;type=i",
        "ftp://user:pass@h:21/a/b/c",
        "ftp://user@h/f",
        "ftp://user:@h/f",
        "ftp://:pw@h/f",
        "ftp://a@b@h/f",
        "ftp://u:p:q@h/f",
        "ftp://h:0/f",
        "ftp://h:/f",
        "ftp://h",
        "ftp:///f",
        "ftp://@h/f",
        "ftp://h/%2Fsrv/f",
        "ftp://us%40er:p%3Ass@[::1]:2121/pub/f",
        "ftp://h/f?x=1",
        "ftp://h/f#frag",
        " ftp://h/f",
        "ftp://h/a\tb",
        "ftp://hé/f",
        "x-y.z+1://h/f",
        "ftp:/h/f",
        "1ftp://h/f",
    ],
)
def test_plain_url_split_agrees_with_urlsplit(url: str) -> None:
    from urllib.parse import urlsplit

    from pftp_client.plain_url import plain_url_parts

    parts = plain_url_parts(url)
    if parts is None:
        return  # (urlsplit's own)
    u = urlsplit(url)
    assert parts == (u.scheme, u.hostname, u.port, u.path, u.username, u.password)


@pytest.mark.parametrize("url", ["ftp://h:99999/f", "ftp://h:2x/f", "ftp://h:-1/f", "ftp://h:1:2/f"])
def test_a_bad_port_is_refused_on_both_paths(url: str) -> None:
    from urllib.parse import urlsplit

    with pytest.raises(ValueError):
        _ = urlsplit(url).port
    with pytest.raises(ValueError, match="invalid port"):
        ftp_target(url)


def test_epsv_and_pasv_parsing() -> None:
    assert parse_epsv("229 Entering Extended Passive Mode (|||6446|)") == 6446
    assert parse_epsv("229 Extended Passive mode OK (!!!40407!)") == 40407
    assert parse_pasv("227 Entering Passive Mode (127,0,0,1,156,64).") == ("127.0.0.1", 40000)
    assert parse_pasv("227 =10,1,2,3,4,1") == ("10.1.2.3", 1025)
    assert parse_epsv("229 (x) then (|||21|) and (|||22|)") == 21  # the first that matches
    assert parse_epsv("229 (|||123456|) (|||7|)") == 7  # (six digits do not match)
    for bad in ("229 nope", "229 (|||0|)", "229 (|||70000|)", "229 (||1|)", "229 (|||12|",
                "229 (|||1|2|)", "229 (|||١٢|)"):
        with pytest.raises(TransientError):
            parse_epsv(bad)
    for bad in ("227 (1,2,3,4)", "227 (300,1,1,1,1,1)", "227 (1,2,3,4,0,0)"):
        with pytest.raises(TransientError):
            parse_pasv(bad)


def test_range_end_only_shrinks_and_deliver_clips() -> None:
    end = RangeEnd(100)
    assert end.lower_to(150) == 100
    assert end.lower_to(60) == 60
    got: list[tuple[int, bytes]] = []

    def sink(offset: int, block: memoryview, _t: int) -> None:
        got.append((offset, bytes(block)))

    block = memoryview(bytes(range(40)))
    assert end.deliver(sink, 30, block, 1) == 30  # clipped at 60
    assert end.deliver(sink, 60, block, 2) == 0
    assert got == [(30, bytes(range(30)))]


def test_sink_may_lower_ends_while_another_thread_does_too() -> None:
    """deliver holds no lock during the sink: the engine's sink takes its own lock
    and lowers other flows' ends while other threads lower this one (no deadlock)."""
    engine_lock = threading.Lock()
    ends = [RangeEnd(10_000), RangeEnd(10_000)]
    inside = threading.Event()
    release = threading.Event()

    def sink(offset: int, block: memoryview, _t: int) -> None:
        inside.set()
        release.wait(10)
        with engine_lock:
            ends[1].lower_to(5000)
            ends[0].lower_to(offset + len(block) + 100)

    t = threading.Thread(target=ends[0].deliver, args=(sink, 0, memoryview(bytes(500)), 0))
    t.start()
    assert inside.wait(10)
    with engine_lock:
        assert ends[0].lower_to(8000) == 8000  # does not wait for the running sink
    release.set()
    t.join(10)
    assert not t.is_alive()
    assert ends[0].value == 600 and ends[1].value == 5000
