"""The benchmark's lower bounds (pure functions, no lab needed)."""

from __future__ import annotations

import pytest

from bench.bounds import (
    PAYLOAD_EFFICIENCY,
    LinkState,
    aggregate_bps,
    bound_seconds,
    single_mirror_bps,
)
from bench.scenarios import MIB, SCENARIOS

M = 1_000_000


def test_aggregate_is_capped_by_shared_bottleneck_and_access() -> None:
    state = LinkState(access_bps=None, mirrors={"a": 30 * M, "b": 30 * M, "c": 15 * M},
                      groups={"g": (20 * M, ("a", "b"))})
    assert aggregate_bps(state) == 35 * M
    assert aggregate_bps(LinkState(4 * M, state.mirrors, state.groups)) == 4 * M
    assert single_mirror_bps(state, "a") == 20 * M


def test_piecewise_bound_over_an_event() -> None:
    before = LinkState(None, {"a": 10 * M, "b": 30 * M}, {})
    after = LinkState(None, {"a": 10 * M, "b": 0.0}, {})
    size = 10 * 1_000_000  # 80 Mbit
    # 20% at 40 Mbit/s (0.4 s), then 80% at 10 Mbit/s (6.4 s)
    expected = 6.8 / PAYLOAD_EFFICIENCY
    assert bound_seconds(size, [(0.2, before), (1.0, after)]) == pytest.approx(expected)
    with pytest.raises(ValueError):
        bound_seconds(size, [(1.0, LinkState(None, {"a": 0.0}, {}))])


def test_every_scenario_has_a_finite_bound_and_a_sane_file() -> None:
    names = [s.name for s in SCENARIOS]
    assert len(names) == len(set(names)) == 10
    limited = next(s for s in SCENARIOS if s.name == "per-connection-limit")
    assert all(m.conn_rate_Bps for m in limited.mirrors)
    # the long-path scenarios have their delay lines (and the lossy one its loss)
    wide = next(s for s in SCENARIOS if s.name == "wide-area")
    assert sorted(m.rtt_ms for m in wide.mirrors) == [20, 40, 80, 160]
    lossy = next(s for s in SCENARIOS if s.name == "lossy-path")
    assert [m.loss for m in lossy.mirrors].count(0.01) == 1
    for s in SCENARIOS:
        for quick in (True, False):
            size = s.file_bytes(quick)
            assert size >= MIB
            assert 0 < s.bound_s(size) < 60
    dies = next(s for s in SCENARIOS if s.name == "mirror-dies")
    # after the kill the 30 Mbit/s mirror is gone: the bound is longer than without events
    size = dies.file_bytes(False)
    assert dies.bound_s(size) > size * 8 / 80e6


def test_the_bench_waits_for_every_exit_and_kills_at_the_deadline() -> None:
    """bench.tools._wait_all (a blocking wait: Popen.wait(timeout) polls in steps of
    up to 50 ms, which the measured times used to include): exit codes as they
    are, None for a process killed at the deadline, which is kept."""
    import subprocess
    import sys
    import time

    from bench.tools import _wait_all

    def spawn(code: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen([sys.executable, "-c", code])

    procs = [spawn("import time; time.sleep(60)"), spawn("import sys; sys.exit(3)")]
    t0 = time.monotonic()
    assert _wait_all(procs, time.monotonic() + 1.0) == [None, 3]
    assert 0.9 < time.monotonic() - t0 < 30
    assert procs[0].returncode is not None  # killed, not left running
    assert _wait_all([spawn("pass"), spawn("import sys; sys.exit(1)")],
                     time.monotonic() + 30) == [0, 1]


def test_phases_follow_every_kind_of_event() -> None:
    """A link that goes down and comes back, a mirror that dies and restarts, an
    access link that grows: the bound follows each (fault sweeps use them)."""
    from pftp_lab import MirrorSpec

    from bench.scenarios import Event, Scenario

    sc = Scenario(
        "t", "t", (MirrorSpec(rate_bps=10 * M), MirrorSpec(rate_bps=30 * M)),
        access_bps=20 * M,
        events=(Event(0.2, "disconnect", "m1"), Event(0.4, "reconnect", "m1"),
                Event(0.5, "kill", "m0"), Event(0.6, "restart", "m0"),
                Event(0.8, "access", "", 100 * M)),
    )
    states = [(f, st.mirrors["m0"], st.mirrors["m1"], st.access_bps) for f, st in sc.phases()]
    assert states == [
        (0.2, 10 * M, 30 * M, 20 * M),
        (0.4, 10 * M, 0.0, 20 * M),
        (0.5, 10 * M, 30 * M, 20 * M),
        (0.6, 0.0, 30 * M, 20 * M),
        (0.8, 10 * M, 30 * M, 20 * M),
        (1.0, 10 * M, 30 * M, 100 * M),
    ]
    with pytest.raises(ValueError, match="unknown event kind"):
        Scenario("u", "u", sc.mirrors, events=(Event(0.5, "melt", "m0"),)).phases()
