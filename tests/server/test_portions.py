"""Portion split: exact cover, proportionality, minimum size, piece alignment."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pftp_coordinator.portions import split_portions


def check_cover(size, portions):
    offset = 0
    for p in portions:
        assert p.offset == offset
        assert p.length >= 0
        offset += p.length
    assert offset == size


@pytest.mark.parametrize("size", [2, 3, 7, 1_000_003, 2**31 + 17])
def test_odd_sizes_are_covered_exactly(size):
    portions = split_portions(size, [0.5, 0.3, 0.2])
    check_cover(size, portions)
    assert [p.index for p in portions] == [0, 1, 2][: len(portions)]


def test_proportional_hand_computed():
    ps = split_portions(1000, [0.5, 0.3, 0.2])
    assert [(p.offset, p.length) for p in ps] == [(0, 500), (500, 300), (800, 200)]
    # 10 / 3: ideal 3.33 each; the leftover byte goes to the best-ranked mirror.
    ps = split_portions(10, [1.0, 1.0, 1.0])
    assert [p.length for p in ps] == [4, 3, 3]


def test_highest_weight_gets_the_largest_portion():
    ps = split_portions(10_000_000, [0.1, 0.6, 0.3])
    lengths = {p.index: p.length for p in ps}
    assert lengths[1] > lengths[2] > lengths[0]


def test_size_zero_and_one():
    assert [(p.index, p.offset, p.length) for p in split_portions(0, [0.2, 0.8])] == [(0, 0, 0)]
    assert [(p.index, p.offset, p.length) for p in split_portions(1, [0.2, 0.8])] == [(0, 0, 1)]


def test_min_portion_merges_into_fewer_mirrors():
    # 3 MiB over 4 mirrors with a 1 MiB minimum: at most 3 portions.
    mib = 1 << 20
    ps = split_portions(3 * mib, [0.4, 0.3, 0.2, 0.1], min_portion=mib)
    check_cover(3 * mib, ps)
    assert all(p.length >= mib for p in ps)
    assert 3 not in {p.index for p in ps}  # the lightest mirror was dropped
    # A file smaller than the minimum goes to one mirror.
    ps = split_portions(mib // 2, [0.4, 0.3, 0.2, 0.1], min_portion=mib)
    assert [(p.index, p.length) for p in ps] == [(0, mib // 2)]


def test_tiny_weight_is_dropped_rather_than_given_a_sliver():
    ps = split_portions(10 << 20, [0.999, 0.001], min_portion=1 << 20)
    assert [p.index for p in ps] == [0]


def test_piece_alignment():
    piece = 256 * 1024
    size = 10 * piece + 123
    ps = split_portions(size, [0.5, 0.3, 0.2], piece_size=piece)
    check_cover(size, ps)
    for p in ps:
        assert p.offset % piece == 0
    assert ps[-1].length % piece == 123


def test_fewer_pieces_than_mirrors():
    ps = split_portions(2 * 1000 + 1, [1, 1, 1, 1, 1], piece_size=1000)
    check_cover(2001, ps)
    assert len(ps) == 3


def test_degenerate_weights():
    check_cover(100, split_portions(100, [0.0, 0.0, 0.0]))
    ps = split_portions(100, [float("inf"), 1.0])
    assert [p.index for p in ps] == [0]
    with pytest.raises(ValueError, match="non-negative"):
        split_portions(100, [1.0, -1.0])
    with pytest.raises(ValueError, match="non-negative"):
        split_portions(100, [float("nan")])
    with pytest.raises(ValueError, match="at least one mirror"):
        split_portions(100, [])
    with pytest.raises(ValueError, match="negative"):
        split_portions(-1, [1.0])


@settings(max_examples=400, deadline=None)
@given(
    size=st.integers(min_value=0, max_value=2**40),
    weights=st.lists(
        st.floats(min_value=0, max_value=1e12, allow_nan=False), min_size=1, max_size=20
    ),
    min_portion=st.integers(min_value=1, max_value=2**24),
    piece_size=st.one_of(st.none(), st.integers(min_value=1, max_value=2**22)),
)
def test_split_properties(size, weights, min_portion, piece_size):
    ps = split_portions(size, weights, min_portion=min_portion, piece_size=piece_size)
    # whole bytes, disjoint, contiguous, exact cover, in input order
    check_cover(size, ps)
    assert all(isinstance(p.offset, int) and isinstance(p.length, int) for p in ps)
    idx = [p.index for p in ps]
    assert idx == sorted(set(idx))
    assert all(0 <= i < len(weights) for i in idx)
    assert 1 <= len(ps) <= len(weights)
    if len(ps) > 1:
        assert all(p.length >= min_portion for p in ps)
    if piece_size:
        assert all(p.offset % piece_size == 0 for p in ps)
    # proportional within rounding (one unit) among the kept mirrors
    if len(ps) > 1 and sum(weights[i] for i in idx) > 0:
        unit = piece_size or 1
        n_units = -(-size // unit)
        kw = sum(weights[i] for i in idx)
        for p in ps[:-1]:
            ideal = n_units * weights[p.index] / kw
            assert abs(p.length / unit - ideal) <= 1.0 + 1e-6 * ideal


def test_far_mirrors_get_less_so_that_all_finish_together():
    from pftp_coordinator.portions import finish_together_weights, start_delay_s

    size = 45 * 2**20
    rates = [5e6, 10e6, 20e6, 40e6]
    rtts = [0.02, 0.16, 0.04, 0.08]
    starts = [start_delay_s(r, t) for r, t in zip(rates, rtts, strict=True)]
    assert starts[0] == pytest.approx(0.10, abs=0.001)  # 5 round trips, no ramp at 5 Mbit/s
    assert starts[3] > 5 * 0.08  # plus slow start at 40 Mbit/s over 80 ms
    weights = finish_together_weights(size, rates, starts)
    portions = split_portions(size, weights)
    assert sum(p.length for p in portions) == size
    finish = [s + p.length / (r / 8) for s, p, r in zip(starts, portions, rates, strict=True)]
    assert max(finish) - min(finish) < 1e-3  # together, to the byte's time
    # plain rate weights would have left the 160 ms mirror a second behind
    plain = split_portions(size, rates)
    late = [s + p.length / (r / 8) for s, p, r in zip(starts, plain, rates, strict=True)]
    assert max(late) - min(late) > 0.8
    # on a LAN nothing changes
    assert finish_together_weights(size, rates, [0.0] * 4) == pytest.approx(
        [r / 8 * (size / (sum(rates) / 8)) for r in rates])


def test_a_mirror_that_would_start_after_the_end_gets_nothing():
    from pftp_coordinator.portions import finish_together_weights

    size = 10 * 2**20  # 1 s at 80 Mbit/s; the far mirror starts 2 s late
    weights = finish_together_weights(size, [80e6, 10e6], [0.0, 2.0])
    assert weights[1] == 0.0 and weights[0] > 0
    assert [p.index for p in split_portions(size, weights)] == [0]


def test_an_http_mirror_starts_two_round_trips_sooner_than_an_ftp_one():
    from pftp_coordinator.portions import SETUP_ROUND_TRIPS, setup_round_trips, start_delay_s

    assert setup_round_trips("ftp://m/pub/") == SETUP_ROUND_TRIPS == 5
    assert setup_round_trips("http://m/pub/") == 3
    assert setup_round_trips("HTTPS://m/pub/") == 4  # TLS's handshake
    assert setup_round_trips("") == SETUP_ROUND_TRIPS
    ftp = start_delay_s(40e6, 0.08, setup_round_trips("ftp://m/"))
    http = start_delay_s(40e6, 0.08, setup_round_trips("http://m/"))
    assert ftp - http == pytest.approx(2 * 0.08)


def test_connections_opened_together_cut_a_long_slow_start():
    from pftp_coordinator.portions import start_delay_s
    from pftp_wire.tcp_model import RAMP_WORTH_S, ramp_connections, slow_start_s

    rate, rtt = 50.9e6 / 8, 0.25  # a far fast mirror: one connection ramps ~1.45 s
    one = slow_start_s(rate, rtt)
    assert one == pytest.approx(1.45, abs=0.01)
    # k connections begin with k initial windows: log2(k) round trips sooner
    assert slow_start_s(rate, rtt, 4) == pytest.approx(one - 2 * rtt)
    assert slow_start_s(rate, rtt, 4) == slow_start_s(rate / 4, rtt)
    assert start_delay_s(50.9e6, rtt, 5, 4) == pytest.approx(start_delay_s(50.9e6, rtt) - 2 * rtt)
    # doubled while the ramp left is worth it; at most four for the ramp
    assert ramp_connections(rate, rtt) == 4
    assert ramp_connections(rate, rtt, max_connections=2) == 2
    assert ramp_connections(rate, rtt, max_connections=1) == 1
    assert ramp_connections(40e6 / 8, 0.08) == 1  # 0.3 s of slow start: not worth it
    assert slow_start_s(40e6 / 8, 0.08) < RAMP_WORTH_S
    assert ramp_connections(100e6 / 8, 0.001) == 1  # a LAN
    assert ramp_connections(20e6 / 8, 0.16) == 1  # 0.61 s: below what is worth it
    assert ramp_connections(32.3e6 / 8, 0.25) == 4  # 1.28 s with one, 1.03 s with two
    assert ramp_connections(23.2e6 / 8, 0.25) == 2  # 1.16 s with one, 0.91 s with two
    for unknown in (None, 0.0, -1.0, float("nan")):
        assert ramp_connections(unknown, rtt) == 1
        assert ramp_connections(rate, unknown) == 1


def test_a_mirror_opens_the_more_of_its_held_and_its_ramp_connections():
    from pftp_coordinator.portions import opening, start_delay_s

    far = (50.9e6, 0.25, 5)
    assert opening(*far) == (1, start_delay_s(*far))  # no ramp asked for
    assert opening(*far, held=1, ramp_max=4) == (4, pytest.approx(start_delay_s(*far, 4)))
    assert opening(*far, held=8, ramp_max=4) == (8, pytest.approx(start_delay_s(*far, 8)))
    assert opening(40e6, 0.08, 5, held=1, ramp_max=4) == (1, start_delay_s(40e6, 0.08))
    assert opening(40e6, None, 5, held=3, ramp_max=4) == (3, 0.0)
