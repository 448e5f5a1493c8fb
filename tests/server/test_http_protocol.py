"""The coalescing httptools protocol (pftp_coordinator.http_protocol) in a real uvicorn."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import uvicorn
from pftp_coordinator.http_protocol import PROTOCOL_PATH, CoalescingTransport

BIG = bytes(range(256)) * 20_000  # 5 MB: many writes, flow control


async def app(scope, receive, send):  # type: ignore[no-untyped-def]
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    path = scope["path"]
    if path == "/stream":  # chunked, with pauses between the parts
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for i in range(5):
            await send({"type": "http.response.body", "body": b"part%d;" % i, "more_body": True})
            await asyncio.sleep(0.01)
        await send({"type": "http.response.body", "body": b""})
        return
    payload = BIG if path == "/big" else b'{"echo": %d}' % len(body)
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})


@contextmanager
def serving() -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, http=PROTOCOL_PATH, log_config=None, access_log=False
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def test_keep_alive_big_streamed_and_head_responses() -> None:
    with serving() as url, httpx.Client(base_url=url, timeout=30) as client:
        for i in range(50):  # one connection, many small answers
            r = client.post("/small", content=b"x" * i)
            assert r.status_code == 200 and r.json() == {"echo": i}
        r = client.get("/big")
        assert r.content == BIG
        r = client.get("/stream")
        assert r.text == "part0;part1;part2;part3;part4;"
        r = client.head("/small")
        assert r.status_code == 200 and r.content == b""
        r = client.post("/small", content=b"abc", headers={"Connection": "close"})
        assert r.json() == {"echo": 3}


def test_writes_of_one_loop_step_go_out_together() -> None:
    async def run() -> bytes:
        received = bytearray()
        done = asyncio.Event()

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while len(received) < 9:
                received.extend(await reader.read(100))
            done.set()
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_connection(asyncio.Protocol, "127.0.0.1", port)
        t = CoalescingTransport(transport, loop)
        t.write(b"head")
        t.write(b"")
        t.write(b"body")
        assert t.get_write_buffer_size() >= 8  # pending until the loop turns
        await asyncio.sleep(0)
        t.write(b"!")
        t.close()  # sends what is pending first
        await asyncio.wait_for(done.wait(), 30)
        server.close()
        await server.wait_closed()
        return bytes(received)

    assert asyncio.run(run()) == b"headbody!"
