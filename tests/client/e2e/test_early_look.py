"""The early look at a mirror's first connection (engine._early_look): a server that
holds each connection to a rate sends even bursts with pauses between; the look is
repeated until those bursts are enough evidence, then the mirror gets more
connections, before its first monitor round."""

from __future__ import annotations

import dataclasses
import hashlib
import os

from pftp_client import EngineConfig, download

# (a long monitor round: the trial must come from the early look, not from the
# round's own idle reading)
CFG = EngineConfig(timeout=10.0, stall_timeout=5.0, backoff_s=(0.2, 0.4, 0.8),
                   monitor_interval_s=3.0)


def _first_stream(tmp_path, ftp_mirrors, cfg: EngineConfig):
    data = os.urandom(6 * 1024 * 1024)
    # 64 KiB bursts at 640 KiB/s: one every 0.1 s, each read at once on loopback, so
    # the five such receives burst_bytes asks for are there ~0.5 s after the first
    # data
    m = ftp_mirrors({"b.bin": data}, 1, pace={0: 640 * 1024})[0]
    s = download(mirrors=[m.url("b.bin")], output=tmp_path / "b.bin",
                 sha256=hashlib.sha256(data).hexdigest(), config=cfg)
    assert (tmp_path / "b.bin").read_bytes() == data
    streams = [e for e in s.events if e.kind == "stream"]
    assert streams, s.events
    print(streams[0])
    return streams[0]


def test_the_look_is_repeated_until_the_bursts_say_enough(tmp_path, ftp_mirrors):
    cfg = dataclasses.replace(CFG, stream_early_first_s=0.3, stream_early_every_s=0.05,
                              stream_early_s=1.8)
    first = _first_stream(tmp_path, ftp_mirrors, cfg)
    assert "bursts" in first.detail, first
    # the first look (0.3 s) had too few pauses; one 50 ms later had them, long
    # before the last look (1.8 s)
    assert 0.3 < first.at_s < 1.3, first


def test_one_look_when_first_and_last_are_the_same(tmp_path, ftp_mirrors):
    cfg = dataclasses.replace(CFG, stream_early_first_s=1.8, stream_early_s=1.8)
    first = _first_stream(tmp_path, ftp_mirrors, cfg)
    assert "bursts" in first.detail, first
    assert first.at_s >= 1.8, first
