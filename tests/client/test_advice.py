"""Connections the coordinator advises (pftp_client.advice): how many, and where
each begins; the engine's cut and the early plan's starts must agree."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from pftp_client.advice import (
    MIN_PART_BYTES,
    advised_count,
    part_starts,
    split_work,
    transfer_starts,
)
from pftp_client.early import plan_transfers
from pftp_client.ranges import RangeSet

MIB = 1 << 20


def test_how_many_advised_connections_are_opened() -> None:
    assert advised_count(4, 8, 40 * MIB) == 4
    assert advised_count(4, 2, 40 * MIB) == 2  # --max-connections
    assert advised_count(8, 8, 3 * MIB) == 3  # at least a MiB each
    assert advised_count(4, 8, MIB // 2) == 1
    # behind a 20 Mbit/s access link, a quarter of the mirror's 80 Mbit/s: 8 -> 2
    assert advised_count(8, 8, 40 * MIB, access_bps=20e6, expected_bps=80e6) == 2
    assert advised_count(4, 8, 40 * MIB, access_bps=1e9, expected_bps=80e6) == 4
    assert advised_count(1, 8, 40 * MIB) == 1


def test_parts_begin_at_piece_boundaries() -> None:
    assert part_starts(0, 8 * MIB, 4, MIB, 8 * MIB) == [0, 2 * MIB, 4 * MIB, 6 * MIB]
    # equal cuts moved up to the next piece boundary
    assert part_starts(100, 3 * MIB + 100, 3, MIB, 10 * MIB) == [100, 2 * MIB, 3 * MIB]
    # parts a piece would swallow are left out
    assert part_starts(0, MIB, 4, MIB, MIB) == [0]


@given(
    start=st.integers(0, 50 * MIB), length=st.integers(1, 50 * MIB),
    parts=st.integers(1, 8), piece_shift=st.integers(14, 22), tail=st.integers(0, MIB),
)
def test_the_engines_cut_of_a_whole_portion_begins_where_the_early_plan_starts(
    start: int, length: int, parts: int, piece_shift: int, tail: int
) -> None:
    end = start + length
    size = end + tail
    groups = split_work(RangeSet([(start, end)]), parts, 1 << piece_shift, size)
    assert [g.first()[0] for g in groups] == part_starts(start, end, parts,
                                                        1 << piece_shift, size)
    # and the groups are the portion, once
    got = RangeSet()
    for g in groups:
        for s, e in g:
            assert not got.overlaps(s, e)
            got.add(s, e)
    assert list(got) == [(start, end)]


def test_the_transfers_a_plan_begins_with() -> None:
    portions = [("ftp://a/f", 0, 16 * MIB, 4, 40e6), ("ftp://b/f", 16 * MIB, 20 * MIB, 1, 10e6),
                ("ftp://c/f", 20 * MIB, 20 * MIB, 4, 40e6)]  # (an empty portion: none)
    assert transfer_starts(portions, 20 * MIB, MIB, 8) == [
        ("ftp://a/f", 0), ("ftp://a/f", 4 * MIB), ("ftp://a/f", 8 * MIB),
        ("ftp://a/f", 12 * MIB), ("ftp://b/f", 16 * MIB)]
    assert transfer_starts(portions, 20 * MIB, MIB, 1) == [("ftp://a/f", 0),
                                                          ("ftp://b/f", 16 * MIB)]


def _answer(**file: object) -> dict:
    return {
        "request_id": "r", "mode": "ranked", "backups": [],
        "file": {"name": "f", "size": 24 * MIB, "sha256": "a" * 64, **file},
        "assignments": [
            {"mirror": "a", "url": "ftp://a/f", "offset": 0, "length": 16 * MIB,
             "suitability": 1, "expected_bps": 4e7, "connections": 2},
            {"mirror": "b", "url": "ftp://b/f", "offset": 16 * MIB, "length": 8 * MIB,
             "suitability": 1},
        ],
    }


def test_the_early_plan_starts_what_the_engine_will_ask_for() -> None:
    # the piece size the download will choose for 24 MiB over 2 mirrors: 512 KiB
    assert plan_transfers(_answer(), None, 8) == [
        ("ftp://a/f", 0), ("ftp://a/f", 8 * MIB), ("ftp://b/f", 16 * MIB)]
    assert plan_transfers(_answer(piece_size=3 * MIB), None, 8) == [
        ("ftp://a/f", 0), ("ftp://a/f", 9 * MIB), ("ftp://b/f", 16 * MIB)]
    assert plan_transfers(_answer(), None, 1) == [("ftp://a/f", 0), ("ftp://b/f", 16 * MIB)]
    # an answer not shaped so: nothing started (download() says what is wrong)
    bad = _answer()
    bad["assignments"][0]["connections"] = "many"
    assert plan_transfers(bad, None, 8) is None
    assert plan_transfers({"file": {}}, None, 8) is None
    assert MIN_PART_BYTES == MIB
