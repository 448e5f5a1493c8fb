"""What a user types or sets wrongly (session 17's audit from the outside): bad
environment values and config files, a coordinator URL that is not one, ``-o dir/``,
``--version``, and file names that look like the terminal display's markup."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PFTP = [sys.executable, "-c", "from pftp_client.cli import main; main()"]


def _run(tmp_path: Path, *args: str, env: dict[str, str] | None = None,
         config: str | None = None) -> subprocess.CompletedProcess:
    e = dict(os.environ)
    e.pop("PFTP_COORDINATOR", None)
    e.pop("PFTP_ACCESS_BANDWIDTH", None)
    cfg = tmp_path / "pftp.toml"
    if config is not None:
        cfg.write_bytes(config.encode("latin-1"))
    e["PFTP_CLIENT_CONFIG"] = str(cfg if config is not None else tmp_path / "none.toml")
    e.update(env or {})
    return subprocess.run([*PFTP, *args], capture_output=True, text=True, timeout=120, env=e)


def _usage_error(r: subprocess.CompletedProcess, *words: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    for w in words:
        assert w in r.stderr, r.stderr


@pytest.mark.parametrize("value", ["abc", "0", "-5M"])
def test_a_bad_access_bandwidth_in_the_environment_is_a_usage_error(tmp_path, value):
    r = _run(tmp_path, "get", "--mirror", "ftp://127.0.0.1:1/f", "-o", str(tmp_path / "f"),
             env={"PFTP_ACCESS_BANDWIDTH": value})
    _usage_error(r, "PFTP_ACCESS_BANDWIDTH")


def test_a_bad_access_probe_setting_fails_before_the_download(tmp_path, ftp_mirrors):
    """It used to be read only after a verified download (to record its rate):
    the file was in place and the command exited 1 with a traceback."""
    data = os.urandom(10_000)
    m = ftp_mirrors({"f.bin": data})[0]
    r = _run(tmp_path, "get", "--mirror", m.url("f.bin"), "-o", str(tmp_path / "f.bin"),
             env={"PFTP_ACCESS_PROBE": "garbage"})
    _usage_error(r, "PFTP_ACCESS_PROBE")
    assert not (tmp_path / "f.bin").exists()


@pytest.mark.parametrize(
    ("config", "words"),
    [
        ("timeout = inf\n", ["timeout must be a positive number"]),
        ("stall_timeout = nan\n", ["stall_timeout must be a positive number"]),
        ("domain = 5\n", ["domain must be"]),
        ('access_bandwidth = "abc"\n', ["access_bandwidth"]),
        ('coordinator = "not-a-url"\n', ["coordinator", "not an http"]),
        ('timeout = 5 # caf\xe9\n', ["cannot read config file"]),  # not UTF-8
        ("max_connections = 0\n", ["max_connections must be a whole number from 1 to 16"]),
        ("max_connections = 2.5\n", ["max_connections must be"]),
        ('cross_check = "no"\n', ["cross_check must be true or false"]),
    ],
)
def test_a_bad_config_file_is_a_usage_error(tmp_path, config, words):
    r = _run(tmp_path, "get", "--mirror", "ftp://127.0.0.1:1/f", "-o", str(tmp_path / "f"),
             config=config)
    _usage_error(r, *words)


@pytest.mark.parametrize("value", ["0", "17", "two"])
def test_a_bad_max_connections_is_a_usage_error(tmp_path, value):
    r = _run(tmp_path, "get", "--mirror", "ftp://127.0.0.1:1/f", "-o", str(tmp_path / "f"),
             "--max-connections", value)
    _usage_error(r, "--max-connections")


def test_two_mirrors_that_disagree_exit_3_unless_the_cross_check_is_off(
    tmp_path, mirrors_with_a_liar
):
    """No SHA-256 given and two mirrors with other bytes: pftp cannot tell which copy
    is right, so it puts none in place (exit 3); --no-cross-check (or the config
    file's cross_check = false) takes what the mirrors sent, as before."""
    data = os.urandom(1_500_000)
    (good,), bad = mirrors_with_a_liar("x.bin", data, 1)
    args = ["get", "--mirror", good, "--mirror", bad, "--json"]
    r = _run(tmp_path, *args, "-o", str(tmp_path / "a.bin"))
    assert r.returncode == 3, r.stderr
    assert "no SHA-256 known to tell which copy is right" in r.stderr
    assert not (tmp_path / "a.bin").exists()
    for extra, config in ((["--no-cross-check"], None), ([], "cross_check = false\n")):
        out = tmp_path / f"b{len(extra)}.bin"
        r = _run(tmp_path, *args, *extra, "-o", str(out), config=config)
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["cross_checked_spots"] == 0
        assert out.read_bytes() != data  # what the mirrors sent, unchecked


def test_a_coordinator_url_that_is_not_one_is_a_usage_error(tmp_path):
    r = _run(tmp_path, "get", "f.bin", "--coordinator", "not-a-url", "-o", str(tmp_path / "f"))
    _usage_error(r, "bad coordinator URL")
    assert "attempt" not in r.stderr  # refused, not retried as unreachable


def test_output_with_a_trailing_slash_is_a_directory(tmp_path, ftp_mirrors):
    data = os.urandom(20_000)
    m = ftp_mirrors({"f.bin": data})[0]
    r = _run(tmp_path, "get", "--mirror", m.url("f.bin"), "-o", str(tmp_path / "new") + "/",
             "--json")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "new" / "f.bin").read_bytes() == data
    assert json.loads(r.stdout)["path"] == str(tmp_path / "new" / "f.bin")
    (tmp_path / "plain").write_bytes(b"keep me")
    r = _run(tmp_path, "get", "--mirror", m.url("f.bin"), "-o", str(tmp_path / "plain") + "/")
    _usage_error(r, "is not a directory")
    assert (tmp_path / "plain").read_bytes() == b"keep me"


def test_version(tmp_path):
    r = _run(tmp_path, "--version")
    assert r.returncode == 0 and r.stdout.startswith("pftp ") and r.stdout.strip() != "pftp"


def test_the_terminal_display_shows_names_as_text(tmp_path):
    """A file named "report [draft].bin" kept its brackets; "[/x]" in a path broke
    the display after the file was in place (a traceback, exit 1)."""
    from pftp_client.progress import RichProgress
    from pftp_client.summary import DownloadSummary, MirrorStats
    from rich.console import Console

    out = io.StringIO()
    p = RichProgress(Console(file=out, force_terminal=True, width=120, color_system=None))
    stats = [MirrorStats(name="ftp://h[/x]", url="ftp://h/x", role="active", state="fetching")]
    p.start("report [draft].bin", 100, [s.name for s in stats])
    p.update(50, 100, 0.5, stats, {"ftp://h[/x]": 1000.0})
    stats[0].state, stats[0].bytes = "done", 100
    summary = DownloadSummary(
        name="report [draft].bin", path=str(tmp_path / "a[/x]b"), size=100, seconds=1.0,
        mode="dynamic", sha256=hashlib.sha256(b"").hexdigest(), expected_sha256=None,
        sha256_verified=False, mirrors=stats,
    )
    p.message("see [/x] here")
    p.finish(summary)
    text = out.getvalue()
    assert "report [draft].bin" in text and "see [/x] here" in text
    assert "done" in text  # the last frame shows how the mirror ended


def test_an_unknown_config_key_is_named_not_ignored_silently(tmp_path, ftp_mirrors):
    data = os.urandom(5_000)
    m = ftp_mirrors({"f.bin": data})[0]
    r = _run(tmp_path, "get", "--mirror", m.url("f.bin"), "-o", str(tmp_path / "f.bin"),
             config="timout = 5\n")
    assert r.returncode == 0, r.stderr
    assert "unknown setting(s) timout ignored" in r.stderr and "timeout" in r.stderr
    assert (tmp_path / "f.bin").read_bytes() == data
