"""Ranking: paper 004 eq. 1 and 2 against hand-computed values, and the robustness rules."""

from __future__ import annotations

import math

import pytest
from pftp_coordinator.config import RankingWeights, Settings
from pftp_coordinator.ranking import (
    INVERSE_FLOORS,
    MirrorMetrics,
    PredictorCoefficients,
    RankingParams,
    direct_suitability,
    expected_rate_bps,
    inverse_suitability,
    params_from_settings,
    rank_mirrors,
)

NOW = 1_000_000.0


def only(var: str, **extra: float) -> RankingParams:
    """Params with a single variable weighted."""
    weights = {v: 0.0 for v in RankingWeights().model_dump()}
    weights[var] = 1.0
    weights.update(extra)
    return RankingParams(weights=weights, half_life_s=1800.0, stale_after_s=6 * 3600.0)


def by_key(ranks):
    return {r.key: r for r in ranks}


def test_eq1_direct_hand_computed():
    # Bandwidths 10, 30, 60 Mbit/s -> 0.1, 0.3, 0.6.
    assert direct_suitability([10.0, 30.0, 60.0]) == pytest.approx([0.1, 0.3, 0.6])


def test_eq2_inverse_hand_computed():
    # RTTs 10, 20, 40 ms: 1/OV = 100, 50, 25 -> /175 = 4/7, 2/7, 1/7.
    assert inverse_suitability([0.01, 0.02, 0.04]) == pytest.approx([4 / 7, 2 / 7, 1 / 7])
    # Paper 001 eq. 2-3 form: s_k = OV_z / OV_k with OV_z = min, then normalised: same.
    s = [0.01 / v for v in (0.01, 0.02, 0.04)]
    assert inverse_suitability([0.01, 0.02, 0.04]) == pytest.approx([x / sum(s) for x in s])


def test_inverse_zero_without_floor_does_not_divide_by_zero():
    assert inverse_suitability([0.0, 1.0]) == [1.0, 0.0]
    assert direct_suitability([0.0, 0.0]) == [0.5, 0.5]


def test_rank_bandwidth_only_matches_eq1():
    ms = [
        MirrorMetrics(key=1, capacity_bps=10e6, probe_ts=NOW),
        MirrorMetrics(key=2, capacity_bps=30e6, probe_ts=NOW),
        MirrorMetrics(key=3, capacity_bps=60e6, probe_ts=NOW),
    ]
    ranks = rank_mirrors(ms, params=only("bandwidth"), now=NOW)
    assert [r.key for r in ranks] == [3, 2, 1]
    assert [r.suitability for r in ranks] == pytest.approx([0.6, 0.3, 0.1])
    assert ranks[0].explain == {"bandwidth": pytest.approx(0.6)}


def test_rank_rtt_only_matches_eq2():
    ms = [
        MirrorMetrics(key=k, rtt_s=rtt, probe_ts=NOW)
        for k, rtt in ((1, 0.01), (2, 0.02), (3, 0.04))
    ]
    ranks = by_key(rank_mirrors(ms, params=only("rtt"), now=NOW))
    # rtt floor of 0.1 ms is added: 1/(0.0101), 1/(0.0201), 1/(0.0401)
    inv = [1 / (x + INVERSE_FLOORS["rtt"]) for x in (0.01, 0.02, 0.04)]
    assert [ranks[k].suitability for k in (1, 2, 3)] == pytest.approx([x / sum(inv) for x in inv])


def test_weighted_average_of_two_variables():
    # bandwidth S = (0.25, 0.75); rtt S = (2/3, 1/3) (floor makes it approximate)
    ms = [
        MirrorMetrics(key=1, capacity_bps=10e6, rtt_s=0.1, probe_ts=NOW),
        MirrorMetrics(key=2, capacity_bps=30e6, rtt_s=0.2, probe_ts=NOW),
    ]
    params = only("bandwidth", rtt=3.0)  # weights 1 and 3
    ranks = by_key(rank_mirrors(ms, params=params, now=NOW))
    s_rtt1 = (1 / 0.1001) / (1 / 0.1001 + 1 / 0.2001)
    assert ranks[1].suitability == pytest.approx((1 * 0.25 + 3 * s_rtt1) / 4)
    assert ranks[2].suitability == pytest.approx((1 * 0.75 + 3 * (1 - s_rtt1)) / 4)
    assert ranks[1].suitability + ranks[2].suitability == pytest.approx(1.0)


def test_weights_change_the_winner():
    ms = [
        MirrorMetrics(key=1, capacity_bps=100e6, rtt_s=0.3, probe_ts=NOW),  # fat, far
        MirrorMetrics(key=2, capacity_bps=10e6, rtt_s=0.01, probe_ts=NOW),  # thin, near
    ]
    assert rank_mirrors(ms, params=only("bandwidth", rtt=0.1), now=NOW)[0].key == 1
    assert rank_mirrors(ms, params=only("rtt", bandwidth=0.1), now=NOW)[0].key == 2


def test_loss_zero_is_finite_and_floored():
    ms = [
        MirrorMetrics(key=1, loss=0.0, probe_ts=NOW),
        MirrorMetrics(key=2, loss=0.01, probe_ts=NOW),
        MirrorMetrics(key=3, loss=0.10, probe_ts=NOW),
    ]
    ranks = by_key(rank_mirrors(ms, params=only("loss"), now=NOW))
    # 1/(0.01), 1/(0.02), 1/(0.11): 0 % loss is 2x a 1 % mirror, 11x a 10 % one.
    assert ranks[1].suitability / ranks[2].suitability == pytest.approx(2.0)
    assert ranks[1].suitability / ranks[3].suitability == pytest.approx(11.0)


def test_missing_variable_gets_neutral_value():
    # Mirror 3 has no agent: cpu unknown -> 1/m for cpu; 1 and 2 share 2/3 by eq. 2.
    ms = [
        MirrorMetrics(key=1, cpu_percent=15.0, utilization_ts=NOW),
        MirrorMetrics(key=2, cpu_percent=35.0, utilization_ts=NOW),
        MirrorMetrics(key=3),
    ]
    ranks = by_key(rank_mirrors(ms, params=only("cpu"), now=NOW))
    assert ranks[3].explain["cpu"] == pytest.approx(1 / 3)
    # floors: 1/20 and 1/40 -> 2/3 and 1/3 of the 2/3 share
    assert ranks[1].explain["cpu"] == pytest.approx(2 / 3 * 2 / 3)
    assert ranks[2].explain["cpu"] == pytest.approx(2 / 3 * 1 / 3)


def test_mirror_without_agent_ranks_on_path_data():
    settings = Settings()
    params = params_from_settings(settings, None)
    ms = [
        MirrorMetrics(key=1, capacity_bps=50e6, rtt_s=0.02, loss=0.0, probe_ts=NOW),  # no agent
        MirrorMetrics(
            key=2,
            capacity_bps=10e6,
            rtt_s=0.05,
            loss=0.0,
            probe_ts=NOW,
            cpu_percent=10.0,
            memory_percent=20.0,
            utilization_ts=NOW,
        ),
    ]
    ranks = rank_mirrors(ms, params=params, now=NOW)
    assert ranks[0].key == 1
    assert all(math.isfinite(r.suitability) for r in ranks)
    assert sum(r.suitability for r in ranks) == pytest.approx(1.0)


def test_variable_nobody_has_is_skipped():
    ms = [
        MirrorMetrics(key=1, capacity_bps=1e6, probe_ts=NOW),
        MirrorMetrics(key=2, capacity_bps=3e6, probe_ts=NOW),
    ]
    ranks = rank_mirrors(ms, params=params_from_settings(Settings(), None), now=NOW)
    assert set(ranks[0].explain) == {"bandwidth"}
    assert [r.suitability for r in ranks] == pytest.approx([0.75, 0.25])


def test_no_data_at_all_gives_equal_shares_and_ties_by_key():
    ms = [MirrorMetrics(key=k) for k in (7, 3, 5)]
    ranks = rank_mirrors(ms, params=params_from_settings(Settings(), None), now=NOW)
    assert [r.key for r in ranks] == [3, 5, 7]
    assert [r.suitability for r in ranks] == pytest.approx([1 / 3] * 3)
    assert all(r.expected_bps is None for r in ranks)


def test_ties_are_broken_by_key():
    ms = [MirrorMetrics(key=k, capacity_bps=5e6, probe_ts=NOW) for k in (9, 2, 4)]
    assert [r.key for r in rank_mirrors(ms, params=only("bandwidth"), now=NOW)] == [2, 4, 9]


def test_one_mirror_and_no_mirror():
    assert rank_mirrors([], params=only("bandwidth"), now=NOW) == []
    (r,) = rank_mirrors(
        [MirrorMetrics(key=1, capacity_bps=1e6, probe_ts=NOW)], params=only("bandwidth"), now=NOW
    )
    assert r.suitability == pytest.approx(1.0)


def test_stale_data_decays_toward_neutral_then_is_ignored():
    params = only("bandwidth")
    hl = params.half_life_s

    def share_of_best(age: float) -> float:
        ms = [
            MirrorMetrics(key=1, capacity_bps=90e6, probe_ts=NOW - age),
            MirrorMetrics(key=2, capacity_bps=10e6, probe_ts=NOW),
        ]
        return by_key(rank_mirrors(ms, params=params, now=NOW))[1].suitability

    fresh, one_hl, three_hl = share_of_best(0), share_of_best(hl), share_of_best(3 * hl)
    assert fresh == pytest.approx(0.9)
    assert fresh > one_hl > three_hl > 0.5  # fades toward equal shares...
    # ... with c = 1/2 after one half-life: S1' = 0.5*0.9 + 0.5*0.5 = 0.7, S2 = 0.1
    assert one_hl == pytest.approx(0.7 / 0.8)
    # Beyond stale_after_s it is missing: neutral 1/2 vs mirror 2's share of 1/2.
    assert share_of_best(params.stale_after_s + 1) == pytest.approx(0.5)


def test_future_timestamps_count_as_fresh():
    ms = [
        MirrorMetrics(key=1, capacity_bps=3e6, probe_ts=NOW + 60),
        MirrorMetrics(key=2, capacity_bps=1e6, probe_ts=NOW),
    ]
    assert rank_mirrors(ms, params=only("bandwidth"), now=NOW)[0].suitability == pytest.approx(0.75)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -1.0])
def test_bad_values_are_missing_not_nan(bad):
    ms = [
        MirrorMetrics(
            key=1,
            capacity_bps=bad,
            rtt_s=bad,
            loss=bad,
            cpu_percent=bad,
            probe_ts=NOW,
            utilization_ts=NOW,
        ),
        MirrorMetrics(
            key=2,
            capacity_bps=1e6,
            rtt_s=0.01,
            loss=0.0,
            cpu_percent=0.0,
            probe_ts=NOW,
            utilization_ts=NOW,
        ),
    ]
    ranks = rank_mirrors(ms, params=params_from_settings(Settings(), None), now=NOW)
    for r in ranks:
        assert math.isfinite(r.suitability)
        assert all(math.isfinite(v) for v in r.explain.values())


def test_all_zero_values():
    ms = [
        MirrorMetrics(
            key=k,
            capacity_bps=0.0,
            rtt_s=0.0,
            loss=0.0,
            cpu_percent=0.0,
            memory_percent=0.0,
            probe_ts=NOW,
            utilization_ts=NOW,
            demand=0.0,
        )
        for k in (1, 2)
    ]
    ranks = rank_mirrors(ms, params=params_from_settings(Settings(), None), now=NOW)
    assert [r.suitability for r in ranks] == pytest.approx([0.5, 0.5])


def test_demand_is_inverse():
    # Mirror 1 holds many scarce files (high demand): it should be spared.
    ms = [MirrorMetrics(key=1, demand=30.0), MirrorMetrics(key=2, demand=10.0)]
    ranks = by_key(rank_mirrors(ms, params=only("demand"), now=NOW))
    assert ranks[2].suitability > ranks[1].suitability


def test_throughput_history_is_direct_and_sets_expected_rate():
    ms = [
        MirrorMetrics(
            key=1, throughput_bps=20e6, throughput_ts=NOW, probe_throughput_bps=5e6, probe_ts=NOW
        ),
        MirrorMetrics(key=2, throughput_bps=60e6, throughput_ts=NOW),
    ]
    ranks = by_key(rank_mirrors(ms, params=only("throughput"), now=NOW))
    assert ranks[2].suitability == pytest.approx(0.75)
    assert ranks[1].expected_bps == 20e6  # history beats the probe


def test_expected_rate_fallbacks():
    params = only("bandwidth")
    assert (
        expected_rate_bps(
            MirrorMetrics(key=1, probe_throughput_bps=4e6, capacity_bps=9e6, probe_ts=NOW),
            NOW,
            params,
        )
        == 4e6
    )
    assert (
        expected_rate_bps(MirrorMetrics(key=1, capacity_bps=9e6, probe_ts=NOW), NOW, params) == 9e6
    )
    stale = NOW - params.stale_after_s - 1
    assert (
        expected_rate_bps(MirrorMetrics(key=1, capacity_bps=9e6, probe_ts=stale), NOW, params)
        is None
    )
    assert expected_rate_bps(MirrorMetrics(key=1), NOW, params) is None


def test_floors_from_full_client_links_only_raise_what_is_known():
    """Rates clients measured behind a full access link are floors: alone they lift
    the probe only when above it; next to the history of rates the mirror set,
    only when newer and higher."""
    params = only("throughput")
    probe = dict(probe_throughput_bps=30e6, probe_ts=NOW - 600)

    def rate(**kw: float) -> float | None:
        return expected_rate_bps(MirrorMetrics(key=1, **kw), NOW, params)

    assert rate(**probe, throughput_floor_bps=4e6, throughput_floor_ts=NOW) == 30e6
    assert rate(**probe, throughput_floor_bps=45e6, throughput_floor_ts=NOW) == 45e6
    assert rate(throughput_floor_bps=4e6, throughput_floor_ts=NOW) == 4e6  # nothing else known
    hist = dict(throughput_bps=12e6, throughput_ts=NOW - 60)
    assert rate(**probe, **hist, throughput_floor_bps=20e6, throughput_floor_ts=NOW) == 20e6
    # (older than the history: the mirror may have slowed since)
    assert rate(**probe, **hist, throughput_floor_bps=20e6, throughput_floor_ts=NOW - 120) == 12e6
    assert rate(**probe, **hist, throughput_floor_bps=5e6, throughput_floor_ts=NOW) == 12e6
    stale = NOW - params.stale_after_s - 1
    assert rate(**probe, throughput_floor_bps=45e6, throughput_floor_ts=stale) == 30e6
    # The ranking's throughput variable is the same figure.
    ranks = rank_mirrors([
        MirrorMetrics(key=1, **probe, throughput_floor_bps=4e6, throughput_floor_ts=NOW),
        MirrorMetrics(key=2, throughput_bps=10e6, throughput_ts=NOW),
    ], params=params, now=NOW)
    assert by_key(ranks)[1].suitability == pytest.approx(0.75)


def test_predicted_time_eq3_paper_coefficients():
    # Paper 004 eq. 3: t = 247.44 / BW(Mbps) + 344 * RTT(s)
    pred = PredictorCoefficients(247.44, 344.0)
    assert pred.predict_s(10e6, 0.05) == pytest.approx(24.744 + 17.2)
    ms = [
        MirrorMetrics(key=1, capacity_bps=10e6, rtt_s=0.05, probe_ts=NOW),
        MirrorMetrics(key=2, capacity_bps=20e6, rtt_s=0.10, probe_ts=NOW),
    ]
    params = RankingParams(
        weights=only("predicted_time").weights, half_life_s=1800, stale_after_s=3600, predictor=pred
    )
    ranks = by_key(rank_mirrors(ms, params=params, now=NOW))
    t1, t2 = 24.744 + 17.2, 12.372 + 34.4
    floor = INVERSE_FLOORS["predicted_time"]
    inv = [1 / (t1 + floor), 1 / (t2 + floor)]
    assert ranks[1].explain["predicted_time"] == pytest.approx(inv[0] / sum(inv))


def test_predicted_time_skipped_without_a_usable_fit():
    ms = [MirrorMetrics(key=1, capacity_bps=10e6, rtt_s=0.05, probe_ts=NOW)]
    for pred in (None, PredictorCoefficients(math.nan, 1.0), PredictorCoefficients(-1.0, 2.0)):
        params = params_from_settings(Settings(), pred)
        (r,) = rank_mirrors(ms, params=params, now=NOW)
        assert "predicted_time" not in r.explain
