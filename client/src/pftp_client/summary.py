"""What a download did: per-mirror figures and events, for --json, the progress
display, the library caller and the report to the coordinator."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from pftp_client.timeline import Timeline

EventKind = Literal[
    "slow", "failed", "retry", "congested", "corrupt", "backup", "stolen", "duplicate",
    "parked", "resumed", "no-ranges", "from-zero", "stream",
]


@dataclass
class MirrorEvent:
    """Something that happened to a mirror's flow, ``at_s`` after the start."""

    kind: EventKind
    mirror: str
    at_s: float
    detail: str = ""


@dataclass
class MirrorStats:
    """One mirror's share of a download."""

    name: str
    url: str
    role: Literal["active", "backup"] = "active"
    state: str = "waiting"
    bytes: int = 0  # bytes written into the file (useful bytes)
    received: int = 0  # bytes received, including discarded duplicates
    seconds: float = 0.0  # time spent fetching
    # bits/s while a range runs, past its request and slow start: the flow's rate over
    # the monitoring intervals (1 s) that one range spent wholly past its warm-up
    # (engine); None without one. What the report tells the coordinator
    # (bytes / seconds also counts each range's set-up).
    steady_bps: float | None = None
    failures: int = 0
    ranges: int = 0  # range requests (lanes) this mirror served
    # of those, how many began on a second connection before the one before ended
    # (far paths: FtpFetcher.start_next), their slow start hidden behind it
    ranges_ahead: int = 0
    # ... and by how long, summed: how far ahead of the switch their requests went
    ahead_s: float = 0.0
    events: list[str] = field(default_factory=list)
    # mirrors this one was found to share a congested link with (issue 6)
    congested_with: list[str] = field(default_factory=list)
    # connections to it that carried data and were kept, once a trial of more was
    # judged (streams.py): the first and the extra ones that paid, or 1 when more
    # did not; None when none was tried. The report tells the coordinator, whose
    # short probe read cannot see a limit counted in whole seconds.
    connections: int | None = None

    def copy(self) -> MirrorStats:
        """A copy that later updates of this one do not change."""
        return MirrorStats(**{**self.__dict__, "events": list(self.events)})

    @property
    def rate_bps(self) -> float:
        """Throughput in bits per second while fetching."""
        return 8 * self.bytes / self.seconds if self.seconds > 0 else 0.0

    @property
    def slow(self) -> bool:
        return "slow" in self.events

    @property
    def congested(self) -> bool:
        return "congested" in self.events

    @property
    def corrupt(self) -> bool:
        return "corrupt" in self.events


@dataclass
class DownloadSummary:
    """The outcome of one download (``--json`` prints ``to_json_dict()``)."""

    name: str
    path: str
    size: int
    seconds: float
    mode: str  # coordinated | dynamic | single
    sha256: str | None  # of the file written
    expected_sha256: str | None
    sha256_verified: bool  # an expected hash was known and matched
    mirrors: list[MirrorStats]
    events: list[MirrorEvent] = field(default_factory=list)
    resumed_bytes: int = 0  # already present from an interrupted run
    duplicate_bytes: int = 0  # fetched twice at the tail (bounded, paper 000)
    refetched_bytes: int = 0  # fetched again to repair or find bad bytes
    # without a SHA-256: spots of the mirrors' bytes another mirror's copy matched
    # (cross_check.py); 0 with a hash (it checks every byte) or a single mirror
    cross_checked_spots: int = 0
    request_id: str | None = None
    coordinator: str | None = None
    access_bandwidth_bps: int | None = None
    notes: list[str] = field(default_factory=list)
    # shared-congestion detection: {"mode", "source", "sources_used", "detector",
    # "events": [{"at_s", "mirrors", "kept", "dropped", "source", "confidence",
    # "packets", "refuted" (its parking was undone: the verdict did not hold),
    # "thinned_by" (nothing dropped: these mirrors are what an earlier set left), ...}],
    # "refuted": [mirrors put back to work so]}; source None = not attached (off,
    # one mirror, own detector)
    congestion: dict[str, Any] = field(default_factory=dict)
    # bytes received per mirror over time, with the events (timeline.py); None when
    # no transfer ran (or for the report of a failed download)
    timeline: Timeline | None = None

    @property
    def fetched_bytes(self) -> int:
        return sum(m.received for m in self.mirrors)

    def to_json_dict(self) -> dict[str, Any]:
        out = asdict(self)
        from pftp_client.transports.base import redacted, shown

        for m, raw in zip(self.mirrors, out["mirrors"], strict=True):
            raw["rate_bps"] = round(m.rate_bps, 1)
            raw["seconds"] = round(m.seconds, 3)
            raw["url"] = shown(m.url)  # (a summary is printed, kept, pasted: no passwords)
        out["seconds"] = round(self.seconds, 3)
        out["fetched_bytes"] = self.fetched_bytes
        out["rate_bps"] = (
            round(8 * (self.size - self.resumed_bytes) / self.seconds, 1)
            if self.seconds > 0
            else 0.0
        )
        for ev in out["events"]:
            ev["at_s"] = round(ev["at_s"], 3)
            ev["detail"] = redacted(ev["detail"])
        out["notes"] = [redacted(n) for n in out["notes"]]
        # last: the longest part, and a reader that cuts the text keeps the rest
        del out["timeline"]
        out["timeline"] = self.timeline.to_json_dict() if self.timeline is not None else None
        return out
