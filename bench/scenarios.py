"""The issue's seven scenarios as plain data (issue 5; paper 004 section 4, paper 001 tables)."""

from __future__ import annotations

from dataclasses import dataclass, field

from pftp_lab import BottleneckSpec, MirrorSpec

from .bounds import LinkState, bound_seconds, single_mirror_bps

MBIT = 1_000_000
MIB = 1 << 20


@dataclass(frozen=True)
class Event:
    """After `at_fraction` of the file has reached the client: `kind` on mirror `mirror`.

    Kinds: 'slow' (its link to rate_bps), 'kill' (its servers SIGKILLed: transfers
    end), 'restart' (a killed mirror's servers back), 'disconnect' (its link down:
    transfers stall without an error), 'reconnect' (link up again), 'freeze' (its
    processes frozen, pftp_lab.freezer: the host still completes TCP handshakes, no
    server answers), 'thaw' (they run again), 'access' (the client's access link to
    rate_bps; `mirror` is ignored)."""

    at_fraction: float
    kind: str
    mirror: str
    rate_bps: int | None = None


@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    mirrors: tuple[MirrorSpec, ...]
    access_bps: int | None = 1000 * MBIT
    bottlenecks: tuple[BottleneckSpec, ...] = ()
    events: tuple[Event, ...] = ()
    # Sizes the file so the bound is about this long: long enough that start-up and
    # connection set-up (tens of ms per tool) are not what the ratio measures.
    target_bound_s: float = 5.0
    per_mirror_curl: bool = True
    equal_split: int = 0  # >0: also the paper 004 table 1 methods with this many mirrors
    quick: bool = False  # part of --quick
    notes: str = ""
    extra: dict[str, str] = field(default_factory=dict)

    def names(self) -> list[str]:
        return [m.name or f"m{i}" for i, m in enumerate(self.mirrors)]

    def initial_state(self) -> LinkState:
        names = self.names()
        groups: dict[str, tuple[float, list[str]]] = {
            b.name: (float(b.rate_bps), []) for b in self.bottlenecks
        }
        for name, spec in zip(names, self.mirrors, strict=True):
            if spec.bottleneck:
                groups[spec.bottleneck][1].append(name)
        return LinkState(
            access_bps=self.access_bps,
            mirrors={n: float(m.rate_bps or 10_000 * MBIT) for n, m in zip(names, self.mirrors,
                                                                          strict=True)},
            groups={k: (v[0], tuple(v[1])) for k, v in groups.items()},
        )

    def phases(self) -> list[tuple[float, LinkState]]:
        state = self.initial_state()
        out: list[tuple[float, LinkState]] = []
        for ev in sorted(self.events, key=lambda e: e.at_fraction):
            out.append((ev.at_fraction, state))
            rates, access = dict(state.mirrors), state.access_bps
            if ev.kind == "access":
                access = float(ev.rate_bps) if ev.rate_bps else None
            elif ev.kind in ("kill", "disconnect", "freeze"):
                rates[ev.mirror] = 0.0
            elif ev.kind in ("restart", "reconnect", "thaw"):
                rates[ev.mirror] = self.initial_state().mirrors[ev.mirror]
            elif ev.kind == "slow":
                rates[ev.mirror] = float(ev.rate_bps or 0)
            else:
                raise ValueError(f"unknown event kind {ev.kind!r}")
            state = LinkState(access, rates, state.groups)
        out.append((1.0, state))
        return out

    def file_bytes(self, quick: bool) -> int:
        """Sized so the initial-topology bound is about target_bound_s (smaller in quick)."""
        from .bounds import aggregate_bps

        target = self.target_bound_s * (0.25 if quick else 1.0)
        size = aggregate_bps(self.initial_state()) * target / 8
        return max(MIB, round(size / MIB) * MIB)

    def bound_s(self, file_bytes: int) -> float:
        return bound_seconds(file_bytes, self.phases())

    def fastest_mirror(self) -> str:
        state = self.initial_state()
        return max(self.names(), key=lambda n: single_mirror_bps(state, n))

    def best_mirrors(self, k: int) -> list[str]:
        state = self.initial_state()
        return sorted(self.names(), key=lambda n: -single_mirror_bps(state, n))[:k]


def _mirrors(rates_mbit: list[float], **kw: object) -> tuple[MirrorSpec, ...]:
    # every other mirror runs pure-ftpd, so both server kinds are always in the comparison
    return tuple(
        MirrorSpec(rate_bps=int(r * MBIT), kind="pure-ftpd" if i % 2 else "vsftpd",
                   **kw)  # type: ignore[arg-type]
        for i, r in enumerate(rates_mbit)
    )


SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        name="heterogeneous",
        title="4 mirrors at 5/10/20/40 Mbit/s, 1 Gbit/s access",
        mirrors=_mirrors([5, 10, 20, 40]),
        quick=True,
    ),
    Scenario(
        name="equal",
        title="4 mirrors at 20 Mbit/s each, 1 Gbit/s access",
        mirrors=_mirrors([20, 20, 20, 20]),
    ),
    Scenario(
        name="shared-bottleneck",
        title="m0,m1 (30 Mbit/s each) behind one 20 Mbit/s bottleneck; m2,m3 at 15 Mbit/s",
        mirrors=(
            MirrorSpec(rate_bps=30 * MBIT, bottleneck="b0"),
            MirrorSpec(rate_bps=30 * MBIT, kind="pure-ftpd", bottleneck="b0"),
            MirrorSpec(rate_bps=15 * MBIT),
            MirrorSpec(rate_bps=15 * MBIT, kind="pure-ftpd"),
        ),
        bottlenecks=(BottleneckSpec("b0", 20 * MBIT),),
    ),
    Scenario(
        name="slowdown",
        title="10/20/20/30 Mbit/s; the 30 Mbit/s mirror drops to 1.5 Mbit/s after 15% of the file",
        mirrors=_mirrors([10, 20, 20, 30]),
        events=(Event(0.15, "slow", "m3", int(1.5 * MBIT)),),
        quick=True,
    ),
    Scenario(
        name="mirror-dies",
        title="10/20/20/30 Mbit/s; the 30 Mbit/s mirror's server is killed after 15% of the file",
        mirrors=_mirrors([10, 20, 20, 30]),
        events=(Event(0.15, "kill", "m3"),),
        quick=True,
    ),
    Scenario(
        name="slow-access",
        title="10/20/20/30 Mbit/s mirrors behind a 4 Mbit/s access link",
        mirrors=_mirrors([10, 20, 20, 30]),
        access_bps=4 * MBIT,
        target_bound_s=8.0,
    ),
    Scenario(
        name="selection-table1",
        title="paper 004 table 1: 8 mirrors 2..24 Mbit/s, 40 Mbit/s access; P-FTP selection vs "
              "equal portions from the 4 best / 4 random mirrors",
        mirrors=_mirrors([2, 3, 4, 6, 8, 12, 16, 24]),
        access_bps=40 * MBIT,
        per_mirror_curl=False,
        equal_split=4,
    ),
    Scenario(
        name="wide-area",
        title="5/10/20/40 Mbit/s mirrors 20-160 ms away (the fastest farthest but one)",
        mirrors=(
            MirrorSpec(rate_bps=5 * MBIT, rtt_ms=20),
            MirrorSpec(rate_bps=10 * MBIT, kind="pure-ftpd", rtt_ms=160),
            MirrorSpec(rate_bps=20 * MBIT, rtt_ms=40),
            MirrorSpec(rate_bps=40 * MBIT, kind="pure-ftpd", rtt_ms=80),
        ),
        notes="propagation delay from the lab's delay line; the bound ignores set-up round trips",
    ),
    Scenario(
        name="lossy-path",
        title="4 mirrors at 20 Mbit/s, 30 ms away; the path to m1 drops 1% of its packets",
        mirrors=(
            MirrorSpec(rate_bps=20 * MBIT, rtt_ms=30),
            MirrorSpec(rate_bps=20 * MBIT, kind="pure-ftpd", rtt_ms=30, loss=0.01),
            MirrorSpec(rate_bps=20 * MBIT, rtt_ms=30),
            MirrorSpec(rate_bps=20 * MBIT, kind="pure-ftpd", rtt_ms=30),
        ),
        notes="TCP over 1% loss at 30 ms carries a few Mbit/s, so the link-rate bound is not "
              "reachable there: compare the tools",
    ),
    Scenario(
        name="per-connection-limit",
        title="4 mirrors at 40 Mbit/s whose servers hold each connection to 1.25 MB/s (10 Mbit/s)",
        mirrors=(
            MirrorSpec(rate_bps=40 * MBIT, conn_rate_Bps=1_250_000),
            MirrorSpec(rate_bps=40 * MBIT, kind="pure-ftpd", conn_rate_Bps=1_250_000),
            MirrorSpec(rate_bps=40 * MBIT, conn_rate_Bps=1_250_000),
            MirrorSpec(rate_bps=40 * MBIT, kind="pure-ftpd", conn_rate_Bps=1_250_000),
        ),
        target_bound_s=4.0,
        notes="vsftpd anon_max_rate / pure-ftpd --anonymousbandwidth: the links' rate needs "
              "4 connections per mirror",
    ),
)
