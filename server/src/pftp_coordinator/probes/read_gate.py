"""Throughput reads of several mirrors run at once (up to ``probe_read_concurrency``;
the other probes up to ``probe_concurrency``); the read over several connections
that decides whether a mirror needs them runs alone.

Two mirrors behind one link, probed at the same time, each carry a share of it: a
parallel read of one of them then takes a larger share from the other's read (4
connections against 1), not more of its own mirror, and looks like a server's
per-connection limit (lab, shared-bottleneck: clients told 3 connections for a
mirror behind a 20 Mbit/s link it shares, which then crowded the other). Run alone,
with its single-connection baseline read again first, the comparison is the
mirror's own.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class ReadGate:
    """Readers share, one reads alone: ``shared()`` around an ordinary throughput
    read, ``alone()`` around the baseline and parallel reads. A read waiting to go
    alone keeps new shared ones out (it would wait for ever behind a steady stream
    of them) and waits for those in flight to end."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._shared = 0
        self._alone = False
        self._waiting = 0  # reads waiting to go alone

    @contextmanager
    def shared(self, limit: int | None = None) -> Iterator[None]:
        """``limit``: at most that many shared reads at once (this one counted)."""
        with self._cond:
            while self._alone or self._waiting or (
                limit is not None and self._shared >= max(limit, 1)
            ):
                self._cond.wait()
            self._shared += 1
        try:
            yield
        finally:
            with self._cond:
                self._shared -= 1
                self._cond.notify_all()  # (one waiting for a place, or to go alone)

    @contextmanager
    def alone(self) -> Iterator[None]:
        with self._cond:
            self._waiting += 1
            try:
                while self._alone or self._shared:
                    self._cond.wait()
            finally:
                self._waiting -= 1
            self._alone = True
        try:
            yield
        finally:
            with self._cond:
                self._alone = False
                self._cond.notify_all()
