"""Selection: access-bandwidth bound, backups, congestion pairs, balanced mode."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from pftp_coordinator.ranking import MirrorRank
from pftp_coordinator.selection import DEFAULT_UNKNOWN_RATE_BPS, assumed_rates, select_mirrors


def ranked(*rates: float | None) -> list[MirrorRank]:
    """Mirrors 1..n, best first, suitability decreasing."""
    n = len(rates)
    weights = [n - i for i in range(n)]
    total = sum(weights)
    return [MirrorRank(i + 1, weights[i] / total, {}, rates[i]) for i in range(n)]


def keys(rs):
    return [r.key for r in rs]


def test_takes_mirrors_until_access_bandwidth_is_covered():
    rs = ranked(10e6, 10e6, 10e6, 10e6, 10e6)
    sel = select_mirrors(rs, access_bandwidth_bps=25e6, max_mirrors=8, backup_count=2)
    assert keys(sel.selected) == [1, 2, 3]  # 30 >= 25 after three
    assert keys(sel.backups) == [4, 5]
    assert sel.mode == "ranked"


def test_a_mirror_that_already_fills_the_access_link_is_enough():
    """Its measured rate is goodput through that link (~95 % of it): no second
    mirror behind the same full link."""
    rs = ranked(3.83e6, 20e6, 10e6)
    sel = select_mirrors(rs, access_bandwidth_bps=4e6, max_mirrors=8, backup_count=2)
    assert keys(sel.selected) == [1]
    short = select_mirrors(ranked(3.4e6, 20e6), access_bandwidth_bps=4e6, max_mirrors=8,
                           backup_count=0)
    assert keys(short.selected) == [1, 2]  # 85 %: not covered


def test_slow_client_gets_one_mirror():
    rs = ranked(10e6, 10e6, 10e6)
    sel = select_mirrors(rs, access_bandwidth_bps=56_000, max_mirrors=8, backup_count=3)
    assert keys(sel.selected) == [1]
    assert keys(sel.backups) == [2, 3]


def test_unknown_access_bandwidth_takes_up_to_max_mirrors():
    rs = ranked(*([1e6] * 10))
    sel = select_mirrors(rs, access_bandwidth_bps=None, max_mirrors=4, backup_count=3)
    assert keys(sel.selected) == [1, 2, 3, 4]
    assert keys(sel.backups) == [5, 6, 7]


def test_max_mirrors_bounds_a_fast_client():
    rs = ranked(*([1e6] * 10))
    sel = select_mirrors(rs, access_bandwidth_bps=1e9, max_mirrors=3, backup_count=0)
    assert keys(sel.selected) == [1, 2, 3]
    assert sel.backups == []


def test_unknown_rates_use_median_of_known_then_default():
    rs = ranked(4e6, None, 8e6, None)
    assert assumed_rates(rs) == {1: 4e6, 2: 6e6, 3: 8e6, 4: 6e6}
    assert set(assumed_rates(ranked(None, None)).values()) == {DEFAULT_UNKNOWN_RATE_BPS}
    # 4 + 6 + 8 = 18 >= 15 after three mirrors
    sel = select_mirrors(rs, access_bandwidth_bps=15e6, max_mirrors=8, backup_count=1)
    assert keys(sel.selected) == [1, 2, 3]


def test_one_mirror_and_no_mirror():
    sel = select_mirrors(ranked(1e6), access_bandwidth_bps=1e9, max_mirrors=8, backup_count=3)
    assert keys(sel.selected) == [1] and sel.backups == []
    sel = select_mirrors([], access_bandwidth_bps=None, max_mirrors=8, backup_count=3)
    assert sel.selected == [] and sel.backups == []


def test_congested_pair_is_not_selected_together():
    rs = ranked(10e6, 10e6, 10e6, 10e6)
    sel = select_mirrors(
        rs,
        access_bandwidth_bps=30e6,
        max_mirrors=8,
        backup_count=3,
        congested_pairs={frozenset((1, 2))},
    )
    assert keys(sel.selected) == [1, 3, 4]
    assert keys(sel.backups) == [2]  # penalised one is a backup, last


def test_bad_bounds_are_rejected():
    with pytest.raises(ValueError, match="max_mirrors"):
        select_mirrors(ranked(1.0), access_bandwidth_bps=None, max_mirrors=0, backup_count=0)
    with pytest.raises(ValueError, match="access_bandwidth"):
        select_mirrors(ranked(1.0), access_bandwidth_bps=0, max_mirrors=1, backup_count=0)


def test_balanced_mode_spreads_load_over_all_mirrors_weighted_by_suitability():
    rs = ranked(10e6, 10e6, 10e6, 10e6, 10e6)  # suitabilities 5/15 .. 1/15
    rng = random.Random(42)
    first = Counter()
    used = Counter()
    for _ in range(3000):
        sel = select_mirrors(
            rs, access_bandwidth_bps=10e6, max_mirrors=8, backup_count=2, balanced=True, rng=rng
        )
        assert sel.mode == "balanced"
        assert len(sel.selected) == 1  # the access bound still holds
        assert sel.selected[0].key not in keys(sel.backups)
        first[sel.selected[0].key] += 1
        used.update(keys(sel.selected))
    assert set(first) == {1, 2, 3, 4, 5}  # every suitable mirror gets requests
    assert first[1] > first[3] > first[5]  # ... more for the more suitable
    # In ranked mode mirror 1 would take all 3000.
    assert first[1] < 2000


def test_balanced_mode_is_reproducible_with_the_same_rng():
    rs = ranked(*([5e6] * 8))
    a = select_mirrors(
        rs,
        access_bandwidth_bps=12e6,
        max_mirrors=8,
        backup_count=2,
        balanced=True,
        rng=random.Random(7),
    )
    b = select_mirrors(
        rs,
        access_bandwidth_bps=12e6,
        max_mirrors=8,
        backup_count=2,
        balanced=True,
        rng=random.Random(7),
    )
    assert keys(a.selected) == keys(b.selected) and keys(a.backups) == keys(b.backups)
    assert len(a.selected) == 3


def test_of_the_mirrors_that_fill_a_slow_link_alone_the_nearest_is_taken():
    """8 Mbit/s client: the top-ranked 30 Mbit/s mirror 120 ms away and a 10 Mbit/s
    one 30 ms away both fill the link; only the near one's data comes ~1 s sooner."""
    rs = ranked(30e6, 20e6, 10e6, 5e6)
    delays = {1: 1.0, 2: 0.6, 3: 0.2, 4: 0.05}
    sel = select_mirrors(rs, access_bandwidth_bps=8e6, max_mirrors=8, backup_count=2,
                         start_delay_s=delays)
    assert keys(sel.selected) == [3]  # 4 is nearer still, but cannot fill the link
    assert keys(sel.backups) == [1, 2]
    # without delays (or all equal) the rank decides, as before
    assert keys(select_mirrors(rs, access_bandwidth_bps=8e6, max_mirrors=8, backup_count=0
                               ).selected) == [1]
    assert keys(select_mirrors(rs, access_bandwidth_bps=8e6, max_mirrors=8, backup_count=0,
                               start_delay_s=dict.fromkeys(delays, 0.1)).selected) == [1]
    # a link no single mirror fills: rank order, several mirrors
    assert keys(select_mirrors(rs, access_bandwidth_bps=45e6, max_mirrors=8, backup_count=0,
                               start_delay_s=delays).selected) == [1, 2]
