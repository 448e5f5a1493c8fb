"""Helpers for the coordinator API/CLI tests: a migrated database and a running app."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from pftp_coordinator import migrate
from pftp_coordinator.api.app import create_app
from pftp_coordinator.config import Settings

ADMIN_TOKEN = "test-admin-token"
AUTH = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
REPO = Path(__file__).resolve().parents[2]
CLI = [str(Path(sys.executable).parent / "pftp-coordinator")]


def settings_for(url: str, tmp_path: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "database_url": url,
        "data_dir": tmp_path,
        "admin_token": ADMIN_TOKEN,
        "scheduler_enabled": False,
        "announce_enabled": False,
        "snapshot_refresh_s": 0.2,
        "min_portion_bytes": 1024,
    }
    values.update(overrides)
    return Settings(**values)


@contextmanager
def running_app(url: str, tmp_path: Path, **overrides: Any) -> Iterator[TestClient]:
    """The real app (lifespan included) on a migrated database."""
    migrate.upgrade(url)
    app = create_app(settings_for(url, tmp_path, **overrides))
    with TestClient(app) as client:
        yield client


def wait_until(check: Callable[[], Any], *, timeout: float = 30.0, what: str = "condition") -> Any:
    """Poll ``check`` until it returns something truthy (the snapshot refreshes in the
    background); generous timeout for a loaded machine."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; last result: {result!r}")
        time.sleep(0.1)


def run_cli(*args: str, url: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PFTP_")}
    env["PFTP_CONFIG"] = "/nonexistent/pftp.toml"
    if url is not None:
        env["PFTP_DATABASE_URL"] = url
    proc = subprocess.run(
        [*CLI, *args], env=env, capture_output=True, text=True, timeout=120, cwd=REPO
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"pftp-coordinator {' '.join(args)} failed ({proc.returncode}):\n"
            f"{proc.stdout}\n{proc.stderr}"
        )
    return proc
