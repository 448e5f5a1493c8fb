"""Windowed throughput of one flow, bounded memory, clock passed in."""

from __future__ import annotations

import threading
from collections import deque


class RateMeter:
    """Bytes per second over roughly the last ``window_s`` seconds of activity.

    Samples of the cumulative byte count are kept at most every ``step_s``, so
    memory is bounded by window_s / step_s whatever the transfer rate.
    """

    def __init__(self, window_s: float = 3.0, step_s: float = 0.1, min_span_s: float = 0.2,
                 restart_after_s: float | None = None) -> None:
        self.window_s = window_s
        self.step_s = step_s
        self.min_span_s = min_span_s  # no rate from less time than this
        # Data again after a silence this long within a period: the window starts
        # over where it resumed. A link that went down and came back (or a server
        # that froze) is measured by what it carries now; its stall, averaged in,
        # read a 38 Mbit/s mirror as 10 for the next three seconds, and the tail
        # rule then gave it small steals, one after another, each paying a switch.
        # Shorter silences (loss recovery, a server's pacing) stay part of the rate.
        self.restart_after_s = restart_after_s
        self._period_data = False  # a byte came in this period
        self._resumed = False  # its window started over after a silence
        self.total = 0
        self._samples: deque[tuple[float, int]] = deque(maxlen=int(window_s / step_s) + 2)
        self._lock = threading.Lock()
        self._last_rate: float | None = None
        self._last_add = 0.0

    def start(self, now: float) -> None:
        """Mark the start of an active period (a new request)."""
        with self._lock:
            self._samples.clear()
            self._samples.append((now, self.total))
            self._period_data = False
            self._resumed = False

    def add(self, nbytes: int, now: float) -> None:
        """Count ``nbytes`` at ``now``; a time before the last sample's (bytes that
        came earlier but are counted late) joins the next sample."""
        with self._lock:
            if (
                self.restart_after_s is not None and self._period_data and self._samples
                and now - self._last_add >= self.restart_after_s
            ):
                self._samples.clear()
                self._samples.append((now, self.total))
                self._resumed = True
            self._period_data = True
            self.total += nbytes
            self._last_add = max(self._last_add, now)
            if not self._samples or now - self._samples[-1][0] >= self.step_s:
                self._samples.append((now, self.total))
                while len(self._samples) > 2 and now - self._samples[1][0] >= self.window_s:
                    self._samples.popleft()

    def rate(self, now: float) -> float | None:
        """Current rate; the last known one while idle; None before any data."""
        with self._lock:
            # Forget samples older than the window even when no data arrives, so a
            # stalled flow's rate falls to 0 within window_s instead of decaying as
            # 1/t (the tail rule then takes all of its work, tail.py).
            while len(self._samples) > 1 and now - self._samples[1][0] >= self.window_s:
                self._samples.popleft()
            if len(self._samples) >= 1:
                t0, b0 = self._samples[0]
                dt = now - t0
                if now - max(self._last_add, t0) >= self.window_s:
                    # (silent for a whole window. The bytes that came after the last
                    # sample, kept one per step_s, would otherwise leave a rate that
                    # decays as 1/t and never reaches 0: a stalled leader kept its
                    # last 112 bytes for 17 s, tail.py never saw it stalled)
                    self._last_rate = 0.0
                elif dt >= min(self.min_span_s, self.window_s) and self.total > b0:
                    self._last_rate = (self.total - b0) / dt
                elif dt >= self.window_s:
                    self._last_rate = 0.0
            return self._last_rate

    def recent(self, now: float, span_s: float) -> float | None:
        """Bytes per second over about the last ``span_s`` of this period (from the
        newest sample at least that old); None while the period is younger. A
        connection in slow start doubles its rate every round trip: the window's
        average then lags what it carries now by seconds on a long path."""
        with self._lock:
            base = next((s for s in reversed(self._samples) if now - s[0] >= span_s), None)
            if base is None or now <= base[0]:
                return None
            return (self.total - base[1]) / (now - base[0])

    @property
    def active(self) -> bool:
        """In an active period (between start and stop)."""
        return bool(self._samples)

    def since(self, t: float, now: float) -> float | None:
        """Bytes per second from ``t`` on: from the newest sample at or before it,
        or from the window's start when that is later; 0 after a window's silence.
        None outside an active period, before a byte since that sample or
        ``min_span_s`` after it (no reading of its own yet). A read only:
        what the meter says for everyone else is unchanged."""
        with self._lock:
            base = self._samples[0] if self._samples else None
            for s in self._samples:
                if s[0] > t:
                    break
                base = s
            if base is None:
                return None
            if now - max(self._last_add, base[0]) >= self.window_s:
                return 0.0  # (silent for a whole window, as rate() says)
            if self.total == base[1] or now - base[0] < self.min_span_s:
                return None
            return (self.total - base[1]) / (now - base[0])

    def samples(self, since: float) -> list[tuple[float, int]]:
        """The kept (time, total bytes) samples taken at or after ``since``: one per
        ``step_s`` while data comes, none during a pause."""
        with self._lock:
            return [s for s in self._samples if s[0] >= since]

    def stop(self, now: float | None = None, stalled_after_s: float = 1.0) -> None:
        """End of an active period: freeze the last rate (idle time is not slowness),
        taken up to the period's last byte (rate() may not have been asked lately).
        A period that ended in a stall (no byte for ``stalled_after_s`` before
        ``now``: a range cut where its server stopped sending; a range ends right
        after its last byte otherwise, or a few round trips later for its final
        reply) freezes 0: the rate from before the stall would hand the flow new
        work it will not serve."""
        with self._lock:
            if self._samples:
                t0, b0 = self._samples[0]
                dt = self._last_add - t0
                quiet = min(self.window_s, stalled_after_s)
                if now is not None and now - max(self._last_add, t0) >= quiet:
                    self._last_rate = 0.0
                elif self.total > b0 and dt >= min(self.min_span_s, self.window_s):
                    self._last_rate = (self.total - b0) / dt
                elif self.total > b0 and self._resumed:
                    # (a range finished soon after its flow came back: what came
                    # since, over at least min_span_s, rather than the rate the
                    # silence had worn down to nothing)
                    self._last_rate = (self.total - b0) / max(dt, self.min_span_s)
            self._samples.clear()
