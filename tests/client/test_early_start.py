"""The head start of `pftp get --mirror ftp://...` (pftp_client.early, launch):
which command lines start it, how download() takes its probes over, and that the
real entry point connects before the CLI's modules load."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pftp_client import early

FTP = "ftp://127.0.0.1:2121/f.bin"
FTP2 = "ftp://127.0.0.2:2121/f.bin"


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["get", "--mirror", FTP], ([FTP], [])),
        (["get", "-m", FTP, "--mirror=" + FTP2, "--quiet", "--json"], ([FTP, FTP2], [])),
        (["get", "-m" + FTP, "--backup", FTP2, "-o", "out", "--sha256", "ab"], ([FTP], [FTP2])),
        (["get", "--mirror", FTP, "--no-discovery", "--restart", "--stall-timeout", "3"],
         ([FTP], [])),
        # a NAME (the coordinator may be asked), help, unknown or abbreviated options,
        # a missing value: left to argparse and the normal path
        (["get", "ubuntu.iso", "--mirror", FTP], None),
        (["get", "--mirror", FTP, "-h"], None),
        (["get", "--mirr", FTP], None),
        (["get", "--mirror"], None),
        (["get", "--mirror", "--quiet"], None),
        (["get", "--quiet=1", "--mirror", FTP], None),
        (["get", "-qm", FTP], None),
        (["get", "--json"], None),
        (["put", "--mirror", FTP], None),
        ([], None),
    ],
)
def test_mirror_urls(argv: list[str], expected: tuple[list[str], list[str]] | None) -> None:
    assert early.mirror_urls(argv) == expected


@pytest.fixture
def clean_early():
    early.discard_all()
    yield
    early.discard_all()


def test_take_hands_over_a_probe_once_and_only_for_its_timeout(pyftpd_server, clean_early) -> None:
    data = os.urandom(300_000)
    pyftpd_server.put("f.bin", data)
    url, other = pyftpd_server.url("f.bin"), pyftpd_server.url("g.bin")
    assert early.start(["get", "--mirror", url, "--mirror", other]) == 2
    assert early.take(url, timeout=5.0) is None  # other settings: not this probe
    probe = early.take(url, timeout=30.0)
    assert probe is not None and early.take(url, timeout=30.0) is None
    got_url, fetcher, size, error = probe.result()
    assert (got_url, size, error) == (url, len(data), "")
    assert fetcher._head is not None  # the first mirror's transfer is under way
    fetcher.close()
    missing = early.take(other, timeout=30.0)
    assert missing is not None
    _, f2, size2, error2 = missing.result()
    assert f2 is None and size2 is None and "550" in error2  # as download()'s probe says it


def test_download_takes_the_early_probes(pyftpd_server, tmp_path: Path, clean_early) -> None:
    from pftp_client import download

    data = os.urandom(1_000_003)
    pyftpd_server.put("f.bin", data)
    url = pyftpd_server.url("f.bin")
    assert early.start(["get", "--mirror", url]) == 1
    probe = early._probes[url]
    out = tmp_path / "f.bin"
    summary = download(mirrors=[url], output=out, sha256=hashlib.sha256(data).hexdigest(),
                       timeout=30.0, congestion="off")
    assert summary.sha256_verified and out.read_bytes() == data
    assert url not in early._probes and probe._done.is_set()


def test_download_with_other_settings_closes_them(pyftpd_server, tmp_path: Path,
                                                  clean_early) -> None:
    from pftp_client import download

    data = os.urandom(200_000)
    pyftpd_server.put("f.bin", data)
    url = pyftpd_server.url("f.bin")
    early.start(["get", "--mirror", url])
    probe = early._probes[url]
    summary = download(mirrors=[url], output=tmp_path / "f.bin", timeout=7.0, congestion="off")
    assert summary.size == len(data) and not early._probes
    probe._done.wait(10)
    fetcher = probe._value[1]
    deadline = 50
    while fetcher is not None and not fetcher._closed and deadline:  # closed by its thread
        deadline -= 1
        probe._done.wait(0.1)
    assert fetcher is None or fetcher._closed


def test_pftp_connects_before_the_cli_loads(pyftpd_server, tmp_path: Path) -> None:
    """The real entry point (launch.main): the first control connection is opened
    before pftp_client.cli is imported, and before logging (lazy.LazyLogger), and
    the download verifies."""
    data = os.urandom(2_000_000)
    pyftpd_server.put("f.bin", data)
    url = pyftpd_server.url("f.bin")
    out = tmp_path / "out.bin"
    argv = ["pftp", "get", "--mirror", url, "--sha256", hashlib.sha256(data).hexdigest(),
            "-o", str(out), "--quiet", "--json", "--no-discovery"]
    hook = (
        "import sys, threading\n"
        "order = []\n"
        "def hook(event, args):\n"
        f"    if event == 'socket.connect' and args[1][1] == {pyftpd_server.port} and not any(\n"
        "            o.startswith('connect') for o in order):\n"
        "        order.append('connect ' + threading.current_thread().name)\n"
        "    elif event == 'import' and args[0] in ('pftp_client.cli', 'pftp_client.engine',\n"
        "                                            'logging') and args[0] not in order:\n"
        "        order.append(args[0])\n"
        "sys.addaudithook(hook)\n"
    )
    code = hook + (
        f"sys.argv = {argv!r}\n"
        "import atexit\n"
        "atexit.register(lambda: print('ORDER', order))\n"
        "from pftp_client.launch import main\n"
        "main()\n"
    )
    env = dict(os.environ, PFTP_CLIENT_CONFIG=str(tmp_path / "none.toml"))
    env.pop("PFTP_COORDINATOR", None)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary, _, tail = proc.stdout.rpartition("ORDER ")
    order = eval(tail)  # a list literal printed by the child
    # The early probe thread connects while the CLI loads, before the engine does.
    connect = next(o for o in order if o.startswith("connect "))
    assert connect.startswith("connect pftp-early-")
    assert order.index(connect) < order.index("pftp_client.engine")
    assert order.index(connect) < order.index("logging")
    assert json.loads(summary)["sha256_verified"] is True
    assert out.read_bytes() == data


def _three_mirrors(start_pyftpd, data: bytes, first_handler: type | None = None) -> list[str]:
    first = start_pyftpd(handler=first_handler)
    first.put("f.bin", data)
    others = [start_pyftpd(root=first.root) for _ in range(2)]
    return [s.url("f.bin") for s in (first, *others)]


def _start_early(start_pyftpd, tmp_path: Path, monkeypatch, access: str | None,
                 data: bytes, first_handler: type | None = None
                 ) -> tuple[list[str], list[early.EarlyProbe]]:
    """Three mirrors of ``data``, the early probes of `pftp get --mirror` x3 started
    with that access bandwidth configured (None: none) and no config file."""
    if access is None:
        monkeypatch.delenv("PFTP_ACCESS_BANDWIDTH", raising=False)
    else:
        monkeypatch.setenv("PFTP_ACCESS_BANDWIDTH", access)
    monkeypatch.setenv("PFTP_CLIENT_CONFIG", str(tmp_path / "none.toml"))
    urls = _three_mirrors(start_pyftpd, data, first_handler)
    early.start(["get", *[a for u in urls for a in ("--mirror", u)]])
    return urls, [early._probes[u] for u in urls]


def _head_offset(probe: early.EarlyProbe) -> int | None:
    fetcher = probe.result()[1]
    head = fetcher._head if fetcher is not None else None
    return None if head is None else head.offset


@pytest.mark.parametrize("access", [None, "1000G"], ids=["unknown", "fast-link"])
def test_an_even_start_starts_every_mirror_at_its_block(
    start_pyftpd, tmp_path: Path, clean_early, monkeypatch, access: str | None
) -> None:
    """No access bandwidth configured, or one so fast that a lead start would not
    pay (lead.pays_off): the engine starts even, so each mirror's transfer is
    started where its first block will be, at once, and the download uses them."""
    from pftp_client import download
    from pftp_client.bandwidth_setting import configured_access_bandwidth
    from pftp_client.ranges import first_offsets

    data = os.urandom(3_000_001)
    urls, probes = _start_early(start_pyftpd, tmp_path, monkeypatch, access, data)
    assert [_head_offset(p) for p in probes] == first_offsets(len(data), 3)
    summary = download(mirrors=urls, output=tmp_path / "f.bin", timeout=30.0,
                       access_bandwidth_bps=configured_access_bandwidth()[0],
                       sha256=hashlib.sha256(data).hexdigest(), congestion="off")
    assert summary.sha256_verified and (tmp_path / "f.bin").read_bytes() == data
    assert all(_head_offset(p) is None for p in probes)  # every one was taken over
    assert summary.duplicate_bytes == 0
    assert not [e for e in summary.events if e.kind == "resumed"]  # nobody stood by


def test_a_first_mirror_that_fills_the_access_link_starts_no_other(
    start_pyftpd, tmp_path: Path, clean_early, monkeypatch
) -> None:
    """With lead start (an access bandwidth configured) the others start early only
    when the first mirror's transfer falls short of the link; here it fills it."""
    _, probes = _start_early(start_pyftpd, tmp_path, monkeypatch, "100k", os.urandom(3_000_000))
    assert [_head_offset(p) for p in probes] == [0, None, None]
    assert all(p.result()[1]._rest_honoured for p in probes[1:])  # REST checked early


def test_a_first_mirror_short_of_the_link_starts_the_others_and_the_release_uses_them(
    start_pyftpd, tmp_path: Path, clean_early, monkeypatch, throttled_ftp_handler
) -> None:
    """Lead start (80 Mbit/s configured: slow enough for it to pay) with a first
    mirror that sends 128 KiB and then sleeps: the early verdict starts every other
    mirror at its block, the engine's release deals as an even start
    (engine._deal_as_even_start), and each of those transfers is taken over."""
    from pftp_client import download
    from pftp_client.ranges import first_offsets

    data = os.urandom(24_000_000)
    urls, probes = _start_early(start_pyftpd, tmp_path, monkeypatch, "80M", data,
                                first_handler=throttled_ftp_handler(64 * 1024))
    assert [_head_offset(p) for p in probes] == first_offsets(len(data), 3)
    fetchers = [p.result()[1] for p in probes]
    summary = download(mirrors=urls, output=tmp_path / "f.bin", timeout=30.0,
                       access_bandwidth_bps=80_000_000,
                       sha256=hashlib.sha256(data).hexdigest(), congestion="off")
    assert summary.sha256_verified and (tmp_path / "f.bin").read_bytes() == data
    # each head was taken over by a fetch (not aborted), on its first connection
    assert all(f.head_history is not None for f in fetchers)
    assert all(f.reconnects == 0 for f in fetchers[1:])
    # the others stood by and were released at the engine's first judgement (one
    # whose thread reached its first lane only after that release never stood by,
    # and has no event: seen once in a clean-clone CI, 1 of 2)
    resumed = [e for e in summary.events if e.kind == "resumed"]
    others = {m.name for m in summary.mirrors[1:]}
    assert 1 <= len(resumed) <= 2 and all(e.at_s < 1.0 for e in resumed)
    assert {e.mirror for e in resumed} <= others
    assert all(m.bytes > 0 for m in summary.mirrors[1:])


def test_a_mirror_that_ignores_rest_gets_no_early_transfer_and_writes_nothing_wrong(
    start_pyftpd, tmp_path: Path, clean_early, monkeypatch
) -> None:
    """The early REST check catches a server that answers 350 and sends from byte 0:
    no transfer is started there, and the download (even start: no access bandwidth)
    still verifies, the other mirrors taking that mirror's blocks."""
    from pftp_client import download
    from pyftpdlib.handlers import FTPHandler

    class IgnoresRest(FTPHandler):
        def ftp_REST(self, line: str) -> None:
            self.respond(f"350 Restarting at position {line}.")

    monkeypatch.delenv("PFTP_ACCESS_BANDWIDTH", raising=False)
    monkeypatch.setenv("PFTP_CLIENT_CONFIG", str(tmp_path / "none.toml"))
    data = os.urandom(2_000_003)
    good = start_pyftpd()
    good.put("f.bin", data)
    liar = start_pyftpd(handler=IgnoresRest, root=good.root)
    urls = [good.url("f.bin"), liar.url("f.bin")]
    early.start(["get", "--mirror", urls[0], "--mirror", urls[1]])
    probe = early._probes[urls[1]]
    fetcher = probe.result()[1]
    assert fetcher is not None and fetcher._rest_honoured is False
    assert fetcher.head_progress() is None
    summary = download(mirrors=urls, output=tmp_path / "f.bin", timeout=30.0,
                       sha256=hashlib.sha256(data).hexdigest(), congestion="off")
    assert summary.sha256_verified and (tmp_path / "f.bin").read_bytes() == data


def test_the_early_parser_knows_every_option_of_get() -> None:
    """early.mirror_urls reads `pftp get` without argparse (its import is on the way to
    the first connect); its option lists must stay those of cli.build_parser."""
    import argparse

    from pftp_client.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    get = sub.choices["get"]
    with_value, flags = set(), set()
    for action in get._actions:
        if not action.option_strings or isinstance(action, argparse._HelpAction):
            continue
        (flags if action.nargs == 0 else with_value).update(action.option_strings)
    assert with_value == early._WITH_VALUE
    assert flags == early._FLAGS


def _rest_args_handler(seen: list[tuple[int, str]]) -> type:
    from pyftpdlib.handlers import FTPHandler

    class RecordsRest(FTPHandler):
        def ftp_REST(self, line: str) -> None:
            seen.append((self.server.address[1], line))
            super().ftp_REST(line)

    return RecordsRest


@pytest.mark.parametrize("constant", [False, True], ids=["random", "zeros"])
def test_the_early_transfers_check_rest_from_their_data(
    start_pyftpd, tmp_path: Path, clean_early, monkeypatch, constant: bool
) -> None:
    """An even start: each other mirror's transfer starts at its block right after
    SIZE, and its first bytes, different from the first mirror's bytes at 0, show
    that REST was honoured: no REST probe (at size-1). A file whose blocks start
    with the same bytes as the file (zeros) cannot show it: the probe decides, and
    the transfers start after it. Either way the download uses them and verifies."""
    from pftp_client import download
    from pftp_client.ranges import first_offsets

    monkeypatch.delenv("PFTP_ACCESS_BANDWIDTH", raising=False)
    monkeypatch.setenv("PFTP_CLIENT_CONFIG", str(tmp_path / "none.toml"))
    data = bytes(3_000_000) + b"end" if constant else os.urandom(3_000_003)
    seen: list[tuple[int, str]] = []
    first = start_pyftpd(handler=_rest_args_handler(seen))
    first.put("f.bin", data)
    others = [start_pyftpd(root=first.root, handler=_rest_args_handler(seen)) for _ in range(2)]
    urls = [s.url("f.bin") for s in (first, *others)]
    early.start(["get", *[a for u in urls for a in ("--mirror", u)]])
    probes = [early._probes[u] for u in urls]
    assert [_head_offset(p) for p in probes] == first_offsets(len(data), 3)
    assert all(p.result()[1].rest_honoured for p in probes[1:])
    probed = sorted(port for port, arg in seen if arg == str(len(data) - 1))
    assert probed == (sorted(s.port for s in others) if constant else [])
    summary = download(mirrors=urls, output=tmp_path / "f.bin", timeout=30.0,
                       sha256=hashlib.sha256(data).hexdigest(), congestion="off")
    assert summary.sha256_verified and (tmp_path / "f.bin").read_bytes() == data
    assert all(_head_offset(p) is None for p in probes)  # each was taken over
    assert summary.duplicate_bytes == 0


def _late_greeting(delay_s: float) -> type:
    import time

    from pyftpdlib.handlers import FTPHandler

    class LateGreeting(FTPHandler):
        def handle(self) -> None:
            time.sleep(delay_s)  # (blocks this server's own loop only)
            super().handle()

    return LateGreeting


@pytest.mark.parametrize("same_file", [True, False])
def test_a_slow_entry_point_probe_does_not_hold_the_start(
    start_pyftpd, tmp_path: Path, clean_early, monkeypatch, same_file: bool
) -> None:
    """The entry point's probe of one mirror answers 2.5 s late (longer than the
    other mirrors' size answers are waited for). Its transfer is begun at its block
    like the others', so the download starts without it and its flow waits for its
    own probe: it stays an active mirror (not a late backup). When it then reports
    another size, its flow fails with that and the others serve its block."""
    from pftp_client import download

    monkeypatch.delenv("PFTP_ACCESS_BANDWIDTH", raising=False)
    monkeypatch.setenv("PFTP_CLIENT_CONFIG", str(tmp_path / "none.toml"))
    data = os.urandom(3_000_001)
    first = start_pyftpd()
    first.put("f.bin", data)
    second = start_pyftpd(root=first.root)
    slow = start_pyftpd(handler=_late_greeting(2.5))
    slow.put("f.bin", data if same_file else data + b"x")
    urls = [first.url("f.bin"), second.url("f.bin"), slow.url("f.bin")]
    early.start(["get", *[a for u in urls for a in ("--mirror", u)]])
    summary = download(mirrors=urls, output=tmp_path / "f.bin", timeout=30.0,
                       sha256=hashlib.sha256(data).hexdigest(), congestion="off")
    assert summary.sha256_verified and (tmp_path / "f.bin").read_bytes() == data
    by = {m.url: m for m in summary.mirrors}
    late = by[slow.url("f.bin")]
    assert late.role == "active" and "backup" not in late.events
    assert not any("has not answered" in n for n in summary.notes), summary.notes
    if same_file:
        assert late.state == "done"
    else:
        assert late.state == "failed" and late.bytes == 0
        failed = next(e for e in summary.events if e.kind == "failed")
        assert f"reports {len(data) + 1} bytes" in failed.detail


def _never_sends_handler() -> type:
    """A server that logs in and answers everything but RETR, which it never answers
    (a first mirror whose disk hangs, or whose transfers a broken firewall drops)."""
    from pyftpdlib.handlers import FTPHandler

    class NeverSends(FTPHandler):
        def ftp_RETR(self, file: str) -> None:
            return None

    return NeverSends


def _others_with_a_first(start_pyftpd, tmp_path: Path, monkeypatch, data: bytes,
                         first_url: Callable[[Any], str]) -> tuple[list[str], list[Any],
                                                                   list[tuple[int, str]]]:
    """Two mirrors of ``data`` recording their REST arguments, behind a first
    mirror ``first_url(root)``; the early probes of `pftp get --mirror` x3 started
    (no access bandwidth: an even start)."""
    monkeypatch.delenv("PFTP_ACCESS_BANDWIDTH", raising=False)
    monkeypatch.setenv("PFTP_CLIENT_CONFIG", str(tmp_path / "none.toml"))
    seen: list[tuple[int, str]] = []
    second = start_pyftpd(handler=_rest_args_handler(seen))
    second.put("f.bin", data)
    others = [second, start_pyftpd(root=second.root, handler=_rest_args_handler(seen))]
    urls = [first_url(second.root), *[o.url("f.bin") for o in others]]
    early.start(["get", *[a for u in urls for a in ("--mirror", u)]])
    return urls, others, seen


def _rests_of(seen: list[tuple[int, str]], server: Any) -> list[str]:
    return [arg for port, arg in seen if port == server.port]


def test_a_first_mirror_that_never_answers_has_rest_probed_before_the_transfer(
    start_pyftpd, tmp_path: Path, clean_early, monkeypatch
) -> None:
    """The first mirror accepts connections and never greets (hung, or its host up
    and its server stopped), so the others' first bytes would have nothing to be
    compared with. Each finds it not logged in by the time it has its own size, and
    probes REST on its own connection first (REST size-1), then starts its transfer
    once (before: started it, waited 1.5 s, probed and began again, its bytes
    thrown away). The download then hands the mute mirror's block over."""
    import socket

    from pftp_client import download
    from pftp_client.ranges import first_offsets

    data = os.urandom(3_000_003)
    with socket.create_server(("127.0.0.1", 0), backlog=16) as mute:  # (never accepts)
        urls, others, seen = _others_with_a_first(
            start_pyftpd, tmp_path, monkeypatch, data,
            lambda _root: f"ftp://127.0.0.1:{mute.getsockname()[1]}/f.bin")
        probes = [early._probes[u] for u in urls[1:]]
        blocks = first_offsets(len(data), 3)[1:]
        assert [_head_offset(p) for p in probes] == blocks
        assert all(p.result()[1].rest_honoured for p in probes)
        for server, block in zip(others, blocks, strict=True):
            assert _rests_of(seen, server) == [str(len(data) - 1), str(block)], seen
        summary = download(mirrors=urls, output=tmp_path / "f.bin", timeout=30.0,
                           sha256=hashlib.sha256(data).hexdigest(), congestion="off")
    assert summary.sha256_verified and (tmp_path / "f.bin").read_bytes() == data
    assert all(_head_offset(p) is None for p in probes)  # each was taken over
    by = {m.url: m for m in summary.mirrors}
    assert by[urls[0]].bytes == 0


def test_a_first_mirror_that_never_sends_has_rest_checked_on_a_second_connection(
    start_pyftpd, tmp_path: Path, clean_early, monkeypatch
) -> None:
    """The first mirror logs in and never answers its RETR: the others' transfers,
    begun at their blocks, have no bytes to be compared with. Each checks REST on a
    second connection (REST size-1) while its transfer goes on: that transfer is
    kept, not aborted and begun again after 1.5 s with its bytes thrown away."""
    from pftp_client.ranges import first_offsets

    data = os.urandom(3_000_003)

    def first(root: Path) -> str:
        silent = start_pyftpd(root=root, handler=_never_sends_handler())
        return silent.url("f.bin")

    urls, others, seen = _others_with_a_first(start_pyftpd, tmp_path, monkeypatch, data, first)
    probes = [early._probes[u] for u in urls[1:]]
    blocks = first_offsets(len(data), 3)[1:]
    assert [_head_offset(p) for p in probes] == blocks
    assert all(p.result()[1].rest_honoured for p in probes)
    for server, block in zip(others, blocks, strict=True):
        assert _rests_of(seen, server) == [str(block), str(len(data) - 1)], seen


def test_a_check_aside_that_finds_rest_ignored_starts_no_transfer(
    start_pyftpd, tmp_path: Path, clean_early, monkeypatch
) -> None:
    """First mirror silent after its login, so the REST check goes to a second
    connection; the server answers 350 and sends from byte 0 there: its early
    transfer is not trusted, and no later transfer is started on it (its bytes
    would be the file's first ones)."""
    from pyftpdlib.handlers import FTPHandler

    class IgnoresRest(FTPHandler):
        def ftp_REST(self, line: str) -> None:
            self.respond(f"350 Restarting at position {line}.")

    monkeypatch.delenv("PFTP_ACCESS_BANDWIDTH", raising=False)
    monkeypatch.setenv("PFTP_CLIENT_CONFIG", str(tmp_path / "none.toml"))
    liar = start_pyftpd(handler=IgnoresRest)
    liar.put("f.bin", os.urandom(2_000_003))
    silent = start_pyftpd(root=liar.root, handler=_never_sends_handler())
    urls = [silent.url("f.bin"), liar.url("f.bin")]
    early.start(["get", *[a for u in urls for a in ("--mirror", u)]])
    fetcher = early._probes[urls[1]].result()[1]
    assert fetcher is not None and fetcher.rest_honoured is False
    assert fetcher.head_progress() is None


def test_a_mute_first_mirror_behind_a_configured_link_holds_no_one(
    start_pyftpd, tmp_path: Path, clean_early, monkeypatch
) -> None:
    """Lead start (80 Mbit/s configured) with a first mirror that accepts and never
    greets: the others gave up on it once it had not carried the link within what
    a lead start could save (lead.budget_s, ~13 ms here), started at their blocks
    of an even start, and the engine released them the same way (its wait counted
    from the same connects: DownloadEngine began_at). Before, each waited for the
    first mirror's probe to end (its 30 s timeout), then stood by."""
    import socket

    from pftp_client import download
    from pftp_client.ranges import first_offsets

    monkeypatch.setenv("PFTP_ACCESS_BANDWIDTH", "80M")
    monkeypatch.setenv("PFTP_CLIENT_CONFIG", str(tmp_path / "none.toml"))
    data = os.urandom(3_000_003)
    first = start_pyftpd()
    first.put("f.bin", data)
    others = [first, start_pyftpd(root=first.root)]
    with socket.create_server(("127.0.0.1", 0), backlog=16) as mute:  # (never accepts)
        urls = [f"ftp://127.0.0.1:{mute.getsockname()[1]}/f.bin",
                *[s.url("f.bin") for s in others]]
        early.start(["get", *[a for u in urls for a in ("--mirror", u)]])
        probes = [early._probes[u] for u in urls[1:]]
        for p in probes:  # (ended long before the mute one's 30 s)
            assert p.wait(10.0)
        assert [_head_offset(p) for p in probes] == first_offsets(len(data), 3)[1:]
        fetchers = [p.result()[1] for p in probes]
        summary = download(mirrors=urls, output=tmp_path / "f.bin", timeout=30.0,
                           access_bandwidth_bps=80_000_000,
                           sha256=hashlib.sha256(data).hexdigest(), congestion="off")
    assert summary.sha256_verified and (tmp_path / "f.bin").read_bytes() == data
    assert all(f.head_history is not None for f in fetchers)  # taken over, not aborted
    # (released at the engine's first judgement: a standby whose thread had not
    # begun yet gets no "resumed" event)
    resumed = [e for e in summary.events if e.kind == "resumed"]
    assert resumed and all("could save" in e.detail and e.at_s < 1.0 for e in resumed), resumed
    by = {m.url: m for m in summary.mirrors}
    assert by[urls[0]].bytes == 0 and all(by[u].bytes > 0 for u in urls[1:])
