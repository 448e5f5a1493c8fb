"""The preallocated ``<target>.pftp-part`` file every flow writes into with pwrite.

The target name only appears after verification (``finalize`` renames), so a
wrong or partial file is never where the user expects the real one.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

PART_SUFFIX = ".pftp-part"


def part_path(target: Path) -> Path:
    return target.with_name(target.name + PART_SUFFIX)


class PartFile:
    def __init__(self, path: Path, size: int, *, reuse: bool) -> None:
        """Open (``reuse``: keep existing bytes, e.g. when resuming) or create
        ``path`` with exactly ``size`` bytes reserved on disk."""
        self.path = path
        self.size = size
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
        if not reuse:
            flags |= os.O_TRUNC
        self.fd = os.open(path, flags, 0o644)
        try:
            if os.fstat(self.fd).st_size != size:
                os.ftruncate(self.fd, size)
            self._preallocate()
        except BaseException:
            os.close(self.fd)
            raise

    def _preallocate(self) -> None:
        # Reserve the blocks now so a full disk fails at the start, not after
        # an hour; file systems without fallocate keep the sparse file.
        if self.size == 0 or not hasattr(os, "posix_fallocate"):
            return
        try:
            os.posix_fallocate(self.fd, 0, self.size)
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                raise

    def pwrite(self, data: memoryview | bytes, offset: int) -> None:
        view = memoryview(data)
        while view:
            n = os.pwrite(self.fd, view, offset)
            view = view[n:]
            offset += n

    def pread(self, length: int, offset: int) -> bytes:
        out = bytearray()
        while len(out) < length:
            chunk = os.pread(self.fd, length - len(out), offset + len(out))
            if not chunk:
                raise OSError(f"{self.path}: short read at {offset + len(out)}")
            out += chunk
        return bytes(out)

    def sync(self) -> None:
        os.fsync(self.fd)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def finalize(self, target: Path) -> None:
        """fsync, close and rename into place (atomic on one file system)."""
        self.sync()
        self.close()
        os.replace(self.path, target)
