"""How a signal ends `pftp` (launch.py), phase by phase, in a child process: at once
before the download's engine runs, KeyboardInterrupt / Terminated while it runs,
held while the display draws its last frame, at once after; the JSON failure
object written without json; a Ctrl-C swallowed before the entry point's first
line (the import lock left held) is honoured there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pftp_client import launch


def _child(code: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PFTP_CLIENT_CONFIG=str(tmp_path / "none.toml"))
    env.pop("PFTP_COORDINATOR", None)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, env=env)


@pytest.mark.parametrize("code, message", [
    (130, "interrupted; run the same command again to resume"),
    (143, "terminated; run the same command again to resume"),
    (130, "interrupted"),
])
def test_the_failure_object_is_what_json_would_print(code: int, message: str) -> None:
    assert launch.json_failure_text(code, message) == json.dumps(
        {"error": message, "exit_code": code}, indent=2) + "\n"


def test_a_signal_before_the_engine_runs_ends_the_process_at_once(tmp_path: Path) -> None:
    r = _child(
        "import os, signal, sys\n"
        "sys.argv = ['pftp', 'get', '--mirror', 'ftp://127.0.0.1:9/f', '--json']\n"
        "from pftp_client import launch\n"
        "launch.catch_signals()\n"
        "print('before', flush=True)\n"
        "os.kill(os.getpid(), signal.SIGINT)\n"
        "print('not reached')\n",
        tmp_path,
    )
    assert r.returncode == 130, r.stderr
    head, _, rest = r.stdout.partition("\n")
    assert head == "before" and json.loads(rest)["exit_code"] == 130, r.stdout
    assert r.stderr == "pftp: interrupted; run the same command again to resume\n"


def test_the_phases_follow_the_download(tmp_path: Path) -> None:
    r = _child(
        "import os, signal, sys\n"
        "sys.argv = ['pftp', 'get', '--json']\n"
        "from pftp_client import launch\n"
        "from pftp_client.progress import QuietProgress\n"
        "def kill(sig):\n"
        "    os.kill(os.getpid(), sig)\n"
        "    sum(range(1000))  # (a call: where a pending handler runs)\n"
        "class Display(QuietProgress):\n"
        "    def finish(self, summary):\n"
        "        kill(signal.SIGINT)  # while the last frame is drawn: held\n"
        "        print('last frame drawn', flush=True)\n"
        "launch.catch_signals()\n"
        "p = launch.DownloadPhases(Display())\n"
        "p.start('f', 1, ['m'])\n"
        "for sig in (signal.SIGINT, signal.SIGTERM):\n"
        "    try:\n"
        "        kill(sig)\n"
        "    except KeyboardInterrupt as exc:\n"
        "        print(type(exc).__name__, flush=True)\n"
        "launch.result_shown()  # (so no failure object on stdout)\n"
        "p.finish(None)\n"
        "print('not reached')\n",
        tmp_path,
    )
    assert r.returncode == 130, r.stderr
    assert r.stdout.splitlines() == ["KeyboardInterrupt", "Terminated", "last frame drawn"]
    assert r.stderr == "pftp: interrupted\n"  # (the download had ended: no resume hint)


def test_a_signal_while_the_result_is_printed_adds_no_second_object(tmp_path: Path) -> None:
    """SIGTERM between the --json summary's write and its mark as shown printed a
    failure object after the summary (the Ctrl-C sweep saw two objects once): it
    is held until the summary is out, then ends the process without one."""
    r = _child(
        "import os, signal, sys\n"
        "sys.argv = ['pftp', 'get', '--json']\n"
        "from pftp_client import launch\n"
        "launch.catch_signals()\n"
        "def write():\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    sum(range(1000))  # (a call: where a pending handler runs)\n"
        "    sys.stdout.write('{\"done\": true}\\n')\n"
        "    sys.stdout.flush()\n"
        "launch.show_result(write)\n"
        "print('not reached')\n",
        tmp_path,
    )
    assert r.returncode == 143, r.stderr
    assert json.loads(r.stdout) == {"done": True}, r.stdout
    assert r.stderr.startswith("pftp: terminated")


def test_a_ctrl_c_swallowed_before_the_entry_point_is_honoured(tmp_path: Path) -> None:
    """A KeyboardInterrupt raised in a module lock's weakref callback is reported as
    ignored, and the import lock stays held: launch.main finds it held, and ends
    the process as that Ctrl-C asked, before any thread can wait for the lock."""
    r = _child(
        "import _imp, sys\n"
        "_imp.acquire_lock()  # (what that callback leaves)\n"
        "sys.argv = ['pftp', 'get', '--mirror', 'ftp://127.0.0.1:9/f', '--json']\n"
        "from pftp_client.launch import main\n"
        "main()\n",
        tmp_path,
    )
    assert r.returncode == 130, r.stderr
    assert r.stderr == "pftp: interrupted; run the same command again to resume\n"
    assert json.loads(r.stdout)["exit_code"] == 130
