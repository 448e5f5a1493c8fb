"""The ``pftp`` command as a subprocess: exit codes, --json, resume after SIGKILL,
and memory on a big sparse file."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pftp_client.control_file import ctl_path, load
from pftp_client.part_file import part_path


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


PFTP = [sys.executable, "-c", "from pftp_client.cli import main; main()"]


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PFTP_CLIENT_CONFIG"] = str(tmp_path / "no-config.toml")
    env.pop("PFTP_COORDINATOR", None)
    env["PFTP_ACCESS_BANDWIDTH"] = "100M"
    return env


# Runs the command as its only child and writes that child's peak RSS (KiB) to a file.
_RSS_WRAPPER = (
    "import resource, subprocess, sys\n"
    "rc = subprocess.call(sys.argv[2:])\n"
    "open(sys.argv[1], 'w').write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))\n"
    "sys.exit(rc)\n"
)


def run_pftp(tmp_path: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run the pftp CLI; ``--peak-rss-file F`` first records its peak RSS in F."""
    argv = [*PFTP, *args]
    if args[:1] == ("--peak-rss-file",):
        argv = [sys.executable, "-c", _RSS_WRAPPER, args[1], *PFTP, *args[2:]]
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout, env=_env(tmp_path)
    )


def test_exit_codes_usage_and_no_mirror(tmp_path, closed_port_url):
    assert run_pftp(tmp_path, "get").returncode == 2
    r = run_pftp(tmp_path, "get", "--mirror", "gopher://h/x")
    assert r.returncode == 2 and "unsupported mirror URL" in r.stderr
    r = run_pftp(
        tmp_path,
        "get",
        "--mirror",
        closed_port_url + "/x",
        "-o",
        str(tmp_path / "x"),
        "--stall-timeout",
        "3",
    )
    assert r.returncode == 4, r.stderr
    r = run_pftp(
        tmp_path, "get", "name.iso", "--coordinator", closed_port_url, "-o", str(tmp_path / "y")
    )
    assert r.returncode == 5 and "3 attempts" in r.stderr
    r = run_pftp(tmp_path, "get", "--mirror", "ftp://h/x", "--sha256", "nothex")
    assert r.returncode == 2


@pytest.mark.parametrize("url, why", [
    ("http://[::1/f.bin", "Invalid IPv6 URL"),
    ("ftp://127.0.0.1:99999/f.bin", "out of range"),
    ("http://127.0.0.1:abc/f.bin", "integer"),
    ("ftp://127.0.0.1:0/f.bin", "port 0"),
])
def test_malformed_mirror_urls_are_usage_errors(tmp_path, url, why):
    r = run_pftp(tmp_path, "get", "--mirror", url, "-o", str(tmp_path / "x"), timeout=20)
    assert r.returncode == 2 and "malformed mirror URL" in r.stderr and why in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_bad_output_and_timeouts_are_refused_before_any_transfer(tmp_path, closed_port_url):
    (tmp_path / "out" / "f.bin").mkdir(parents=True)
    r = run_pftp(tmp_path, "get", "--mirror", closed_port_url + "/f.bin", "-o",
                 str(tmp_path / "out"), timeout=20)
    assert r.returncode == 2 and "is a directory" in r.stderr, r.stderr
    for value in ("0", "-3", "nan", "soon"):
        r = run_pftp(tmp_path, "get", "--mirror", closed_port_url + "/f.bin",
                     "--stall-timeout", value, timeout=20)
        assert r.returncode == 2 and "--stall-timeout" in r.stderr, (value, r.stderr)


def test_json_summary_and_verification_exit_code(tmp_path, ftp_mirrors):
    data = os.urandom(700_001)
    m = ftp_mirrors({"j.bin": data}, 2)
    args = [
        "get",
        "--mirror",
        m[0].url("j.bin"),
        "--mirror",
        m[1].url("j.bin"),
        "-o",
        str(tmp_path / "j.bin"),
    ]
    r = run_pftp(tmp_path, *args, "--sha256", sha256_hex(data), "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["sha256_verified"] is True and out["size"] == len(data)
    assert {"bytes", "seconds", "rate_bps", "events", "state"} <= set(out["mirrors"][0])
    assert sum(x["bytes"] for x in out["mirrors"]) == len(data)
    (tmp_path / "j.bin").unlink()
    r = run_pftp(tmp_path, *args, "--sha256", "0" * 64, "-q", "--json")
    assert r.returncode == 3 and not (tmp_path / "j.bin").exists()
    failed = json.loads(r.stdout)  # (a failure is still one JSON object)
    assert failed["exit_code"] == 3 and "SHA-256" in failed["error"], failed


def _wait_for_progress(
    target: Path, proc: subprocess.Popen, at_least: int, timeout: float = 60
) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        try:
            state = load(ctl_path(target))
        except ValueError:
            state = None
        if state is not None and state.done.total() >= at_least:
            return state.done.total()
        time.sleep(0.05)
    raise AssertionError("download made no progress")


def test_resume_after_sigkill_refetches_at_most_one_piece_per_connection(tmp_path, ftp_mirrors):
    data = os.urandom(12 * 1024 * 1024 + 7)
    m = ftp_mirrors({"r.bin": data}, 2, throttle={0: 1024 * 1024, 1: 1024 * 1024})
    target = tmp_path / "r.bin"
    args = [
        "get",
        "--mirror",
        m[0].url("r.bin"),
        "--mirror",
        m[1].url("r.bin"),
        "-o",
        str(target),
        "--sha256",
        sha256_hex(data),
        "-q",
        "--json",
    ]
    proc = subprocess.Popen(
        [*PFTP, *args],
        env=_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for_progress(target, proc, 3 * 1024 * 1024)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    assert not target.exists() and part_path(target).exists()
    saved = load(ctl_path(target))
    assert saved is not None
    at_kill = saved.done.total()
    r = run_pftp(tmp_path, *args)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert target.read_bytes() == data
    assert out["resumed_bytes"] == at_kill
    piece = saved.piece_size
    connections = 2
    fetched_again = out["fetched_bytes"] - (len(data) - at_kill)
    print(
        f"resumed {at_kill} bytes; fetched {out['fetched_bytes']}; "
        f"refetched {fetched_again}; piece {piece}"
    )
    assert out["fetched_bytes"] <= len(data) - at_kill + connections * piece


def test_refuses_to_resume_onto_a_different_file(tmp_path, ftp_mirrors):
    data = os.urandom(6 * 1024 * 1024)
    m = ftp_mirrors({"d.bin": data}, 1, throttle={0: 512 * 1024})
    target = tmp_path / "d.bin"
    args = ["get", "--mirror", m[0].url("d.bin"), "-o", str(target), "-q"]
    proc = subprocess.Popen(
        [*PFTP, *args],
        env=_env(tmp_path),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for_progress(target, proc, 512 * 1024)
    finally:
        proc.kill()
        proc.wait()
        proc.stderr.close()
    (m[0].root / "d.bin").write_bytes(data + b"more")
    r = run_pftp(tmp_path, *args)
    assert r.returncode == 5 and "--restart" in r.stderr and not target.exists()


def _interrupt(tmp_path: Path, args: list[str], target: Path, at_least: int) -> None:
    """Run the CLI with ``args`` until ``at_least`` bytes are recorded, then SIGKILL."""
    proc = subprocess.Popen(
        [*PFTP, *args], env=_env(tmp_path), stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True,
    )
    try:
        _wait_for_progress(target, proc, at_least)
    finally:
        proc.kill()
        proc.wait()
        proc.stderr.close()


def _replace_keeping_size(path: Path, seed: bytes) -> None:
    """A new version of the file: same size, other bytes, a later modification time."""
    size = path.stat().st_size
    later = path.stat().st_mtime + 120
    path.write_bytes(hashlib.shake_256(seed).digest(size))
    os.utime(path, (later, later))


def test_resume_without_hash_refuses_a_mirror_whose_file_changed(tmp_path, ftp_mirrors):
    """No SHA-256 anywhere: the control file keeps each mirror's MDTM, and on resume
    the mirror whose copy changed (same size) is refused before it writes a byte;
    the other one finishes the file, which is the original."""
    data = os.urandom(8 * 1024 * 1024)
    a = ftp_mirrors({"v.bin": data}, 1, throttle={0: 1024 * 1024})[0]
    b = ftp_mirrors({"v.bin": data}, 1, throttle={0: 1024 * 1024})[0]
    target = tmp_path / "v.bin"
    args = ["get", "--mirror", a.url("v.bin"), "--mirror", b.url("v.bin"),
            "-o", str(target), "-q", "--json"]
    _interrupt(tmp_path, args, target, 2 * 1024 * 1024)
    saved = load(ctl_path(target))
    assert saved is not None and set(saved.validators) == {a.url("v.bin"), b.url("v.bin")}
    assert all(v.startswith("MDTM ") for v in saved.validators.values())
    _replace_keeping_size(b.root / "v.bin", b"new version")
    r = run_pftp(tmp_path, *args)
    assert r.returncode == 0, r.stderr
    assert target.read_bytes() == data
    out = json.loads(r.stdout)
    changed = next(m for m in out["mirrors"] if m["url"] == b.url("v.bin"))
    assert changed["state"] == "failed" and changed["bytes"] == 0, changed
    assert "changed since the interrupted download" in json.dumps(out)


def test_mirrors_added_on_resume_are_compared_by_their_bytes(tmp_path, ftp_mirrors):
    """No version recorded for a mirror added on resume: a few kept ranges are
    fetched from it and compared with the part file. The one with the same file
    helps finish it; the one with a newer copy (same size) is refused."""
    data = os.urandom(8 * 1024 * 1024)
    a = ftp_mirrors({"s.bin": data}, 1, throttle={0: 1024 * 1024})[0]
    same = ftp_mirrors({"s.bin": data}, 1, throttle={0: 1024 * 1024})[0]
    newer = ftp_mirrors({"s.bin": data}, 1, throttle={0: 1024 * 1024})[0]
    _replace_keeping_size(newer.root / "s.bin", b"newer")
    target = tmp_path / "s.bin"
    first = ["get", "--mirror", a.url("s.bin"), "-o", str(target), "-q", "--json"]
    _interrupt(tmp_path, first, target, 2 * 1024 * 1024)
    r = run_pftp(tmp_path, *first[:3], "--mirror", same.url("s.bin"),
                 "--mirror", newer.url("s.bin"), *first[3:])
    assert r.returncode == 0, r.stderr
    assert target.read_bytes() == data
    out = json.loads(r.stdout)
    by_url = {m["url"]: m for m in out["mirrors"]}
    assert by_url[newer.url("s.bin")]["state"] == "failed"
    assert by_url[newer.url("s.bin")]["bytes"] == 0
    assert by_url[same.url("s.bin")]["state"] != "failed" and by_url[same.url("s.bin")]["bytes"]
    assert "differ from the ones kept" in json.dumps(out)


def test_resume_refused_when_every_mirror_changed(tmp_path, ftp_mirrors):
    data = os.urandom(6 * 1024 * 1024)
    m = ftp_mirrors({"w.bin": data}, 1, throttle={0: 512 * 1024})[0]
    target = tmp_path / "w.bin"
    args = ["get", "--mirror", m.url("w.bin"), "-o", str(target), "-q"]
    _interrupt(tmp_path, args, target, 512 * 1024)
    _replace_keeping_size(m.root / "w.bin", b"w2")
    r = run_pftp(tmp_path, *args)
    assert r.returncode == 5, r.stderr
    assert "the file changed on" in r.stderr and "--restart" in r.stderr
    assert not target.exists() and part_path(target).exists()
    kept = load(ctl_path(target))
    assert kept is not None and kept.done.total() >= 512 * 1024  # nothing lost
    r = run_pftp(tmp_path, *args, "--restart")
    assert r.returncode == 0, r.stderr
    assert target.read_bytes() == (m.root / "w.bin").read_bytes()


@pytest.mark.slow
def test_big_sparse_file_memory_stays_bounded(tmp_path, ftp_mirrors, http_mirror):
    size = int(os.environ.get("PFTP_TEST_SPARSE_GB", "1")) * 1024**3 + 12345
    root = tmp_path / "sparse-root"
    root.mkdir()
    with open(root / "big.bin", "wb") as f:
        f.truncate(size)
        f.seek(size // 2)
        f.write(b"middle")  # not all zeros: a misplaced range would change the hash
    h = hashlib.sha256()
    with open(root / "big.bin", "rb") as f:
        while chunk := f.read(8 * 1024 * 1024):
            h.update(chunk)
    m = ftp_mirrors({}, 1, root=root)
    http_base = http_mirror(root)
    target = tmp_path / "big.bin"
    t0 = time.monotonic()
    # Measure pftp alone: RUSAGE_CHILDREN of this pytest process is the maximum over
    # every child it ever waited for (Chromium in the status-page tests, say).
    rss_file = tmp_path / "peak_rss_kib"
    r = run_pftp(
        tmp_path,
        "--peak-rss-file",
        str(rss_file),
        "get",
        "--mirror",
        m[0].url("big.bin"),
        "--mirror",
        http_base + "big.bin",
        "-o",
        str(target),
        "--sha256",
        h.hexdigest(),
        "-q",
        "--json",
        timeout=900,
    )
    assert r.returncode == 0, r.stderr
    peak_mib = int(rss_file.read_text()) / 1024
    out = json.loads(r.stdout)
    print(
        f"{size / 2**30:.1f} GiB in {time.monotonic() - t0:.1f}s, "
        f"peak RSS of pftp {peak_mib:.0f} MiB"
    )
    assert out["sha256_verified"]
    with open(target, "rb") as f:
        f.seek(size // 2)
        assert f.read(6) == b"middle"
    assert peak_mib < 120


def test_sigterm_saves_the_state_and_says_so(tmp_path, ftp_mirrors):
    """SIGTERM (a service manager stopping it) ends the client as Ctrl-C does: a
    message, exit 143, the control file kept, and the same command finishes."""
    data = os.urandom(6 * 1024 * 1024 + 1)
    m = ftp_mirrors({"t.bin": data}, 1, throttle={0: 1024 * 1024})
    target = tmp_path / "t.bin"
    args = ["get", "--mirror", m[0].url("t.bin"), "-o", str(target), "-q",
            "--sha256", sha256_hex(data)]
    proc = subprocess.Popen([*PFTP, *args], env=_env(tmp_path), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_progress(target, proc, 1024 * 1024)
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 143, err
    assert "terminated; run the same command again to resume" in err
    saved = load(ctl_path(target))
    assert saved is not None and saved.done.total() > 0
    r = run_pftp(tmp_path, *args)
    assert r.returncode == 0, r.stderr
    assert target.read_bytes() == data


def test_bytes_damaged_here_after_a_crash_are_repaired_and_nobody_blamed(tmp_path, ftp_mirrors):
    """The kept bytes of an interrupted download were damaged on this side (a power
    loss losing page cache, another writer): the whole-file hash fails on resume,
    the culprit search repairs the range, and since the mirror that wrote it now
    serves the right bytes, no mirror is blamed (nor reported as bad_data)."""
    data = os.urandom(4 * 1024 * 1024)
    a = ftp_mirrors({"d.bin": data}, 1, throttle={0: 512 * 1024})[0]
    b = ftp_mirrors({"d.bin": data}, 1, throttle={0: 512 * 1024})[0]
    target = tmp_path / "d.bin"
    args = ["get", "--mirror", a.url("d.bin"), "--mirror", b.url("d.bin"),
            "--sha256", sha256_hex(data), "-o", str(target), "-q", "--json"]
    _interrupt(tmp_path, args, target, 1024 * 1024)
    start, _end = next(iter(load(ctl_path(target)).done))
    with open(part_path(target), "r+b") as f:
        f.seek(start + 1000)
        f.write(b"\0" * 3)
    r = run_pftp(tmp_path, *args)
    assert r.returncode == 0, r.stderr
    assert target.read_bytes() == data
    out = json.loads(r.stdout)
    assert not [e for e in out["events"] if e["kind"] == "corrupt"], out["events"]
    assert all("corrupt" not in m["events"] for m in out["mirrors"])
    assert any("nobody blamed" in n for n in out["notes"]), out["notes"]


def test_a_second_pftp_on_the_same_target_is_refused(tmp_path, ftp_mirrors):
    """Two runs writing one part file would mix their bytes (and the second's
    --restart truncate the first's): the second stops at once, the first finishes."""
    data = os.urandom(3 * 1024 * 1024)
    a = ftp_mirrors({"l.bin": data}, 1, throttle={0: 1024 * 1024})[0]
    target = tmp_path / "l.bin"
    args = ["get", "--mirror", a.url("l.bin"), "--sha256", sha256_hex(data),
            "-o", str(target), "-q", "--json"]
    first = subprocess.Popen([*PFTP, *args], env=_env(tmp_path), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_progress(target, first, 256 * 1024)
        second = run_pftp(tmp_path, *args, "--restart")
        assert second.returncode == 5, second.stderr
        assert "another pftp is downloading to" in second.stderr
        assert json.loads(second.stdout)["exit_code"] == 5
        _out, err = first.communicate(timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode == 0, err
    assert target.read_bytes() == data
    assert not list(tmp_path.glob("l.bin.pftp-*"))  # no part, control or lock file left


def test_starting_over_forgets_the_old_ranges_before_the_new_part_file(tmp_path, ftp_mirrors):
    """An interrupted download's record whose part file is gone: the record goes
    first. When the new part file cannot be made (here: a directory in its way),
    no record is left claiming bytes the part file does not hold."""
    from pftp_client.control_file import ControlState, save
    from pftp_client.ranges import RangeSet

    data = os.urandom(300_000)
    m = ftp_mirrors({"f.bin": data})[0]
    out = tmp_path / "f.bin"
    ctl = ctl_path(out)
    save(ctl, ControlState("f.bin", len(data), sha256_hex(data), 65536, [m.url("f.bin")],
                           RangeSet([(0, 200_000)])))
    part_path(out).mkdir()  # not a file of the right size: start over, and fail making it
    r = run_pftp(tmp_path, "get", "--mirror", m.url("f.bin"), "--sha256", sha256_hex(data),
                 "-o", str(out))
    assert r.returncode != 0 and "starting over" in r.stderr, r.stderr
    assert load(ctl) is None
    part_path(out).rmdir()
    r = run_pftp(tmp_path, "get", "--mirror", m.url("f.bin"), "--sha256", sha256_hex(data),
                 "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert out.read_bytes() == data and "resuming" not in r.stderr
