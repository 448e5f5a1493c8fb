"""``RangeFetcher``: what the engine asks of a protocol (contract in base.py's
docstring). Apart from base.py so that typing loads only where it is used.
``from pftp_client.transports.base import RangeFetcher`` still works."""

from __future__ import annotations

import threading
from typing import Protocol

from pftp_client.transports.base import DataSink, RangeEnd


class RangeFetcher(Protocol):
    url: str

    def fetch(
        self,
        offset: int,
        end: RangeEnd,
        sink: DataSink,
        cancel: threading.Event,
    ) -> int:
        """Deliver bytes [offset, end.value) to ``sink`` in order and return the
        number of bytes delivered. Returns early (without error) when ``end``
        is lowered to or below the next byte. Raises ``Cancelled`` when
        ``cancel`` is set, ``TransferError`` subclasses on failure; bytes
        already passed to ``sink`` before an error are valid and kept."""
        ...

    def size(self) -> int | None:
        """Size of the remote file as the server reports it (SIZE / HEAD), if known."""
        ...

    def close(self) -> None:
        """Release connections; safe to call twice."""
        ...
