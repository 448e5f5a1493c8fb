"""proftpd's own quirks, against the real server (Debian's proftpd-core): what the
shared tests (every FtpFetcher test runs on it too) do not set up.

- Multi-line greeting and login replies (DisplayConnect, DisplayLogin) read in the
  login batch that went out before the greeting.
- ``AllowRetrieveRestart off``: REST is accepted (350), then RETR refused with
  ``451 ...: Restart not permitted, try again``. A 4xx, but no retry can help: it is
  a range refusal (RangeNotHonoured), and the transfer from byte 0 still works.
- ``MaxClientsPerHost 1``: the spare (second) connection is refused; the fetcher goes
  on with one.
"""

from __future__ import annotations

import functools
import time

import pytest
from pftp_client.transports.base import RangeNotHonoured
from pftp_client.transports.ftp import FtpFetcher

from .helpers import fetch, payload, with_test_timeouts

fetcher = functools.partial(with_test_timeouts, FtpFetcher)


def test_multi_line_greeting_and_login_replies_in_the_login_batch(
    start_proftpd, relay, tmp_path
) -> None:
    connect_msg = tmp_path / "connect.msg"
    connect_msg.write_text("Mirror of everything\nsecond line of the greeting\n")
    connect_msg.chmod(0o644)
    server = start_proftpd(DisplayConnect=str(connect_msg), DisplayLogin="welcome.msg")
    server.put("welcome.msg", b"Welcome, anonymous\nplease be nice\nthird line\n")
    data = payload(300_000, seed=41)
    server.put("f.bin", data)
    proxy, base = relay(server, one_way_delay=0.005)
    with fetcher(base + "f.bin") as f:
        assert fetch(f, 0, 1000) == data[:1000]
        assert fetch(f, 70_000, 300_000) == data[70_000:]
        assert f.pipeline and f.reconnects == 0
    lines = proxy.lines
    # the replies really were multi-line, and the login batch went out before them
    assert any(side == "S" and "second line of the greeting" in text for side, text in lines)
    assert any(side == "S" and "please be nice" in text for side, text in lines)
    first_reply = next(i for i, (side, _t) in enumerate(lines) if side == "S")
    assert [t.split()[0] for side, t in lines[:first_reply] if side == "C"][:3] == [
        "USER", "PASS", "TYPE"]


def test_restart_not_permitted_is_a_range_refusal_not_a_retry(start_proftpd) -> None:
    server = start_proftpd(AllowRetrieveRestart="off")
    data = payload(200_000, seed=42)
    server.put("f.bin", data)
    with fetcher(server.url("f.bin"), verify_rest=False) as f:
        started = time.monotonic()
        with pytest.raises(RangeNotHonoured, match="Restart not permitted"):
            fetch(f, 1000, 2000)
        assert time.monotonic() - started < 5.0  # refused at once, not retried
        assert f.rest_honoured is False
        with pytest.raises(RangeNotHonoured):
            fetch(f, 5000, 6000)
        assert fetch(f, 0, 200_000) == data  # from byte 0 it still serves
        assert f.reconnects == 0


def test_restart_not_permitted_found_by_the_rest_check(start_proftpd) -> None:
    """With REST verified before the first range (the default), the check itself
    meets the refusal: no byte of a range is ever read."""
    server = start_proftpd(AllowRetrieveRestart="off")
    data = payload(200_000, seed=43)
    server.put("f.bin", data)
    with fetcher(server.url("f.bin")) as f:
        with pytest.raises(RangeNotHonoured):
            fetch(f, 1000, 2000)
        assert f.rest_honoured is False
        assert fetch(f, 0, 5000) == data[:5000]


def test_a_connection_limit_per_host_leaves_one_connection(start_proftpd, relay) -> None:
    server = start_proftpd(MaxClientsPerHost="1")
    data = payload(2_000_000, seed=44)
    server.put("f.bin", data)
    _proxy, base = relay(server, one_way_delay=0.005)
    with fetcher(base + "f.bin") as f:
        assert fetch(f, 100, 200) == data[100:200]
        f.keep_spare()
        deadline = time.monotonic() + 10
        while not (f._spare_off and not f._spares_coming):
            assert time.monotonic() < deadline, "the refused spare was not given up"
            time.sleep(0.01)
        assert not f.can_start_next()
        assert fetch(f, 300_000, 400_000) == data[300_000:400_000]
        assert f.spare_switches == 0 and f.reconnects == 0
