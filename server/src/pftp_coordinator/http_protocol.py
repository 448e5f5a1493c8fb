"""uvicorn's httptools protocol with one socket write per small response.

uvicorn writes the status line and headers, then the body, as two
``transport.write`` calls; each is a ``send()`` system call and, over TCP with
Nagle off, a segment of its own. For the coordinator's small JSON answers that
second write cost as much as a tenth of the CPU of an answer (the loopback
delivery runs in the sender's system call). Here writes made while one
event-loop callback runs are gathered and sent together right after it
(``loop.call_soon``), so a response goes out as one segment. Nothing waits
longer than the current loop iteration; ``close`` sends what is pending first.

Used by ``pftp-coordinator serve`` (``http=`` of uvicorn, a supported extension
point). Falls back to uvicorn's own class if httptools is missing.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

PROTOCOL_PATH = "pftp_coordinator.http_protocol:CoalescingHttpToolsProtocol"


class CoalescingTransport:
    """A transport proxy that merges the writes of one loop step into one write."""

    __slots__ = ("_loop", "_pending", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []

    def write(self, data: bytes) -> None:
        if not data:
            return
        if not self._pending:
            self._loop.call_soon(self.flush)
        self._pending.append(data)

    def writelines(self, lines: Any) -> None:
        for data in lines:
            self.write(data)

    def flush(self) -> None:
        if not self._pending:
            return
        data = self._pending[0] if len(self._pending) == 1 else b"".join(self._pending)
        self._pending.clear()
        if not self._transport.is_closing():
            self._transport.write(data)

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + sum(map(len, self._pending))

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def abort(self) -> None:
        self._pending.clear()
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:
        # is_closing, get_extra_info, pause_reading, resume_reading, ...
        return getattr(self._transport, name)


class CoalescingHttpToolsProtocol(HttpToolsProtocol):
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(CoalescingTransport(transport, self.loop))  # type: ignore[arg-type]
