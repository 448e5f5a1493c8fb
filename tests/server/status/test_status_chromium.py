"""The status page in a real browser: headless Chromium against a real
`pftp-coordinator serve` process on a seeded database."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from status_seed import MIRRORS, seed_database

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def served_status(tmp_path: Path) -> Iterator[str]:
    url_db = f"sqlite:///{tmp_path / 'status.db'}"
    seed_database(url_db)
    port = free_port()
    env = {
        **os.environ,
        "PFTP_DATABASE_URL": url_db,
        "PFTP_SCHEDULER_ENABLED": "false",
        "PFTP_ANNOUNCE_ENABLED": "false",
        "PFTP_CONFIG": str(tmp_path / "none.toml"),
        "PFTP_DATA_DIR": str(tmp_path),
    }
    log = (tmp_path / "serve.log").open("wb")
    proc = subprocess.Popen(
        [str(BIN / "pftp-coordinator"), "serve", "--host", "127.0.0.1", "--port", str(port)],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{base}/status", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass  # not listening yet
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(
                    f"coordinator did not serve: {(tmp_path / 'serve.log').read_text()[-2000:]}"
                )
            time.sleep(0.2)
        yield base
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        log.close()


def chromium(args: list[str], profile: Path) -> subprocess.CompletedProcess[bytes]:
    assert CHROMIUM, "chromium is not installed (scripts/install-system-deps.sh installs it)"
    cmd = [
        CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
        "--no-first-run", "--hide-scrollbars", f"--user-data-dir={profile}", *args,
    ]
    return subprocess.run(cmd, capture_output=True, timeout=180, check=False)


def test_status_page_in_headless_chromium(served_status: str, tmp_path: Path) -> None:
    url = f"{served_status}/status"
    dom = chromium(["--dump-dom", url], tmp_path / "profile-dom")
    html = dom.stdout.decode("utf-8", "replace")
    assert dom.returncode == 0, dom.stderr.decode()[-2000:]
    for name in MIRRORS:
        assert name in html, f"{name} missing from the rendered DOM"
    assert "<svg" in html and "Probe history" in html

    shot = tmp_path / "status.png"
    res = chromium(
        [f"--screenshot={shot}", "--window-size=1400,2000", url], tmp_path / "profile-shot"
    )
    assert res.returncode == 0, res.stderr.decode()[-2000:]
    assert shot.is_file()
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    # A blank 1400x2000 page compresses to a few kB; tables and charts make it far larger.
    assert len(data) > 60_000, f"screenshot suspiciously small: {len(data)} bytes"
    keep = os.environ.get("PFTP_KEEP_SCREENSHOT")
    if keep:
        shutil.copy(shot, keep)
    print(f"screenshot {shot} ({len(data)} bytes)")
