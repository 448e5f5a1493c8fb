"""Downloads this coordinator assigned and has no report of yet, per mirror: the
probes put their throughput reads of a mirror off while its clients fetch from it.

A probe's read shares the mirror's path with those downloads. It slows them (lab,
wide-area: a scheduled probe of the 5 Mbit/s mirror during a download halved that
mirror's rate for 3 s, 1.13x -> 1.23x) and reads low itself, which the ranking then
believes (the same probe read 2.4 of the path's 5 Mbit/s and took it for a held
connection). A download counts from its answer until its report, or until
``until`` when no report comes (a client that crashed or never reports).

Downloads that follow one another leave the mirror idle for a moment only, and a
read begun then runs into the next one (lab, 60 back-to-back downloads: the probes
that waited for a report slowed the six after it to 1.17-1.22x). So a mirror is
idle for a probe once none ran there for ``quiet_s``; and a read that a download
began during is not kept (``begun``).

In memory, one per app (``app.state.active_downloads``), handed to the scheduler
that runs in the same process (api/app.py). With several replicas, the one running
a mirror's probe sees only the downloads it assigned itself. A probe asked for by
hand (``probe``, POST .../probe) reads at once.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable, Iterable


class ActiveDownloads:
    """Thread-safe; O(log n) per answer (the assignments hot path), at most
    ``capacity`` downloads held (a flood of requests that never report drops the
    ones due to end first)."""

    def __init__(
        self, clock: Callable[[], float] = time.monotonic, capacity: int = 50_000
    ) -> None:
        self._clock = clock
        self._capacity = capacity
        self._cond = threading.Condition()
        # request id -> (mirror names, monotonic deadline)
        self._running: dict[str, tuple[frozenset[str], float]] = {}
        self._per_mirror: dict[str, int] = {}
        self._deadlines: list[tuple[float, str]] = []  # heap; stale entries skipped
        self._last: dict[str, float] = {}  # mirror -> when one of its downloads began or ended
        self._begun: dict[str, int] = {}  # mirror -> downloads begun there

    def begin(self, request_id: str, mirrors: Iterable[str], for_s: float) -> None:
        """A download assigned to ``mirrors``, expected to end within ``for_s``."""
        names = frozenset(mirrors)
        with self._cond:
            self._drop_expired()
            self._remove(request_id)
            now = self._clock()
            until = now + max(for_s, 0.0)
            self._running[request_id] = (names, until)
            for name in names:
                self._per_mirror[name] = self._per_mirror.get(name, 0) + 1
                self._begun[name] = self._begun.get(name, 0) + 1
                self._last[name] = now
            heapq.heappush(self._deadlines, (until, request_id))
            while len(self._running) > self._capacity:
                self._remove(heapq.heappop(self._deadlines)[1])

    def end(self, request_id: str | None) -> None:
        """Its report came (an unknown id is fine: another replica's, or expired)."""
        if not request_id:
            return
        with self._cond:
            if self._remove(request_id):
                self._cond.notify_all()

    def busy(self, mirror: str) -> int:
        """How many of the downloads running now fetch from ``mirror``."""
        with self._cond:
            self._drop_expired()
            return self._per_mirror.get(mirror, 0)

    def begun(self, mirror: str) -> int:
        """Downloads begun at ``mirror`` so far (compare two readings)."""
        with self._cond:
            return self._begun.get(mirror, 0)

    def wait_idle(
        self, mirror: str, timeout_s: float, quiet_s: float = 0.0, poll_s: float = 1.0
    ) -> str | None:
        """Wait up to ``timeout_s`` until no download runs at ``mirror`` and none
        began or ended there for ``quiet_s``: None then, else why not. Polls,
        because downloads also end by expiring."""
        deadline = self._clock() + max(timeout_s, 0.0)
        with self._cond:
            while True:
                self._drop_expired()
                now = self._clock()
                n = self._per_mirror.get(mirror, 0)
                last = self._last.get(mirror)
                quiet_in = 0.0 if last is None else last + quiet_s - now
                if n == 0 and quiet_in <= 0:
                    return None
                left = deadline - now
                if left <= 0:
                    if n:
                        return f"{n} download(s) this coordinator assigned to it still running"
                    return f"a download there ended {now - last:.0f} s ago (quiet: {quiet_s:.0f} s)"
                # (woken by a report; a quiet spell ends on its own)
                self._cond.wait(min(poll_s, left) if n else min(poll_s, left, quiet_in))

    def __len__(self) -> int:
        with self._cond:
            return len(self._running)

    def _remove(self, request_id: str) -> bool:
        held = self._running.pop(request_id, None)
        if held is None:
            return False
        now = self._clock()
        for name in held[0]:
            self._last[name] = now
            n = self._per_mirror[name] - 1
            if n:
                self._per_mirror[name] = n
            else:
                del self._per_mirror[name]
        return True

    def _drop_expired(self) -> None:
        now = self._clock()
        heap = self._deadlines
        while heap and heap[0][0] <= now:
            until, rid = heapq.heappop(heap)
            held = self._running.get(rid)
            if held is not None and held[1] == until:  # (not a stale entry)
                self._remove(rid)
        if len(heap) > 2 * len(self._running) + 1024:  # reported ones pile up: rebuild
            self._deadlines = [(u, r) for r, (_, u) in self._running.items()]
            heapq.heapify(self._deadlines)


def expected_seconds(size: int, expected_bps: Iterable[float | None]) -> float | None:
    """The file over the assigned mirrors' expected aggregate rate (bits/s), or
    None when no rate is known."""
    total = sum(b for b in expected_bps if b and b > 0)
    return size * 8 / total if total > 0 else None
