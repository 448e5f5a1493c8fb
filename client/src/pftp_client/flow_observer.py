"""The hook between the download engine and the shared-congestion detector.

The engine reports every receive of every flow to its observers (application
level timestamps, ``time.monotonic_ns()`` right after the receive returned),
and keeps the last ``capacity`` arrivals of each flow in a ring buffer that a
detector may read at any time (``FlowTimings``). A detector that decides some
flows share a congested link calls ``FlowControl.drop_flows``: the engine then
closes those connections and gives their remaining ranges to backup mirrors
(paper 001, Shared-Con-Algo lines 13-23: keep one of the set, start as many new
connections to passive mirrors as were closed).

Observers run on the flows' receive path: they must be quick and must not
raise (an exception is logged and the observer is removed).
"""

from __future__ import annotations

import threading
from array import array
from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import numpy as np


class FlowObserver(Protocol):
    def flow_started(self, flow_id: str, mirror: str) -> None: ...

    def on_receive(self, flow_id: str, arrival_ns: int, nbytes: int) -> None: ...

    def flow_ended(self, flow_id: str) -> None: ...


class FlowControl(Protocol):
    def drop_flows(self, flow_ids: Iterable[str], reason: str = "congested") -> list[str]:
        """Close these flows and move their remaining bytes to backups; returns
        the flow ids actually dropped (unknown or finished flows are skipped)."""
        ...

    def active_flows(self) -> list[str]: ...

    # Optional: ``access_saturated() -> bool``, True while the flows together fill
    # the client's access link (a shared set found then is not acted on);
    # ``note_kept(kept, dropped)``: the flow kept on the link the dropped ones shared;
    # ``note_shared_by_all()``: a set held every flow of the download.


class _Ring:
    __slots__ = ("count", "nbytes", "times")

    def __init__(self, capacity: int) -> None:
        # array, not numpy: the engine must not pay numpy's import and memory
        # when no detector is plugged in; snapshot() converts on demand.
        self.times = array("q", bytes(8 * capacity))
        self.nbytes = array("q", bytes(8 * capacity))
        self.count = 0


class FlowTimings:
    """Bounded per-flow ring buffers of (arrival_ns, nbytes); thread-safe."""

    def __init__(self, capacity: int = 4096) -> None:
        if capacity < 2:
            raise ValueError("capacity must be >= 2")
        self.capacity = capacity
        self._rings: dict[str, _Ring] = {}
        self._lock = threading.Lock()

    def flow_started(self, flow_id: str, mirror: str) -> None:
        with self._lock:
            self._rings.setdefault(flow_id, _Ring(self.capacity))

    def on_receive(self, flow_id: str, arrival_ns: int, nbytes: int) -> None:
        with self._lock:
            ring = self._rings.get(flow_id)
            if ring is None:
                ring = self._rings[flow_id] = _Ring(self.capacity)
            i = ring.count % self.capacity
            ring.times[i] = arrival_ns
            ring.nbytes[i] = nbytes
            ring.count += 1

    def flow_ended(self, flow_id: str) -> None:
        """Keep the history (a detector may still look at it); nothing to do."""

    def flows(self) -> list[str]:
        with self._lock:
            return list(self._rings)

    def snapshot(self, flow_id: str) -> tuple[np.ndarray, np.ndarray]:
        """(arrival_ns, nbytes) of the flow's most recent arrivals, oldest first,
        as int64 numpy arrays."""
        import numpy as np

        with self._lock:
            ring = self._rings.get(flow_id)
            if ring is None:
                return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
            n = min(ring.count, self.capacity)
            start = ring.count % self.capacity if ring.count > self.capacity else 0
            times = np.frombuffer(ring.times, dtype=np.int64)
            sizes = np.frombuffer(ring.nbytes, dtype=np.int64)
            order = (np.arange(n) + start) % self.capacity
            return times[order].copy(), sizes[order].copy()

    def total_arrivals(self, flow_id: str) -> int:
        with self._lock:
            ring = self._rings.get(flow_id)
            return ring.count if ring else 0


# A detector factory gets the engine's control and timings and returns an
# observer (or None); it is called once per download, before flows start.
class DetectorFactory(Protocol):
    def __call__(self, control: FlowControl, timings: FlowTimings) -> FlowObserver | None: ...
