"""Lower bounds on a download's time in a lab topology (pure functions).

The optimum of dynamic parallel access is the file size over the best aggregate rate the
client can get (paper 000, Rodriguez & Biersack, section on the optimum download time):
min(access link, sum over mirrors, with the mirrors behind one shared bottleneck together
capped at its rate). With events (a mirror slows down or dies after a fraction of the bytes
has arrived), the bound is piecewise: each phase's bytes over that phase's aggregate rate.

Rates in a scenario are what ``tc`` shapes: bytes of whole Ethernet frames. File bytes
travel as TCP payload, so the best any tool can reach is that rate times the payload
share of a full-size frame (``PAYLOAD_EFFICIENCY``), and that is the bound used here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# MTU 1500: 1448 payload bytes (IP 20 + TCP 20 + timestamps option 12 taken out)
# per 1514-byte frame as tc counts it (Ethernet header 14 included).
PAYLOAD_EFFICIENCY = 1448 / 1514


@dataclass(frozen=True)
class LinkState:
    """Rates in bit/s. mirrors: name -> rate (0 = dead); groups: bottleneck -> (rate, names)."""

    access_bps: float | None
    mirrors: Mapping[str, float]
    groups: Mapping[str, tuple[float, Sequence[str]]]


def aggregate_bps(state: LinkState) -> float:
    grouped = {name for _, names in state.groups.values() for name in names}
    total = sum(rate for name, rate in state.mirrors.items() if name not in grouped)
    for cap, names in state.groups.values():
        total += min(cap, sum(state.mirrors.get(n, 0.0) for n in names))
    if state.access_bps is not None:
        total = min(total, state.access_bps)
    return total


def bound_seconds(file_bytes: int, phases: Sequence[tuple[float, LinkState]]) -> float:
    """phases: (fraction of the file after which the next phase starts, state); the last
    phase's fraction is ignored (it runs to the end). Fractions must increase. Rates are
    shaped link rates; the bound uses their TCP payload share (``PAYLOAD_EFFICIENCY``)."""
    if file_bytes <= 0 or not phases:
        raise ValueError("need a positive size and at least one phase")
    total = 0.0
    done = 0.0
    for i, (until, state) in enumerate(phases):
        end = 1.0 if i == len(phases) - 1 else until
        if end < done:
            raise ValueError(f"phase fractions must increase: {[p[0] for p in phases]}")
        rate = aggregate_bps(state)
        if rate <= 0:
            raise ValueError("a phase with no usable mirror has no finite bound")
        total += (end - done) * file_bytes * 8 / (rate * PAYLOAD_EFFICIENCY)
        done = end
    return total


def single_mirror_bps(state: LinkState, name: str) -> float:
    """What one plain download from `name` alone can reach."""
    rate = state.mirrors[name]
    for cap, names in state.groups.values():
        if name in names:
            rate = min(rate, cap)
    if state.access_bps is not None:
        rate = min(rate, state.access_bps)
    return rate
