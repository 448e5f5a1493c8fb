"""Each mirror's throughput over time, recorded during every download: the
summary's ``timeline``, drawn by ``pftp get --plot`` and ``pftp plot``.

A daemon thread reads each mirror's count of received bytes every ``SAMPLE_S``
(the engine's counters, copied under its lock as the progress display does):
nothing is added to the data path. The bytes received between two samples are
spread over the bins the interval covers, in proportion to time, so the bins add
up to exactly what was received however late a sample wakes. Time counts from
the download's start, not the engine's: the bytes a head start (early.py) read
before the engine took its transfers over reach the engine's counters in its
first milliseconds; the first sample, ``FIRST_S`` after the engine's start,
spreads them over the time since the download began instead of showing them as a
burst in the first bin (2.5x the rate in the first 0.25 s with HTTP mirrors). Memory is bounded:
when the series would pass ``MAX_BINS`` bins, neighbouring bins are merged in
pairs and the bin width doubles (0.25 s bins for the first 128 s; a 10-hour
download ends with 128-s bins, still at most ``MAX_BINS`` per mirror).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

SAMPLE_S = 0.25  # sampling interval, and the first bin width
FIRST_S = 0.05  # the first sample, after the engine's start
MAX_BINS = 512  # per mirror; past it, pairs of bins merge (bin width doubles)
# what a timeline read from JSON may hold (pftp plot): no float overflow when drawn
MIN_BIN_S = 0.001
MAX_BIN_BYTES = 2**63 - 1


@dataclass
class TimelineEvent:
    """A summary event (summary.MirrorEvent) placed on the timeline."""

    at_s: float
    mirror: str
    kind: str
    detail: str = ""


@dataclass
class Timeline:
    """Bytes received per mirror in consecutive bins of ``bin_s`` seconds from the
    download's start; the last bin ends at ``seconds`` and may be partial. The
    engine started at ``start_s`` (after the size probes, or the coordinator's
    answer): the summary's events count from there, these events from 0."""

    bin_s: float
    seconds: float
    mirrors: dict[str, list[int]]
    events: list[TimelineEvent] = field(default_factory=list)
    start_s: float = 0.0

    def bin_count(self) -> int:
        return max((len(b) for b in self.mirrors.values()), default=0)

    def total(self) -> list[int]:
        """All mirrors together, per bin."""
        out = [0] * self.bin_count()
        for bins in self.mirrors.values():
            for i, n in enumerate(bins):
                out[i] += n
        return out

    def received(self) -> int:
        return sum(sum(b) for b in self.mirrors.values())

    def with_events(self, events: Iterable[Any]) -> Timeline:
        """This timeline with ``events`` (summary.MirrorEvent or alike, timed from
        the engine's start) as its events, timed from the download's start."""
        return Timeline(
            self.bin_s,
            self.seconds,
            self.mirrors,
            [TimelineEvent(self.start_s + e.at_s, e.mirror, e.kind, e.detail) for e in events],
            self.start_s,
        )

    def to_json_dict(self) -> dict[str, Any]:
        from pftp_client.transports.base import redacted

        return {
            "bin_s": self.bin_s,
            "seconds": round(self.seconds, 3),
            "start_s": round(self.start_s, 3),
            "mirrors": {name: list(bins) for name, bins in self.mirrors.items()},
            "events": [
                {"at_s": round(e.at_s, 3), "mirror": e.mirror, "kind": e.kind,
                 "detail": redacted(e.detail)}
                for e in self.events
            ],
        }

    @classmethod
    def from_json_dict(cls, raw: object) -> Timeline:
        """A timeline as ``to_json_dict`` wrote it; ValueError naming what is wrong."""
        if not isinstance(raw, dict):
            raise ValueError("timeline is not a JSON object")
        bin_s = _number(raw, "bin_s", positive=True)
        if bin_s < MIN_BIN_S:
            raise ValueError(f"timeline.bin_s must be at least {MIN_BIN_S} s, not {bin_s!r}")
        seconds = _number(raw, "seconds")
        start_s = _number(raw, "start_s") if "start_s" in raw else 0.0
        mirrors_raw = raw.get("mirrors")
        if not isinstance(mirrors_raw, dict):
            raise ValueError("timeline.mirrors must be an object of mirror name -> bytes per bin")
        mirrors: dict[str, list[int]] = {}
        for name, bins in mirrors_raw.items():
            if not isinstance(bins, list) or not all(
                type(n) is int and 0 <= n <= MAX_BIN_BYTES for n in bins
            ):
                raise ValueError(
                    f"timeline.mirrors[{name!r}] must be a list of byte counts (whole numbers >= 0)"
                )
            mirrors[name] = bins
        events_raw = raw.get("events", [])
        if not isinstance(events_raw, list):
            raise ValueError("timeline.events must be a list")
        events = []
        for i, ev in enumerate(events_raw):
            if not (
                isinstance(ev, dict)
                and isinstance(ev.get("mirror"), str)
                and isinstance(ev.get("kind"), str)
                and isinstance(ev.get("detail", ""), str)
            ):
                raise ValueError(f"timeline.events[{i}] needs mirror and kind (text)")
            events.append(
                TimelineEvent(_number(ev, "at_s", where=f"timeline.events[{i}]."),
                              ev["mirror"], ev["kind"], ev.get("detail", ""))
            )
        return cls(bin_s, seconds, mirrors, events, start_s)


def _number(raw: dict[str, Any], key: str, *, positive: bool = False,
            where: str = "timeline.") -> float:
    value = raw.get(key)
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
        or (positive and value == 0)
    ):
        want = "a positive number" if positive else "a number >= 0"
        raise ValueError(f"{where}{key} must be {want}, not {value!r}")
    return float(value)


def merge_pairs(bins: Sequence[int]) -> list[int]:
    """Bins twice as wide: each pair of neighbours summed (an odd last one alone)."""
    return [sum(bins[i : i + 2]) for i in range(0, len(bins), 2)]


def spread(bins: list[int], bin_s: float, t0: float, t1: float, nbytes: int) -> None:
    """Add ``nbytes`` received over (t0, t1] to ``bins`` (extended with zeros as
    needed), each bin getting the share of the interval it covers; exact in total
    (integer shares by cumulative rounding). A zero-length interval goes to t1's bin."""
    last = max(0, math.ceil(t1 / bin_s) - 1)
    if len(bins) <= last:
        bins.extend([0] * (last + 1 - len(bins)))
    span = t1 - t0
    first = min(last, int(t0 / bin_s))
    if span <= 0 or first == last:
        bins[last] += nbytes
        return
    given = 0
    for i in range(first, last + 1):
        upto = min(t1, (i + 1) * bin_s) - t0
        share = nbytes if i == last else round(nbytes * upto / span)
        bins[i] += share - given
        given = share


class TimelineBuilder:
    """Samples of cumulative bytes per mirror in, bins out (pure: no clock, no
    thread; TimelineSampler drives it)."""

    def __init__(self, bin_s: float = SAMPLE_S, max_bins: int = MAX_BINS) -> None:
        if bin_s <= 0 or max_bins < 2:
            raise ValueError("bin_s must be > 0 and max_bins >= 2")
        self.bin_s = bin_s
        self.max_bins = max_bins
        self.bins: dict[str, list[int]] = {}
        self._last: dict[str, int] = {}
        self._t = 0.0

    def add(self, t: float, counts: Iterable[tuple[str, int]]) -> None:
        """A sample at ``t`` seconds: each mirror's bytes received so far (a name may
        come several times: summed; a new name starts from 0 at the previous sample)."""
        t = max(t, self._t)
        totals: dict[str, int] = {}
        for name, n in counts:
            totals[name] = totals.get(name, 0) + n
        while math.ceil(t / self.bin_s) > self.max_bins:
            self.bin_s *= 2
            for name, bins in self.bins.items():
                self.bins[name] = merge_pairs(bins)
        for name, total in totals.items():
            bins = self.bins.setdefault(name, [])
            delta = total - self._last.get(name, 0)
            if delta > 0:
                spread(bins, self.bin_s, self._t, t, delta)
            self._last[name] = total
        self._t = t

    def timeline(self, start_s: float = 0.0) -> Timeline:
        """The bins so far (no events: Timeline.with_events)."""
        n = max(math.ceil(self._t / self.bin_s), max(map(len, self.bins.values()), default=0))
        n = max(n, 1) if self.bins else 0
        mirrors = {name: bins + [0] * (n - len(bins)) for name, bins in self.bins.items()}
        return Timeline(self.bin_s, self._t, mirrors, [], start_s)


class TimelineSampler:
    """TimelineBuilder fed by a daemon thread, ``first_s`` after ``start`` and then
    every ``interval_s``: ``read()`` gives (mirror, bytes received so far) pairs,
    ``clock()`` the seconds since the download began (the builder's 0)."""

    def __init__(
        self,
        read: Callable[[], Iterable[tuple[str, int]]],
        clock: Callable[[], float],
        *,
        interval_s: float = SAMPLE_S,
        first_s: float = FIRST_S,
        max_bins: int = MAX_BINS,
    ) -> None:
        self._read = read
        self._clock = clock
        self._interval = interval_s
        self._first = first_s
        self._builder = TimelineBuilder(interval_s, max_bins)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pftp-timeline", daemon=True)
        self.samples = 0
        self.cpu_s = 0.0  # the thread's own CPU time (notes/client-plot.md)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        c0 = time.thread_time()
        try:
            wait = self._first
            while not self._stop.wait(wait):
                wait = self._interval
                counts = list(self._read())
                t = self._clock()
                with self._lock:
                    if self._stop.is_set():
                        break
                    self._builder.add(t, counts)
                    self.samples += 1
        finally:
            self.cpu_s = time.thread_time() - c0

    def stop(
        self,
        final: Iterable[tuple[str, int]] | None = None,
        events: Iterable[Any] = (),
        start_s: float = 0.0,
    ) -> Timeline:
        """Stop sampling and add a last sample: ``final`` counts (else ``read()``)
        now; ``events`` timed from ``start_s`` (the engine's start). Safe to call
        before ``start`` and more than once."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5.0)  # (one read: a copy under the engine's lock)
        counts = list(final) if final is not None else list(self._read())
        t = self._clock()
        with self._lock:
            self._builder.add(t, counts)
            return self._builder.timeline(start_s).with_events(events)
