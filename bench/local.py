"""Servers on 127.0.0.1 for the loopback benchmarks: a free port, wait until it listens."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port: int, proc: subprocess.Popen, log: Path | None = None,
                   timeout: float = 20.0) -> None:
    """Until 127.0.0.1:port accepts; a server that exits first is an error (with the
    tail of its log when given)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = f": {log.read_text()[-500:]}" if log is not None and log.exists() else ""
            raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode}{tail}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{proc.args[0]} did not start listening on {port} within {timeout:g} s")
