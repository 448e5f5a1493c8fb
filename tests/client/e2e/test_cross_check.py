"""Spot checks between mirrors when no SHA-256 is known (cross_check.py), over real
FTP servers (pyftpdlib) on loopback."""

from __future__ import annotations

import os
import random

import pytest
from pftp_client import EngineConfig, VerificationFailed, download
from pftp_client.cross_check import CrossChecker, pick_spot, refetch_runs, runs_minus
from pftp_client.part_file import PartFile, part_path
from pftp_client.transports.base import TransferError, open_fetcher

FAST = EngineConfig(
    timeout=10.0, stall_timeout=5.0, backoff_s=(0.2, 0.4, 0.8), monitor_interval_s=0.5
)


def _opener(url: str):  # type: ignore[no-untyped-def]
    return open_fetcher(url, timeout=10.0, stall_timeout=5.0)


def _check_kept(path, kept: bytes, urls: dict[str, str]):  # type: ignore[no-untyped-def]
    """A part file holding ``kept``, all of it written by "m0", checked once against
    the mirrors ``urls``: (the mirrors blamed, in order; the result)."""
    part = PartFile(path, len(kept), reuse=False)
    try:
        part.pwrite(kept, 0)
        blamed: list[str] = []
        checker = CrossChecker(
            urls, lambda: [(0, len(kept), "m0")], part, _opener,
            on_blame=lambda m, _why: blamed.append(m), interval_s=0.05,
        ).start()
        return blamed, checker.finish(timeout=10)
    finally:
        part.close()


def test_runs_minus_and_spots_stay_inside_runs():
    assert runs_minus([(0, 10), (20, 30)], [(5, 22)]) == [(0, 5), (22, 30)]
    assert runs_minus([(0, 10)], []) == [(0, 10)]
    assert runs_minus([(0, 10)], [(0, 10)]) == []
    assert runs_minus([(0, 100)], [(10, 20), (30, 40)]) == [(0, 10), (20, 30), (40, 100)]
    rng = random.Random(7)
    runs = [(0, 5), (100, 200_000), (300_000, 300_010)]
    starts = set()
    for _ in range(500):
        s, e = pick_spot(runs, 16384, rng)  # type: ignore[misc]
        assert any(rs <= s < e <= re_ for rs, re_ in runs)
        assert e - s == min(16384, next(re_ - rs for rs, re_ in runs if rs <= s < re_))
        starts.add(s)
    assert len(starts) > 100  # spread out, not one fixed place
    assert pick_spot([], 10, rng) is None


def test_a_mirror_serving_other_bytes_is_caught_without_a_hash(tmp_path, mirrors_with_a_liar):
    data = os.urandom(3 * 1024 * 1024 + 11)
    good, bad = mirrors_with_a_liar("c.bin", data, 2)
    urls = [bad, *good]
    target = tmp_path / "c.bin"
    s = download(mirrors=urls, output=target, config=FAST)
    assert target.read_bytes() == data
    assert not part_path(target).exists()
    assert not s.sha256_verified
    liar = s.mirrors[0].name
    assert [m.name for m in s.mirrors if "corrupt" in m.events] == [liar]
    assert s.mirrors[0].state == "corrupt"
    assert any(e.kind == "corrupt" and e.mirror == liar for e in s.events)
    # every byte it wrote was fetched again, and the honest ones vouched for each other
    assert s.refetched_bytes >= s.mirrors[0].bytes > 0
    assert s.cross_checked_spots >= 2


def test_two_mirrors_that_disagree_never_make_a_file(tmp_path, mirrors_with_a_liar):
    data = os.urandom(2 * 1024 * 1024 + 3)
    good, bad = mirrors_with_a_liar("d.bin", data, 1)
    target = tmp_path / "d.bin"
    urls = [*good, bad]
    with pytest.raises(VerificationFailed, match="no SHA-256 known to tell which copy"):
        download(mirrors=urls, output=target, config=FAST)
    assert not target.exists()
    assert part_path(target).exists()  # kept for inspection
    # the same download with the file's hash resumes, finds the liar and repairs
    import hashlib

    s = download(mirrors=urls, output=target, config=FAST,
                 sha256=hashlib.sha256(data).hexdigest())
    assert target.read_bytes() == data and s.sha256_verified
    assert [e.mirror for e in s.events if e.kind == "corrupt"] == [urls[1].rsplit("/", 1)[0]]


def test_honest_mirrors_vouch_for_each_other_and_the_check_can_be_turned_off(
    tmp_path, ftp_mirrors
):
    data = os.urandom(4 * 1024 * 1024 + 1)
    mirrors = ftp_mirrors({"e.bin": data}, 3)
    urls = [m.url("e.bin") for m in mirrors]
    s = download(mirrors=urls, output=tmp_path / "a.bin", config=FAST)
    assert (tmp_path / "a.bin").read_bytes() == data
    # each mirror that wrote bytes had at least one spot matched by another
    assert s.cross_checked_spots >= sum(1 for m in s.mirrors if m.bytes)
    assert not any("corrupt" in m.events for m in s.mirrors) and s.refetched_bytes == 0

    s = download(mirrors=urls, output=tmp_path / "b.bin", config=FAST, cross_check=False)
    assert (tmp_path / "b.bin").read_bytes() == data and s.cross_checked_spots == 0
    # with a hash every byte is checked: no spots
    import hashlib

    s = download(mirrors=urls, output=tmp_path / "c.bin", config=FAST,
                 sha256=hashlib.sha256(data).hexdigest())
    assert s.sha256_verified and s.cross_checked_spots == 0


def test_a_lying_referee_is_outvoted_by_a_third_mirror(tmp_path, mirrors_with_a_liar):
    """The bytes on disk are right; the first mirror asked serves others: the third
    mirror agrees with the disk, so the referee is the one blamed."""
    data = os.urandom(1024 * 1024)
    good, bad = mirrors_with_a_liar("f.bin", data, 2)
    # (no bytes served yet by the others: referees are asked in this order)
    blamed, res = _check_kept(tmp_path / "f.part", data,
                              {"liar": bad, "m0": good[0], "m1": good[1]})
    assert blamed == ["liar"] and list(res.blamed) == ["liar"]
    assert res.agreed == {"m0": 1} and not res.undecided and not res.unchecked


def test_refetch_runs_repairs_from_the_next_mirror_when_one_fails(
    tmp_path, ftp_mirrors, closed_port_url
):
    data = os.urandom(300_000)
    good = ftp_mirrors({"g.bin": data}, 1)
    part = PartFile(tmp_path / "g.part", len(data), reuse=False)
    try:
        part.pwrite(bytes(len(data)), 0)  # zeros: every byte wrong
        fetched, differed = refetch_runs(
            part, [(1000, 200_000)], [f"{closed_port_url}/g.bin", good[0].url("g.bin")], _opener)
        assert fetched == 199_000 and 0 < differed <= 199_000
        assert part.pread(199_000, 1000) == data[1000:200_000]
        assert part.pread(1000, 0) == bytes(1000)  # outside the run: untouched
        with pytest.raises(TransferError, match="no mirror could serve"):
            refetch_runs(part, [(0, 10)], [f"{closed_port_url}/g.bin"], _opener)
    finally:
        part.close()


def test_a_liar_found_while_the_download_runs_is_stopped_at_once(
    tmp_path, mirrors_with_a_liar
):
    """Three mirrors at 1 MB/s, one serving other bytes: the first spots catch it
    within the first second, its flow is stopped (as a bad piece stops one) and the
    others take its share; only what it wrote by then is fetched again."""
    data = os.urandom(12 * 1024 * 1024)
    good, bad = mirrors_with_a_liar("h.bin", data, 2, rate=1_000_000)
    urls = [bad, *good]
    s = download(mirrors=urls, output=tmp_path / "h.bin", config=FAST)
    assert (tmp_path / "h.bin").read_bytes() == data
    liar = s.mirrors[0]
    assert liar.state == "corrupt"
    blamed_at = next(e.at_s for e in s.events if e.kind == "corrupt" and e.mirror == liar.name)
    assert blamed_at < 0.5 * s.seconds, (blamed_at, s.seconds)
    # an even share would be a third; it was stopped well before
    assert 0 < liar.bytes < len(data) / 4, liar.bytes
    assert s.refetched_bytes == liar.bytes
    # its bytes went back to the engine's work at once: the good mirrors' flows
    # fetched every byte of the file (a repair after the run counts in no flow)
    assert sum(m.bytes for m in s.mirrors[1:]) == len(data)


def test_an_http_mirror_with_another_copy_is_caught_and_its_bytes_replaced(
    tmp_path, ftp_mirrors, http_mirror
):
    """An HTTP mirror whose file is another one of the same size (a stale copy),
    among two FTP mirrors: spots over HTTP and FTP both ways, the HTTP one blamed."""
    data = os.urandom(3 * 1024 * 1024)
    good = ftp_mirrors({"s.bin": data}, 2)
    stale = tmp_path / "stale"
    stale.mkdir()
    (stale / "s.bin").write_bytes(os.urandom(len(data)))
    urls = [http_mirror(stale) + "s.bin", *(g.url("s.bin") for g in good)]
    s = download(mirrors=urls, output=tmp_path / "s.bin", config=FAST)
    assert (tmp_path / "s.bin").read_bytes() == data
    assert [m.url for m in s.mirrors if m.state == "corrupt"] == [urls[0]]
    assert s.refetched_bytes == s.mirrors[0].bytes > 0


def test_bytes_damaged_here_are_not_blamed_on_the_mirror(tmp_path, ftp_mirrors):
    """What is on disk differs from the referee, but the mirror that wrote it serves
    the referee's bytes now: the copy kept here was damaged (a crash, then a
    resume), so nobody is blamed and the bytes are marked to be fetched again."""
    data = os.urandom(1024 * 1024)
    root = tmp_path / "shared"
    root.mkdir()
    good = ftp_mirrors({"k.bin": data}, 2, root=root)
    # zeros where m0's bytes should be
    blamed, res = _check_kept(tmp_path / "k.part", bytes(len(data)),
                              {"m0": good[0].url("k.bin"), "m1": good[1].url("k.bin")})
    assert not blamed and not res.blamed and not res.undecided
    assert list(res.damaged) == ["m0"] and not res.unchecked


def test_repair_fetches_blamed_and_damaged_bytes_and_blames_only_the_liar(
    tmp_path, ftp_mirrors
):
    from types import SimpleNamespace

    from pftp_client.cross_check import CrossCheckResult, repair
    from pftp_client.summary import MirrorStats

    data = os.urandom(600_000)
    good = ftp_mirrors({"r.bin": data}, 1)[0].url("r.bin")
    part = PartFile(tmp_path / "r.part", len(data), reuse=False)
    stats = [MirrorStats(name=n, url=f"ftp://{n}/r.bin") for n in ("liar", "hurt", "ok")]
    ran = SimpleNamespace(mirrors=stats, owners=[
        (0, 200_000, "liar"), (200_000, 400_000, "hurt"), (400_000, 600_000, "ok")])
    found = CrossCheckResult(blamed={"liar": "its bytes differ"}, damaged={"hurt": "[0, 1)"})
    events: list = []
    said: list[str] = []
    try:
        part.pwrite(bytes(400_000), 0)  # both wrong on disk
        part.pwrite(data[400_000:], 400_000)
        fetched = repair(found, ran, [good], part, events, 1.0, said.append, _opener)
        assert part.pread(len(data), 0) == data
    finally:
        part.close()
    assert fetched == 400_000
    assert [(e.kind, e.mirror) for e in events] == [("corrupt", "liar")]
    assert [(m.name, m.state) for m in stats if "corrupt" in m.events] == [("liar", "corrupt")]
    assert len(said) == 2


def test_two_mirrors_that_disagree_stop_the_download_before_its_end(
    tmp_path, mirrors_with_a_liar
):
    """No third mirror can settle it, so the download cannot end well: it stops at
    the first disagreement instead of fetching the rest, and keeps what it has for a
    run with --sha256."""
    from pftp_client.control_file import ctl_path, load

    data = os.urandom(12 * 1024 * 1024)
    good, bad = mirrors_with_a_liar("t.bin", data, 1, rate=1_000_000)
    target = tmp_path / "t.bin"
    with pytest.raises(VerificationFailed, match="with --sha256 to settle it"):
        download(mirrors=[*good, bad], output=target, config=FAST)
    kept = load(ctl_path(target))
    assert kept is not None and 0 < kept.done.total() < len(data) / 2
