"""Freeze a mirror's processes without a signal: the cgroup freezer.

A hung host, for Lab.freeze: its kernel still completes TCP handshakes and
acknowledges data, but no process runs. SIGSTOP would do that too, except that a
server's parent is told its children stopped (SIGCHLD): vsftpd's privileged parent
then waits for a child that waits for it, and the session never ends after SIGCONT.
The freezer sends nothing. cgroup v1 (`freezer.state`) or v2 (`cgroup.freeze`).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from pathlib import Path

from .netns import LabError

V1_ROOT = Path("/sys/fs/cgroup/freezer")
V2_ROOTS = (Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup"))


@dataclass(frozen=True)
class FreezeGroup:
    path: Path
    v2: bool

    def add(self, pids: list[int]) -> None:
        """Move ``pids`` into the group (one that exited meanwhile is skipped)."""
        for pid in pids:
            try:
                (self.path / "cgroup.procs").write_text(str(pid))
            except ProcessLookupError:
                continue

    def set_frozen(self, frozen: bool, wait_s: float = 5.0) -> None:
        """Freeze or thaw every process in the group; waits until the kernel says
        it is done (a task in a system call is frozen when it leaves it)."""
        if self.v2:
            (self.path / "cgroup.freeze").write_text("1" if frozen else "0")
        else:
            (self.path / "freezer.state").write_text("FROZEN" if frozen else "THAWED")
        deadline = time.monotonic() + wait_s
        while self.frozen() != frozen:
            if time.monotonic() > deadline:
                raise LabError(f"{self.path}: not {'frozen' if frozen else 'thawed'} "
                               f"after {wait_s:g} s")
            time.sleep(0.005)

    def frozen(self) -> bool:
        if self.v2:
            events = (self.path / "cgroup.events").read_text().split()
            return events[events.index("frozen") + 1] == "1"
        return (self.path / "freezer.state").read_text().strip() == "FROZEN"

    def remove(self) -> None:
        """Thaw, then remove the group. Called once its processes are gone: with
        some left, rmdir fails (OSError) and the group stays for pftp_lab.cleanup."""
        with contextlib.suppress(FileNotFoundError):
            self.set_frozen(False)
        with contextlib.suppress(FileNotFoundError):
            self.path.rmdir()


def _root() -> tuple[Path, bool]:
    if V1_ROOT.is_dir():
        return V1_ROOT, False
    for root in V2_ROOTS:
        if (root / "cgroup.procs").exists() and (root / "cgroup.controllers").exists():
            return root, True
    raise LabError("no cgroup freezer here (neither /sys/fs/cgroup/freezer nor cgroup v2)")


def group(name: str) -> FreezeGroup:
    """The freezer group ``name`` (created if new)."""
    root, v2 = _root()
    path = root / name
    path.mkdir(exist_ok=True)
    return FreezeGroup(path, v2)


def groups_with_prefix(prefix: str) -> list[FreezeGroup]:
    """Existing groups whose name starts with ``prefix`` (for cleanup)."""
    try:
        root, v2 = _root()
    except LabError:
        return []
    return [FreezeGroup(p, v2) for p in sorted(root.glob(f"{prefix}*")) if p.is_dir()]
