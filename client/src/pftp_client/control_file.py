"""``<target>.pftp-ctl``: what is already safely in the part file, for resume.

JSON, replaced atomically (write a temporary file, then rename), so a crash at
any moment leaves either the old or the new state. It lists the completed
(and, with piece hashes, verified) pieces as coalesced byte ranges, plus the
identity of the file; resuming onto a different file (size or SHA-256 changed,
or no mirror in common when no hash is known) is refused. It also keeps what each
mirror said about its copy's version (validators.py), so that a mirror whose file
changed since is refused on resume.

The data is written with pwrite before a piece is recorded here, so after a
process crash (Ctrl-C, SIGKILL) every recorded byte is in the part file. A
power loss can lose page-cache data; we do not fsync per piece (it would cost
far more than re-fetching), and the whole-file hash catches such a loss.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from pftp_client.ranges import RangeSet

CTL_SUFFIX = ".pftp-ctl"
VERSION = 1


class ResumeMismatch(Exception):
    """The control file describes a different file than the one requested."""


def ctl_path(target: Path) -> Path:
    return target.with_name(target.name + CTL_SUFFIX)


@dataclass
class ControlState:
    """What the control file holds (module doc)."""

    name: str
    size: int
    sha256: str | None
    piece_size: int
    urls: list[str]
    done: RangeSet = field(default_factory=RangeSet)
    # (start, end, mirror) runs: who wrote which bytes, to blame after a bad hash.
    written_by: list[tuple[int, int, str]] = field(default_factory=list)
    # URL -> validator (HTTP ETag or Last-Modified, FTP "MDTM <time>"), validators.py
    validators: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(
            {
                "version": VERSION,
                "name": self.name,
                "size": self.size,
                "sha256": self.sha256,
                "piece_size": self.piece_size,
                "urls": self.urls,
                "done": [[s, e] for s, e in self.done],
                "written_by": [[s, e, m] for s, e, m in self.written_by],
                "validators": self.validators,
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str) -> ControlState:
        try:
            raw = json.loads(text)
            if raw.get("version") != VERSION:
                raise ValueError(f"unknown control file version {raw.get('version')!r}")
            state = cls(
                name=str(raw["name"]),
                size=int(raw["size"]),
                sha256=raw.get("sha256"),
                piece_size=int(raw["piece_size"]),
                urls=[str(u) for u in raw["urls"]],
                done=RangeSet((int(s), int(e)) for s, e in raw["done"]),
                written_by=[(int(s), int(e), str(m)) for s, e, m in raw.get("written_by", [])],
                # (absent from the files of clients before it: nothing to check)
                validators={str(u): str(v) for u, v in dict(raw.get("validators", {})).items()},
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"unreadable control file: {exc}") from exc
        if state.piece_size <= 0 or any(e > state.size for _, e in state.done):
            raise ValueError("unreadable control file: ranges outside the file")
        return state


def check_same_file(old: ControlState, *, size: int, sha256: str | None, urls: list[str]) -> None:
    if old.size != size:
        raise ResumeMismatch(
            f"the interrupted download was {old.size} bytes, this file is {size} bytes"
        )
    if old.sha256 and sha256 and old.sha256 != sha256:
        raise ResumeMismatch("the interrupted download had a different SHA-256")
    if not (old.sha256 and sha256) and not set(old.urls) & set(urls):
        raise ResumeMismatch(
            "no SHA-256 to compare and no mirror in common with the interrupted download"
        )


def load(path: Path) -> ControlState | None:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    return ControlState.from_json(text)


def save(path: Path, state: ControlState) -> None:
    """Replace the control file atomically. A failed write (a full disk) leaves the
    old one in place, removes the temporary file, and says which file failed."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "w") as f:
            f.write(state.to_json())
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise OSError(exc.errno, f"cannot write {path}: {exc.strerror or exc}") from exc


def remove(path: Path) -> None:
    for p in (path, path.with_name(path.name + ".tmp")):
        try:
            p.unlink()
        except FileNotFoundError:
            continue
