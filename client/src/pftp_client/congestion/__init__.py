"""Shared-congestion detection (paper 001 section 2.3.1 and 7, paper 004 section 3.3.1).

Pure pair tests over per-flow arrival timestamps (ns), grouping of n flows in
O(n^2) pair tests, timestamp sources, and the monitor the engine drives.
"""

from pftp_client.congestion.detectors import DEFAULT_DETECTOR, DETECTORS
from pftp_client.congestion.entropy import EntropyParams, entropy_pair_test, entropy_set_test
from pftp_client.congestion.grouping import Grouping, flows_to_drop, group_flows
from pftp_client.congestion.monitor import CongestionEvent, SharedCongestionMonitor
from pftp_client.congestion.rate_correlation import (
    RateCorrelationParams,
    rate_correlation_pair_test,
)
from pftp_client.congestion.timestamps import ArrivalBuffer, TimestampSource
from pftp_client.congestion.verdict import PairVerdict, Sharing

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
