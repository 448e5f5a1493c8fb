"""SharedCongestionMonitor: the engine-facing side of shared-congestion detection.

The engine (client/src/pftp_client/engine.py) feeds it with its flow-observer
hook and gives it a callback to drop flows; the monitor periodically groups
the active flows (grouping.py) and, for each shared set, asks the engine to
drop every flow but the best-ranked one (paper 001, Shared-Con-Algo f'). The
engine then hands the dropped flows' remaining ranges to as many backup
mirrors (f''), registers the new flows here, and detection repeats on the new
set. Contract, in call order:

    mon = SharedCongestionMonitor(drop_flows=engine_drop, capture=cap_or_None)
    mon.add_flow(flow_id, rank, remote=(ip, port), local_port=port)  # per flow
    mon.observe(flow_id, arrival_ns, nbytes)    # every receive (flow-observer hook)
    mon.start() / mon.stop()                    # or call mon.check() yourself
    mon.remove_flow(flow_id)                    # flow finished or failed

``drop_flows(flow_ids, event)`` is called from the monitor's thread; it must
not block for long. Dropped flows are removed from the monitor before the call.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field

import numpy as np

from pftp_client.congestion.capture import FlowKey, PacketCapture
from pftp_client.congestion.detectors import DEFAULT_DETECTOR, DETECTORS, pair_test_for
from pftp_client.congestion.grouping import Grouping, group_flows
from pftp_client.congestion.timestamps import (
    ArrivalBuffer,
    TimestampSource,
    clean_app_timestamps,
)
from pftp_client.congestion.verdict import PairVerdict, Sharing
from pftp_client.flow_observer import DetectorFactory, FlowControl, FlowObserver, FlowTimings

FlowId = Hashable


@dataclass
class CongestionEvent:
    """One shared set found and acted on."""

    shared_set: list[FlowId]  # best-ranked first
    kept: FlowId
    dropped: list[FlowId]
    detector: str
    source: TimestampSource
    confidence: float  # weakest pair verdict inside the set
    packets: int  # fewest packets per flow any pair verdict used
    at_ns: int
    verdicts: list[PairVerdict] = field(default_factory=list)
    # mirror names of shared_set, in the same order (filled by MonitorObserver),
    # for MirrorReport.congested_with in the report to the coordinator
    mirrors: list[str] = field(default_factory=list)
    # the flows together filled the client's access link when the set was found:
    # the shared link is (most likely) that one, so nothing was dropped
    access_link: bool = False
    # the access bandwidth is known but the flows' aggregate was not measured yet:
    # whether the shared link is the access link could not be told (kept, unreported)
    access_unknown: bool = False
    # the set held every flow the download was running (two or more): the shared
    # link may be the client's own (an access link slower than configured), which
    # says nothing about the mirrors' paths (not reported to the coordinator)
    everyone: bool = False
    # mirrors of the set whose flow is what an earlier set left on that link:
    # nothing dropped (MonitorObserver: one drop per upstream link)
    thinned_by: list[str] = field(default_factory=list)


# (ip, port) of a server; (ip, None, control_port) for an FTP server whose
# data comes from any port of that address but the control port
Remote = tuple[str, int] | tuple[str, None, int]


@dataclass
class _Flow:
    rank: float
    key: FlowKey | None
    remote: Remote | None = None


class SharedCongestionMonitor:
    def __init__(
        self,
        drop_flows: Callable[[list[FlowId], CongestionEvent], None],
        *,
        detector: str = DEFAULT_DETECTOR,
        interval_s: float = 0.1,
        window_packets: int = 400,
        confirmations: int = 2,
        capture: PacketCapture | None = None,
        app_source: TimestampSource = TimestampSource.APP_RECV,
        clock_ns: Callable[[], int] = time.monotonic_ns,
        rank_now: Callable[[], Mapping[FlowId, float | None]] | None = None,
    ) -> None:
        """``rank_now`` (optional) gives live ranks at each check (e.g. measured
        rates in dynamic mode); a flow it gives None for keeps its static rank."""
        if detector not in DETECTORS:
            raise ValueError(f"unknown detector {detector!r}; choose from {sorted(DETECTORS)}")
        if interval_s <= 0 or window_packets < 20 or confirmations < 1:
            raise ValueError("need interval_s > 0, window_packets >= 20, confirmations >= 1")
        self.confirmations = confirmations
        self._streak: dict[frozenset, int] = {}
        self.drop_flows = drop_flows
        self.detector = detector
        self.interval_s = interval_s
        self.window_packets = window_packets
        self.capture = capture
        self.app_source = app_source
        self.clock_ns = clock_ns
        self.rank_now = rank_now
        self.events: list[CongestionEvent] = []
        self.last_grouping: Grouping | None = None
        self.last_source: TimestampSource | None = None
        self._flows: dict[FlowId, _Flow] = {}
        self._app = ArrivalBuffer(capacity=max(4 * window_packets, 1024))
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- engine hook -------------------------------------------------------
    def add_flow(
        self,
        flow_id: FlowId,
        rank: float,
        *,
        remote: Remote | None = None,
        local_port: int | None = None,
    ) -> None:
        key = (
            (remote[0], int(remote[1]), int(local_port))
            if remote and remote[1] is not None and local_port
            else None
        )
        with self._lock:
            self._flows[flow_id] = _Flow(float(rank), key, remote)

    def flow_ids(self) -> list[FlowId]:
        with self._lock:
            return list(self._flows)

    def remove_flow(self, flow_id: FlowId) -> None:
        with self._lock:
            self._flows.pop(flow_id, None)
        self._app.forget(flow_id)

    def observe(self, flow_id: FlowId, arrival_ns: int, nbytes: int) -> None:
        """Flow-observer hook: one call per receive."""
        if nbytes > 0:
            self._app.add(flow_id, int(arrival_ns), int(nbytes))

    # -- detection ---------------------------------------------------------
    def _timestamps(self) -> tuple[
        dict[FlowId, np.ndarray], dict[FlowId, float], TimestampSource,
        dict[FlowId, np.ndarray] | None,
    ]:
        """(arrival ns per flow, ranks, source, payload bytes per packet or None)."""
        with self._lock:
            flows = dict(self._flows)
        ranks = {f: s.rank for f, s in flows.items()}
        if self.rank_now is not None:
            live = self.rank_now()
            for f in ranks:
                r = live.get(f)
                if r is not None:
                    ranks[f] = float(r)
        if self.capture is not None and flows and all(s.remote for s in flows.values()):
            cap = self.capture
            packet = {
                f: cap.packets(s.key) if s.key else cap.packets_from(*s.remote)  # type: ignore[misc]
                for f, s in flows.items()
            }
            if all(t.size >= 2 for t, _z in packet.values()):
                w = self.window_packets
                return ({f: t[-w:] for f, (t, _z) in packet.items()}, ranks,
                        self.capture.source, {f: z[-w:] for f, (_t, z) in packet.items()})
        w = self.window_packets
        if self.app_source is TimestampSource.APP_RECV:
            # late reads carry the time of the read, not of an arrival (timestamps.py)
            app = {f: clean_app_timestamps(self._app.timestamps(f), self._app.sizes(f))[-w:]
                   for f in flows}
        else:  # kernel receive times stay true however late the read
            app = {f: self._app.timestamps(f)[-w:] for f in flows}
        # read sizes are not packet sizes: no per-byte spacing for app sources
        return app, ranks, self.app_source, None

    def check(self) -> list[CongestionEvent]:
        """One detection round; drops flows of each shared set found."""
        flows, ranks, source, sizes = self._timestamps()
        self.last_source = source
        if len(flows) < 2:
            return []
        base = pair_test_for(self.detector, source)
        streak = self._streak

        def confirmed(fa: FlowId, a: np.ndarray, fb: FlowId, b: np.ndarray) -> PairVerdict:
            # a pair counts as shared only after ``confirmations`` checks in a row
            ids = frozenset((fa, fb))
            v = base(a, b) if sizes is None else base(a, b, sizes=(sizes[fa], sizes[fb]))
            streak[ids] = streak.get(ids, 0) + 1 if v.shared else 0
            if v.shared and streak[ids] < self.confirmations:
                return PairVerdict(v.detector, Sharing.UNDECIDED, v.confidence, v.packets,
                                   v.statistic, v.span_ns, "awaiting confirmation")
            return v

        keyed = {f: (f, a) for f, a in flows.items()}
        grouping = group_flows(
            keyed, lambda x, y: confirmed(x[0], x[1], y[0], y[1]), ranks)
        self.last_grouping = grouping
        events = []
        for shared in grouping.shared_sets:
            pair_verdicts = [
                v for i, a in enumerate(shared) for b in shared[i + 1:]
                if (v := grouping.verdict(a, b)) is not None
            ]
            event = CongestionEvent(
                shared_set=list(shared),
                kept=shared[0],
                dropped=list(shared[1:]),
                detector=self.detector,
                source=source,
                confidence=min(v.confidence for v in pair_verdicts),
                packets=min(v.packets for v in pair_verdicts),
                at_ns=self.clock_ns(),
                verdicts=pair_verdicts,
            )
            asked = list(event.dropped)
            self.events.append(event)
            events.append(event)
            self.drop_flows(event.dropped, event)
            # (a set the control could not act on yet, the access link not ruled
            # out in the first half second, stays watched: a later round's verdict
            # acts once it can. Lab, two groups behind two links: found at 0.46 s of
            # the engine's 0.5, both kept for the whole download)
            if not event.access_unknown:
                for f in asked:
                    self.remove_flow(f)
        return events

    def _run(self, stop: threading.Event) -> None:
        while not stop.wait(self.interval_s):
            self.check()

    def start(self) -> SharedCongestionMonitor:
        """Run ``check`` every ``interval_s`` in a daemon thread (idempotent)."""
        with self._lock:
            if self._thread is None:
                self._stop = threading.Event()
                self._thread = threading.Thread(target=self._run, args=(self._stop,),
                                                name="pftp-congestion", daemon=True)
                self._thread.start()
        return self

    def stop(self, wait: bool = True) -> None:
        """Stop the periodic checks. ``wait=False`` only signals the thread: use it
        from callbacks that may run while the engine holds its lock (the monitor
        thread may be waiting for that lock inside ``drop_flows``)."""
        with self._lock:
            thread, self._thread = self._thread, None
            self._stop.set()
        if wait and thread is not None and thread is not threading.current_thread():
            thread.join(timeout=10)


class MonitorObserver:
    """Adapter from the engine's FlowObserver hook (flow_observer.py) to the monitor.

    Ranks: ``rank_of(mirror)`` if given (the coordinator's suitability, higher is
    better); otherwise flows that started earlier rank higher, which is what
    paper 001 section 7 keeps ("the mirror server which started first").
    ``endpoint_of(mirror)`` -> (ip, port) lets a packet capture attribute
    packets to flows; without it the monitor uses the engine's app-level times.
    """

    def __init__(
        self,
        control: FlowControl,
        monitor_kw: dict | None = None,
        rank_of: Callable[[str], float | None] | None = None,
        endpoint_of: Callable[[str], Remote | None] | None = None,
        on_event: Callable[[CongestionEvent], None] | None = None,
        rank_by_rate: bool = False,
    ) -> None:
        self.control = control
        self.rank_of = rank_of
        self.endpoint_of = endpoint_of
        self.on_event = on_event
        self._started = 0
        self._mirror: dict[str, str] = {}
        self._left_alone: set[str] = set()  # flows kept when others of their set went
        kw = dict(monitor_kw or {})
        rates = getattr(control, "rates", None)
        if rank_by_rate and rates is not None:
            # dynamic mode: the flow with the best measured rate is kept
            kw["rank_now"] = rates
        self.monitor = SharedCongestionMonitor(self._drop, **kw)

    def _drop(self, flow_ids: list[FlowId], event: CongestionEvent) -> None:
        event.mirrors = [self._mirror.get(str(f), str(f)) for f in event.shared_set]
        saturated = getattr(self.control, "access_saturated", None)
        event.access_link = bool(saturated is not None and saturated())
        undetermined = getattr(self.control, "access_undetermined", None)
        event.access_unknown = bool(undetermined is not None and undetermined())
        running = getattr(self.control, "active_flows", None)
        if running is not None:
            flows = set(running())
            event.everyone = len(flows) >= 2 and flows <= {str(f) for f in event.shared_set}
        if event.everyone:
            note = getattr(self.control, "note_shared_by_all", None)
            if note is not None:
                note()
        if not event.access_link:
            # One drop per upstream link: a set holding the flow an earlier set left
            # is that link again (three mirrors behind one: the first set is two of
            # them, the next the one kept and the third). Dropping again would leave
            # one flow, which may not fill the link: 20 Mbit/s mirrors behind 25,
            # both others parked, 40 of 45 Mbit/s (1.12-1.13x). Two flows sharing a
            # link lose nothing but a backup's place.
            event.thinned_by = [self._mirror.get(str(f), str(f))
                                for f in event.shared_set if str(f) in self._left_alone]
            if event.thinned_by:
                flow_ids = []
        # The engine decides: a backup in its place, parked (no backup left, or the
        # shared link is the access link), or kept.
        done: set[str] = set()
        if flow_ids:
            done = set(self.control.drop_flows([str(f) for f in flow_ids], "congested") or [])
        # Say what really happened.
        event.dropped = [f for f in flow_ids if str(f) in done]
        if event.dropped and not event.access_link:
            self._left_alone.add(str(event.kept))
            # (the engine renews the kept flow's connection if it does not take up
            # the share of those parked; optional, as access_saturated)
            note_kept = getattr(self.control, "note_kept", None)
            if note_kept is not None:
                note_kept(str(event.kept), [str(f) for f in event.dropped])
        if self.on_event is not None:
            self.on_event(event)

    def flow_started(self, flow_id: str, mirror: str) -> None:
        if flow_id in self._mirror:  # the engine may announce a flow twice on attach
            return
        self._started += 1
        self._mirror[flow_id] = mirror
        rank = self.rank_of(mirror) if self.rank_of else None
        remote = self.endpoint_of(mirror) if self.endpoint_of else None
        self.monitor.add_flow(flow_id, -self._started if rank is None else rank, remote=remote)
        self.monitor.start()

    def on_receive(self, flow_id: str, arrival_ns: int, nbytes: int) -> None:
        self.monitor.observe(flow_id, arrival_ns, nbytes)

    def flow_ended(self, flow_id: str) -> None:
        self.monitor.remove_flow(flow_id)
        if not self.monitor.flow_ids():
            self.monitor.stop(wait=False)  # never join here: see stop()


def congestion_detector_factory(
    *,
    rank_of: Callable[[str], float | None] | None = None,
    endpoint_of: Callable[[str], Remote | None] | None = None,
    on_event: Callable[[CongestionEvent], None] | None = None,
    rank_by_rate: bool = False,
    on_observer: Callable[[MonitorObserver], None] | None = None,
    **monitor_kw: object,
) -> DetectorFactory:
    """``Engine(detector_factory=congestion_detector_factory(...))``.

    ``rank_by_rate``: rank flows by the engine's measured rate at each check
    (``control.rates()``), static ranks only break ties for flows without one.
    ``on_observer`` receives the MonitorObserver built for the download."""

    def factory(control: FlowControl, timings: FlowTimings) -> FlowObserver:
        del timings  # the monitor keeps its own bounded buffers
        obs = MonitorObserver(control, dict(monitor_kw), rank_of, endpoint_of, on_event,
                              rank_by_rate=rank_by_rate)
        if on_observer is not None:
            on_observer(obs)
        return obs

    return factory
