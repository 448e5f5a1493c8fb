"""Connections the coordinator advises (Assignment.connections: its probe found each
connection to a mirror held below the path's rate, or a far fast path's slow start
is long): the client opens them with the
mirror's first, each on a part of the mirror's portion. Real FTP mirrors (pyftpdlib,
one throttled per connection) and a canned coordinator answer."""

from __future__ import annotations

import os
from pathlib import Path

from pftp_client.downloader import download
from pftp_client.engine import EngineConfig

MIB = 1 << 20


def _advised(summary, mirror: str) -> list[str]:
    return [e.detail for e in summary.events
            if e.kind == "stream" and e.mirror == mirror and "coordinator advised" in e.detail]


def _get(tmp_path: Path, coord: str, **kw) -> object:
    kw.setdefault("access_bandwidth_bps", None)
    return download("f.bin", coordinator=[coord], output=tmp_path / "f.bin", timeout=30.0,
                    congestion="off", **kw)


def _advising(ftp_mirrors, canned_coordinator, equal_plan, data: bytes,
              connections: list[int], **mirror_kw) -> tuple[dict, str]:
    """Two pyftpdlib mirrors of ``data`` (``mirror_kw``: ftp_mirrors' options) and a
    coordinator whose answer gives mirror i ``connections[i]``: (answer, its URL)."""
    m = ftp_mirrors({"f.bin": data}, 2, **mirror_kw)
    answer = equal_plan(data, [x.url("f.bin") for x in m])
    for a, n in zip(answer["assignments"], connections, strict=True):
        a["connections"] = n
    return answer, canned_coordinator(200, answer).url


def test_a_mirror_advised_three_connections_opens_them_at_once(
    tmp_path: Path, ftp_mirrors, canned_coordinator, equal_plan
) -> None:
    data = os.urandom(6 * MIB + 7)
    # m0 holds each connection to 1 MB/s: its portion (3 MiB) takes ~1 s on three
    answer, coord = _advising(ftp_mirrors, canned_coordinator, equal_plan, data, [3, 1],
                              throttle={0: 1_000_000})
    s = _get(tmp_path, coord)
    assert s.sha256_verified and (tmp_path / "f.bin").read_bytes() == data
    advised = _advised(s, "m0")
    assert len(advised) == 2, [e.detail for e in s.events]
    assert all("advised 3 connections to m0 at once" in d for d in advised)
    # with the first connection, before any monitor round could have asked for them
    assert all(e.at_s < 0.5 for e in s.events if e.detail in advised)
    assert _advised(s, "m1") == []
    # the three carried most of m0's portion (m1, unthrottled, may take its tail)
    m0 = next(x for x in s.mirrors if x.name == "m0")
    assert m0.bytes >= answer["assignments"][0]["length"] // 2
    # and nothing was tried on top of the advice, nor closed for no gain
    tried = [e.detail for e in s.events if e.kind == "stream" and e.detail not in advised]
    assert not any("no gain" in d for d in tried), tried


def test_advice_is_held_to_the_connection_limit_and_the_portion(
    tmp_path: Path, ftp_mirrors, canned_coordinator, equal_plan
) -> None:
    data = os.urandom(4 * MIB)
    # m0: 8 for a 2 MiB portion, two 1 MiB parts; m1: 4, but --max-connections 1 below
    _answer, coord = _advising(ftp_mirrors, canned_coordinator, equal_plan, data, [8, 4])
    s = _get(tmp_path, coord, config=EngineConfig(advised_min_part_bytes=MIB))
    assert s.sha256_verified
    assert len(_advised(s, "m0")) == 1 and len(_advised(s, "m1")) == 1
    (tmp_path / "f.bin").unlink()
    # behind a 20 Mbit/s access link, a quarter of the 80 Mbit/s expected: 8 -> 2
    s = _get(tmp_path, coord, config=EngineConfig(advised_min_part_bytes=MIB // 4),
             access_bandwidth_bps=20_000_000)
    assert s.sha256_verified
    assert len(_advised(s, "m0")) == 1 and _advised(s, "m1") == []
    (tmp_path / "f.bin").unlink()
    s = _get(tmp_path, coord, max_connections=1)
    assert s.sha256_verified and (tmp_path / "f.bin").read_bytes() == data
    assert _advised(s, "m0") == [] and _advised(s, "m1") == []


def test_advised_connections_the_mirror_refuses_give_their_part_back(
    tmp_path: Path, ftp_mirrors, canned_coordinator, equal_plan
) -> None:
    """The coordinator advised 4, the server takes 2 from one address (421 to the
    rest): those two go at once, their parts to the others. Which two lose is a
    race between the transfers the early plan began at each part: usually two
    extra connections ("not taken", no retry); when the mirror's first flow lost
    (its extras held the slots), it retries after its backoff and only one extra
    is refused."""
    data = os.urandom(8 * MIB + 3)
    _answer, coord = _advising(ftp_mirrors, canned_coordinator, equal_plan, data, [4, 1],
                               max_per_ip={0: 2})
    s = _get(tmp_path, coord)
    assert s.sha256_verified and (tmp_path / "f.bin").read_bytes() == data
    assert len(_advised(s, "m0")) == 3
    seen = [(e.kind, e.mirror, round(e.at_s, 3), e.detail) for e in s.events]
    refused = [e.detail for e in s.events if e.kind == "stream" and "not taken" in e.detail]
    retried = [e.detail for e in s.events if e.kind == "retry"]
    assert all("421" in d for d in refused + retried), seen
    assert (len(refused), len(retried)) in ((2, 0), (1, 1)), seen
    assert not [e for e in s.events if e.kind == "failed"], seen
    assert sum(x.bytes for x in s.mirrors) >= len(data)


def test_a_backup_advised_several_connections_gets_them_when_it_starts(
    tmp_path: Path, ftp_mirrors, start_vsftpd, canned_coordinator, equal_plan
) -> None:
    """m0 dies early; its remainder goes to the backup, a vsftpd holding each
    connection to 1 MB/s that the coordinator advised 3 connections for: the
    backup opens the other two a moment after its first data, not after a
    monitor round's signals."""
    data = os.urandom(12 * MIB + 9)
    m = ftp_mirrors({"f.bin": data}, 2, die_after={0: 256 * 1024}, throttle={1: 512 * 1024})
    backup = start_vsftpd(anon_max_rate=1_000_000)
    backup.put("f.bin", data)
    answer = equal_plan(data, [x.url("f.bin") for x in m])
    answer["backups"] = [{"mirror": "b0", "url": backup.url("f.bin"), "suitability": 0.1,
                          "expected_bps": 2.4e7, "connections": 3}]
    coord = canned_coordinator(200, answer)
    s = _get(tmp_path, coord.url)
    assert s.sha256_verified and (tmp_path / "f.bin").read_bytes() == data
    started = next(e for e in s.events if e.kind == "backup" and e.mirror == "b0")
    advised = _advised(s, "b0")
    assert len(advised) == 2, [(e.kind, e.mirror, e.detail) for e in s.events]
    opened = [e for e in s.events if e.detail in advised]
    assert all(e.at_s - started.at_s < 1.0 for e in opened), (started, opened)
