"""SHA-256 checks: per piece while downloading, whole file at the end, and the
search for the mirror that served wrong bytes when only the whole-file hash is
known (issue 3, "Integrity").

Memory stays bounded: every check streams the part file in ``CHUNK`` blocks.
"""

from __future__ import annotations

import hashlib
import mmap
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pftp_client.part_file import PartFile
from pftp_client.transports.base import RangeEnd, RangeFetcher, TransferError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pftp_client.ranges import RangeSet

CHUNK = 1024 * 1024
# The prefix hasher's blocks, hashed through a mapping of the part file: one
# hashlib call each, which releases the GIL while it reads the page cache and
# hashes. Taking the GIL back may wait a switch interval (5 ms) while the flows'
# threads run, so blocks are large: with 1 MiB read into a buffer (two releases
# per block) the hasher fell 15-35 MiB behind the prefix by the last byte (lab,
# 4 x 20 Mbit/s), all of it hashed after the download. Mapped only while hashed:
# the pages count in the resident set meanwhile.
PREFIX_CHUNK = 8 * 1024 * 1024
# The last stretch, hashed by finish() with nothing else to wait for: read through
# one buffer of this size, which stays in the CPU's cache. 36 MiB took ~24 ms so,
# ~32 ms through the mapping in PREFIX_CHUNK spans (this machine, page cache).
FINISH_CHUNK = 1024 * 1024
ALT_SUFFIX = ".pftp-alt"


class VerificationFailed(Exception):
    """The file does not match its SHA-256 and could not be repaired."""


def sha256_of_range(part: PartFile, start: int, end: int) -> str:
    h = hashlib.sha256()
    pos = start
    while pos < end:
        n = min(CHUNK, end - pos)
        h.update(part.pread(n, pos))
        pos += n
    return h.hexdigest()


def sha256_of_buffer(data: bytes | bytearray | memoryview) -> str:
    return hashlib.sha256(data).hexdigest()


class PrefixHasher:
    """Hashes the part file in order, as far as the completed prefix reaches.

    Bytes arrive out of order, but the prefix of completed pieces grows during
    the download; hashing it meanwhile (from the page cache) leaves only the
    last stretch to hash at the end instead of the whole file.
    """

    def __init__(self, part: PartFile) -> None:
        self._part = part
        self._h = hashlib.sha256()
        self._pos = 0
        self._target = 0
        self._cond = threading.Condition()
        self._closed = False
        self._error: BaseException | None = None
        self._handoff = False  # finish(): stop after the current chunk
        # Where the part file cannot be mapped, blocks are read into this buffer
        # (allocated then: zeroing it costs ~1-2 ms).
        self._buf_mem: memoryview | None = None
        self._thread = threading.Thread(target=self._run, name="pftp-hasher", daemon=True)
        self._thread.start()

    def _hash(self, pos: int, n: int) -> None:
        """Hash the part file's [pos, pos + n)."""
        if self._buf_mem is None:
            start = pos - pos % mmap.ALLOCATIONGRANULARITY
            try:
                m = mmap.mmap(self._part.fd, pos + n - start, offset=start,
                              access=mmap.ACCESS_READ)
            except OSError:  # (a file system without mmap)
                self._buf_mem = memoryview(bytearray(PREFIX_CHUNK))
            else:
                with m, memoryview(m) as view, view[pos - start:] as span:
                    self._h.update(span)
                return
        buf = self._buf_mem
        self._h.update(buf[: self._part.readinto(buf[:n], pos)])

    def advance(self, prefix_end: int) -> None:
        with self._cond:
            if prefix_end > self._target:
                self._target = prefix_end
                self._cond.notify_all()

    def _run(self) -> None:
        try:
            while True:
                with self._cond:
                    while self._pos >= self._target and not self._closed:
                        self._cond.wait()
                    if self._pos >= self._target and self._closed:
                        return
                    pos, target = self._pos, self._target
                n = min(PREFIX_CHUNK, target - pos)
                self._hash(pos, n)
                with self._cond:
                    self._pos = pos + n
                    self._cond.notify_all()
                    if self._handoff:
                        return
        except BaseException as exc:  # surfaced by finish()
            with self._cond:
                self._error = exc
                self._cond.notify_all()

    def finish(self, size: int) -> str:
        # The rest is hashed here, not by the thread: waking the caller once per
        # chunk hands the GIL back and forth (up to the 5 ms switch interval each),
        # which made the last 36 MiB take ~0.12 s instead of ~0.03 s.
        with self._cond:
            self._handoff = True
            self._closed = True
            self._cond.notify_all()
        self._thread.join()
        if self._error is not None:
            raise self._error
        buf = memoryview(bytearray(min(FINISH_CHUNK, max(0, size - self._pos))))
        while self._pos < size:
            n = min(len(buf), size - self._pos)
            self._h.update(buf[: self._part.readinto(buf[:n], self._pos)])
            self._pos += n
        return self._h.hexdigest()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._target = self._pos
            self._cond.notify_all()
        self._thread.join(timeout=5)


# --- culprit search with a whole-file hash only ---------------------------------------


@dataclass
class CulpritSearch:
    """Outcome of the search for the mirror that served wrong bytes."""

    ok: bool
    sha256: str
    blamed: dict[str, int] = field(default_factory=dict)  # mirror -> wrong bytes
    refetched_bytes: int = 0
    repaired_bytes: int = 0
    detail: str = ""


OpenFetcher = Callable[[str], RangeFetcher]


def _differing_span(a: bytes, b: memoryview) -> tuple[int, int]:
    """[i, j): from the first to past the last byte where ``a`` and ``b`` (same
    length, not equal) differ; bisection over slice comparisons (C speed)."""
    lo, hi = 0, len(a)  # a[:lo] == b[:lo]; a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    first = lo
    lo, hi = 0, len(a)  # same suffix of length lo; not of length hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[len(a) - mid:] == b[len(b) - mid:]:
            lo = mid
        else:
            hi = mid
    return first, len(a) - lo


def compare_run(
    part: PartFile,
    alt: PartFile,
    fetcher: RangeFetcher,
    start: int,
    end: int,
    mismatches: list[tuple[int, int]],
) -> int:
    """Stream [start, end) from ``fetcher``; where it differs from the part file,
    keep the referee's bytes in the alt file and record the range (``alt`` may be
    the part file itself: the referee's bytes then replace the differing ones,
    cross_check.refetch_runs). Returns the bytes compared."""
    state = {"pos": start}

    def sink(offset: int, data: memoryview, _arrival_ns: int) -> None:
        mine = part.pread(len(data), offset)
        if mine != data:
            # only the span that differs: exact counts, and _serves_now looks there
            i, j = _differing_span(mine, data)
            alt.pwrite(data[i:j], offset + i)
            if mismatches and mismatches[-1][1] == offset + i:
                mismatches[-1] = (mismatches[-1][0], offset + j)
            else:
                mismatches.append((offset + i, offset + j))
        state["pos"] = offset + len(data)

    fetcher.fetch(start, RangeEnd(end), sink, threading.Event())
    if state["pos"] < end:
        raise TransferError(f"referee stopped at {state['pos']} of [{start}, {end})")
    return end - start


def sample_spots(done: RangeSet, length: int) -> list[tuple[int, int]]:
    """Up to three ranges of ``length`` bytes inside ``done``: its first bytes, the
    middle of its largest run, the end of its last run (kept_bytes_match)."""
    runs = list(done)
    if not runs:
        return []
    big = max(runs, key=lambda r: r[1] - r[0])
    spots: list[tuple[int, int]] = []
    for s, e in (runs[0], ((big[0] + big[1]) // 2, big[1]),
                 (max(runs[-1][0], runs[-1][1] - length), runs[-1][1])):
        spot = (s, min(e, s + length))
        if spot[1] > spot[0] and spot not in spots:
            spots.append(spot)
    return spots


def kept_bytes_match(
    part: PartFile, fetcher: RangeFetcher, spots: Sequence[tuple[int, int]]
) -> bool:
    """Whether ``fetcher``'s bytes over ``spots`` equal the part file's (a resumed
    mirror with no version to compare, validators.py). Raises TransferError."""
    same = True

    def sink(offset: int, data: memoryview, _arrival_ns: int) -> None:
        nonlocal same
        same = same and part.pread(len(data), offset) == data

    for s, e in spots:
        if fetcher.fetch(s, RangeEnd(e), sink, threading.Event()) < e - s:
            raise TransferError(f"sample [{s}, {e}) ended short")
        if not same:
            return False
    return True


CONFIRM_BYTES = 64 * 1024


def _serves_now(
    part: PartFile, open_fetcher: OpenFetcher, url: str, ranges: Sequence[tuple[int, int]]
) -> bool:
    """Whether ``url`` now serves the part file's (repaired) bytes over the first
    of ``ranges`` (up to CONFIRM_BYTES). False when it cannot tell."""
    s, e = ranges[0]
    e = min(e, s + CONFIRM_BYTES)
    try:
        fetcher = open_fetcher(url)
    except (TransferError, OSError, ValueError):
        return False
    try:
        return kept_bytes_match(part, fetcher, [(s, e)])
    except (TransferError, OSError):
        return False
    finally:
        fetcher.close()


def _swap(part: PartFile, alt: PartFile, ranges: Sequence[tuple[int, int]]) -> None:
    for s, e in ranges:
        pos = s
        while pos < e:
            n = min(CHUNK, e - pos)
            a, b = part.pread(n, pos), alt.pread(n, pos)
            part.pwrite(b, pos)
            alt.pwrite(a, pos)
            pos += n


def find_culprits_and_repair(
    part: PartFile,
    runs: Sequence[tuple[int, int, str]],
    urls: dict[str, str],
    expected_sha256: str,
    open_fetcher: OpenFetcher,
    log: Callable[[str], None] = lambda _m: None,
) -> CulpritSearch:
    """Whole-file hash failed and no piece hashes exist: find who served bad bytes.

    1. Every run of bytes written by mirror m is fetched again from another
       mirror (the referee) and compared; differing bytes go to a side file.
    2. Hypothesis "m served bad bytes", for each mirror with differences (most
       first): swap in the referee's bytes for m's differing ranges and hash
       the file; if it matches, m is blamed and the file is repaired; if not,
       swap back (a referee may be the bad one). Last hypothesis: all of them.
    Memory is one chunk; disk is a sparse side file of the differing bytes.
    """
    alt_path = Path(str(part.path) + ALT_SUFFIX)
    # sparse: it only ever holds the ranges that differed (not a second copy)
    alt = PartFile(alt_path, part.size, reuse=False, reserve=False)
    result = CulpritSearch(ok=False, sha256="")
    try:
        mirrors = [m for m in urls]
        if len(mirrors) < 2:
            result.sha256 = sha256_of_range(part, 0, part.size)
            result.detail = "only one mirror: nobody to compare with"
            return result
        per_mirror: dict[str, list[tuple[int, int]]] = {}
        fetchers: dict[str, RangeFetcher] = {}
        try:
            for start, end, owner in runs:
                referees = [m for m in mirrors if m != owner]
                mism = per_mirror.setdefault(owner, [])
                for ref in referees:
                    try:
                        if ref not in fetchers:
                            fetchers[ref] = open_fetcher(urls[ref])
                        result.refetched_bytes += compare_run(
                            part, alt, fetchers[ref], start, end, mism
                        )
                        break
                    except TransferError as exc:
                        log(f"integrity: referee {ref} failed on [{start}, {end}): {exc}")
                        bad = fetchers.pop(ref, None)
                        if bad is not None:
                            bad.close()
                else:
                    result.detail = f"no referee could serve [{start}, {end})"
        finally:
            for f in fetchers.values():
                f.close()
        suspects = sorted(
            (m for m, r in per_mirror.items() if r),
            key=lambda m: -sum(e - s for s, e in per_mirror[m]),
        )
        hypotheses = [[m] for m in suspects]
        if len(suspects) > 1:
            hypotheses.append(list(suspects))
        for hyp in hypotheses:
            ranges = [r for m in hyp for r in per_mirror[m]]
            _swap(part, alt, ranges)
            digest = sha256_of_range(part, 0, part.size)
            if digest == expected_sha256:
                result.ok = True
                result.sha256 = digest
                result.repaired_bytes = sum(e - s for s, e in ranges)
                # Blame only a mirror that still serves the wrong bytes: kept bytes
                # damaged on this side (a power loss after a resume, another
                # writer) would otherwise be pinned on an innocent mirror.
                local = [m for m in hyp
                         if m in urls and _serves_now(part, open_fetcher, urls[m], per_mirror[m])]
                result.blamed = {
                    m: sum(e - s for s, e in per_mirror[m]) for m in hyp if m not in local
                }
                if local:
                    log(f"integrity: {', '.join(local)} now serve(s) the right bytes: the "
                        "copy kept here was damaged, not served wrong; repaired, nobody blamed")
                log(
                    f"integrity: repaired {result.repaired_bytes} bytes "
                    f"served wrong by {', '.join(result.blamed) or 'nobody'}"
                )
                return result
            _swap(part, alt, ranges)  # undo
        result.sha256 = sha256_of_range(part, 0, part.size)
        result.detail = result.detail or (
            "no mirror disagreed with another"
            if not suspects
            else "no repair produced the expected SHA-256"
        )
        return result
    finally:
        alt.close()
        alt_path.unlink(missing_ok=True)
