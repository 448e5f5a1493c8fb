"""A mirror whose data went silent, and whose range was handed over meanwhile, gets
a trial range once it answers again (engine._trial_range): a link that went down and
came back, a server that froze for a while. One that stays silent gets fewer and
fewer trials, each taken back. Loopback, paced pyftpdlib mirrors."""

from __future__ import annotations

import hashlib
import os
import threading
import time
from pathlib import Path
from typing import Any

from paced_ftp import paced_dtp
from pftp_client import EngineConfig, download

PACE = 512 * 1024  # bytes/s per mirror
# (one connection a mirror: the pace is per connection)
CFG = EngineConfig(timeout=10.0, stall_timeout=30.0, max_streams=1)


def _pausing_dtp(after: int, pause_s: float) -> tuple[type, dict[str, Any]]:
    """A paced data channel that, once the mirror has sent ``after`` bytes, sends
    nothing for ``pause_s`` (``inf``: never again) on any of its connections, then
    goes on at its pace; the control connection answers all along, as a server
    whose disk froze, or a path that lost only the data for a while. ``state``
    tells when the pause began."""
    base = paced_dtp(PACE)
    state: dict[str, Any] = {"sent": 0, "paused_at": None, "lock": threading.Lock()}

    class Pausing(base):  # type: ignore[misc, valid-type]
        _resumed = False

        def send(self, data: bytes) -> int:
            now = time.monotonic()
            with state["lock"]:
                at = state["paused_at"]
                if at is None and state["sent"] >= after:
                    state["paused_at"] = at = now
            if at is not None and now < at + pause_s:
                self._hold_until(at + pause_s)
                return 0
            if at is not None and not self._resumed:
                self._resumed = True  # (paced from now on, no catching up)
                self._started, self._datacount = None, 0
            sent = super().send(data)
            with state["lock"]:
                state["sent"] += sent
            return sent

    return Pausing, state


def _run(tmp_path: Path, ftp_mirrors: Any, pause_s: float) -> tuple[Any, bytes, dict]:
    data = os.urandom(12 * 1024 * 1024)  # ~12 s from the two mirrors
    dtp, state = _pausing_dtp(after=1024 * 1024, pause_s=pause_s)
    m = ftp_mirrors({"f.bin": data}, 2, pace={0: PACE}, dtp_for={1: dtp})
    target = tmp_path / "f.bin"
    s = download(mirrors=[x.url("f.bin") for x in m], output=target,
                 sha256=hashlib.sha256(data).hexdigest(), config=CFG)
    assert target.read_bytes() == data
    print(f"{s.seconds:.2f} s", [(m.name, m.bytes) for m in s.mirrors],
          [(round(e.at_s, 2), e.kind, e.mirror[-5:], e.detail[:80]) for e in s.events])
    return s, data, state


def test_a_mirror_back_from_a_silence_gets_work_again(tmp_path, ftp_mirrors):
    """Mirror 1 stops sending after 1 MiB, for 2.5 s. Its range goes to mirror 0
    meanwhile; once it answers again it is tried on a small range, and then
    works on as before."""
    s, data, state = _run(tmp_path, ftp_mirrors, pause_s=2.5)
    assert state["paused_at"] is not None
    back = s.mirrors[1]
    trials = [e for e in s.events if e.kind == "retry" and e.mirror == back.name]
    assert trials and "trial" in trials[0].detail, s.events
    # (before the pause it had sent ~1 MiB; it served a good share after it)
    assert back.bytes > 3 * 1024 * 1024, [(m.name, m.bytes) for m in s.mirrors]
    assert s.duplicate_bytes <= len(data) // 100


def test_a_mirror_that_stays_silent_gets_few_trials(tmp_path, ftp_mirrors):
    """Mirror 1 never sends again after 1 MiB, but answers its control connection:
    each trial range is taken back, the next trial waits twice as long, and the
    file is whole."""
    s, _data, state = _run(tmp_path, ftp_mirrors, pause_s=float("inf"))
    assert state["paused_at"] is not None
    silent = s.mirrors[1]
    trials = [e for e in s.events if e.kind == "retry" and e.mirror == silent.name]
    # (~12 s left at the pause: trials 1, 2, 4 s apart at most)
    assert 1 <= len(trials) <= 4, s.events
    assert silent.bytes <= 1024 * 1024 + 256 * 1024
