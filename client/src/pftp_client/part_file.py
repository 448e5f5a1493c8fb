"""The preallocated ``<target>.pftp-part`` file every flow writes into with pwrite.

The target name only appears after verification (``finalize`` renames), so a
wrong or partial file is never where the user expects the real one.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
from pathlib import Path

PART_SUFFIX = ".pftp-part"
LOCK_SUFFIX = ".pftp-lock"
# Dirty bytes after which the background flusher asks the kernel to write them out:
# at most this much, and an eighth of the file (at least FLUSH_MIN), so the final
# fsync of a mid-sized file finds little left as well (48 MiB: 30-40 ms at the end
# in the lab, after a 5 s download).
FLUSH_EVERY = 64 << 20
FLUSH_MIN = 4 << 20


def flush_every(size: int) -> int:
    return min(FLUSH_EVERY, max(FLUSH_MIN, size // 8))

# With less free space than twice the file plus this, blocks are reserved up front.
RESERVE_BELOW_SPARE = 1 << 30

log = logging.getLogger("pftp_client")


def _free_bytes(path: Path) -> int | None:
    """Bytes an unprivileged writer may still use on path's file system."""
    try:
        st = os.statvfs(path)
    except (OSError, AttributeError):
        return None
    return st.f_bavail * st.f_frsize


MAX_FILE_BYTES = 2**63 - 1  # off_t


def part_path(target: Path) -> Path:
    return target.with_name(target.name + PART_SUFFIX)


def lock_target(target: Path) -> int:
    """Take ``<target>.pftp-lock`` (flock, not waiting): one pftp per target at a
    time, or a second one would truncate or resume onto the part file the first
    is writing and rename a file neither verified. Returns the fd for
    ``unlock_target``. The holder removes the file before it lets go; whoever
    locked a file that was removed meanwhile tries again."""
    import fcntl

    path = target.with_name(target.name + LOCK_SUFFIX)
    for _ in range(10):
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise OSError(
                errno.EBUSY, f"another pftp is downloading to {target} (it holds {path})"
            ) from None
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)  # removed by the holder that just finished: try again
    raise OSError(errno.EBUSY, f"cannot lock {path}")


def unlock_target(target: Path, fd: int) -> None:
    target.with_name(target.name + LOCK_SUFFIX).unlink(missing_ok=True)
    os.close(fd)


class PartFile:
    def __init__(self, path: Path, size: int, *, reuse: bool, reserve: bool = True) -> None:
        """Open (``reuse``: keep existing bytes, e.g. when resuming) or create
        ``path`` with exactly ``size`` bytes reserved on disk (``reserve=False``:
        a sparse file, for side files that hold only a few ranges)."""
        self.path = path
        self.size = size
        if not 0 <= size <= MAX_FILE_BYTES:  # (os.ftruncate raises OverflowError past off_t)
            raise OSError(errno.EFBIG, f"{path}: {size} bytes is beyond the largest possible file")
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
        if not reuse:
            flags |= os.O_TRUNC
        self.fd = os.open(path, flags, 0o644)
        self.flushes = 0
        self._dirty = 0
        self._flush_every = 0
        self._flush_wanted = threading.Event()
        self._flusher: threading.Thread | None = None
        self._closing = False
        try:
            if os.fstat(self.fd).st_size != size:
                os.ftruncate(self.fd, size)
            if reserve:
                self._preallocate()
        except BaseException:
            os.close(self.fd)
            if not reuse:  # nothing of value in it: do not leave an empty part file
                path.unlink(missing_ok=True)
            raise

    def _preallocate(self) -> None:
        """Make sure the bytes will fit before the first one is fetched.

        Not enough free space: a clear error now, not ENOSPC after an hour. Tight
        (less than twice what is still needed, plus 1 GiB): reserve the blocks with
        posix_fallocate, so other writers cannot take them. Plenty: keep the sparse
        file, because writing into fallocate's unwritten extents costs the kernel
        extent conversions: ~20 % of the throughput on unshaped loopback (2 GiB:
        380 vs 460 MiB/s, notes/loopback-throughput.md). A disk that fills anyway
        fails the write with a clear error, and the control file keeps what was done."""
        if self.size == 0:
            return
        needed = self.size - os.fstat(self.fd).st_blocks * 512  # a resumed file has some
        free = _free_bytes(self.path)
        if free is not None and free < needed:
            raise OSError(
                errno.ENOSPC,
                f"not enough space for {self.path}: {self.size} bytes needed "
                f"({max(needed, 0)} more), {free} free",
            )
        if free is not None and free >= 2 * needed + RESERVE_BELOW_SPARE:
            return
        if not hasattr(os, "posix_fallocate"):
            return
        try:
            os.posix_fallocate(self.fd, 0, self.size)
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                raise

    def start_flusher(self, every: int = FLUSH_EVERY) -> None:
        """Write dirty pages out during the download, every ``every`` bytes written.

        The kernel starts background writeback only at a share of RAM (10 % by
        default), so a file smaller than that stays dirty until the final fsync,
        which then writes all of it while the user waits (2 s for 1 GiB here, after
        a 1.5 s transfer). Flushing in a background thread spreads that work over
        the download; the final fsync finds little left."""
        if self._flusher is not None or every <= 0:
            return
        self._flush_every = every
        self._flusher = threading.Thread(target=self._flush_loop, name="pftp-flush", daemon=True)
        self._flusher.start()

    def _flush_loop(self) -> None:
        sync = getattr(os, "fdatasync", os.fsync)
        while True:
            self._flush_wanted.wait()
            self._flush_wanted.clear()
            if self._closing:
                return
            try:
                sync(self.fd)
            except OSError as exc:
                # The final fsync reports it (and the download fails there); no
                # point in hammering a failing disk meanwhile.
                log.warning("background flush of %s failed: %s", self.path, exc)
                return
            self.flushes += 1

    def pwrite(self, data: memoryview | bytes, offset: int) -> None:
        view = memoryview(data)
        while view:
            n = os.pwrite(self.fd, view, offset)
            view = view[n:]
            offset += n
            self._dirty += n  # approximate across threads; only paces the flusher
        if self._flush_every and self._dirty >= self._flush_every:
            self._dirty = 0
            self._flush_wanted.set()

    def readinto(self, buf: memoryview, offset: int) -> int:
        """Fill ``buf`` from ``offset`` (no intermediate copies); returns its length."""
        done = 0
        while done < len(buf):
            n = os.preadv(self.fd, [buf[done:]], offset + done)
            if n == 0:
                raise OSError(f"{self.path}: short read at {offset + done}")
            done += n
        return done

    def pread(self, length: int, offset: int) -> bytes:
        buf = bytearray(length)
        self.readinto(memoryview(buf), offset)
        return bytes(buf)

    def sync(self) -> None:
        os.fsync(self.fd)

    def close(self) -> None:
        flusher, self._flusher = self._flusher, None
        if flusher is not None:
            self._closing = True
            self._flush_wanted.set()
            flusher.join()  # a flush in progress must end before the fd is closed
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def finalize(self, target: Path) -> None:
        """fsync, close and rename into place (atomic on one file system)."""
        self.sync()
        self.close()
        os.replace(self.path, target)
