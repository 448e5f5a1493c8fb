"""pftp_wire.plain (the client's pydantic-free codec) against pftp_wire.models (the
definition): same fields and defaults; whatever plain accepts, the model accepts
with the same values; dumps are identical; constraint violations fail in both."""

from __future__ import annotations

import copy
import dataclasses
import json
import subprocess
import sys

import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pftp_wire import models, plain

CLASSES = [
    "AssignmentRequest",
    "FileInfo",
    "Assignment",
    "Backup",
    "AssignmentResponse",
    "MirrorReport",
    "DownloadReport",
    "ReportAck",
]
HEX = "0123456789abcdef"


def _plain_default(f: dataclasses.Field) -> object:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return "<required>"


def _model_default(info: pydantic.fields.FieldInfo) -> object:
    if info.is_required():
        return "<required>"
    return info.get_default(call_default_factory=True)


@pytest.mark.parametrize("name", CLASSES)
def test_same_fields_order_and_defaults_as_the_model(name: str) -> None:
    model, mirror = getattr(models, name), getattr(plain, name)
    assert [f.name for f in dataclasses.fields(mirror)] == list(model.model_fields)
    for f in dataclasses.fields(mirror):
        assert _plain_default(f) == _model_default(model.model_fields[f.name]), f.name


def test_importing_plain_does_not_load_pydantic() -> None:
    code = (
        "import sys, pftp_wire, pftp_wire.plain\n"
        "from pftp_wire import API_PREFIX, ANNOUNCE_PORT\n"
        "print('pydantic' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "False"


def test_lazy_package_exports_are_the_models() -> None:
    import pftp_wire

    for name in pftp_wire.__all__:
        assert getattr(pftp_wire, name) is getattr(models, name)
    with pytest.raises(AttributeError):
        _ = pftp_wire.NoSuchModel


# ----------------------------------------------------------------- documents

hex64 = st.text(HEX, min_size=64, max_size=64)
names = st.text(min_size=0, max_size=20)
nonneg = st.integers(min_value=0, max_value=2**62)
finite = st.floats(allow_nan=False, allow_infinity=False, width=64)
maybe_float = st.none() | finite | st.integers(-(2**40), 2**40)
explain = st.dictionaries(names, finite | st.integers(-10, 10), max_size=3)


@st.composite
def file_infos(draw: st.DrawFn) -> dict:
    doc = {"name": draw(names), "size": draw(nonneg), "sha256": draw(hex64)}
    if draw(st.booleans()):
        doc["piece_size"] = draw(st.none() | st.integers(1, 2**30))
    if draw(st.booleans()):
        doc["piece_sha256"] = draw(st.none() | st.lists(hex64, max_size=3))
    return doc


def _mirror_doc(draw: st.DrawFn, ranged: bool) -> dict:
    doc: dict = {"mirror": draw(names), "url": draw(names), "suitability": draw(finite)}
    if ranged:
        doc |= {"offset": draw(nonneg), "length": draw(nonneg)}
    if draw(st.booleans()):
        doc["expected_bps"] = draw(maybe_float)
    if draw(st.booleans()):
        doc["connections"] = draw(st.integers(1, 64))
    if draw(st.booleans()):
        doc["explain"] = draw(explain)
    if draw(st.booleans()):
        doc["from_a_newer_coordinator"] = draw(names)  # ignored by both
    return doc


@st.composite
def assignments(draw: st.DrawFn) -> dict:
    return _mirror_doc(draw, ranged=True)


@st.composite
def backups(draw: st.DrawFn) -> dict:
    return _mirror_doc(draw, ranged=False)


@st.composite
def answers(draw: st.DrawFn) -> dict:
    return {
        "request_id": draw(names),
        "file": draw(file_infos()),
        "assignments": draw(st.lists(assignments(), max_size=3)),
        "backups": draw(st.lists(backups(), max_size=2)),
        "mode": draw(st.sampled_from(["ranked", "balanced"])),
    }


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 2**40) | finite | st.text(max_size=5) | hex64,
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(names, inner, max_size=2),
    max_leaves=4,
)


def _paths(doc: object, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, (*prefix, i))
    return out


@st.composite
def mutated_answers(draw: st.DrawFn) -> dict:
    """A valid answer with one place replaced by any JSON value, or one key removed."""
    doc = copy.deepcopy(draw(answers()))
    path = draw(st.sampled_from(_paths(doc)[1:]))
    parent = doc
    for p in path[:-1]:
        parent = parent[p]
    if isinstance(parent, dict) and draw(st.booleans()):
        del parent[path[-1]]
    else:
        parent[path[-1]] = draw(json_values)
    return doc


def _model_parse(raw: bytes) -> dict | None:
    try:
        return models.AssignmentResponse.model_validate_json(raw).model_dump()
    except pydantic.ValidationError:
        return None


def _plain_parse(raw: bytes) -> dict | None:
    try:
        return dataclasses.asdict(plain.parse(plain.AssignmentResponse, raw))
    except plain.WireError:
        return None


@settings(max_examples=150, deadline=None)
@given(answers())
def test_valid_answers_parse_to_the_same_values(doc: dict) -> None:
    raw = json.dumps(doc).encode()
    expected = _model_parse(raw)
    assert expected is not None
    assert _plain_parse(raw) == expected


@settings(max_examples=300, deadline=None)
@given(mutated_answers())
def test_plain_accepts_only_what_the_model_accepts(doc: dict) -> None:
    raw = json.dumps(doc).encode()
    got = _plain_parse(raw)
    if got is not None:
        assert got == _model_parse(raw)


def _valid_answer() -> dict:
    return {
        "request_id": "r1",
        "file": {
            "name": "f",
            "size": 8,
            "sha256": "a" * 64,
            "piece_size": 4,
            "piece_sha256": ["b" * 64, "c" * 64],
        },
        "assignments": [
            {"mirror": "m", "url": "ftp://h/f", "offset": 0, "length": 8, "suitability": 0.5}
        ],
        "backups": [{"mirror": "b", "url": "http://h/f", "suitability": 0.1}],
        "mode": "ranked",
    }


def _set(path: str, value: object) -> object:
    def mutate(doc: dict) -> None:
        *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
        for p in parents:
            doc = doc[p]
        if value is KeyError:
            del doc[last]
        else:
            doc[last] = value

    return pytest.param(mutate, path, id=f"{path}={value!r}"[:60])


@pytest.mark.parametrize(
    ("mutate", "where"),
    [
        _set("request_id", KeyError),
        _set("file.size", KeyError),
        _set("file.size", -1),
        _set("file.size", 1.5),
        _set("file.sha256", "A" * 64),
        _set("file.sha256", "a" * 63),
        _set("file.sha256", "a" * 64 + "\n"),
        _set("file.piece_size", 0),
        _set("file.piece_sha256.1", "zz"),
        _set("assignments.0.offset", -1),
        _set("assignments.0.length", "x"),
        _set("assignments.0.url", None),
        _set("assignments.0.suitability", "high"),
        _set("assignments.0.explain", {"s": "x"}),
        _set("assignments.0.connections", 0),
        _set("assignments.0.connections", 65),
        _set("backups.0.connections", 2.5),
        _set("backups", {}),
        _set("backups.0.mirror", 3),
        _set("mode", "fastest"),
    ],
)
def test_constraint_violations_fail_in_both(mutate, where: str) -> None:
    doc = _valid_answer()
    mutate(doc)
    raw = json.dumps(doc).encode()
    assert _model_parse(raw) is None
    with pytest.raises(plain.WireError) as err:
        plain.parse(plain.AssignmentResponse, raw)
    assert where in str(err.value)


@pytest.mark.parametrize("raw", [b"<html>oops</html>", b"", b"[1, 2]", b"null", b"\xff"])
def test_not_an_object(raw: bytes) -> None:
    assert _model_parse(raw) is None
    with pytest.raises(plain.WireError, match="body: "):
        plain.parse(plain.AssignmentResponse, raw)


def test_report_ack() -> None:
    ack = plain.parse(plain.ReportAck, b'{"accepted": true, "download_id": 7, "x": 1}')
    assert (
        dataclasses.asdict(ack)
        == models.ReportAck.model_validate_json(
            b'{"accepted": true, "download_id": 7}'
        ).model_dump()
    )
    with pytest.raises(plain.WireError, match="accepted: Field required"):
        plain.parse(plain.ReportAck, b"{}")


# ----------------------------------------------------------------- what the client sends


@settings(max_examples=150, deadline=None)
@given(
    file=st.text(min_size=1, max_size=1024),
    bw=st.none() | st.integers(1, 2**50),
    protocols=st.none() | st.lists(st.sampled_from(["ftp", "http", "https"]), min_size=1),
)
def test_request_dump_is_the_models(file: str, bw: int | None, protocols: list | None) -> None:
    kw: dict = {"file": file, "access_bandwidth_bps": bw}
    if protocols is not None:
        kw["protocols"] = protocols
    assert plain.dump(plain.AssignmentRequest(**kw)) == models.AssignmentRequest(**kw).model_dump(
        mode="json"
    )


@pytest.mark.parametrize(
    "kw",
    [
        {"file": ""},
        {"file": "x" * 1025},
        {"file": "x", "access_bandwidth_bps": 0},
        {"file": "x", "protocols": []},
        {"file": "x", "protocols": ["gopher"]},
    ],
)
def test_bad_requests_fail_in_both(kw: dict) -> None:
    with pytest.raises(pydantic.ValidationError):
        models.AssignmentRequest(**kw)
    with pytest.raises(plain.WireError):
        plain.dump(plain.AssignmentRequest(**kw))


mirror_reports = st.fixed_dictionaries(
    {
        "mirror": st.text(min_size=1, max_size=10),
        "bytes": nonneg,
        "seconds": st.floats(0, 1e6) | st.integers(0, 100),
        "throughput_bps": st.floats(0, 1e12),
    },
    optional={
        "url": st.none() | names,
        "failures": st.integers(0, 100),
        "slow": st.booleans(),
        "congested": st.booleans(),
        "bad_data": st.booleans(),
        "congested_with": st.lists(names, max_size=3),
    },
)


@settings(max_examples=150, deadline=None)
@given(
    top=st.fixed_dictionaries(
        {
            "file": names,
            "size": nonneg,
            "seconds": st.floats(0, 1e6),
            "sha256_ok": st.booleans(),
        },
        optional={
            "request_id": st.none() | names,
            "access_bandwidth_bps": st.none() | st.integers(-5, 2**50),
        },
    ),
    mirrors=st.lists(mirror_reports, max_size=4),
)
def test_report_dump_is_the_models(top: dict, mirrors: list[dict]) -> None:
    want = models.DownloadReport(
        **top, mirrors=[models.MirrorReport(**m) for m in mirrors]
    ).model_dump(mode="json")
    got = plain.dump(
        plain.DownloadReport(**top, mirrors=[plain.MirrorReport(**m) for m in mirrors])
    )
    assert got == want
    assert json.dumps(got) == json.dumps(want)  # same types too (1.0, not 1)


@pytest.mark.parametrize(
    "change",
    [{"bytes": -1}, {"seconds": -0.5}, {"throughput_bps": -1.0}, {"mirror": ""}, {"failures": -1}],
)
def test_bad_reports_fail_in_both(change: dict) -> None:
    m = {"mirror": "m", "bytes": 1, "seconds": 1.0, "throughput_bps": 8.0} | change
    with pytest.raises(pydantic.ValidationError):
        models.MirrorReport(**m)
    report = plain.DownloadReport(
        file="f", size=1, seconds=1.0, sha256_ok=True, mirrors=[plain.MirrorReport(**m)]
    )
    with pytest.raises(plain.WireError, match=r"mirrors\.0\."):
        plain.dump(report)
