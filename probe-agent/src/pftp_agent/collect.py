"""Reads the mirror's utilization with psutil: CPU, memory, load, NIC tx rate,
and FTP/HTTP connections on the configured ports when the OS allows it."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from datetime import UTC, datetime

import psutil
from pftp_wire.models import UtilizationSample

log = logging.getLogger(__name__)


def tx_rate_bps(prev_bytes: int, prev_t: float, cur_bytes: int, cur_t: float) -> float | None:
    """Pure: bits/s between two counter readings; None across a counter reset."""
    dt = cur_t - prev_t
    if dt <= 0 or cur_bytes < prev_bytes:
        return None
    return (cur_bytes - prev_bytes) * 8 / dt


def count_connections(conns: Iterable, ports: set[int]) -> int:
    """Pure: established TCP connections whose local port is one of ``ports``."""
    return sum(
        1
        for c in conns
        if c.status == psutil.CONN_ESTABLISHED and c.laddr and c.laddr.port in ports
    )


class Collector:
    def __init__(self, ports: Iterable[int], nic: str = "") -> None:
        self.ports = set(ports)
        self.nic = nic
        self._connections_ok = True
        self._prev: tuple[int, float] | None = None
        psutil.cpu_percent(interval=None)  # prime: the first call has no reference point
        self._tx()

    def _tx(self) -> float | None:
        counters = psutil.net_io_counters(pernic=True)
        if self.nic:
            if self.nic not in counters:
                raise ValueError(f"no network interface {self.nic!r}; have {sorted(counters)}")
            total = counters[self.nic].bytes_sent
        else:
            total = sum(c.bytes_sent for n, c in counters.items() if n != "lo")
        now = time.monotonic()
        rate = tx_rate_bps(*self._prev, total, now) if self._prev else None
        self._prev = (total, now)
        return rate

    def _connections(self) -> int | None:
        if not self._connections_ok:
            return None
        try:
            return count_connections(psutil.net_connections(kind="tcp"), self.ports)
        except (psutil.AccessDenied, PermissionError) as exc:
            log.info("cannot count connections (%s); run as root to report them", exc)
            self._connections_ok = False
            return None

    def sample(self) -> UtilizationSample:
        load1, load5, load15 = psutil.getloadavg()
        return UtilizationSample(
            ts=datetime.now(UTC),
            cpu_percent=min(max(psutil.cpu_percent(interval=None), 0.0), 100.0),
            memory_percent=min(max(psutil.virtual_memory().percent, 0.0), 100.0),
            load1=load1,
            load5=load5,
            load15=load15,
            nic_tx_bps=self._tx(),
            connections=self._connections(),
        )
