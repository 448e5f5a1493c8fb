import threading

import numpy as np
import pytest
from pftp_client.congestion import (
    PairVerdict,
    SharedCongestionMonitor,
    Sharing,
    TimestampSource,
    entropy_pair_test,
    flows_to_drop,
    group_flows,
)
from pftp_client.congestion.monitor import congestion_detector_factory

from .synthetic import MS, own_link, shared_link


def _topology(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    a, b = shared_link(rng, 2, 1.5 * MS, 900)
    c, d = shared_link(rng, 2, 1.1 * MS, 1200)
    e = own_link(rng, 1.8 * MS, 450)
    return {"a": a, "b": b, "c": c, "d": d, "e": e}


@pytest.mark.parametrize("seed", range(3))
def test_grouping_finds_two_shared_pairs_in_n_squared_tests(seed):
    flows = _topology(seed)
    calls = []

    def counting(x, y):
        calls.append(1)
        return entropy_pair_test(x, y)

    ranks = {"a": 0.2, "b": 0.9, "c": 0.5, "d": 0.1, "e": 1.0}
    g = group_flows(flows, counting, ranks)
    assert len(calls) == g.pair_tests == 5 * 4 // 2
    assert sorted(map(sorted, g.shared_sets)) == [["a", "b"], ["c", "d"]]
    # best-ranked first in each set: keep b and c, drop a and d
    assert [s[0] for s in g.shared_sets] == ["b", "c"]
    assert sorted(flows_to_drop(g)) == ["a", "d"]
    assert g.set_of("e") is None


def _fake(pairs_shared: set[frozenset[str]]):
    def test(x, y):
        key = frozenset((str(x[0]), str(y[0])))
        sharing = Sharing.SHARED if key in pairs_shared else Sharing.INDEPENDENT
        return PairVerdict("fake", sharing, 0.99, 100, 0.0)

    return test


def test_one_wrong_pair_cannot_chain_unrelated_flows():
    flows = {k: np.array([k]) for k in ("a", "b", "c")}
    g = group_flows(flows, _fake({frozenset("ab"), frozenset("bc")}))
    assert len(g.shared_sets) == 1 and len(g.shared_sets[0]) == 2


def test_three_way_set_when_all_pairs_agree():
    flows = {k: np.array([k]) for k in ("a", "b", "c", "d")}
    shared = {frozenset(p) for p in ("ab", "ac", "bc")}
    g = group_flows(flows, _fake(shared))
    assert sorted(map(sorted, g.shared_sets)) == [["a", "b", "c"]]


def test_flows_must_be_a_mapping():
    assert group_flows({"a": np.arange(3)}, entropy_pair_test).shared_sets == []
    with pytest.raises(TypeError, match="map flow id"):
        group_flows([("a", np.arange(3)), ("b", np.arange(3))], entropy_pair_test)


def _feed(mon, flows, sizes=1448):
    events = sorted((int(t), f) for f, ts in flows.items() for t in ts)
    for t, f in events:
        mon.observe(f, t, sizes)


def test_monitor_drops_all_but_the_best_ranked_flow_of_each_set():
    flows = _topology(11)
    dropped: list[list[str]] = []
    mon = SharedCongestionMonitor(lambda ids, ev: dropped.append(sorted(ids)),
                                  clock_ns=lambda: 0)
    for f, rank in {"a": 3, "b": 1, "c": 2, "d": 5, "e": 4}.items():
        mon.add_flow(f, rank)
    assert mon.check() == []  # no data yet: no decision
    _feed(mon, flows)
    assert mon.check() == []  # shared verdicts need confirmations=2 checks in a row
    assert dropped == []
    events = mon.check()
    assert sorted(dropped) == [["b"], ["c"]]
    assert {e.kept for e in events} == {"a", "d"}
    for e in events:
        assert e.source is TimestampSource.APP_RECV
        assert e.confidence >= 0.9
        assert 60 <= e.packets <= 400
        assert e.detector == "entropy"
    # dropped flows are gone; the survivors are not shared any more
    assert mon.check() == []


def test_monitor_rejects_unknown_detector():
    with pytest.raises(ValueError, match="unknown detector"):
        SharedCongestionMonitor(lambda ids, ev: None, detector="astrology")


class _Engine:
    """The part of the engine the factory talks to (FlowControl)."""

    def __init__(self):
        self.dropped: list[str] = []
        self.alive = {"f1", "f2", "f3"}
        self.lock = threading.Lock()
        self.kept: list[tuple[str, list[str]]] = []  # note_kept's calls

    def note_kept(self, kept, dropped):
        self.kept.append((kept, list(dropped)))

    def drop_flows(self, flow_ids, reason="congested"):
        with self.lock:
            ids = [f for f in flow_ids if f in self.alive]
            self.dropped += ids
            self.alive -= set(ids)
        return ids

    def active_flows(self):
        return sorted(self.alive)


def test_detector_factory_plugs_into_the_engine_hook():
    from pftp_client.flow_observer import FlowTimings

    rng = np.random.default_rng(5)
    a, b = shared_link(rng, 2, 1.5 * MS, 900)
    c = own_link(rng, 1.3 * MS, 500)
    engine = _Engine()
    events = []
    obs = congestion_detector_factory(on_event=events.append, interval_s=3600)(
        engine, FlowTimings(16))
    for fid, mirror in (("f1", "m1"), ("f2", "m2"), ("f3", "m3")):
        obs.flow_started(fid, mirror)
    for t, f in sorted((int(t), f) for f, ts in {"f1": a, "f2": b, "f3": c}.items() for t in ts):
        obs.on_receive(f, t, 1448)
    obs.monitor.check()
    obs.monitor.check()
    assert engine.dropped == ["f2"]  # f1 started first, so it ranks higher and stays
    assert events and events[0].kept == "f1"
    assert events[0].mirrors == ["m1", "m2"]
    for f in ("f1", "f2", "f3"):
        engine.alive.discard(f)
        obs.flow_ended(f)
    assert obs.monitor._thread is None  # stopped once no flow is left


def _shared_phase(obs, flows: tuple[str, str], start_ns: int, seed: int) -> None:
    """Arrivals of ``flows`` sharing one link from ``start_ns``, and two checks (a
    verdict needs two in a row)."""
    rng = np.random.default_rng(seed)
    a, b = shared_link(rng, 2, 1.5 * MS, 1400, start_ns=start_ns)
    for t, f in sorted((int(t), f) for f, ts in zip(flows, (a, b), strict=True) for t in ts):
        obs.on_receive(f, t, 1448)
    obs.monitor.check()
    obs.monitor.check()


def test_one_drop_per_link_the_flow_left_is_not_dropped_again():
    """Three flows behind one link come as two sets: f1 with f2 (f2 dropped, f1 kept),
    then f1 with f3. Dropping f3 would leave f1 alone on the link, which it may not
    fill; so nothing more is dropped and the event says why. Two sets on two links
    (f1 with f2, f3 with f4) each lose a flow."""
    from pftp_client.flow_observer import FlowTimings

    engine = _Engine()
    events = []
    obs = congestion_detector_factory(on_event=events.append, interval_s=3600)(
        engine, FlowTimings(16))
    for fid in ("f1", "f2", "f3"):
        obs.flow_started(fid, "m" + fid[1])
    _shared_phase(obs, ("f1", "f2"), 0, 5)
    assert engine.dropped == ["f2"] and events[-1].kept == "f1"
    _shared_phase(obs, ("f1", "f3"), 10**10, 6)
    assert engine.dropped == ["f2"], "the flow left on the link lost its partner too"
    assert events[-1].mirrors == ["m1", "m3"] and events[-1].dropped == []
    assert events[-1].thinned_by == ["m1"]
    assert engine.kept == [("f1", ["f2"])]
    obs.monitor.stop()

    engine = _Engine()
    engine.alive.add("f4")
    events = []
    obs = congestion_detector_factory(on_event=events.append, interval_s=3600)(
        engine, FlowTimings(16))
    for fid in ("f1", "f2", "f3", "f4"):
        obs.flow_started(fid, "m" + fid[1])
    _shared_phase(obs, ("f1", "f2"), 0, 5)
    _shared_phase(obs, ("f3", "f4"), 10**10, 6)
    assert engine.dropped == ["f2", "f4"]
    assert [e.thinned_by for e in events] == [[], []]
    # (the engine hears which flow is left on each link: it renews that one's
    # connection if it does not take up the share of the one parked)
    assert engine.kept == [("f1", ["f2"]), ("f3", ["f4"])]
    obs.monitor.stop()


class _SaturatedEngine(_Engine):
    """An engine whose flows together fill the client's access link."""

    def access_saturated(self):
        return True


def _two_flows_on_one_link(engine: _Engine) -> tuple[list, object]:
    """Two flows (m1, m2) whose arrivals share one link, run through the real
    monitor with ``engine`` as its control: (the events, the observer)."""
    from pftp_client.flow_observer import FlowTimings

    rng = np.random.default_rng(5)
    a, b = shared_link(rng, 2, 1.5 * MS, 900)
    events = []
    obs = congestion_detector_factory(on_event=events.append, interval_s=3600)(
        engine, FlowTimings(16))
    for fid, mirror in (("f1", "m1"), ("f2", "m2")):
        obs.flow_started(fid, mirror)
    for t, f in sorted((int(t), f) for f, ts in {"f1": a, "f2": b}.items() for t in ts):
        obs.on_receive(f, t, 1448)
    obs.monitor.check()
    obs.monitor.check()
    return events, obs


def test_shared_set_on_a_full_access_link_goes_to_the_engine_and_is_not_reported():
    """The engine decides what to do with a set found on a full access link (it
    parks the flows, engine.drop_flows); the event says so and is marked, and the
    mirrors are not reported as sharing congestion."""
    from pftp_client.congestion_wiring import congested_with

    engine = _SaturatedEngine()
    events, obs = _two_flows_on_one_link(engine)
    assert events and events[0].access_link and events[0].dropped == ["f2"]
    assert engine.dropped == ["f2"]
    # such a set says nothing about the mirrors' own paths: not reported
    as_dicts = [{"mirrors": e.mirrors, "access_link": e.access_link} for e in events]
    assert congested_with(as_dicts) == {}
    assert congested_with([{"mirrors": ["m1", "m2"]}]) == {"m1": ["m2"], "m2": ["m1"]}
    obs.monitor.stop()


class _TwoFlowEngine(_Engine):
    """An engine running two flows that hears of a set holding both."""

    def __init__(self):
        super().__init__()
        self.alive = {"f1", "f2"}
        self.shared_by_all = 0

    def note_shared_by_all(self):
        self.shared_by_all += 1


def test_a_set_of_every_flow_of_the_download_is_acted_on_but_not_reported():
    """Every flow the download runs is in the set: the link they all cross may be
    the client's own (lab r30: its access link cut from 1 Gbit/s to 21 Mbit/s
    mid-download). The engine acts as on any set; the event says so, and the pair
    is not reported (the next coordinated download got one mirror of two, 1.86x).
    A set of two of three flows is reported as before."""
    from pftp_client.congestion_wiring import congested_with

    engine = _TwoFlowEngine()
    events, obs = _two_flows_on_one_link(engine)
    assert events and events[0].everyone and engine.dropped == ["f2"]
    assert engine.shared_by_all == 1  # (the engine tries no more connections then)
    as_dicts = [{"mirrors": e.mirrors, "everyone": e.everyone} for e in events]
    assert congested_with(as_dicts) == {}
    obs.monitor.stop()
    events, obs = _two_flows_on_one_link(_Engine())  # (f3 runs on a link of its own)
    assert events and not events[0].everyone
    as_dicts = [{"mirrors": e.mirrors, "everyone": e.everyone} for e in events]
    assert congested_with(as_dicts) == {"m1": ["m2"], "m2": ["m1"]}
    obs.monitor.stop()


class _UnmeasuredEngine(_Engine):
    """An engine with a known access bandwidth whose aggregate is not measured yet."""

    def access_undetermined(self):
        return True


def test_shared_set_before_the_aggregate_is_measured_is_not_reported():
    """Found in the first half second, a set cannot be told from the access link:
    the event says so, and its mirrors are not reported as sharing congestion (the
    coordinator would avoid selecting them together)."""
    from pftp_client.congestion_wiring import congested_with

    events, obs = _two_flows_on_one_link(_UnmeasuredEngine())
    assert events and events[0].access_unknown and not events[0].access_link
    as_dicts = [{"mirrors": e.mirrors, "access_unknown": e.access_unknown} for e in events]
    assert congested_with(as_dicts) == {}
    obs.monitor.stop()


class _MeasuredLaterEngine(_Engine):
    """An engine with a known access bandwidth whose aggregate is measured only
    once ``measured`` is set: until then it acts on no set (engine.drop_flows)."""

    measured = False

    def access_undetermined(self):
        return not self.measured

    def drop_flows(self, flow_ids, reason="congested"):
        return super().drop_flows(flow_ids, reason) if self.measured else []


def test_a_set_found_before_the_aggregate_is_measured_is_acted_on_later():
    """A set found while the access link cannot be ruled out is kept; its flows stay
    watched, so the next round's verdict, with the aggregate measured, drops one."""
    from pftp_client.flow_observer import FlowTimings

    engine = _MeasuredLaterEngine()
    events = []
    obs = congestion_detector_factory(on_event=events.append, interval_s=3600)(
        engine, FlowTimings(16))
    for fid in ("f1", "f2"):
        obs.flow_started(fid, "m" + fid[1])
    _shared_phase(obs, ("f1", "f2"), 0, 5)
    assert events and events[-1].access_unknown and events[-1].dropped == []
    assert engine.dropped == []
    engine.measured = True
    _shared_phase(obs, ("f1", "f2"), 10**10, 6)
    assert engine.dropped == ["f2"], [(e.mirrors, e.dropped) for e in events]
    assert not events[-1].access_unknown and events[-1].dropped == ["f2"]
    obs.monitor.stop()


def test_real_sources_need_stronger_evidence_for_shared():
    """The bare test says shared at D < -0.25; kernel timestamps need D < -0.7 and
    app-recv D < -0.9 (detectors.py: both see the receiver's own batching)."""
    from pftp_client.congestion.detectors import pair_test_for

    packet = pair_test_for("entropy", TimestampSource.PACKET_AF_PACKET)
    kernel = pair_test_for("entropy", "app-kernel")
    app = pair_test_for("entropy", "app-recv")
    rng = np.random.default_rng(21)
    a, b = shared_link(rng, 2, 1.5 * MS, 900, jitter=0.6)  # smeared lattice: weak signal
    bare, vp, vk, va = entropy_pair_test(a, b), packet(a, b), kernel(a, b), app(a, b)
    assert bare.statistic == pytest.approx(vp.statistic) == pytest.approx(va.statistic)
    assert -0.7 < bare.statistic < -0.25
    assert bare.shared and not vp.shared and not vk.shared and not va.shared
    clear_a, clear_b = shared_link(rng, 2, 1.5 * MS, 900)  # a clean lattice: strong signal
    strong = packet(clear_a, clear_b)
    assert strong.statistic < -0.9 and strong.shared and kernel(clear_a, clear_b).shared
    with pytest.raises(ValueError, match="unknown detector"):
        pair_test_for("tea-leaves", "app-recv")


def test_late_receives_are_removed_from_app_timestamps():
    from pftp_client.congestion.timestamps import clean_app_timestamps

    t = np.array([10, 20, 30, 40])
    n = np.array([1448, 1448 * 6, 1448, 2000])
    assert clean_app_timestamps(t, n).tolist() == [10, 30, 40]
    with pytest.raises(ValueError, match="same length"):
        clean_app_timestamps(t, n[:2])
