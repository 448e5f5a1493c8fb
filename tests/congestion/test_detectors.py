import numpy as np
import pytest
from pftp_client.congestion import (
    DETECTORS,
    EntropyParams,
    Sharing,
    entropy_pair_test,
    entropy_set_test,
    rate_correlation_pair_test,
)
from pftp_client.congestion.entropy import histogram_entropy

from .synthetic import MS, own_link, shared_link


@pytest.mark.parametrize("seed", range(5))
def test_entropy_says_shared_for_flows_behind_one_link(seed):
    rng = np.random.default_rng(seed)
    a, b = shared_link(rng, 2, 1.5 * MS, 600)
    v = entropy_pair_test(a, b)
    assert v.sharing is Sharing.SHARED, v
    assert v.statistic < 0
    assert v.confidence >= 0.9
    assert 200 <= v.packets <= 400
    assert v.detector == "entropy"


@pytest.mark.parametrize("seed", range(5))
def test_entropy_says_independent_for_separate_links(seed):
    rng = np.random.default_rng(100 + seed)
    a = own_link(rng, 1.5 * MS, 300)
    b = own_link(rng, 2.1 * MS, 300)
    v = entropy_pair_test(a, b)
    assert v.sharing is Sharing.INDEPENDENT, v
    assert v.statistic > 0


def test_entropy_independent_even_with_equal_link_rates():
    rng = np.random.default_rng(7)
    a = own_link(rng, 1.5 * MS, 300)
    b = own_link(rng, 1.5 * MS, 300)
    assert entropy_pair_test(a, b).sharing is Sharing.INDEPENDENT


def test_set_of_four_sharing_one_link():
    rng = np.random.default_rng(3)
    flows = shared_link(rng, 4, 0.7 * MS, 1600)
    assert entropy_set_test(flows).sharing is Sharing.SHARED


def test_no_decision_before_enough_packets():
    rng = np.random.default_rng(1)
    a, b = shared_link(rng, 2, 1.5 * MS, 60)
    v = entropy_pair_test(a, b)
    assert v.sharing is Sharing.UNDECIDED
    assert v.confidence == 0.0
    assert v.packets < EntropyParams().min_packets
    assert "packets" in v.reason


def test_only_the_common_window_counts():
    rng = np.random.default_rng(2)
    a = own_link(rng, 1.5 * MS, 400)
    b = own_link(rng, 1.5 * MS, 400, start_ns=int(a[-1]) - 30 * MS)  # barely overlaps
    v = entropy_pair_test(a, b)
    assert v.sharing is Sharing.UNDECIDED
    assert v.packets < 40


@pytest.mark.parametrize("bad", [[3, 2, 1], np.zeros((2, 2)), ["a", "b"]])
def test_bad_input_is_a_clear_error(bad):
    ok = np.arange(100) * MS
    with pytest.raises(ValueError, match="flow"):
        entropy_pair_test(bad, ok)


def test_set_test_needs_two_flows():
    with pytest.raises(ValueError, match="two flows"):
        entropy_set_test([np.arange(10)])


def test_histogram_entropy_bounds():
    gaps = np.full(1000, 10.0)
    assert histogram_entropy(gaps, 1.0) == pytest.approx(0.0)
    uniform = np.arange(1000) % 8 + 0.5
    assert histogram_entropy(uniform, 1.0) == pytest.approx(3.0, abs=0.01)


@pytest.mark.parametrize("seed", range(3))
def test_rate_correlation_shared_and_independent(seed):
    rng = np.random.default_rng(50 + seed)
    a, b = shared_link(rng, 2, 1.5 * MS, 1200, burst=12.0)
    assert rate_correlation_pair_test(a, b).sharing is Sharing.SHARED
    c = own_link(rng, 1.5 * MS, 600)
    d = own_link(rng, 2.0 * MS, 600)
    assert rate_correlation_pair_test(c, d).sharing is not Sharing.SHARED


def test_every_detector_reports_confidence_and_packets():
    rng = np.random.default_rng(9)
    a, b = shared_link(rng, 2, 1.5 * MS, 800)
    for name, test in DETECTORS.items():
        v = test(a, b)
        assert v.detector == name
        assert 0.0 <= v.confidence <= 1.0
        assert v.packets > 0


# -- super-packets (GSO on the path, GRO at the receiver): one captured packet = k segments --
MSS = 1448


def _bursts(rng, n):
    return rng.integers(2, 13, size=n) * MSS  # 2..12 segments per captured packet


def _own_link_bursty(rng, bytes_per_ns, n, start_ns):
    """A flow alone on its link: each super-packet leaves after its own transmission time."""
    sizes = _bursts(rng, n)
    gaps = sizes / bytes_per_ns * (1 + rng.normal(0, 0.02, n))
    return (start_ns + np.cumsum(gaps)).astype(np.int64), sizes


def _shared_link_bursty(rng, bytes_per_ns, n):
    """Two flows' super-packets served one after another by one busy link."""
    sizes = _bursts(rng, 2 * n)
    owner = rng.integers(0, 2, size=2 * n)
    times = np.cumsum(sizes / bytes_per_ns * (1 + rng.normal(0, 0.02, 2 * n))).astype(np.int64)
    return [(times[owner == i], sizes[owner == i]) for i in (0, 1)]


@pytest.mark.parametrize("seed", range(5))
def test_per_byte_spacing_keeps_equal_rate_super_packet_flows_apart(seed):
    """Equal-rate independent flows whose capture sees super-packets: with the
    packet sizes the test looks at time per byte and finds them independent."""
    rng = np.random.default_rng(300 + seed)
    rate = 20e6 / 8 / 1e9  # 20 Mbit/s in bytes per ns
    ta, sa = _own_link_bursty(rng, rate, 400, 0)
    tb, sb = _own_link_bursty(rng, rate, 400, int(rng.uniform(0, 3e6)))
    v = entropy_pair_test(ta, tb, sizes=(sa, sb))
    assert v.sharing is Sharing.INDEPENDENT, v


@pytest.mark.parametrize("seed", range(5))
def test_per_byte_spacing_still_finds_a_shared_link_of_super_packets(seed):
    rng = np.random.default_rng(400 + seed)
    (ta, sa), (tb, sb) = _shared_link_bursty(rng, 20e6 / 8 / 1e9, 400)
    v = entropy_pair_test(ta, tb, sizes=(sa, sb))
    assert v.sharing is Sharing.SHARED, v
    assert v.confidence >= 0.8


def test_sizes_must_match_the_timestamps():
    t = np.arange(0, 100_000, 1000)
    with pytest.raises(ValueError, match="sizes for"):
        entropy_pair_test(t, t + 500, sizes=(np.ones(t.size), np.ones(3)))
