"""Which mode (ranked/balanced) each recent assignment used, so a later client
report can be filed with it. Bounded and in memory: losing it only leaves
downloads.mode empty."""

from __future__ import annotations

from collections import OrderedDict


class RecentAssignments:
    def __init__(self, capacity: int = 50_000) -> None:
        self._capacity = capacity
        self._modes: OrderedDict[str, str] = OrderedDict()

    def remember(self, request_id: str, mode: str) -> None:
        self._modes[request_id] = mode
        if len(self._modes) > self._capacity:
            self._modes.popitem(last=False)

    def get(self, request_id: str | None) -> str | None:
        return self._modes.get(request_id) if request_id else None
