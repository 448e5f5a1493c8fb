"""The part file: background flushing during the download, reads without copies."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from pftp_client.part_file import PartFile


def _wait_for(cond, timeout: float = 10.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.01)
    return cond()


def test_flusher_writes_out_every_so_many_bytes(tmp_path: Path) -> None:
    size = 8 << 20
    part = PartFile(tmp_path / "f.part", size, reuse=False)
    try:
        part.start_flusher(every=1 << 20)
        block = os.urandom(256 << 10)
        for off in range(0, 3 << 20, len(block)):
            part.pwrite(block, off)
        assert _wait_for(lambda: part.flushes >= 1), "no background flush after 3 MiB"
        assert _wait_for(lambda: not part._flush_wanted.is_set())  # the flusher took it
        part.pwrite(block, 7 << 20)  # 256 KiB: below the threshold, no new flush asked
        assert not part._flush_wanted.is_set()
    finally:
        part.close()
    assert part.fd == -1 and part._flusher is None  # joined before the fd was closed


def test_no_flusher_unless_started(tmp_path: Path) -> None:
    part = PartFile(tmp_path / "f.part", 4 << 20, reuse=False)
    part.pwrite(os.urandom(4 << 20), 0)
    time.sleep(0.1)
    assert part.flushes == 0
    part.close()


def test_readinto_fills_the_buffer_and_refuses_short_reads(tmp_path: Path) -> None:
    data = os.urandom(3 << 20)
    part = PartFile(tmp_path / "f.part", len(data), reuse=False)
    try:
        part.pwrite(data, 0)
        buf = memoryview(bytearray(1 << 20))
        assert part.readinto(buf, 1 << 20) == len(buf)
        assert bytes(buf) == data[1 << 20 : 2 << 20]
        with pytest.raises(OSError, match="short read"):
            part.readinto(buf, len(data) - 10)
    finally:
        part.close()


def test_plenty_of_space_keeps_the_file_sparse(tmp_path: Path) -> None:
    part = PartFile(tmp_path / "f.part", 64 << 20, reuse=False)
    try:
        assert os.fstat(part.fd).st_size == 64 << 20
        assert os.fstat(part.fd).st_blocks * 512 < 1 << 20  # nothing reserved
    finally:
        part.close()


@pytest.fixture
def small_fs(tmp_path: Path):
    """A real 64 MiB file system (tmpfs), so free space is tight."""
    import subprocess

    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


@pytest.mark.lab
def test_tight_space_reserves_the_blocks(small_fs: Path) -> None:
    part = PartFile(small_fs / "f.part", 40 << 20, reuse=False)
    try:
        assert os.fstat(part.fd).st_blocks * 512 >= 40 << 20  # fallocate'd
    finally:
        part.close()


@pytest.mark.lab
def test_a_side_file_stays_sparse_where_space_is_tight(small_fs: Path) -> None:
    """The repair's side file holds only the ranges that differed: it must not need
    a second file's worth of space (a tight disk could never be repaired)."""
    part = PartFile(small_fs / "f.part", 40 << 20, reuse=False)
    try:
        alt = PartFile(small_fs / "f.alt", 40 << 20, reuse=False, reserve=False)
        alt.pwrite(b"x" * 4096, 30 << 20)
        assert os.fstat(alt.fd).st_blocks * 512 < 1 << 20
        alt.close()
    finally:
        part.close()


@pytest.mark.lab
def test_not_enough_space_fails_at_the_start_with_a_clear_error(small_fs: Path) -> None:
    with pytest.raises(OSError, match="not enough space") as err:
        PartFile(small_fs / "f.part", 100 << 20, reuse=False)
    assert "104857600 bytes needed" in str(err.value)
    assert not (small_fs / "f.part").exists()


def test_flush_threshold_follows_the_file_size():
    """An eighth of the file between 4 and 64 MiB: a 48 MiB download is flushed
    along the way instead of all at the final fsync; a 4 GiB one every 64 MiB."""
    from pftp_client.part_file import flush_every

    assert flush_every(1 << 20) == 4 << 20
    assert flush_every(48 << 20) == 6 << 20
    assert flush_every(4 << 30) == 64 << 20
