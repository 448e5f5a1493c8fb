"""Fetchers report their file's version (FTP MDTM, HTTP ETag/Last-Modified) before
the first byte, and stop when it is not the recorded one (validators.py), against
the real servers."""

from __future__ import annotations

import email.utils
import functools
import os
import re
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler

import pytest
from pftp_client.transports.base import (
    FileChanged,
    PermanentError,
    RangeEnd,
    RangeNotHonoured,
    TransientError,
    shown,
)
from pftp_client.transports.ftp import FtpFetcher
from pftp_client.transports.http import HttpFetcher
from pftp_client.validators import ValidatorBook

from .helpers import Collector, fetch, payload, with_test_timeouts

ftp = functools.partial(with_test_timeouts, FtpFetcher)
http = functools.partial(with_test_timeouts, HttpFetcher)


def _learn(make, url: str, data: bytes) -> str:
    """The validator a fresh fetcher reports for ``url`` (and the bytes check out)."""
    book = ValidatorBook()
    with make(url) as f:
        f.vet = book.vet
        assert fetch(f, 10, 5000) == data[10:5000]
    got = book.snapshot()
    assert set(got) == {url}
    return got[url]


def _refused(make, url: str, recorded: str, offset: int) -> str:
    """A fetch with ``recorded`` as the URL's old validator: FileChanged, nothing
    handed over. Returns the message."""
    book = ValidatorBook({url: recorded})
    sink = Collector(offset)
    with make(url) as f:
        f.vet = book.vet
        with pytest.raises(FileChanged) as err:
            f.fetch(offset, RangeEnd(offset + 4096), sink, threading.Event())
    assert not sink.data
    assert book.changed() == {url: (recorded, book.changed()[url][1])}
    assert book.snapshot() == {url: recorded}  # the kept bytes are of that version
    return str(err.value)


def test_ftp_mdtm_is_the_version_and_a_changed_one_is_refused(ftp_server) -> None:
    data = payload(200_000, seed=31)
    path = ftp_server.put("f.bin", data)
    url = ftp_server.url("f.bin")
    stamp = time.gmtime(path.stat().st_mtime)
    validator = _learn(ftp, url, data)
    assert validator.startswith("MDTM " + time.strftime("%Y%m%d", stamp)), validator
    # the same version: fetched as before, from the start and at an offset
    for offset in (0, 150_000):
        book = ValidatorBook({url: validator})
        with ftp(url) as f:
            f.vet = book.vet
            assert fetch(f, offset, offset + 3000) == data[offset : offset + 3000]
    message = _refused(ftp, url, "MDTM 19990101000000", 1000)
    assert "changed since the interrupted download" in message and shown(url) in message
    assert ":***@" in message if "@" in url else True  # (no password in messages)


def test_ftp_head_start_is_vetted_before_its_bytes_are_handed_over(vsftpd_server) -> None:
    """A transfer begun before the book was known (the entry point's head start)
    hands nothing over when its version is not the recorded one."""
    data = payload(300_000, seed=32)
    vsftpd_server.put("f.bin", data)
    url = vsftpd_server.url("f.bin")
    with ftp(url) as f:
        f.size(passive=True)
        f.start_head(0)
        f.vet = ValidatorBook({url: "MDTM 19990101000000"}).vet
        sink = Collector(0)
        with pytest.raises(FileChanged):
            f.fetch(0, RangeEnd(len(data)), sink, threading.Event())
        assert not sink.data


def test_http_etag_is_the_version_and_a_changed_one_is_refused(nginx_server) -> None:
    data = payload(200_000, seed=33)
    nginx_server.put("f.bin", data)
    url = nginx_server.url("f.bin")
    validator = _learn(http, url, data)
    assert validator.startswith('"'), validator  # nginx's strong ETag
    book = ValidatorBook({url: validator})
    with http(url) as f:
        f.vet = book.vet
        assert fetch(f, 150_000, 160_000) == data[150_000:160_000]
    message = _refused(http, url, '"5e1-0"', 1000)
    assert "changed since the interrupted download" in message


def test_http_file_replaced_during_the_download(nginx_server) -> None:
    """If-Range: a copy replaced between two ranges answers 200, which is named a
    change, not a server that ignores ranges."""
    data = payload(200_000, seed=34)
    path = nginx_server.put("f.bin", data)
    with http(nginx_server.url("f.bin")) as f:
        assert fetch(f, 0, 1000) == data[:1000]
        nginx_server.put("f.bin", payload(200_000, seed=35))
        later = path.stat().st_mtime + 60
        os.utime(path, (later, later))
        with pytest.raises(FileChanged, match="changed during the download"):
            fetch(f, 100_000, 101_000)


@pytest.mark.parametrize("pipeline", [True, False], ids=["pipelined", "one-at-a-time"])
def test_ftp_file_replaced_during_the_download(ftp_server, pipeline: bool) -> None:
    """A mirror's sync renames a new copy in: a running transfer keeps the old file,
    the next RETR would get the new one. Every RETR to the server that gave the
    version asks MDTM again (in the same write when pipelined) and a new time stops
    it before a byte of the new copy is handed over."""
    data = payload(200_000, seed=38)
    path = ftp_server.put("f.bin", data)
    with ftp(ftp_server.url("f.bin"), pipeline=pipeline) as f:
        assert fetch(f, 0, 1000) == data[:1000]
        assert fetch(f, 50_000, 51_000) == data[50_000:51_000]  # the same copy: goes on
        assert f.rechecks >= 1
        ftp_server.put("f.bin", payload(200_000, seed=39))
        later = path.stat().st_mtime + 60
        os.utime(path, (later, later))
        sink = Collector(100_000)
        with pytest.raises(FileChanged, match="changed on the server during the download"):
            f.fetch(100_000, RangeEnd(101_000), sink, threading.Event())
        assert not sink.data
        # the fetcher still serves (the new copy, on a new connection) to whoever
        # asks after adopting that version
        f.validator = f"MDTM {time.strftime('%Y%m%d%H%M%S', time.gmtime(later))}"
        assert fetch(f, 2000, 3000) == payload(200_000, seed=39)[2000:3000]


def test_ftp_other_address_behind_the_name_is_not_compared(ftp_server) -> None:
    """Machines behind one name keep their own times: only the address that gave the
    version is asked again."""
    data = payload(100_000, seed=40)
    ftp_server.put("f.bin", data)
    with ftp(ftp_server.url("f.bin")) as f:
        assert fetch(f, 0, 1000) == data[:1000]
        before = f.rechecks
        f._validator_peer = "192.0.2.7"  # (as if the version came from another machine)
        assert fetch(f, 5000, 6000) == data[5000:6000]
        assert f.rechecks == before


def test_http_range_ignored_is_still_told_apart(nginx_server) -> None:
    """Without a change, a 200 to a range is still a server that ignores ranges
    (nginx's norange/ location), though If-Range went with it."""
    data = payload(100_000, seed=36)
    nginx_server.put("f.bin", data)
    with http(nginx_server.url("f.bin", prefix="norange/")) as f:
        assert fetch(f, 0, 1000) == data[:1000]
        assert f.validator is not None
        with pytest.raises(RangeNotHonoured):
            fetch(f, 5000, 6000)


class _EtagPerResponse(BaseHTTPRequestHandler):
    """A name served by several backends: a new strong ETag on every response, the
    same Last-Modified; If-Range is honoured (200 when it does not match)."""

    protocol_version = "HTTP/1.1"
    data = b""

    def log_message(self, format: str, *args: object) -> None:
        return

    def do_GET(self) -> None:
        data = self.data
        m = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
        ranged = m is not None and self.headers.get("If-Range") is None
        start, end = 0, len(data)
        if ranged:
            start, end = int(m.group(1)), int(m.group(2) or len(data) - 1) + 1
        self.send_response(206 if ranged else 200)
        if ranged:
            self.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(data)}")
        self.send_header("ETag", f'"{uuid.uuid4().hex}"')
        self.send_header("Last-Modified", email.utils.formatdate(1_700_000_000, usegmt=True))
        self.send_header("Content-Length", str(end - start))
        self.end_headers()
        self.wfile.write(data[start:end])


def test_http_etag_that_changes_per_response_is_not_a_change(http_servers) -> None:
    """Backends behind one name with their own ETags: a 200 to If-Range with the same
    Last-Modified is a server that will not give this range, not a new file."""
    data = payload(50_000, seed=37)
    base = http_servers(type("H", (_EtagPerResponse,), {"data": data}))
    with http(base + "/f.bin") as f:
        assert fetch(f, 0, 1000) == data[:1000]
        with pytest.raises(RangeNotHonoured):
            fetch(f, 5000, 6000)


def test_ftp_server_full_530_is_transient(start_pyftpd) -> None:
    """proftpd's MaxClients (and wu-ftpd's class limits) answer a login with 530:
    full for now, asked again later; a wrong password stays a refusal."""
    from pyftpdlib.handlers import FTPHandler

    class Full(FTPHandler):
        def ftp_USER(self, line: str) -> None:
            self.respond("530 Sorry, the maximum number of allowed clients (1) are "
                         "already connected.")

    class Wrong(FTPHandler):
        def ftp_USER(self, line: str) -> None:
            self.respond("530 Login incorrect.")

    for handler, error in ((Full, TransientError), (Wrong, PermanentError)):
        server = start_pyftpd(handler=handler)
        server.put("f.bin", b"x" * 10)
        with ftp(server.url("f.bin"), pipeline=False) as f, pytest.raises(error) as err:
            f.size()
        assert err.type is error, err.value
