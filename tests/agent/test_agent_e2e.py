"""pftp-agent end to end against a real coordinator process (uvicorn) on PostgreSQL:
samples arrive, a bad token is refused, the coordinator goes away and comes back."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
from pftp_coordinator import migrate
from pftp_coordinator.db import create_db_engine, make_session_factory, session_scope
from pftp_coordinator.models import Agent, Mirror, MirrorUrl, UtilizationSample
from sqlalchemy import select

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PFTP_")}
    env.update({"PFTP_CONFIG": "/nonexistent.toml", "PFTP_AGENT_CONFIG": "/nonexistent.conf"})
    env.update(extra)
    return env


def _start_coordinator(url: str, port: int, log: Path) -> subprocess.Popen:
    proc = subprocess.Popen(
        [str(BIN / "pftp-coordinator"), "serve", "--port", str(port)],
        env=_env(
            PFTP_DATABASE_URL=url, PFTP_SCHEDULER_ENABLED="false", PFTP_ADMIN_TOKEN="e2e-admin"
        ),
        stdout=log.open("a"),
        stderr=subprocess.STDOUT,
        cwd=REPO,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.3)
        if proc.poll() is not None:
            raise AssertionError(f"coordinator exited: {log.read_text()}")
    proc.kill()
    raise AssertionError(f"coordinator did not start: {log.read_text()}")


def _stop(proc: subprocess.Popen | None) -> None:
    if proc is not None and proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def _wait(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def test_agent_against_running_coordinator(pg_url, tmp_path):
    migrate.upgrade(pg_url)
    engine = create_db_engine(pg_url, pool_size=2)
    factory = make_session_factory(engine)
    with session_scope(factory) as s:
        m = Mirror(name="mirror-e2e")
        m.urls.append(MirrorUrl(protocol="ftp", base_url="ftp://10.3.0.1/"))
        s.add(m)
    token = subprocess.run(
        [str(BIN / "pftp-coordinator"), "agent", "token", "mirror-e2e"],
        env=_env(PFTP_DATABASE_URL=pg_url),
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()

    def samples() -> list[UtilizationSample]:
        with session_scope(factory) as s:
            return list(s.scalars(select(UtilizationSample).order_by(UtilizationSample.ts)))

    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    clog, alog = tmp_path / "coordinator.log", tmp_path / "agent.log"
    coord = agent = None
    try:
        coord = _start_coordinator(pg_url, port, clog)
        bad = subprocess.run(
            [str(BIN / "pftp-agent"), "--once", "--url", url, "--token", "pftpa_not-a-token"],
            env=_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert bad.returncode == 1 and "HTTP 401" in bad.stderr
        good = subprocess.run(
            [str(BIN / "pftp-agent"), "--once", "--url", url],
            env=_env(PFTP_AGENT_TOKEN=token),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert good.returncode == 0, good.stderr
        assert len(samples()) == 1

        agent = subprocess.Popen(
            [str(BIN / "pftp-agent"), "--url", url, "--interval", "1"],
            env=_env(PFTP_AGENT_TOKEN=token, PFTP_AGENT_BACKOFF_MAX_S="2"),
            stdout=alog.open("w"),
            stderr=subprocess.STDOUT,
        )
        _wait(lambda: len(samples()) >= 4, 60, "agent samples")

        _stop(coord)
        down_at = datetime.now(UTC)
        time.sleep(6)  # the agent buffers and backs off meanwhile
        up_at = datetime.now(UTC)
        coord = _start_coordinator(pg_url, port, clog)
        # Samples taken while the coordinator was down arrive once it is back.
        _wait(
            lambda: any(down_at < s.ts < up_at for s in samples()),
            60,
            "buffered samples after the coordinator came back",
        )
        with session_scope(factory) as s:
            assert s.scalar(select(Agent)).last_seen_at is not None
    finally:
        _stop(agent)
        _stop(coord)
        engine.dispose()
    text = alog.read_text()
    assert "coordinator unreachable" in text and "coordinator back" in text, text
    assert "refused from 127.0.0.1: wrong token" in clog.read_text()
