"""The client's four messages without pydantic, for the start-up path of `pftp get NAME`.

Importing pydantic and building its validators costs a coordinated download
~0.12 s before its request is sent (notes/client-coordinated-path.md), so the
client encodes and checks AssignmentRequest, AssignmentResponse, DownloadReport
and ReportAck with the plain code below.

``pftp_wire.models`` stays the definition. The classes here carry the same
fields, in the same order, with the same defaults and constraints, and
tests/wire/test_plain_codec.py holds them to it: same field names and defaults;
a document accepted here is accepted by the model and gives the same values;
dumps equal ``model_dump(mode="json")``; the models' rejections are rejected
here too. On types this module is stricter than pydantic's lax mode (no "7"
for 7, no true for 1, no NaN): peers send JSON of the natural types.
Change a client message in models.py -> change it here (the test fails until then).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

__all__ = [
    "Assignment",
    "AssignmentRequest",
    "AssignmentResponse",
    "Backup",
    "DownloadReport",
    "FileInfo",
    "MirrorReport",
    "ReportAck",
    "WireError",
    "dump",
    "parse",
]

Loc = tuple[str | int, ...]
Problems = list[tuple[Loc, str]]
Check = Callable[[Any, Loc, Problems], Any]

_HEX = frozenset("0123456789abcdef")


class WireError(ValueError):
    """A message does not match its definition. ``problems``: (location, message)
    pairs, the location dotted like pydantic's (``file.size``, ``assignments.0.url``)."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = problems
        super().__init__("; ".join(f"{loc or 'body'}: {msg}" for loc, msg in problems[:5]))


# --------------------------------------------------------------- field checks
# Each check returns the (normalised) value or appends a problem; messages follow
# pydantic's wording so errors read the same whichever side found them.


def _bad(problems: Problems, loc: Loc, msg: str) -> None:
    problems.append((loc, msg))


def _str(*, min_length: int = 0, max_length: int | None = None, nullable: bool = False) -> Check:
    def check(v: Any, loc: Loc, problems: Problems) -> Any:
        if v is None and nullable:
            return None
        if not isinstance(v, str):
            return _bad(problems, loc, "Input should be a valid string")
        if len(v) < min_length:
            return _bad(problems, loc, f"String should have at least {min_length} character(s)")
        if max_length is not None and len(v) > max_length:
            return _bad(problems, loc, f"String should have at most {max_length} characters")
        return v

    return check


def _hex64(v: Any, loc: Loc, problems: Problems) -> Any:
    if not isinstance(v, str):
        return _bad(problems, loc, "Input should be a valid string")
    if len(v) != 64 or not _HEX.issuperset(v):
        return _bad(problems, loc, "String should be 64 lowercase hex digits")
    return v


def _int(
    *, ge: int | None = None, gt: int | None = None, le: int | None = None,
    nullable: bool = False,
) -> Check:
    def check(v: Any, loc: Loc, problems: Problems) -> Any:
        if v is None and nullable:
            return None
        if isinstance(v, bool) or not isinstance(v, int):
            return _bad(problems, loc, "Input should be a valid integer")
        if ge is not None and v < ge:
            return _bad(problems, loc, f"Input should be greater than or equal to {ge}")
        if gt is not None and v <= gt:
            return _bad(problems, loc, f"Input should be greater than {gt}")
        if le is not None and v > le:
            return _bad(problems, loc, f"Input should be less than or equal to {le}")
        return v

    return check


def _float(*, ge: float | None = None, nullable: bool = False) -> Check:
    def check(v: Any, loc: Loc, problems: Problems) -> Any:
        if v is None and nullable:
            return None
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            return _bad(problems, loc, "Input should be a finite number")
        if ge is not None and v < ge:
            return _bad(problems, loc, f"Input should be greater than or equal to {ge}")
        return float(v)

    return check


def _bool(v: Any, loc: Loc, problems: Problems) -> Any:
    if not isinstance(v, bool):
        return _bad(problems, loc, "Input should be a valid boolean")
    return v


def _literal(*choices: str) -> Check:
    def check(v: Any, loc: Loc, problems: Problems) -> Any:
        if v not in choices or not isinstance(v, str):
            return _bad(problems, loc, "Input should be " + " or ".join(map(repr, choices)))
        return v

    return check


def _list(item: Check, *, min_length: int = 0, nullable: bool = False) -> Check:
    def check(v: Any, loc: Loc, problems: Problems) -> Any:
        if v is None and nullable:
            return None
        if not isinstance(v, list):
            return _bad(problems, loc, "Input should be a valid array")
        if len(v) < min_length:
            return _bad(problems, loc, f"List should have at least {min_length} item(s)")
        return [item(x, (*loc, i), problems) for i, x in enumerate(v)]

    return check


def _float_map(v: Any, loc: Loc, problems: Problems) -> Any:
    if not isinstance(v, dict):
        return _bad(problems, loc, "Input should be a valid dictionary")
    num = _float()
    return {k: num(x, (*loc, k), problems) for k, x in v.items()}


def _message(cls: type) -> Check:
    return lambda v, loc, problems: _fields(cls, v, loc, problems)


def _m(check: Check) -> dict[str, Check]:
    """A dataclass field's metadata: the check its value must pass."""
    return {"check": check}


def _fields(cls: type, doc: Any, loc: Loc, problems: Problems) -> Any:
    if not isinstance(doc, dict):
        return _bad(problems, loc, "Input should be an object")
    before = len(problems)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name in doc:
            values[f.name] = f.metadata["check"](doc[f.name], (*loc, f.name), problems)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            _bad(problems, (*loc, f.name), "Field required")
    # unknown keys from a newer peer are ignored, as the models do (extra="ignore")
    return cls(**values) if len(problems) == before else None


# --------------------------------------------------------------- the messages
# Same order, defaults and constraints as the classes of the same name in models.py.


@dataclass(kw_only=True)
class AssignmentRequest:
    file: str = field(metadata=_m(_str(min_length=1, max_length=1024)))
    access_bandwidth_bps: int | None = field(default=None, metadata=_m(_int(gt=0, nullable=True)))
    protocols: list[str] = field(
        default_factory=lambda: ["ftp", "http"],
        metadata=_m(_list(_literal("ftp", "http", "https"), min_length=1)),
    )


@dataclass(kw_only=True)
class FileInfo:
    name: str = field(metadata=_m(_str()))
    size: int = field(metadata=_m(_int(ge=0)))
    sha256: str = field(metadata=_m(_hex64))
    piece_size: int | None = field(default=None, metadata=_m(_int(gt=0, nullable=True)))
    piece_sha256: list[str] | None = field(default=None, metadata=_m(_list(_hex64, nullable=True)))


@dataclass(kw_only=True)
class Assignment:
    mirror: str = field(metadata=_m(_str()))
    url: str = field(metadata=_m(_str()))
    offset: int = field(metadata=_m(_int(ge=0)))
    length: int = field(metadata=_m(_int(ge=0)))
    suitability: float = field(metadata=_m(_float()))
    expected_bps: float | None = field(default=None, metadata=_m(_float(nullable=True)))
    connections: int = field(default=1, metadata=_m(_int(ge=1, le=64)))
    explain: dict[str, float] = field(default_factory=dict, metadata=_m(_float_map))


@dataclass(kw_only=True)
class Backup:
    mirror: str = field(metadata=_m(_str()))
    url: str = field(metadata=_m(_str()))
    suitability: float = field(metadata=_m(_float()))
    expected_bps: float | None = field(default=None, metadata=_m(_float(nullable=True)))
    connections: int = field(default=1, metadata=_m(_int(ge=1, le=64)))
    explain: dict[str, float] = field(default_factory=dict, metadata=_m(_float_map))


@dataclass(kw_only=True)
class AssignmentResponse:
    request_id: str = field(metadata=_m(_str()))
    file: FileInfo = field(metadata=_m(_message(FileInfo)))
    assignments: list[Assignment] = field(metadata=_m(_list(_message(Assignment))))
    backups: list[Backup] = field(metadata=_m(_list(_message(Backup))))
    mode: str = field(metadata=_m(_literal("ranked", "balanced")))


@dataclass(kw_only=True)
class MirrorReport:
    mirror: str = field(metadata=_m(_str(min_length=1)))
    url: str | None = field(default=None, metadata=_m(_str(nullable=True)))
    bytes: int = field(metadata=_m(_int(ge=0)))
    seconds: float = field(metadata=_m(_float(ge=0)))
    throughput_bps: float = field(metadata=_m(_float(ge=0)))
    failures: int = field(default=0, metadata=_m(_int(ge=0)))
    slow: bool = field(default=False, metadata=_m(_bool))
    congested: bool = field(default=False, metadata=_m(_bool))
    bad_data: bool = field(default=False, metadata=_m(_bool))
    congested_with: list[str] = field(default_factory=list, metadata=_m(_list(_str())))
    connections: int | None = field(
        default=None, metadata=_m(_int(ge=1, le=64, nullable=True))
    )


@dataclass(kw_only=True)
class DownloadReport:
    request_id: str | None = field(default=None, metadata=_m(_str(nullable=True)))
    file: str = field(metadata=_m(_str()))
    size: int = field(metadata=_m(_int(ge=0)))
    seconds: float = field(metadata=_m(_float(ge=0)))
    sha256_ok: bool = field(metadata=_m(_bool))
    access_bandwidth_bps: int | None = field(default=None, metadata=_m(_int(nullable=True)))
    mirrors: list[MirrorReport] = field(metadata=_m(_list(_message(MirrorReport))))


@dataclass(kw_only=True)
class ReportAck:
    accepted: bool = field(metadata=_m(_bool))
    download_id: int | None = field(default=None, metadata=_m(_int(nullable=True)))


# --------------------------------------------------------------- encode / decode

M = TypeVar("M")


def _flat(problems: Problems) -> list[tuple[str, str]]:
    return [(".".join(str(p) for p in loc), msg) for loc, msg in problems]


def parse(cls: type[M], raw: bytes | str) -> M:
    """JSON text -> a checked ``cls`` instance (``Model.model_validate_json``).
    Raises WireError."""
    try:
        doc = json.loads(raw)
    except ValueError as exc:  # includes UnicodeDecodeError
        raise WireError([("", f"Invalid JSON: {exc}")]) from None
    problems: Problems = []
    msg = _fields(cls, doc, (), problems)
    if problems:
        raise WireError(_flat(problems))
    return msg


def dump(msg: Any) -> dict[str, Any]:
    """A checked, JSON-ready dict (``Model(...).model_dump(mode="json")``). Raises WireError."""
    problems: Problems = []
    checked = _fields(type(msg), dataclasses.asdict(msg), (), problems)
    if problems:
        raise WireError(_flat(problems))
    return dataclasses.asdict(checked)
