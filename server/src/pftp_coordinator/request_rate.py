"""In-memory assignment request rate: the input to balanced mode (paper 004, 3.2.2).

Per-process: with several uvicorn workers or coordinator replicas each sees its
share of the load, so the threshold applies per process.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class RequestRateMeter:
    """Requests per second over a sliding window of whole-second buckets.

    O(1) per hit and per read; no lock (called from the event loop thread only).
    """

    def __init__(self, window_s: int = 10, clock: Callable[[], float] = time.monotonic) -> None:
        if window_s < 1:
            raise ValueError("window_s must be >= 1")
        self._window = window_s
        self._clock = clock
        self._counts = [0] * window_s
        self._seconds = [-1] * window_s  # which whole second each bucket holds
        self._started = clock()

    def hit(self) -> None:
        second = int(self._clock())
        i = second % self._window
        if self._seconds[i] != second:
            self._seconds[i] = second
            self._counts[i] = 0
        self._counts[i] += 1

    def rate(self) -> float:
        now = self._clock()
        second = int(now)
        oldest = second - self._window + 1
        total = sum(c for c, s in zip(self._counts, self._seconds, strict=True) if s >= oldest)
        # Right after start the window is not full yet: divide by the time covered.
        span = min(float(self._window), max(1.0, now - self._started))
        return total / span
