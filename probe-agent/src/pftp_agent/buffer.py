"""Bounded sample buffer: while the coordinator is away the oldest samples are
dropped first, and when it is back the newest are sent first (they matter most
to the ranking)."""

from __future__ import annotations

from collections import deque

from pftp_wire.models import UtilizationSample


class SampleBuffer:
    def __init__(self, maxlen: int) -> None:
        if maxlen < 1:
            raise ValueError("buffer size must be >= 1")
        self._q: deque[UtilizationSample] = deque(maxlen=maxlen)
        self.dropped = 0

    def __len__(self) -> int:
        return len(self._q)

    def add(self, sample: UtilizationSample) -> None:
        if len(self._q) == self._q.maxlen:
            self.dropped += 1
        self._q.append(sample)

    def take_newest(self, n: int) -> list[UtilizationSample]:
        """Remove and return up to ``n`` newest samples, oldest first (wire order)."""
        out = [self._q.pop() for _ in range(min(n, len(self._q)))]
        out.reverse()
        return out

    def put_back(self, batch: list[UtilizationSample]) -> None:
        """Return an unsent batch to the newest end, keeping the bound."""
        for s in batch:
            self.add(s)
