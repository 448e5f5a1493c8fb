"""What to download from whom: the validated form of a coordinator answer, or a
plan built from the mirrors the user named (dynamic parallel access, paper 000).

A coordinator answer is checked before anything is fetched (issue 3): the
portions must be disjoint, inside the file and cover it exactly, and piece
hashes must match the piece geometry. Anything else is a ``PlanError`` whose
message says exactly what is wrong.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from pftp_wire import models, plain

SUPPORTED_SCHEMES = ("ftp", "http", "https")
MAX_FILE_BYTES = 2**63 - 1  # off_t: os.ftruncate raises OverflowError past it
PlanMode = Literal["coordinated", "dynamic", "single"]


class PlanError(ValueError):
    """The coordinator's answer (or the user's input) cannot be used as a plan."""


@dataclass(frozen=True)
class MirrorSource:
    """One mirror of a plan: its name, URL and the coordinator's figures."""

    name: str
    url: str
    expected_bps: float | None = None  # bits/s, the coordinator's estimate
    suitability: float | None = None
    # connections to open at once (the coordinator's probe found each one held
    # below the path's rate, and this many together carried expected_bps)
    connections: int = 1


@dataclass(frozen=True)
class Portion:
    """Bytes [start, end) assigned to one mirror by the coordinator."""

    mirror: MirrorSource
    start: int
    end: int  # exclusive


@dataclass(frozen=True)
class FileIdentity:
    """The file to download: name, size and (when known) its hashes."""

    name: str
    size: int
    sha256: str | None = None
    piece_size: int | None = None
    piece_sha256: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.size < 0:
            raise PlanError(f"file size must be >= 0, got {self.size}")
        if self.sha256 is not None and (
            len(self.sha256) != 64 or any(c not in "0123456789abcdef" for c in self.sha256)
        ):
            raise PlanError("sha256 must be 64 lowercase hex digits")
        if self.piece_sha256 is not None:
            if not self.piece_size:
                raise PlanError("piece hashes given without a piece size")
            want = -(-self.size // self.piece_size)
            if len(self.piece_sha256) != want:
                raise PlanError(
                    f"{len(self.piece_sha256)} piece hashes for a {self.size}-byte file with "
                    f"{self.piece_size}-byte pieces; expected {want}"
                )


@dataclass(frozen=True)
class Plan:
    """What to download from whom (coordinated, dynamic or single)."""

    file: FileIdentity
    mode: PlanMode
    # coordinated: one portion per active mirror; dynamic/single: empty (the
    # engine splits the file itself).
    portions: tuple[Portion, ...] = ()
    active: tuple[MirrorSource, ...] = ()
    backups: tuple[MirrorSource, ...] = ()
    request_id: str | None = None
    notes: tuple[str, ...] = field(default=())

    @property
    def urls(self) -> list[str]:
        return [m.url for m in (*self.active, *self.backups)]


def check_url(url: str) -> str:
    try:
        parts = urlsplit(url)
        port = parts.port  # (property access validates it)
    except ValueError as exc:
        raise PlanError(f"malformed mirror URL {url!r}: {exc}") from exc
    if parts.scheme not in SUPPORTED_SCHEMES or not parts.hostname:
        raise PlanError(
            f"unsupported mirror URL {url!r} (need ftp://, http:// or https://host/path)"
        )
    if port == 0:
        raise PlanError(f"malformed mirror URL {url!r}: port 0")
    if parts.scheme == "ftp":
        from pftp_client.transports.ftp import ftp_target

        try:
            ftp_target(url)  # (no file named, a control character: bad input)
        except ValueError as exc:
            raise PlanError(str(exc)) from exc
    return url


def check_tiling(size: int, spans: list[tuple[str, int, int]]) -> None:
    """Portions (name, start, end) must be disjoint, inside [0, size) and cover it."""
    pos = 0
    for name, start, end in sorted(spans, key=lambda t: (t[1], t[2])):
        if end > size:
            raise PlanError(
                f"portion of {name} [{start}, {end}) goes beyond the end of the file ({size} bytes)"
            )
        if start < pos:
            raise PlanError(
                f"portion of {name} [{start}, {end}) overlaps the previous portion (ends at {pos})"
            )
        if start > pos:
            raise PlanError(f"bytes [{pos}, {start}) are not assigned to any mirror")
        pos = end
    if pos < size:
        raise PlanError(f"bytes [{pos}, {size}) are not assigned to any mirror")


def plan_from_assignments(resp: plain.AssignmentResponse | models.AssignmentResponse) -> Plan:
    info = resp.file
    if info.size > MAX_FILE_BYTES:
        raise PlanError(f"file size {info.size} is beyond the largest possible file")
    ident = FileIdentity(
        name=info.name,
        size=info.size,
        sha256=info.sha256,
        piece_size=info.piece_size,
        piece_sha256=tuple(info.piece_sha256) if info.piece_sha256 is not None else None,
    )
    spans: list[tuple[str, int, int]] = []
    portions: list[Portion] = []
    seen: set[str] = set()
    for a in resp.assignments:
        check_url(a.url)
        if a.mirror in seen:
            raise PlanError(f"mirror {a.mirror!r} is assigned twice")
        seen.add(a.mirror)
        end = a.offset + a.length
        spans.append((a.mirror, a.offset, end))
        if a.length:
            src = MirrorSource(a.mirror, a.url, a.expected_bps, a.suitability, a.connections)
            portions.append(Portion(src, a.offset, end))
    if not resp.assignments and info.size > 0:
        raise PlanError("the coordinator assigned no mirror")
    check_tiling(info.size, spans)
    backups: list[MirrorSource] = []
    for b in resp.backups:
        check_url(b.url)
        if b.mirror in seen:
            continue  # a backup that is already active adds nothing
        seen.add(b.mirror)
        backups.append(MirrorSource(b.mirror, b.url, b.expected_bps, b.suitability, b.connections))
    active = tuple(p.mirror for p in sorted(portions, key=lambda p: p.start))
    if not active and resp.assignments:
        # Zero-byte file: keep one mirror so the engine has somebody to ask.
        a = resp.assignments[0]
        active = (MirrorSource(a.mirror, a.url, a.expected_bps, a.suitability, a.connections),)
    return Plan(
        file=ident,
        mode="coordinated",
        portions=tuple(sorted(portions, key=lambda p: p.start)),
        active=active,
        backups=tuple(backups),
        request_id=resp.request_id,
    )


def mirror_name(url: str, taken: set[str]) -> str:
    """A short, unique, human-readable name for a user-given mirror URL."""
    parts = urlsplit(url)
    host = f"[{parts.hostname}]" if parts.hostname and ":" in parts.hostname else parts.hostname
    base = f"{parts.scheme}://{host}" + (f":{parts.port}" if parts.port else "")
    name, n = base, 2
    while name in taken:
        name = f"{base}#{n}"
        n += 1
    taken.add(name)
    return name


def dynamic_plan(file: FileIdentity, urls: list[str], backups: Sequence[str] = ()) -> Plan:
    """Every URL in ``urls`` active (paper 000); ``backups`` are kept in reserve for
    failed, slow or congestion-dropped flows (paper 001)."""
    if not urls:
        raise PlanError("no mirror URL given")
    taken: set[str] = set()
    mirrors = []
    for u in dict.fromkeys(urls):  # drop repeated URLs, keep order
        mirrors.append(MirrorSource(mirror_name(check_url(u), taken), u))
    spare = [
        MirrorSource(mirror_name(check_url(u), taken), u)
        for u in dict.fromkeys(backups)
        if u not in urls
    ]
    return Plan(
        file=file,
        mode="dynamic" if len(mirrors) > 1 else "single",
        active=tuple(mirrors),
        backups=tuple(spare),
    )
