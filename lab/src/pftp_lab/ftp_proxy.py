"""An FTP-aware TCP relay on loopback that adds a fixed one-way delay, for
round-trip measurements and protocol tests without ``tc netem`` (which this
machine does not have).

The control connection is relayed line by line; every EPSV (229) and PASV (227)
reply is rewritten to point at a relay port of the proxy that forwards the
passive data connection to the server's real port, with the same delay. Each
byte is forwarded ``one_way_delay`` seconds after the proxy read it, in order,
so latency is added without limiting throughput.

TCP handshakes: the client's ``connect()`` to the proxy completes at once (the
kernel answers on loopback; user space cannot delay it). The proxy opens the
upstream connection ``3 * one_way_delay`` after accepting, which is when a real
server would see the final ACK (SYN there, SYN-ACK back, ACK there). So a client
that waits for its data ``connect()`` before sending the next command is
flattered by one round trip per data connection; a client that connects while
its commands travel sees the real cost.

``lines`` records, in the order they passed through the proxy, every command
("C", as sent upstream) and every reply line ("S", as received from the server).
``rewrite_command`` may change a command on its way (tests use it to make a real
server refuse REST).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import struct
import threading
from collections.abc import Awaitable, Callable

__all__ = ["FtpDelayProxy"]

_EPSV = re.compile(rb"^(229 .*\(\|\|\|)(\d+)(\|\).*)$", re.DOTALL)
_PASV = re.compile(rb"^(227 .*?)(\d+),(\d+),(\d+),(\d+),(\d+),(\d+)(.*)$", re.DOTALL)
_CHUNK = 256 * 1024
# Bytes queued per direction before the proxy stops reading (a window, so a fast
# server cannot fill memory while the client reads slowly or has gone away).
_WINDOW = 8 * 1024 * 1024
_EOF = object()
_RESET = object()


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with RST (SO_LINGER 0), as a peer that resets its end would."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


async def _until_done(*aws: Awaitable[object]) -> None:
    """Wait for all; a connection handler that ends by cancellation (proxy shutdown)
    returns normally, so asyncio's stream server does not log it as an error."""
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.gather(*aws, return_exceptions=True)


class _DelayedWriter:
    """Writes each item ``delay`` seconds after it was queued, in order."""

    def __init__(self, writer: asyncio.StreamWriter, delay: float) -> None:
        self.writer = writer
        self.delay = delay
        self.queue: asyncio.Queue[tuple[float, object]] = asyncio.Queue()
        self.pending = 0
        self.room = asyncio.Event()
        self.room.set()
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def put(self, item: object) -> None:
        await self.room.wait()
        if self.task.done():
            return  # the destination is gone: drop what is still coming
        if isinstance(item, bytes):
            self.pending += len(item)
            if self.pending >= _WINDOW:
                self.room.clear()
        self.queue.put_nowait((asyncio.get_running_loop().time() + self.delay, item))

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                due, item = await self.queue.get()
                await asyncio.sleep(max(0.0, due - loop.time()))
                if item is _EOF:
                    self.writer.close()
                    return
                if item is _RESET:
                    _reset(self.writer)
                    return
                assert isinstance(item, bytes)
                self.writer.write(item)
                await self.writer.drain()
                self.pending -= len(item)
                if self.pending < _WINDOW:
                    self.room.set()
        except (ConnectionError, OSError):
            _reset(self.writer)
        finally:
            self.room.set()  # never leave a reader waiting for a writer that is gone


class FtpDelayProxy:
    """``with FtpDelayProxy("127.0.0.1", server_port, one_way_delay=0.04) as proxy:``
    then connect to ``proxy.host:proxy.port`` instead of the server."""

    def __init__(
        self,
        upstream_host: str,
        upstream_port: int,
        *,
        one_way_delay: float = 0.0,
        rewrite_command: Callable[[str], str] | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        if one_way_delay < 0:
            raise ValueError("one_way_delay must not be negative")
        self.upstream = (upstream_host, upstream_port)
        self.delay = one_way_delay
        self.rewrite_command = rewrite_command
        self.host = host
        self.port = 0
        self.lines: list[tuple[str, str]] = []
        self.data_connections = 0
        self.control_connections = 0  # accepted so far
        self.open_controls = 0  # relayed right now (until either side closes)
        # (connection number, "C" or "S", line) in order: which session said what
        self.session_lines: list[tuple[int, str, str]] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="ftp-proxy", daemon=True
        )
        self._servers: list[asyncio.AbstractServer] = []
        self._writers: set[asyncio.StreamWriter] = set()

    # ------------------------------------------------------------ lifecycle

    def start(self) -> FtpDelayProxy:
        self._thread.start()
        server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._control_client, self.host, 0), self._loop
        ).result(10)
        self._servers.append(server)
        self.port = server.sockets[0].getsockname()[1]
        return self

    def close(self) -> None:
        if not self._thread.is_alive():
            return

        async def shutdown() -> None:
            for server in self._servers:
                server.close()
            for writer in list(self._writers):
                if writer.transport.is_closing():
                    continue
                # (a transport whose connection the loop has just let go of has no
                # loop left to abort on: AttributeError, CI once; it is closed)
                with contextlib.suppress(AttributeError):
                    writer.transport.abort()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        with contextlib.suppress(RuntimeError, TimeoutError):
            asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def __enter__(self) -> FtpDelayProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def commands(self) -> list[str]:
        return [text for side, text in list(self.lines) if side == "C"]

    # -------------------------------------------------------------- relays

    async def _connect_upstream(
        self, host: str, port: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        await asyncio.sleep(3 * self.delay)  # SYN there, SYN-ACK back, ACK there
        reader, writer = await asyncio.open_connection(host, port, limit=_CHUNK)
        self._writers.add(writer)
        return reader, writer

    async def _control_client(
        self, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter
    ) -> None:
        self.control_connections += 1
        self.open_controls += 1
        session = self.control_connections

        async def command(line: bytes) -> bytes:
            out = await self._on_command(line)
            self.session_lines.append((session, "C", self.lines[-1][1]))
            return out

        async def reply(line: bytes) -> bytes:
            self.session_lines.append(
                (session, "S", line.decode("utf-8", "replace").rstrip("\r\n"))
            )
            return await self._on_reply(line)

        try:
            await self._relay(
                c_reader, c_writer, self.upstream,
                lambda src, out: self._pump_lines(src, out, command),
                lambda src, out: self._pump_lines(src, out, reply),
            )
        finally:
            self.open_controls -= 1

    async def _relay(
        self,
        c_reader: asyncio.StreamReader,
        c_writer: asyncio.StreamWriter,
        upstream: tuple[str, int],
        to_server_pump: Callable[[asyncio.StreamReader, _DelayedWriter], Awaitable[None]],
        to_client_pump: Callable[[asyncio.StreamReader, _DelayedWriter], Awaitable[None]],
    ) -> None:
        """Connect to ``upstream`` and pump both ways, each direction delayed."""
        self._writers.add(c_writer)
        try:
            s_reader, s_writer = await self._connect_upstream(*upstream)
        except OSError:
            _reset(c_writer)
            return
        to_server = _DelayedWriter(s_writer, self.delay)
        to_client = _DelayedWriter(c_writer, self.delay)
        await _until_done(
            to_server_pump(c_reader, to_server),
            to_client_pump(s_reader, to_client),
            to_server.task,
            to_client.task,
        )

    async def _pump_lines(
        self,
        reader: asyncio.StreamReader,
        out: _DelayedWriter,
        transform: Callable[[bytes], Awaitable[bytes]],
    ) -> None:
        try:
            while True:
                line = await reader.readline()
                if not line:
                    await out.put(_EOF)
                    return
                await out.put(await transform(line))
        except (ConnectionError, OSError):
            await out.put(_RESET)

    async def _on_command(self, line: bytes) -> bytes:
        text = line.decode("utf-8", "surrogateescape").rstrip("\r\n")
        if self.rewrite_command is not None:
            text = self.rewrite_command(text)
        self.lines.append(("C", text))
        return text.encode("utf-8", "surrogateescape") + b"\r\n"

    async def _on_reply(self, line: bytes) -> bytes:
        self.lines.append(("S", line.decode("utf-8", "replace").rstrip("\r\n")))
        if m := _EPSV.match(line):
            port = await self._data_relay(self.upstream[0], int(m.group(2)))
            return m.group(1) + str(port).encode() + m.group(3)
        if m := _PASV.match(line):
            p1, p2 = int(m.group(6)), int(m.group(7))
            port = await self._data_relay(self.upstream[0], p1 * 256 + p2)
            h = self.host.split(".") if "." in self.host else ["127", "0", "0", "1"]
            fields = ",".join([*h, str(port // 256), str(port % 256)])
            return m.group(1) + fields.encode() + m.group(8)
        return line

    async def _data_relay(self, host: str, port: int) -> int:
        """A one-connection listener that relays to the server's passive port."""
        done = asyncio.Event()

        async def relay(c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
            if done.is_set():
                _reset(c_writer)
                return
            done.set()
            server.close()
            self.data_connections += 1
            await self._relay(c_reader, c_writer, (host, port), self._pump_chunks,
                              self._pump_chunks)

        server = await asyncio.start_server(relay, self.host, 0, limit=_CHUNK)
        self._servers.append(server)
        return server.sockets[0].getsockname()[1]

    async def _pump_chunks(self, reader: asyncio.StreamReader, out: _DelayedWriter) -> None:
        try:
            while True:
                chunk = await reader.read(_CHUNK)
                if not chunk:
                    await out.put(_EOF)
                    return
                await out.put(chunk)
        except (ConnectionError, OSError):
            await out.put(_RESET)
