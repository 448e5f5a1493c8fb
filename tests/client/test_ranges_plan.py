"""Byte-range bookkeeping and validation of coordinator answers (pure, no network)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pftp_client.plan import (
    FileIdentity,
    PlanError,
    check_tiling,
    dynamic_plan,
    plan_from_assignments,
)
from pftp_client.ranges import RangeOwners, RangeSet, deal_in_rounds, split_evenly
from pftp_wire import AssignmentResponse

intervals = st.lists(
    st.tuples(st.integers(0, 200), st.integers(0, 60)).map(lambda t: (t[0], t[0] + t[1])),
    max_size=12,
)


@given(intervals, intervals)
def test_rangeset_matches_a_plain_set_of_bytes(adds, removes):
    rs = RangeSet()
    ref: set[int] = set()
    for s, e in adds:
        rs.add(s, e)
        ref |= set(range(s, e))
    for s, e in removes:
        rs.remove(s, e)
        ref -= set(range(s, e))
    assert rs.total() == len(ref)
    assert {b for s, e in rs for b in range(s, e)} == ref
    spans = list(rs)
    assert all(a[1] < b[0] for a, b in itertools.pairwise(spans))  # coalesced, sorted
    comp = rs.complement(0, 300)
    assert comp.total() + len(ref & set(range(300))) == 300
    for s, e in spans:
        assert rs.covers(s, e) and not rs.covers(s, e + 1)


@given(intervals, st.integers(1, 7))
def test_split_evenly_partitions(adds, parts):
    todo = RangeSet(adds)
    groups = split_evenly(todo, parts)
    assert len(groups) == parts
    _assert_partition(groups, todo)
    sizes = [g.total() for g in groups]
    assert max(sizes) - min(sizes) <= 1


def _assert_partition(groups: list[RangeSet], todo: RangeSet) -> None:
    """The groups are disjoint and together exactly ``todo``."""
    merged = RangeSet()
    for g in groups:
        assert not any(merged.overlaps(s, e) for s, e in g)
        for s, e in g:
            merged.add(s, e)
    assert merged == todo


@given(intervals, st.integers(1, 5), st.integers(1, 60), st.integers(1, 8))
def test_deal_in_rounds_partitions_in_file_order(adds, parts, block, max_rounds):
    todo = RangeSet(adds)
    groups = deal_in_rounds(todo, parts, block, max_rounds)
    _assert_partition(groups, todo)
    sizes = [g.total() for g in groups]
    rounds = max(1, min(max_rounds, todo.total() // (parts * block)))
    assert max(sizes) - min(sizes) <= rounds


def test_deal_in_rounds_interleaves_large_files_only():
    mib = 1 << 20
    one = deal_in_rounds(RangeSet([(0, 8 * mib)]), 2, 4 * mib, 8)
    assert [list(g) for g in one] == [[(0, 4 * mib)], [(4 * mib, 8 * mib)]]  # = split_evenly
    four = deal_in_rounds(RangeSet([(0, 8 * mib)]), 2, mib, 8)
    assert list(four[0]) == [(0, mib), (2 * mib, 3 * mib), (4 * mib, 5 * mib), (6 * mib, 7 * mib)]
    assert next(iter(four[1])) == (mib, 2 * mib)
    capped = deal_in_rounds(RangeSet([(0, 64 * mib)]), 2, mib, 3)
    assert len(list(capped[0])) == 3
    with pytest.raises(ValueError):
        deal_in_rounds(RangeSet([(0, 10)]), 0, 1, 1)


def test_owners_replace_and_coalesce():
    o = RangeOwners()
    o.set(0, 10, "a")
    o.set(10, 20, "a")
    o.set(20, 30, "b")
    assert o.runs() == [(0, 20, "a"), (20, 30, "b")]
    o.set(5, 25, "c")
    assert o.runs() == [(0, 5, "a"), (5, 25, "c"), (25, 30, "b")]
    assert o.query(4, 6) == [(4, 5, "a"), (5, 6, "c")]


@pytest.mark.parametrize(
    ("spans", "message"),
    [
        ([("a", 0, 5), ("b", 4, 10)], "overlaps"),
        ([("a", 0, 5), ("b", 6, 10)], r"bytes \[5, 6\) are not assigned"),
        ([("a", 0, 5)], r"bytes \[5, 10\) are not assigned"),
        ([("a", 0, 11)], "beyond the end"),
    ],
)
def test_tiling_errors_say_what_is_wrong(spans, message):
    with pytest.raises(PlanError, match=message):
        check_tiling(10, spans)


def test_tiling_accepts_exact_cover_in_any_order():
    check_tiling(10, [("b", 5, 10), ("a", 0, 5)])
    check_tiling(0, [])


def _resp(**over) -> AssignmentResponse:
    raw = {
        "request_id": "r",
        "mode": "ranked",
        "file": {"name": "f", "size": 10, "sha256": "a" * 64},
        "assignments": [
            {"mirror": "m1", "url": "ftp://h1/f", "offset": 0, "length": 6, "suitability": 0.6},
            {"mirror": "m2", "url": "http://h2/f", "offset": 6, "length": 4, "suitability": 0.4},
        ],
        "backups": [
            {"mirror": "m3", "url": "ftp://h3/f", "suitability": 0.1},
            {"mirror": "m1", "url": "ftp://h1/f", "suitability": 0.1},
        ],
    }
    raw.update(over)
    return AssignmentResponse.model_validate(raw)


def test_plan_from_valid_answer():
    plan = plan_from_assignments(_resp())
    assert [(p.mirror.name, p.start, p.end) for p in plan.portions] == [("m1", 0, 6), ("m2", 6, 10)]
    assert [b.name for b in plan.backups] == ["m3"]  # an active mirror is no backup
    assert plan.mode == "coordinated" and plan.request_id == "r"


def test_plan_rejects_duplicate_mirror_and_bad_piece_hashes():
    a = _resp().model_dump()
    a["assignments"][1]["mirror"] = "m1"
    with pytest.raises(PlanError, match="assigned twice"):
        plan_from_assignments(AssignmentResponse.model_validate(a))
    with pytest.raises(PlanError, match="piece hashes"):
        plan_from_assignments(
            _resp(
                file={
                    "name": "f",
                    "size": 10,
                    "sha256": "a" * 64,
                    "piece_size": 4,
                    "piece_sha256": ["b" * 64],
                }
            )
        )


def test_dynamic_plan_names_and_dedups_mirrors():
    ident = FileIdentity("f", 5)
    plan = dynamic_plan(ident, ["ftp://h:21/f", "ftp://h:21/f", "ftp://h:21/g", "http://x/f"])
    assert [m.name for m in plan.active] == ["ftp://h:21", "ftp://h:21#2", "http://x"]
    assert dynamic_plan(ident, ["ftp://h/f"]).mode == "single"
    with pytest.raises(PlanError):
        dynamic_plan(ident, ["file:///etc/passwd"])


def test_first_offsets_are_where_the_even_deal_starts_each_flow() -> None:
    from pftp_client.ranges import MAX_ROUNDS, ROUND_BLOCK_BYTES, first_offsets

    for size, parts in [(50_331_648, 4), (10, 3), (4 << 30, 4), (1, 1), (7, 2)]:
        groups = deal_in_rounds(RangeSet([(0, size)]), parts, ROUND_BLOCK_BYTES, MAX_ROUNDS)
        assert first_offsets(size, parts) == [g.first()[0] if g else None for g in groups]
    assert first_offsets(48 << 20, 4) == [0, 12 << 20, 24 << 20, 36 << 20]
    assert first_offsets(2, 4) == [None, 0, None, 1]  # fewer bytes than flows
