"""Sample config, systemd unit and docs in deploy/ say what the code does."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
from deploy_spec import BIN, REPO
from pftp_coordinator.config import RankingWeights, Settings

DEPLOY = REPO / "deploy"


def test_sample_config_keys_are_settings() -> None:
    data = tomllib.loads((DEPLOY / "coordinator.toml").read_text())
    # Settings ignores unknown keys, so a typo would silently do nothing: check them all.
    unknown = set(data) - set(Settings.model_fields)
    assert not unknown, f"unknown keys in coordinator.toml: {unknown}"
    assert set(data["weights"]) <= set(RankingWeights.model_fields)


def test_sample_config_loads(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for key in [k for k in __import__("os").environ if k.startswith("PFTP_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("PFTP_CONFIG", str(DEPLOY / "coordinator.toml"))
    with pytest.raises(ValueError, match="PFTP_ADMIN_TOKEN"):
        Settings()  # production refuses the default token
    monkeypatch.setenv("PFTP_ADMIN_TOKEN", "a-real-secret")
    s = Settings()
    assert s.environment == "production" and s.announce_enabled and s.announce_priority == 10
    assert s.database_url is not None and s.database_url.startswith("postgresql+psycopg://")
    assert s.weights.bandwidth == 3.0 and s.log_json


def _unit() -> configparser.ConfigParser:
    cp = configparser.ConfigParser(strict=False, interpolation=None)
    cp.optionxform = str  # type: ignore[assignment,method-assign]
    cp.read(DEPLOY / "pftp-coordinator.service")
    return cp


def test_systemd_unit_runs_real_commands() -> None:
    svc = _unit()["Service"]
    pre = svc["ExecStartPre"].split()
    start = svc["ExecStart"].split()
    assert pre[0] == start[0] == "/opt/pftp/bin/pftp-coordinator"
    assert pre[1:] == ["migrate"] and start[1:] == ["serve"]
    for argv in (pre, start):
        res = subprocess.run(
            [str(BIN / "pftp-coordinator"), *argv[1:], "--help"],
            capture_output=True, text=True, timeout=120,
        )
        assert res.returncode == 0, res.stderr
    assert svc["User"] == "pftp" and "PFTP_CONFIG=/etc/pftp/coordinator.toml" in svc["Environment"]


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze missing")
def test_systemd_unit_verifies(tmp_path: Path) -> None:
    # Same unit with the venv's binary (systemd-analyze checks that ExecStart exists).
    text = (DEPLOY / "pftp-coordinator.service").read_text().replace("/opt/pftp/bin", str(BIN))
    unit = tmp_path / "pftp-coordinator.service"
    unit.write_text(text)
    res = subprocess.run(
        ["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60
    )
    problems = [
        line for line in (res.stdout + res.stderr).splitlines()
        if "pftp-coordinator.service" in line
    ]
    assert res.returncode == 0 and not problems, res.stdout + res.stderr


def test_backup_doc_names_the_state() -> None:
    text = (DEPLOY / "BACKUP.md").read_text()
    for needle in ("pg_dump", "pg_restore", ".backup", "coordinator.db", "/etc/pftp"):
        assert needle in text
