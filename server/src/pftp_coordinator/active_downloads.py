"""Downloads this coordinator assigned and has no report of yet, per mirror: the
probes put their throughput reads of a mirror off while its clients fetch from it.

A probe's read shares the mirror's path with those downloads. It slows them (lab,
wide-area: a scheduled probe of the 5 Mbit/s mirror during a download halved that
mirror's rate for 3 s, 1.13x -> 1.23x) and reads low itself, which the ranking then
believes (the same probe read 2.4 of the path's 5 Mbit/s and took it for a held
connection). A download counts from its answer until its report, or until
``until`` when no report comes (a client that crashed or never reports).

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

    def begin(self, request_id: str, mirrors: Iterable[str], for_s: float) -> None:
        """A download assigned to ``mirrors``, expected to end within ``for_s``."""
        until = self._clock() + max(for_s, 0.0)
        names = frozenset(mirrors)
        with self._cond:
            self._drop_expired()
            self._remove(request_id)
            self._running[request_id] = (names, until)
            for name in names:
                self._per_mirror[name] = self._per_mirror.get(name, 0) + 1
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

    def wait_idle(self, mirror: str, timeout_s: float, poll_s: float = 1.0) -> int:
        """Wait up to ``timeout_s`` for ``mirror``'s downloads to end; returns how
        many still run (0: idle). Polls, because downloads also end by expiring."""
        deadline = self._clock() + max(timeout_s, 0.0)
        with self._cond:
            while True:
                self._drop_expired()
                n = self._per_mirror.get(mirror, 0)
                left = deadline - self._clock()
                if n == 0 or left <= 0:
                    return n
                self._cond.wait(min(poll_s, left))

    def __len__(self) -> int:
        with self._cond:
            return len(self._running)

    def _remove(self, request_id: str) -> bool:
        held = self._running.pop(request_id, None)
        if held is None:
            return False
        for name in held[0]:
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
