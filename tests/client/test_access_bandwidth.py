"""Access bandwidth (paper 004, 3.3): the packet-train estimator on synthetic
trains through a token-bucket model, and the choice of source (config > packet
train > history > unknown) with its cache, on fake route tables and a fake probe."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from pftp_client.access_bandwidth import (
    FAILED_PROBE_TTL_S,
    PROBE_TTL_S,
    access_bandwidth,
    default_route,
    default_route_interface,
    record_download,
)
from pftp_client.bandwidth_setting import parse_bandwidth
from pftp_client.packet_train import estimate_rate, queued_runs, windowed_gaps

SIZE = 1500  # bytes per reply (IP)


def tbf_train(
    rate_bps: float,
    *,
    burst: int = 32 * 1024,
    count: int = 120,
    send_gap: float = 2e-6,
    base_rtt: float = 100e-6,
    queue_limit_s: float | None = None,
    pause_at: int | None = None,
    pause_s: float = 0.0,
    line_bps: float = 10e9,
) -> tuple[list[float], list[tuple[int, float]]]:
    """(send times by seq, replies (seq, arrival)) for a train whose replies cross a
    token bucket filter (rate, burst, queue limit as waiting time) like tc tbf."""
    sends, t = [], 1000.0
    for seq in range(count):
        if seq == pause_at:
            t += pause_s
        sends.append(t)
        t += send_gap
    fill = rate_bps / 8  # bytes/s
    tokens, t_tokens, link_free = float(burst), 0.0, 0.0
    replies = []
    for seq, sent in enumerate(sends):
        at_shaper = sent + base_rtt / 2
        start = max(at_shaper, link_free)
        have = min(burst, tokens + (start - t_tokens) * fill)
        leave = start if have >= SIZE else start + (SIZE - have) / fill
        if queue_limit_s is not None and leave - at_shaper > queue_limit_s:
            continue  # dropped by the full queue: no tokens, no link time
        tokens = min(burst, tokens + (leave - t_tokens) * fill) - SIZE
        t_tokens = leave
        link_free = leave + SIZE * 8 / line_bps
        replies.append((seq, link_free + base_rtt / 2))
    return sends, replies


def rate_of(sends, replies, **kw) -> float | None:
    return estimate_rate(sends, replies, SIZE, **kw).rate_bps


# ------------------------------------------------------------------ estimator


def test_windowed_gaps_average_consecutive_gaps():
    assert windowed_gaps([0.0, 1.0, 3.0, 6.0], 1) == [1.0, 2.0, 3.0]
    assert windowed_gaps([6.0, 0.0, 3.0, 1.0], 3) == [2.0]  # sorted first
    assert windowed_gaps([1.0], 4) == []


@pytest.mark.parametrize(
    ("rate", "burst"),
    [(1e6, 32768), (5e6, 32768), (20e6, 32768), (80e6, 100_000), (300e6, 40_000)],
)
def test_shaped_train_reads_the_shaped_rate(rate, burst):
    sends, replies = tbf_train(rate, burst=burst)
    assert rate_of(sends, replies) == pytest.approx(rate, rel=0.02)


def test_the_burst_a_bucket_lets_through_is_not_read_as_the_link():
    # 80 of 120 packets pass on the burst at line rate: the median of all gaps
    # would read 10 Gbit/s; only the queued replies count.
    sends, replies = tbf_train(20e6, burst=80 * SIZE)
    all_gaps = sorted(b - a for (_, a), (_, b) in itertools.pairwise(replies))
    assert SIZE * 8 / all_gaps[len(all_gaps) // 2] > 1e9
    assert rate_of(sends, replies) == pytest.approx(20e6, rel=0.02)


def test_replies_dropped_by_a_full_queue_do_not_bias_the_rate():
    sends, replies = tbf_train(5e6, queue_limit_s=0.08)
    assert len(replies) < 100  # the queue held fewer than the train
    assert rate_of(sends, replies) == pytest.approx(5e6, rel=0.02)


def test_a_sender_pause_that_refills_the_bucket_never_reads_fast():
    # Seen in the lab under load: a 6-70 ms pause mid-train refilled a 100 kB
    # bucket and the rest of the train passed at line rate.
    for pause_at in (20, 45, 60, 90):
        for pause_s in (0.002, 0.006, 0.02, 0.07):
            sends, replies = tbf_train(80e6, burst=100_000, pause_at=pause_at, pause_s=pause_s)
            est = estimate_rate(sends, replies, SIZE)
            assert est.rate_bps is None or est.rate_bps == pytest.approx(80e6, rel=0.05), (
                pause_at, pause_s, est,
            )  # fmt: skip


def test_a_late_send_stamp_does_not_spoil_the_base_round_trip():
    sends, replies = tbf_train(20e6)
    sends[70] += 0.07  # scheduler ran someone else between sendto() and the clock
    assert rate_of(sends, replies) == pytest.approx(20e6, rel=0.02)


def test_receive_batching_in_pairs_averages_out():
    sends, replies = tbf_train(40e6)
    batched = [
        (seq, replies[i + 1][1] if i % 2 == 0 and i + 1 < len(replies) else t)
        for i, (seq, t) in enumerate(replies)
    ]
    assert rate_of(sends, batched) == pytest.approx(40e6, rel=0.05)


def test_stray_outlier_gaps_are_ignored():
    sends, replies = tbf_train(20e6)
    # One reply delayed by 3 ms on the way in (another process's softirq),
    # shifting every later one: the link spacing is unchanged.
    shifted = [(s, t + (0.003 if i >= 100 else 0.0)) for i, (s, t) in enumerate(replies)]
    assert rate_of(sends, shifted) == pytest.approx(20e6, rel=0.02)


def test_unshaped_path_is_sender_limited_not_a_figure():
    sends, replies = tbf_train(100e9, burst=10**9, send_gap=10e-6)
    est = estimate_rate(sends, replies, SIZE)
    assert est.rate_bps is None
    assert "sender-limited" in est.detail or "queue" in est.detail


def test_no_or_few_replies_give_no_figure():
    sends, replies = tbf_train(20e6)
    assert "no echo reply" in estimate_rate(sends, [], SIZE).detail
    est = estimate_rate(sends, replies[-6:], SIZE)
    assert est.rate_bps is None and "too few queued replies" in est.detail


def test_implausibly_low_rate_and_nominal_cap():
    sends, replies = tbf_train(30e3, burst=3000, count=40)
    assert "implausibly low" in estimate_rate(sends, replies, SIZE).detail
    sends, replies = tbf_train(80e6, burst=100_000)
    est = estimate_rate(sends, replies, SIZE, cap_bps=50e6)
    assert est.rate_bps == 50e6 and "capped" in est.detail
    with pytest.raises(ValueError, match="packet_bytes"):
        estimate_rate(sends, replies, 0)


def test_queued_runs_keep_the_backlogged_stretch_only():
    sends, replies = tbf_train(20e6, burst=60 * SIZE)
    runs, top = queued_runs(sends, replies)
    assert len(runs) == 1 and top > 0.01
    first_queued = min(seq for seq, t in replies if t == runs[0][0])
    assert first_queued > 60  # none of the burst


# ------------------------------------------------------------------ source choice

GW = "10.1.2.1"


def _trains_from(monkeypatch, *rates: float) -> list[int]:
    """measure() gets one tbf_train per call, at these rates in turn (the first one
    a spoiled train that reads too fast); returns the list of calls made."""
    from pftp_client import packet_train

    calls: list[int] = []

    def fake_send_train(target, **kw):
        sends, replies = tbf_train(rates[len(calls)])
        calls.append(1)
        return packet_train.TrainSample(target, "raw", len(sends), tuple(sends),
                                        tuple(replies), SIZE, 0.01)

    monkeypatch.setattr(packet_train, "send_train", fake_send_train)
    return calls


def test_measure_takes_the_lower_of_two_trains(monkeypatch):
    """A spoiled train reads too fast (a receiver that batched the replies, a bucket
    refilled during a pause); a second one, when the budget has room, catches it."""
    from pftp_client.packet_train import measure

    calls = _trains_from(monkeypatch, 200e6, 80e6, 80e6)
    m = measure("10.0.0.1")
    assert len(calls) == 2 and m.trains == 2
    assert m.estimate.rate_bps == pytest.approx(80e6, rel=0.05)


def test_measure_keeps_one_figure_when_no_second_train_fits(monkeypatch):
    from pftp_client.packet_train import measure

    calls = _trains_from(monkeypatch, 80e6, 200e6)
    m = measure("10.0.0.1", budget_s=0.05)
    assert len(calls) == 1 and m.estimate.rate_bps == pytest.approx(80e6, rel=0.05)


def route_file(tmp_path: Path, *, gateway_hex: str = "0102010A", metric: int = 0) -> Path:
    path = tmp_path / "route"
    path.write_text(
        "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\tMTU\tWindow\tIRTT\n"
        "eth9\t0000FEA9\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0\n"
        f"eth7\t00000000\t{gateway_hex}\t0003\t0\t0\t{metric}\t00000000\t0\t0\t0\n"
    )
    return path


def sys_net(tmp_path: Path, speed: str = "1000") -> Path:
    net = tmp_path / "net"
    (net / "eth7").mkdir(parents=True, exist_ok=True)
    (net / "eth7" / "speed").write_text(speed + "\n")
    (net / "eth7" / "mtu").write_text("1500\n")
    return net


class FakeProbe:
    def __init__(self, rate: float | None) -> None:
        self.rate = rate
        self.calls: list[tuple[str, int, float | None]] = []

    def __call__(self, target: str, mtu: int, cap: float | None) -> tuple[float | None, str]:
        self.calls.append((target, mtu, cap))
        how = f"packet train to {target}: {self.rate}" if self.rate else "no echo reply"
        return self.rate, how


class Clock:
    def __init__(self) -> None:
        self.t = 1_700_000_000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def world(tmp_path):
    """Fake /proc and /sys files, a state file, a clock; ``ask(**kw)`` runs the choice."""

    class World:
        route = route_file(tmp_path)
        net = sys_net(tmp_path)
        arp = tmp_path / "arp"
        state = tmp_path / "cache" / "access_bandwidth.json"
        clock = Clock()

        def ask(self, probe, configured=None, env=None):
            return access_bandwidth(
                configured, env or {}, self.route, self.net, state_file=self.state,
                arp_table=self.arp, probe=probe, now=self.clock,
            )  # fmt: skip

        def record(self, size, seconds, env=None):
            return record_download(
                size, seconds, env or {}, self.route, state_file=self.state,
                arp_table=self.arp, now=self.clock,
            )  # fmt: skip

    World.arp.write_text(
        f"IP address HW type Flags HW address Mask Device\n{GW} 0x1 0x2 02:00:00:00:00:01 * eth7\n"
    )
    return World()


def test_parse_bandwidth():
    assert parse_bandwidth("100M") == 100_000_000
    assert parse_bandwidth("1.5G") == 1_500_000_000
    assert parse_bandwidth("800 kbps") == 800_000
    with pytest.raises(ValueError, match="bad bandwidth"):
        parse_bandwidth("fast")
    with pytest.raises(ValueError, match="> 0"):
        parse_bandwidth("0")


def test_default_route_lowest_metric_and_point_to_point(tmp_path):
    path = route_file(tmp_path)
    with path.open("a") as f:
        f.write("wg0\t00000000\t00000000\t0001\t0\t0\t50\t00000000\t0\t0\t0\n")
    route = default_route(path)
    assert route is not None and (route.dev, route.gateway) == ("eth7", GW)
    assert default_route_interface(path) == "eth7"
    ptp = tmp_path / "ptp"
    ptp.write_text("Iface\tDestination\tGateway\tFlags\tRefCnt\tUse\tMetric\tMask\n"
                   "ppp0\t00000000\t00000000\t0001\t0\t0\t0\t00000000\n")  # fmt: skip
    route = default_route(ptp)
    assert route is not None and route.gateway is None
    assert default_route(tmp_path / "absent") is None


def test_configuration_wins_and_never_probes(world):
    probe = FakeProbe(20e6)
    assert world.ask(probe, env={"PFTP_ACCESS_BANDWIDTH": "5M"}, configured="9M") == (
        5_000_000, "env PFTP_ACCESS_BANDWIDTH",
    )  # fmt: skip
    assert world.ask(probe, configured="20M") == (20_000_000, "config file")
    assert probe.calls == []


def test_measured_value_is_used_and_cached(world):
    probe = FakeProbe(19.8e6)
    bw, source = world.ask(probe)
    assert bw == 19_800_000 and "packet train to 10.1.2.1" in source
    # The nominal link speed is only a cap handed to the probe, never the answer.
    assert probe.calls == [(GW, 1500, 1_000_000_000)]
    world.clock.t += PROBE_TTL_S - 1
    bw, source = world.ask(probe)
    assert bw == 19_800_000 and source.startswith("cached")
    assert len(probe.calls) == 1
    world.clock.t += 2
    world.ask(probe)
    assert len(probe.calls) == 2
    saved = json.loads(world.state.read_text())
    assert list(saved["probes"]) == ["eth7 via 10.1.2.1 (02:00:00:00:00:01)"]


def test_failed_probe_is_unknown_and_cached_briefly(world):
    probe = FakeProbe(None)
    assert world.ask(probe) == (None, "unknown (no echo reply)")
    world.ask(probe)
    assert len(probe.calls) == 1
    world.clock.t += FAILED_PROBE_TTL_S + 1
    world.ask(probe)
    assert len(probe.calls) == 2


def test_history_is_the_fallback_and_a_floor(world):
    assert world.record(10 << 20, 4.0) == int((10 << 20) * 8 / 4.0)  # ~21 Mbit/s
    assert world.record(100, 4.0) is None  # too small to say anything
    assert world.record(10 << 20, 0.1) is None  # too short
    best = int((10 << 20) * 8 / 4.0)
    bw, source = world.ask(FakeProbe(None))
    assert bw == best and source.startswith("best of 1 recent download")
    world.clock.t += FAILED_PROBE_TTL_S + 1
    bw, source = world.ask(FakeProbe(5e6))  # asymmetric link: the train read the uplink
    assert bw == best and "raised to the best" in source
    world.clock.t += PROBE_TTL_S + 1
    assert world.ask(FakeProbe(80e6))[0] == 80_000_000  # the measurement, above history


def test_history_belongs_to_its_link_and_ages_out(world, tmp_path):
    world.record(10 << 20, 4.0)
    world.route = route_file(tmp_path, gateway_hex="0101A8C0")  # 192.168.1.1: another link
    assert world.ask(FakeProbe(None))[0] is None
    world.route = route_file(tmp_path)
    world.clock.t += 8 * 24 * 3600
    assert world.ask(FakeProbe(None))[0] is None


def test_probe_setting(world):
    probe = FakeProbe(30e6)
    assert world.ask(probe, env={"PFTP_ACCESS_PROBE": "off"}) == (
        None, "unknown (probe disabled by PFTP_ACCESS_PROBE)",
    )  # fmt: skip
    assert world.ask(probe, env={"PFTP_ACCESS_PROBE": "100.64.0.1"})[0] == 30_000_000
    assert probe.calls[0][0] == "100.64.0.1"
    with pytest.raises(ValueError, match="PFTP_ACCESS_PROBE"):
        world.ask(probe, env={"PFTP_ACCESS_PROBE": "isp-router"})


def test_no_route_or_no_gateway_is_unknown(world, tmp_path):
    probe = FakeProbe(30e6)
    world.route = tmp_path / "no-route"
    assert world.ask(probe) == (None, "unknown (no IPv4 default route)")
    world.route = route_file(tmp_path, gateway_hex="00000000")
    bw, source = world.ask(probe)
    assert bw is None and "no gateway" in source
    assert probe.calls == []


def test_unreadable_state_file_is_replaced(world):
    world.state.parent.mkdir(parents=True)
    world.state.write_text("{not json")
    assert world.ask(FakeProbe(12e6))[0] == 12_000_000
    assert json.loads(world.state.read_text())["probes"]


def test_record_download_rejects_nonsense(world):
    with pytest.raises(ValueError, match=">= 0"):
        world.record(-1, 3.0)
