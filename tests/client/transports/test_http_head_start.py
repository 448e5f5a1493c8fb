"""The head start over HTTP mirrors (pftp_client.early with HttpFetcher.start_head),
against real nginx servers: the first mirror's GET from byte 0 gives the size (no
HEAD), the others start at their blocks, the download takes every transfer over,
and a head whose answer is not the range asked for delivers nothing."""

from __future__ import annotations

import hashlib
import itertools
import os
import threading
import time
from pathlib import Path

import pytest
from pftp_client import early
from pftp_client.transports.base import RangeEnd, RangeNotHonoured
from pftp_client.transports.http import HttpFetcher

from .helpers import Collector, nginx_requests


@pytest.fixture
def clean_early(monkeypatch, tmp_path: Path):
    early.discard_all()
    monkeypatch.delenv("PFTP_ACCESS_BANDWIDTH", raising=False)
    monkeypatch.setenv("PFTP_CLIENT_CONFIG", str(tmp_path / "none.toml"))
    yield
    early.discard_all()



def test_a_head_start_answers_the_size_and_is_taken_over(nginx_server) -> None:
    data = os.urandom(2_000_003)
    nginx_server.put("f.bin", data)
    with HttpFetcher(nginx_server.url("f.bin"), timeout=20.0) as f:
        f.start_head(0)
        assert f.size(passive=True) == len(data)  # from the GET's Content-Range
        assert f.rest_honoured and f.head_bytes(10) is None
        sink = Collector(0)
        assert f.fetch(0, RangeEnd(1_500_000), sink, threading.Event()) == 1_500_000
        assert bytes(sink.data) == data[:1_500_000]
        assert f.overlapped == 0  # a head start is not a range begun ahead
        assert f.head_progress() is None  # taken over
    requests = nginx_requests(nginx_server, 1)
    assert [(m, r) for _c, m, r in requests] == [("GET", "bytes=0-")]


def test_a_head_shows_its_progress_until_taken(start_nginx) -> None:
    server = start_nginx(slow_rate="1m")
    data = os.urandom(3_000_000)
    server.put("f.bin", data)
    with HttpFetcher(server.url("f.bin", prefix="slow/"), timeout=20.0) as f:
        f.start_head(0, limit=200_000)
        assert f.size() == len(data)
        deadline = threading.Event()
        progress = f.head_progress()
        while progress is not None and not progress[1] and not deadline.wait(0.02):
            progress = f.head_progress()
        assert progress is not None
        requested_at, samples, _rtt = progress
        assert samples and samples[0][0] >= requested_at
        assert all(b > a for (_, a), (_, b) in itertools.pairwise(samples))
        # taken over, its arrivals so far stay for the engine's lead judge (as FTP's)
        assert f.head_history is None
        sink = Collector(0)
        assert f.fetch(0, RangeEnd(100_000), sink, threading.Event()) == 100_000
        assert f.head_progress() is None and f.head_history is not None
        at, history = f.head_history
        # (the last sample of a 5 ms step is updated in place as more bytes come)
        assert at == requested_at and history[: len(samples) - 1] == samples[:-1]
        assert len(history) >= len(samples)


def test_a_head_answered_200_delivers_nothing(nginx_server) -> None:
    """A server that ignores Range answers a head at an offset with the whole file
    from byte 0: not a byte of it is delivered, and the size still comes (HEAD)."""
    data = os.urandom(500_000)
    nginx_server.put("f.bin", data)
    with HttpFetcher(nginx_server.url("f.bin", prefix="norange/"), timeout=20.0) as f:
        f.start_head(100_000)
        assert f.size() == len(data)
        sink = Collector(100_000)
        with pytest.raises(RangeNotHonoured):
            f.fetch(100_000, RangeEnd(200_000), sink, threading.Event())
        assert sink.data == b""


def test_an_even_start_over_http_starts_every_mirror_at_its_block(
    start_nginx, tmp_path: Path, clean_early
) -> None:
    """`pftp get --mirror http://... x3` with no access bandwidth: each mirror's GET
    starts at its first block while the CLI loads, the first one's answers the size,
    and the download takes all three over (no second request at those offsets)."""
    from pftp_client import download
    from pftp_client.ranges import first_offsets

    data = os.urandom(3_000_001)
    first = start_nginx()
    first.put("f.bin", data)
    servers = [first, *(start_nginx(root=first.root) for _ in range(2))]
    urls = [s.url("f.bin") for s in servers]
    assert early.start(["get", *[a for u in urls for a in ("--mirror", u)]]) == 3
    probes = [early._probes[u] for u in urls]
    offsets = first_offsets(len(data), 3)
    for probe, offset in zip(probes, offsets, strict=True):
        _url, fetcher, size, error = probe.result()
        assert (size, error) == (len(data), "")
        assert fetcher._next is not None and fetcher._next.offset == offset
    out = tmp_path / "f.bin"
    summary = download(mirrors=urls, output=out, timeout=30.0,
                       sha256=hashlib.sha256(data).hexdigest(), congestion="off")
    assert summary.sha256_verified and out.read_bytes() == data
    assert summary.duplicate_bytes == 0
    heads = [m for _c, m, _r in nginx_requests(servers[0]) if m == "HEAD"]
    assert not heads  # the first mirror's size came with its data
    for server, offset in zip(servers, offsets, strict=True):
        ranges = [r for _c, m, r in nginx_requests(server, 1) if m == "GET"]
        head = f"bytes={offset}-"
        assert ranges.count(head) == 1
        assert not [r for r in ranges if r.startswith(head) and r != head]  # not asked again


def test_a_coordinators_http_portions_start_without_a_head(start_nginx, clean_early) -> None:
    """On a coordinator's plan (early.start_portions) each HTTP mirror's GET goes out
    at its portion at once: its Content-Range total is the size, no HEAD first."""
    data = os.urandom(1_000_003)
    first = start_nginx()
    first.put("f.bin", data)
    second = start_nginx(root=first.root)
    starts = {first.url("f.bin"): 0, second.url("f.bin"): 600_000}
    probes = early.start_portions(list(starts.items()), timeout=20.0)
    assert [p.at for p in probes] == [0, 600_000]
    for probe in probes:
        url, fetcher, size, error = probe.result()
        assert (size, error) == (len(data), "")
        at = starts[url]
        sink = Collector(at)
        assert fetcher.fetch(at, RangeEnd(at + 100_000), sink, threading.Event()) == 100_000
        assert bytes(sink.data) == data[at : at + 100_000]
        fetcher.close()
    for server in (first, second):
        at = starts[server.url("f.bin")]
        assert [(m, r) for _c, m, r in nginx_requests(server, 1)] == [("GET", f"bytes={at}-")]


def test_a_first_http_mirror_falls_short_before_its_probe_has_ended(start_nginx) -> None:
    """The standbys' verdict on an http:// first mirror reads its head start's
    arrivals (its GET went out before httpx was loaded) without waiting for its
    probe to end: that waits for httpx's import, ~0.2 s on a loaded machine, and
    the others' transfers waited with it (HTTP selection-table1: 1.09x -> 1.04x)."""
    from pftp_client.transports.http_head import HeadGet

    server = start_nginx(slow_rate="500k")  # far short of a 100 Mbit/s access link
    server.put("f.bin", os.urandom(2_000_000))
    probe = early.EarlyProbe.__new__(early.EarlyProbe)  # (its thread not started:
    probe._done = threading.Event()                      # a probe that has not ended)
    # (40 mirrors: a lead start's budget, lead.budget_s, of ~0.2 s, so the verdict is
    # the arrivals' and not the budget's)
    probe.slots, probe.begun_at = 40, time.monotonic()
    probe._head_get = HeadGet(server.url("f.bin", prefix="slow/"), 0, timeout=10.0)
    try:
        got: list[bool] = []
        judge = threading.Thread(target=lambda: got.append(probe.falls_short(100e6 / 8)),
                                 daemon=True)
        judge.start()
        judge.join(timeout=10.0)
        assert got == [True] and not probe._done.is_set()
        requested_at, samples, _rtt = probe._head_get_progress()
        assert samples and samples[0][0] >= requested_at
        probe._done.set()
        assert probe._head_get_progress() is None  # ended: the fetcher has it now
    finally:
        probe._head_get.stop()
