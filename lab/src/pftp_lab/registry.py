"""Which lab owns which namespaces: one small JSON file per live lab.

`python -m pftp_lab.cleanup` reads these to remove what crashed labs left behind without
touching labs whose owner process is still running.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

PREFIX = "pl"
# pl + 4 hex + '-': the lab id and namespace name pattern (prefix `pl` is this area's own).
NAMESPACE_RE = re.compile(rf"^{PREFIX}([0-9a-f]{{4}})-[a-z0-9]+$")


def registry_dir() -> Path:
    base = Path("/run") if os.access("/run", os.W_OK) else Path(tempfile.gettempdir())
    path = base / "pftp_lab"
    path.mkdir(mode=0o755, exist_ok=True)
    return path


@dataclass
class LabRecord:
    lab_id: str
    owner_pid: int
    workdir: str
    namespaces: list[str] = field(default_factory=list)

    def path(self) -> Path:
        return registry_dir() / f"{self.lab_id}.json"

    def save(self) -> None:
        tmp = self.path().with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self)))
        tmp.replace(self.path())

    def remove(self) -> None:
        self.path().unlink(missing_ok=True)


def load_record(lab_id: str) -> LabRecord | None:
    path = registry_dir() / f"{lab_id}.json"
    try:
        return LabRecord(**json.loads(path.read_text()))
    except FileNotFoundError:
        return None
    except (ValueError, TypeError):  # a half-written or foreign file: treat as unowned
        return None


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def lab_id_of(namespace: str) -> str | None:
    m = NAMESPACE_RE.match(namespace)
    return m.group(1) if m else None
