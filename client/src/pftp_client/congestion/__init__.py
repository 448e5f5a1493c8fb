"""Shared-congestion detection (paper 001 section 2.3.1 and 7, paper 004 section 3.3.1).

Pure pair tests over per-flow arrival timestamps (ns), grouping of n flows in
O(n^2) pair tests, timestamp sources, and the monitor the engine drives.

The names below are loaded on first use (PEP 562): importing a light submodule
(``capture``, ``timestamps``) must not pull numpy and every detector onto the
client's start-up path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pftp_client.lazy import lazy_attributes

if TYPE_CHECKING:
    from pftp_client.congestion.detectors import DEFAULT_DETECTOR, DETECTORS
    from pftp_client.congestion.entropy import (
        EntropyParams,
        entropy_pair_test,
        entropy_set_test,
    )
    from pftp_client.congestion.grouping import Grouping, flows_to_drop, group_flows
    from pftp_client.congestion.monitor import CongestionEvent, SharedCongestionMonitor
    from pftp_client.congestion.rate_correlation import (
        RateCorrelationParams,
        rate_correlation_pair_test,
    )
    from pftp_client.congestion.timestamps import ArrivalBuffer, TimestampSource
    from pftp_client.congestion.verdict import PairVerdict, Sharing

_WHERE = {
    "DEFAULT_DETECTOR": "detectors",
    "DETECTORS": "detectors",
    "EntropyParams": "entropy",
    "entropy_pair_test": "entropy",
    "entropy_set_test": "entropy",
    "Grouping": "grouping",
    "flows_to_drop": "grouping",
    "group_flows": "grouping",
    "CongestionEvent": "monitor",
    "SharedCongestionMonitor": "monitor",
    "RateCorrelationParams": "rate_correlation",
    "rate_correlation_pair_test": "rate_correlation",
    "ArrivalBuffer": "timestamps",
    "TimestampSource": "timestamps",
    "PairVerdict": "verdict",
    "Sharing": "verdict",
}


__getattr__, __dir__ = lazy_attributes(
    __name__, {name: f"{__name__}.{mod}" for name, mod in _WHERE.items()}
)

__all__ = [
    "DEFAULT_DETECTOR",
    "DETECTORS",
    "ArrivalBuffer",
    "CongestionEvent",
    "EntropyParams",
    "Grouping",
    "PairVerdict",
    "RateCorrelationParams",
    "SharedCongestionMonitor",
    "Sharing",
    "TimestampSource",
    "entropy_pair_test",
    "entropy_set_test",
    "flows_to_drop",
    "group_flows",
    "rate_correlation_pair_test",
]
