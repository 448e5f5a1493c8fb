"""``pftp get --plot`` and ``pftp plot`` as a user runs them (the ``pftp`` entry point,
head start included) against real pyftpdlib mirrors: the ``timeline`` of ``--json``
adds up to what the mirrors sent, the chart is well-formed SVG with a line per
mirror and a mark per event, also after a failed or interrupted download, and bad
input is a usage error (exit 2) with a message."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from pftp_client.control_file import ctl_path, load
from pftp_client.part_file import part_path
from pftp_client.timeline import MAX_BINS


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


PFTP = [sys.executable, "-c", "from pftp_client.launch import main; main()"]
SVG = "{http://www.w3.org/2000/svg}"


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PFTP_CLIENT_CONFIG"] = str(tmp_path / "no-config.toml")
    for var in ("PFTP_COORDINATOR", "PFTP_ACCESS_BANDWIDTH"):
        env.pop(var, None)
    env.update(extra)
    return env


def _pftp(tmp_path: Path, *args: str, stdin: str | None = None,
          **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([*PFTP, *args], capture_output=True, text=True, timeout=120,
                          env=_env(tmp_path, **env), input=stdin)


def _check_timeline(out: dict[str, Any]) -> int:
    """The summary's timeline agrees with its other figures; returns the bytes in it."""
    tl = out["timeline"]
    mirrors = {m["name"]: m for m in out["mirrors"]}
    assert list(tl["mirrors"]) == list(mirrors)
    lengths = {len(b) for b in tl["mirrors"].values()}
    assert len(lengths) == 1 and 1 <= lengths.pop() <= MAX_BINS
    n = len(next(iter(tl["mirrors"].values())))
    assert abs(n - tl["seconds"] / tl["bin_s"]) <= 1  # (seconds is rounded to ms)
    assert 0 < tl["start_s"] < tl["seconds"] <= out["seconds"] + 0.01
    for name, bins in tl["mirrors"].items():
        assert sum(bins) == mirrors[name]["received"], name
    got = sum(sum(b) for b in tl["mirrors"].values())
    assert got == out["fetched_bytes"]
    # every byte not kept from an earlier run came once, more only as counted
    new = out["size"] - out["resumed_bytes"]
    assert new <= got <= new + out["duplicate_bytes"] + out["refetched_bytes"], (got, out)
    # the summary's events, on the timeline's clock (from the download's start)
    assert [(e["mirror"], e["kind"]) for e in tl["events"]] == [
        (e["mirror"], e["kind"]) for e in out["events"]]
    for a, b in zip(tl["events"], out["events"], strict=True):
        assert abs(a["at_s"] - (b["at_s"] + tl["start_s"])) <= 0.002
    return got


def _check_svg(path: Path, names: list[str], events: list[dict[str, Any]]) -> ET.Element:
    """Well-formed; a line per mirror and the total; the events marked on their mirror."""
    root = ET.parse(path).getroot()
    assert root.tag == f"{SVG}svg"
    series = [p.get("data-series") for p in root.iter(f"{SVG}polyline")]
    assert series == ["total", *names]
    marks = [g for g in root.iter(f"{SVG}g") if g.get("class") == "event"]
    assert sum(int(g.get("data-count", "0")) for g in marks) == len(events)
    assert {(g.get("data-mirror"), g.get("data-kind")) for g in marks} == {
        (e["mirror"], e["kind"]) for e in events}
    legend = "".join(next(g for g in root.iter(f"{SVG}g") if g.get("class") == "legend")
                     .itertext())
    for name in names:
        assert name[:20] in legend
    return root


def test_get_plot_writes_a_chart_that_pftp_plot_redraws_from_the_json(tmp_path, ftp_mirrors):
    data = os.urandom(6 * 1024 * 1024 + 11)
    m = ftp_mirrors({"p.bin": data}, 3, throttle={2: 1024 * 1024})
    target, chart = tmp_path / "p.bin", tmp_path / "p.svg"
    r = _pftp(tmp_path, "get", *[a for x in m for a in ("--mirror", x.url("p.bin"))],
              "--plot", str(chart), "-o", str(target), "--sha256", sha256_hex(data),
              "--json")
    assert r.returncode == 0, r.stderr
    assert target.read_bytes() == data
    assert f"throughput plot written to {chart}" in r.stderr
    out = json.loads(r.stdout)
    # the keys the summary had before the timeline are all there, the timeline last
    assert list(out)[-1] == "timeline" and {"mirrors", "events", "fetched_bytes",
                                            "rate_bps", "congestion"} <= set(out)
    got = _check_timeline(out)
    print(f"timeline: {len(out['timeline']['mirrors'][out['mirrors'][0]['name']])} bins of "
          f"{out['timeline']['bin_s']} s, {got} bytes, events "
          f"{[e['kind'] for e in out['events']]}")
    # the bins are one line per mirror in the --json text, not one line per number
    assert len(r.stdout.splitlines()) < 150 + 12 * len(out["events"])
    names = [x["name"] for x in out["mirrors"]]
    _check_svg(chart, names, out["events"])
    # pftp plot draws the same chart from the saved summary
    saved = tmp_path / "summary.json"
    saved.write_text(r.stdout)
    r2 = _pftp(tmp_path, "plot", str(saved))
    assert r2.returncode == 0, r2.stderr
    assert (tmp_path / "summary.svg").read_text() == chart.read_text()
    # and from stdin to stdout
    r3 = _pftp(tmp_path, "plot", "-", stdin=r.stdout)
    assert r3.returncode == 0 and r3.stdout == chart.read_text()


def test_a_download_that_fails_still_gets_its_chart(tmp_path, ftp_mirrors):
    """Every mirror dies mid-transfer: exit 4, and the chart (and the --json failure)
    shows what each sent and where it failed."""
    data = os.urandom(4 * 1024 * 1024)
    m = ftp_mirrors({"d.bin": data}, 2, die_after={0: 512 * 1024, 1: 768 * 1024})
    chart = tmp_path / "d.svg"
    r = _pftp(tmp_path, "get", "--mirror", m[0].url("d.bin"), "--mirror", m[1].url("d.bin"),
              "-o", str(tmp_path / "d.bin"), "--plot", str(chart), "--json", "--quiet")
    assert r.returncode == 4, r.stderr
    assert "Traceback" not in r.stderr and "plot written" not in r.stderr  # (--quiet)
    failed = json.loads(r.stdout)
    assert failed["exit_code"] == 4 and failed["error"]
    tl = failed["timeline"]
    sent = sum(x.sent[0] for x in m)
    got = sum(sum(b) for b in tl["mirrors"].values())
    assert 0 < got <= sent
    assert {e["kind"] for e in tl["events"]} >= {"failed"}
    root = _check_svg(chart, list(tl["mirrors"]), tl["events"])
    assert "download failed (exit 4)" in "".join(root.itertext())


def _wait_for(target: Path, proc: subprocess.Popen, at_least: int) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        try:
            state = load(ctl_path(target))
        except ValueError:  # (caught mid-write)
            state = None
        if state is not None and state.done.total() >= at_least:
            return
        time.sleep(0.05)
    raise AssertionError("the download made no progress")


def test_an_interrupted_download_is_charted_and_its_resume_counts_only_new_bytes(
    tmp_path, ftp_mirrors
):
    data = os.urandom(3 * 1024 * 1024 + 5)
    m = ftp_mirrors({"r.bin": data}, 2, throttle={0: 512 * 1024, 1: 512 * 1024})
    target = tmp_path / "r.bin"
    args = ["get", "--mirror", m[0].url("r.bin"), "--mirror", m[1].url("r.bin"),
            "-o", str(target), "--sha256", sha256_hex(data), "--json", "--quiet"]
    proc = subprocess.Popen([*PFTP, *args, "--plot", str(tmp_path / "first.svg")],
                            env=_env(tmp_path), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(target, proc, 512 * 1024)
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 143, stderr
    first = json.loads(stdout)
    assert first["exit_code"] == 143 and "run the same command again" in first["error"]
    before = sum(sum(b) for b in first["timeline"]["mirrors"].values())
    assert before >= 512 * 1024
    _check_svg(tmp_path / "first.svg", list(first["timeline"]["mirrors"]),
               first["timeline"]["events"])
    assert part_path(target).exists()

    r = _pftp(tmp_path, *args, "--plot", str(tmp_path / "second.svg"))
    assert r.returncode == 0, r.stderr
    assert target.read_bytes() == data
    out = json.loads(r.stdout)
    assert out["resumed_bytes"] > 0
    got = _check_timeline(out)  # size - resumed <= got (+ counted duplicates)
    assert got < len(data)
    print(f"interrupted after {before} bytes; resumed {out['resumed_bytes']}, "
          f"then received {got}")
    _check_svg(tmp_path / "second.svg", [x["name"] for x in out["mirrors"]], out["events"])


def test_mirror_names_from_a_coordinator_are_escaped_in_the_chart(
    tmp_path, ftp_mirrors, canned_coordinator, equal_plan
):
    data = os.urandom(1024 * 1024 + 3)
    m = ftp_mirrors({"f.bin": data}, 2)
    answer = equal_plan(data, [x.url("f.bin") for x in m])
    names = ['a<&"b\'>', "</svg><script>x</script>"]
    for a, name in zip(answer["assignments"], names, strict=True):
        a["mirror"] = name
    coord = canned_coordinator(200, answer)
    chart = tmp_path / "f.svg"
    r = _pftp(tmp_path, "get", "f.bin", "--coordinator", coord.url, "-o",
              str(tmp_path / "f.bin"), "--plot", str(chart), "--json", "--quiet",
              PFTP_ACCESS_BANDWIDTH="1G")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["mode"] == "coordinated" and set(out["timeline"]["mirrors"]) == set(names)
    _check_timeline(out)
    text = chart.read_text()
    assert "<script>" not in text and 'a<&"' not in text
    root = _check_svg(chart, [x["name"] for x in out["mirrors"]], out["events"])
    assert {p.get("data-series") for p in root.iter(f"{SVG}polyline")} == {"total", *names}


@pytest.mark.parametrize(
    ("content", "words"),
    [
        ("this is not json\n", "is not JSON"),
        (b"\xff\xfe\x00garbage", "is not JSON"),
        ("[1, 2]", "not a pftp --json summary"),
        ('{"error": "no mirror could serve", "exit_code": 4}', "has no timeline"),
        ('{"timeline": {"bin_s": 0.25, "seconds": 1, "mirrors": {"a": [-1]}}}', "mirrors['a']"),
    ],
)
def test_pftp_plot_on_bad_input_is_a_usage_error(tmp_path, content, words):
    bad = tmp_path / "bad.json"
    if isinstance(content, bytes):
        bad.write_bytes(content)
    else:
        bad.write_text(content)
    r = _pftp(tmp_path, "plot", str(bad))
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr and words in r.stderr, r.stderr
    assert not (tmp_path / "bad.svg").exists()


def test_pftp_plot_missing_input_or_unwritable_output_is_a_usage_error(tmp_path):
    r = _pftp(tmp_path, "plot", str(tmp_path / "nothing.json"))
    assert r.returncode == 2 and "cannot read" in r.stderr, r.stderr
    good = tmp_path / "s.json"
    good.write_text(json.dumps({"timeline": {"bin_s": 0.25, "seconds": 0.5,
                                             "mirrors": {"a": [1, 2]}, "events": []}}))
    for where, words in ((tmp_path / "no" / "such" / "dir.svg", "no directory"),
                         (tmp_path, "is a directory"),
                         (good / "x.svg", "no directory")):
        r = _pftp(tmp_path, "plot", str(good), "-o", str(where))
        assert r.returncode == 2 and words in r.stderr, (where, r.stderr)
        assert "Traceback" not in r.stderr
    r = _pftp(tmp_path, "plot", str(good), "-o", str(tmp_path / "ok.svg"))
    assert r.returncode == 0, r.stderr
    ET.parse(tmp_path / "ok.svg")


def test_get_with_an_unwritable_plot_path_stops_before_downloading(tmp_path, ftp_mirrors):
    data = os.urandom(100_000)
    m = ftp_mirrors({"u.bin": data}, 1)
    target = tmp_path / "u.bin"
    r = _pftp(tmp_path, "get", "--mirror", m[0].url("u.bin"), "-o", str(target),
              "--plot", str(tmp_path / "missing" / "u.svg"), "--json")
    assert r.returncode == 2 and "no directory" in r.stderr, r.stderr
    assert json.loads(r.stdout)["exit_code"] == 2
    assert not target.exists() and not part_path(target).exists()
