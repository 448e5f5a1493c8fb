"""Start-up cost of ``pftp get`` (notes/client-startup.md), guarded without timing:
which modules are loaded before the first connect, and that the lazy public API
still resolves."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

# Not needed to parse `pftp get --mirror ...` and start the size probes: each is
# imported later (the engine's modules by a background thread while the mirrors
# answer) or never on a mirror-only download.
NOT_BEFORE_PROBE = (
    "concurrent.futures",
    "hashlib",
    "httpx",
    "json",
    "numpy",
    "pftp_client.access_bandwidth",
    "pftp_client.congestion",
    "pftp_client.congestion_wiring",
    "pftp_client.control_file",
    "pftp_client.coordinator",
    "pftp_client.discovery",
    "pftp_client.engine",
    "pftp_client.integrity",
    "pftp_client.part_file",
    "pftp_client.summary",
    "pftp_wire",
    "pydantic",
    "rich",
    "shutil",
    "tempfile",
    "tomllib",
)


def _env(tmp_path: Path) -> dict[str, str]:
    import os

    env = dict(os.environ)
    env["PFTP_CLIENT_CONFIG"] = str(tmp_path / "no-config.toml")
    for var in ("PFTP_COORDINATOR", "PFTP_ACCESS_BANDWIDTH"):
        env.pop(var, None)
    return env


def _run(code: str, tmp_path: Path) -> str:
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(tmp_path),
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def _run_both(code: str, tmp_path: Path) -> tuple[str, str]:
    """(stdout, stderr) of ``python -c code``, which must succeed."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, env=_env(tmp_path))
    assert out.returncode == 0, out.stderr
    return out.stdout, out.stderr


def test_cli_import_and_parse_load_nothing_heavy(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from pftp_client.cli import build_parser\n"
        "from pftp_client.settings import load_settings\n"
        "args = build_parser().parse_args(['get', '--mirror', 'ftp://127.0.0.1/f',"
        " '--mirror', 'ftp://127.0.0.2/f', '--sha256', '0' * 64, '-o', 'out', '--quiet',"
        " '--json', '--no-discovery'])\n"
        "assert args.mirror and load_settings().coordinators == []\n"
        f"print(sorted(m for m in {NOT_BEFORE_PROBE!r} if m in sys.modules))\n"
    )
    assert _run(code, tmp_path).strip() == "[]"


def test_probes_start_before_the_engine_loads(pyftpd_server, tmp_path: Path) -> None:
    """A real `pftp get`: when the size probe starts, none of the modules above is
    loaded; the download still completes and verifies."""
    import hashlib

    data = bytes(range(256)) * 4096 + b"tail"
    pyftpd_server.put("f.bin", data)
    url = pyftpd_server.url("f.bin")
    out = tmp_path / "out.bin"
    digest = hashlib.sha256(data).hexdigest()
    argv = ["get", "--mirror", url, "--sha256", digest, "-o", str(out), "--quiet", "--json"]
    argv.append("--no-discovery")
    code = (
        "import sys\n"
        "import pftp_client.cli as cli\n"
        "d = sys.modules['pftp_client.downloader']\n"
        "seen = []\n"
        "start = d._start_probes\n"
        "def spy(*a, **k):\n"
        f"    seen.append(sorted(m for m in {NOT_BEFORE_PROBE!r} if m in sys.modules))\n"
        "    return start(*a, **k)\n"
        "d._start_probes = spy\n"
        f"code = cli.run({argv!r})\n"
        "print('LOADED-AT-PROBE', seen)\n"
        "sys.exit(code)\n"
    )
    stdout = _run(code, tmp_path)
    summary, _, tail = stdout.rpartition("LOADED-AT-PROBE ")
    assert tail.strip() == "[[]]"
    assert json.loads(summary)["sha256_verified"] is True
    assert out.read_bytes() == data


# Not needed by the FTP transport up to a transfer's first bytes (the head start's
# path, early.py): each costs 2-4 ms there, loaded later by the CLI's thread.
NOT_BEFORE_FIRST_BYTE = (
    "dataclasses", "encodings.idna", "logging", "netrc", "re", "typing", "urllib.parse",
)


def test_the_ftp_transport_reaches_the_data_without_heavy_imports(
    pyftpd_server, tmp_path: Path
) -> None:
    """Log in, SIZE, a head transfer's first bytes at an offset (REST, checked the
    way early.py checks it: from the data) and at 0, in a fresh interpreter: none
    of the modules above is loaded, and the bytes are the file's."""
    import os

    data = os.urandom(300_000)
    pyftpd_server.put("f.bin", data)
    url = pyftpd_server.url("f.bin")
    code = (
        "import sys, time\n"
        "from pftp_client.transports.ftp import FtpFetcher\n"
        f"first, other = FtpFetcher({url!r}), FtpFetcher({url!r})\n"
        "first.start_head(); other.start_head(1000, rest_checked_later=True)\n"
        "while (v := other.confirm_rest(first.head_bytes(4096)[0], 4096)) is None:\n"
        "    time.sleep(0.001)\n"
        "print(v, first.size(), other._head.buf[:16].hex(), first.head_bytes(16)[0].hex())\n"
        f"print(sorted(m for m in {NOT_BEFORE_FIRST_BYTE!r} if m in sys.modules))\n"
        "first.close(); other.close()\n"
    )
    env_home = tmp_path / "home"
    env_home.mkdir()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, env={**_env(tmp_path), "HOME": str(env_home)})
    assert out.returncode == 0, out.stderr[-2000:]
    verdict, loaded = out.stdout.strip().splitlines()
    assert verdict.split() == ["True", str(len(data)), data[1000:1016].hex(), data[:16].hex()]
    assert loaded == "[]"


def test_a_coordinators_answer_becomes_transfers_without_dataclasses(tmp_path: Path) -> None:
    """The answer's transfers (early.plan_transfers) are worked out while the CLI
    still loads: with what start() loads while the request is out, nothing
    heavy, and the starts are where the engine will cut (2 portions, one of
    them advised 2 connections)."""
    answer = {
        "file": {"size": 64 * 1024 * 1024, "piece_size": None},
        "assignments": [
            {"url": "ftp://a/f", "offset": 0, "length": 32 * 1024 * 1024,
             "connections": 1, "expected_bps": 20e6},
            {"url": "ftp://b/f", "offset": 32 * 1024 * 1024, "length": 32 * 1024 * 1024,
             "connections": 2, "expected_bps": 20e6},
        ],
    }
    code = (
        "import sys, json\n"
        "from pftp_client import early\n"
        "for m in ('pftp_client.transports.ftp', 'pftp_client.advice',"
        " 'pftp_client.piece_size'):\n"
        "    __import__(m)\n"
        f"print(json.dumps(early.plan_transfers({answer!r}, 1e9, 8)))\n"
        "print(sorted(m for m in ('dataclasses', 'inspect', 'pftp_client.pieces',"
        " 'logging') if m in sys.modules))\n"
    )
    transfers, loaded = _run(code, tmp_path).strip().splitlines()
    starts = json.loads(transfers)
    assert [u for u, _ in starts].count("ftp://b/f") == 2
    assert ["ftp://a/f", 0] in starts and ["ftp://b/f", 32 * 1024 * 1024] in starts
    assert loaded == "[]"


def test_public_api_resolves_lazily() -> None:
    import pftp_client
    from pftp_client import download

    assert callable(download) and download.__module__ == "pftp_client.downloader"
    assert pftp_client.download is download  # no submodule of that name shadows it
    for name in pftp_client.__all__:
        assert getattr(pftp_client, name) is not None, name
        assert name in dir(pftp_client)
    from pftp_client.control_file import ResumeMismatch
    from pftp_client.downloader import ResumeMismatch as again

    assert again is ResumeMismatch is pftp_client.ResumeMismatch
    with pytest.raises(AttributeError):
        _ = pftp_client.no_such_name


def test_congestion_modes_match_the_wiring() -> None:
    import pftp_client.downloader
    from pftp_client.congestion_wiring import MODES

    assert pftp_client.downloader.CONGESTION_MODES == MODES


@pytest.mark.parametrize(
    ("module", "name", "code"),
    [
        ("pftp_client.integrity", "VerificationFailed", 3),
        ("pftp_client.engine", "NoMirrorCouldServe", 4),
        ("pftp_client.coordinator", "CoordinatorUnavailable", 5),
        ("pftp_client.coordinator", "CoordinatorRefused", 5),
        ("pftp_client.control_file", "ResumeMismatch", 5),
        ("builtins", "PermissionError", 5),
        ("builtins", "RuntimeError", None),
    ],
)
def test_exit_codes_by_exception(module: str, name: str, code: int | None) -> None:
    from importlib import import_module

    from pftp_client.cli import _exit_code

    exc = getattr(import_module(module), name)("x")
    assert _exit_code(exc) == code


def test_state_file_written_without_tempfile(tmp_path: Path) -> None:
    from pftp_client.access_bandwidth import load_state, save_state

    path = tmp_path / "cache" / "access_bandwidth.json"
    save_state(path, {"probes": {}, "history": [{"at": 1.0, "key": "k", "bps": 5}]})
    save_state(path, {"probes": {}, "history": []})
    assert load_state(path) == {"probes": {}, "history": []}
    assert [p.name for p in path.parent.iterdir()] == ["access_bandwidth.json"]
    assert path.stat().st_mode & 0o777 == 0o600


def test_a_probe_that_raises_closes_the_others(pyftpd_server, tmp_path: Path) -> None:
    """The size probes run in their own threads: an unexpected error in one reaches
    the caller, and the connections the other probes opened are closed."""
    from pftp_client import download
    from pftp_client.transports.base import open_fetcher

    pyftpd_server.put("f.bin", b"x" * 1000)
    good = pyftpd_server.url("f.bin")
    bad = good + "?broken"
    closed: list[str] = []

    def opener(url: str, **kw: Any) -> Any:  # the real fetcher, its close watched
        if url == bad:
            raise RuntimeError("bug in a transport")
        fetcher = open_fetcher(url, **kw)
        real_close = fetcher.close

        def close() -> None:
            closed.append(url)
            real_close()

        fetcher.close = close  # type: ignore[method-assign]
        return fetcher

    with pytest.raises(RuntimeError, match="bug in a transport"):
        download(mirrors=[good, bad], output=tmp_path / "f.bin", open_fetcher=opener,
                 congestion="off")
    assert closed == [good]
    assert not (tmp_path / "f.bin").exists()


def test_lazy_logger_drops_what_no_handler_could_show_and_logs_the_rest(tmp_path: Path) -> None:
    """Before logging is imported nothing can have configured it, so DEBUG and INFO
    are dropped without importing it; WARNING imports it and is printed (to stderr,
    as logging's last resort does); once logging is configured, everything goes
    through it."""
    code = (
        "import sys\n"
        "from pftp_client.lazy import LazyLogger\n"
        "log = LazyLogger('pftp_client.x')\n"
        "log.debug('d0 %s', 1); log.info('i0')\n"
        "print('after-info', 'logging' in sys.modules)\n"
        "log.warning('w0 %s', 2)\n"
        "print('after-warning', 'logging' in sys.modules)\n"
        "import logging\n"
        "logging.basicConfig(level=logging.DEBUG, stream=sys.stdout, format='%(message)s')\n"
        "log.debug('d1 %s', 3); log.info('i1')\n"
    )
    stdout, stderr = _run_both(code, tmp_path)
    assert stdout.split() == ["after-info", "False", "after-warning", "True", "d1", "3", "i1"]
    assert stderr.strip() == "w0 2"


def test_exit_code_of_an_error_raised_while_a_module_still_loads(monkeypatch) -> None:
    """The engine's modules load in a background thread: an error raised meanwhile
    must get its exit code, not an AttributeError from a half-loaded module."""
    import types

    from pftp_client.cli import _exit_code

    monkeypatch.setitem(sys.modules, "pftp_client.integrity", types.ModuleType("half"))
    assert _exit_code(OSError("disk full")) == 5
    assert _exit_code(RuntimeError("bug")) is None


def test_lazy_logger_while_another_thread_is_loading_logging(tmp_path: Path) -> None:
    """The head start's threads log while the main thread imports the CLI, which
    imports logging: a half-loaded logging module (no getLogger yet) must not be
    used (it once crashed a probe thread, and with it the download)."""
    code = (
        "import importlib.machinery, sys, threading, time\n"
        "from pftp_client.lazy import LazyLogger\n"
        "class Slow:\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name != 'logging':\n"
        "            return None\n"
        "        sys.meta_path.remove(self)\n"
        "        spec = importlib.machinery.PathFinder.find_spec(name, path)\n"
        "        run = spec.loader.exec_module\n"
        "        def slow(mod):\n"
        "            time.sleep(0.3)\n"
        "            run(mod)\n"
        "        spec.loader.exec_module = slow\n"
        "        return spec\n"
        "sys.meta_path.insert(0, Slow())\n"
        "t = threading.Thread(target=__import__, args=('logging',))\n"
        "t.start()\n"
        "time.sleep(0.1)\n"
        "assert sys.modules['logging'].__spec__._initializing\n"
        "log = LazyLogger('pftp_client.x')\n"
        "log.debug('d'); log.info('i')\n"
        "log.warning('w %s', 1)\n"
        "t.join()\n"
        "print('ok')\n"
    )
    stdout, stderr = _run_both(code, tmp_path)
    assert stdout.strip() == "ok" and stderr.strip() == "w 1"
