"""Shared-congestion detection in downloads: source choice, capture plan, report fields."""

from __future__ import annotations

import pytest
from pftp_client.congestion_wiring import (
    APP,
    KERNEL,
    PACKET,
    CongestionSession,
    CongestionSourceUnavailable,
    capture_plan,
    choose_source,
    congested_with,
    held_back_none,
    kernel_timestamps_possible,
)


@pytest.mark.parametrize(
    ("mode", "capture_ok", "kernel_ok", "want"),
    [
        ("auto", True, True, PACKET),
        ("auto", False, True, KERNEL),
        ("auto", False, False, APP),
        ("auto", True, False, PACKET),
        ("packet", True, False, PACKET),
        ("kernel", True, True, KERNEL),
        ("app", True, True, APP),
        ("off", True, True, None),
    ],
)
def test_choose_source_takes_the_best_available(mode, capture_ok, kernel_ok, want):
    got = choose_source(mode, multi_mirror=True, capture_ok=capture_ok, kernel_ok=kernel_ok)
    assert got == want


def test_no_detection_with_one_mirror_and_clear_errors_for_unavailable_sources():
    assert choose_source("auto", multi_mirror=False, capture_ok=True, kernel_ok=True) is None
    assert choose_source("packet", multi_mirror=False, capture_ok=False, kernel_ok=False) is None
    with pytest.raises(CongestionSourceUnavailable, match="CAP_NET_RAW"):
        choose_source("packet", multi_mirror=True, capture_ok=False, kernel_ok=True)
    with pytest.raises(CongestionSourceUnavailable, match="FTP mirrors only"):
        choose_source("kernel", multi_mirror=True, capture_ok=True, kernel_ok=False)
    with pytest.raises(CongestionSourceUnavailable, match="unknown congestion mode"):
        choose_source("sometimes", multi_mirror=True, capture_ok=True, kernel_ok=True)


def test_kernel_timestamps_only_when_every_mirror_is_ftp():
    assert kernel_timestamps_possible(["ftp://a/f", "FTP://b/f"])
    assert not kernel_timestamps_possible(["ftp://a/f", "http://b/f"])
    assert not kernel_timestamps_possible([])


def test_capture_plan_http_filters_on_ports():
    plan = capture_plan({"m0": ("http://a/f", "10.0.0.1"), "m1": ("http://b:8080/f", "10.0.0.2")})
    assert plan is not None and plan.ports == (80, 8080) and not plan.addresses
    assert plan.endpoints == {"m0": ("10.0.0.1", 80), "m1": ("10.0.0.2", 8080)}
    # two mirrors behind one ip:port cannot be told apart
    assert (
        capture_plan({"m0": ("http://a/f", "10.0.0.1"), "m1": ("http://b/g", "10.0.0.1")}) is None
    )


def test_capture_plan_ftp_needs_distinct_non_loopback_ipv4():
    plan = capture_plan(
        {
            "m0": ("ftp://a/f", "10.0.0.1"),
            "m1": ("ftp://b:2121/f", "10.0.0.2"),
            "m2": ("http://c/f", "10.0.0.3"),
        }
    )
    assert plan is not None and plan.addresses == ("10.0.0.1", "10.0.0.2", "10.0.0.3")
    # FTP data comes from any port of the address but the control port
    assert plan.endpoints["m1"] == ("10.0.0.2", None, 2121)
    assert plan.endpoints["m2"] == ("10.0.0.3", 80)
    assert capture_plan({"m0": ("ftp://a/f", "127.0.0.1"), "m1": ("ftp://b/f", "10.0.0.2")}) is None
    assert capture_plan({"m0": ("ftp://a/f", "10.0.0.1"), "m1": ("http://b/f", "10.0.0.1")}) is None
    assert capture_plan({"m0": ("ftp://a/f", "fd00::1"), "m1": ("ftp://b/f", "10.0.0.2")}) is None


def test_session_falls_back_when_capture_is_not_permitted():
    msgs: list[str] = []
    ftp = [("m0", "ftp://10.0.0.1/f", None), ("m1", "ftp://10.0.0.2/f", None)]
    s = CongestionSession(
        "auto",
        active=ftp,
        backups=[],
        rank_by_rate=True,
        say=msgs.append,
        capture_permitted=lambda: False,
    )
    assert s.source == KERNEL and s.kernel_timestamps
    mixed = [ftp[0], ("m1", "http://10.0.0.2/f", None)]
    s = CongestionSession(
        "auto",
        active=mixed,
        backups=[],
        rank_by_rate=True,
        say=msgs.append,
        capture_permitted=lambda: False,
    )
    assert s.source == APP and not s.kernel_timestamps
    s = CongestionSession(
        "auto",
        active=mixed,
        backups=[],
        rank_by_rate=True,
        say=msgs.append,
        capture_permitted=lambda: True,
    )
    assert s.source == PACKET
    one = CongestionSession(
        "auto",
        active=ftp[:1],
        backups=ftp[1:],
        rank_by_rate=True,
        say=msgs.append,
        capture_permitted=lambda: True,
    )
    assert one.source is None and one.factory() is None
    with pytest.raises(CongestionSourceUnavailable):
        CongestionSession(
            "packet",
            active=mixed,
            backups=[],
            rank_by_rate=True,
            say=msgs.append,
            capture_permitted=lambda: False,
        )


def test_ranks_coordinator_suitability_else_plan_order():
    s = CongestionSession(
        "app",
        active=[("a", "http://x/f", 0.2), ("b", "http://y/f", 0.9)],
        backups=[("c", "http://z/f", None)],
        rank_by_rate=False,
        say=lambda _m: None,
    )
    assert s._rank("b") > s._rank("a") > s._rank("c")
    d = CongestionSession(
        "app",
        active=[("a", "http://x/f", None), ("b", "http://y/f", None)],
        backups=[],
        rank_by_rate=True,
        say=lambda _m: None,
    )
    # dynamic mode: plan order only until measured rates (>= 0) override it
    assert d._rank("a") > d._rank("b") and d._rank("a") < 0


def test_events_become_report_fields():
    from pftp_client.congestion.monitor import CongestionEvent
    from pftp_client.congestion.timestamps import TimestampSource

    s = CongestionSession(
        "app",
        active=[("m0", "http://x/f", 0.9), ("m1", "http://y/f", 0.5), ("m2", "http://z/f", 0.4)],
        backups=[],
        rank_by_rate=False,
        say=lambda _m: None,
        t0=0.0,
    )
    ev = CongestionEvent(
        shared_set=["m0", "m1"],
        kept="m0",
        dropped=["m1"],
        detector="entropy",
        source=TimestampSource.APP_RECV,
        confidence=0.93,
        packets=150,
        at_ns=2_500_000_000,
        mirrors=["m0", "m1"],
    )
    s._on_event(ev)
    out = s.summary()
    assert out["source"] == APP and out["detector"] == "entropy"
    assert out["events"] == [
        {
            "at_s": 2.5,
            "mirrors": ["m0", "m1"],
            "kept": "m0",
            "dropped": ["m1"],
            "detector": "entropy",
            "source": "app-recv",
            "confidence": 0.93,
            "packets": 150,
            "access_link": False,
            "access_unknown": False,
            "everyone": False,
            "thinned_by": [],
        }
    ]
    assert congested_with(out["events"]) == {"m0": ["m1"], "m1": ["m0"]}
    # a set found before the aggregate was measured, or at a full access link, says
    # nothing about the mirrors' own paths: not reported to the coordinator
    assert congested_with([{"mirrors": ["a", "b"], "access_unknown": True},
                           {"mirrors": ["c", "d"], "access_link": True}]) == {}
    # nor one whose parked mirror was put back to work (the verdict did not hold)
    assert congested_with([{"mirrors": ["a", "b"], "dropped": ["b"], "refuted": True},
                           {"mirrors": ["c", "d"], "dropped": ["d"]}]) == {
        "c": ["d"], "d": ["c"]}
    three = congested_with([{"mirrors": ["a", "b", "c"]}, {"mirrors": ["a", "d"]}])
    assert three == {"a": ["b", "c", "d"], "b": ["a", "c"], "c": ["a", "b"], "d": ["a"]}


def test_a_set_that_held_no_one_back_is_not_reported():
    """Nothing dropped, and each mirror carried 90 % of what the coordinator expected
    of it: a link they share, if any, cost them nothing (lossy-far sweep: two clean
    25 Mbit/s mirrors named together at 22 Mbit/s each, and the next coordinated run
    got two mirrors instead of three, 1.61x)."""
    expected = {"a": 25e6, "b": 25e6, "c": 20e6}
    ev = {"mirrors": ["a", "b"], "dropped": []}
    assert held_back_none(ev, {"a": 22.5e6, "b": 23e6}, expected)
    # one of them held back well below its expected rate: the verdict may be right
    assert not held_back_none(ev, {"a": 22.5e6, "b": 12e6}, expected)
    # acted on (a mirror dropped or parked): that has its own test (refuted)
    assert not held_back_none({"mirrors": ["a", "b"], "dropped": ["b"]},
                              {"a": 25e6, "b": 25e6}, expected)
    # no expected rate (a mirror-only download) or no rate: no judgement
    assert not held_back_none({"mirrors": ["a", "d"]}, {"a": 25e6, "d": 25e6}, expected)
    assert not held_back_none(ev, {"a": 25e6, "b": None}, expected)
    ev["harmless"] = True
    assert congested_with([ev, {"mirrors": ["b", "c"]}]) == {"b": ["c"], "c": ["b"]}
