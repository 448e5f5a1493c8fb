"""Sample config, systemd unit and docs in deploy/ say what the code does."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
from deploy_spec import BIN, REPO
from pftp_coordinator.config import DEFAULT_CONFIG_PATH, RankingWeights, Settings, config_path

DEPLOY = REPO / "deploy"
AGENT_UNIT = REPO / "probe-agent" / "systemd" / "pftp-agent.service"
AGENT_SAMPLE = REPO / "probe-agent" / "pftp-agent.conf.sample"
# README.md's install instructions put a virtualenv here, for the coordinator and the agent.
VENV_BIN = "/opt/pftp/bin"


def test_sample_config_keys_are_settings() -> None:
    data = tomllib.loads((DEPLOY / "coordinator.toml").read_text())
    # Settings ignores unknown keys, so a typo would silently do nothing: check them all.
    unknown = set(data) - set(Settings.model_fields)
    assert not unknown, f"unknown keys in coordinator.toml: {unknown}"
    assert set(data["weights"]) <= set(RankingWeights.model_fields)


def test_sample_config_loads(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for key in [k for k in __import__("os").environ if k.startswith("PFTP_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("PFTP_COORDINATOR_CONFIG", str(DEPLOY / "coordinator.toml"))
    with pytest.raises(ValueError, match="PFTP_ADMIN_TOKEN"):
        Settings()  # production refuses the default token
    monkeypatch.setenv("PFTP_ADMIN_TOKEN", "a-real-secret")
    s = Settings()
    assert s.environment == "production" and s.announce_enabled and s.announce_priority == 10
    assert s.database_url is not None and s.database_url.startswith("postgresql+psycopg://")
    assert s.weights.bandwidth == 3.0 and s.log_json


def test_config_file_env_vars() -> None:
    preferred, older = "/etc/pftp/coordinator.toml", "/srv/old.toml"
    assert config_path({}) == DEFAULT_CONFIG_PATH
    assert config_path({"PFTP_CONFIG": older}) == Path(older)  # still accepted
    assert config_path({"PFTP_COORDINATOR_CONFIG": preferred}) == Path(preferred)
    both = {"PFTP_COORDINATOR_CONFIG": preferred, "PFTP_CONFIG": older}
    assert config_path(both) == Path(preferred)
    assert config_path({"PFTP_COORDINATOR_CONFIG": "", "PFTP_CONFIG": older}) == Path(older)


def test_preferred_config_env_var_wins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for key in [k for k in __import__("os").environ if k.startswith("PFTP_")]:
        monkeypatch.delenv(key)
    (tmp_path / "old.toml").write_text("port = 8001\n")
    (tmp_path / "new.toml").write_text("port = 8002\n")
    monkeypatch.setenv("PFTP_CONFIG", str(tmp_path / "old.toml"))
    assert Settings().port == 8001
    monkeypatch.setenv("PFTP_COORDINATOR_CONFIG", str(tmp_path / "new.toml"))
    assert Settings().port == 8002


def _unit(path: Path = DEPLOY / "pftp-coordinator.service") -> configparser.ConfigParser:
    cp = configparser.ConfigParser(strict=False, interpolation=None)
    cp.optionxform = str  # type: ignore[assignment,method-assign]
    cp.read(path)
    return cp


def _documentation_is_installed(unit: configparser.ConfigParser) -> None:
    # A file:// link would point at a file no install step puts there.
    for doc in unit["Unit"].get("Documentation", "").split():
        assert doc.startswith(("man:", "http://", "https://")), f"Documentation={doc}"


def test_systemd_unit_runs_real_commands() -> None:
    unit = _unit()
    _documentation_is_installed(unit)
    svc = unit["Service"]
    pre = svc["ExecStartPre"].split()
    start = svc["ExecStart"].split()
    assert pre[0] == start[0] == f"{VENV_BIN}/pftp-coordinator"
    assert pre[1:] == ["migrate"] and start[1:] == ["serve"]
    for argv in (pre, start):
        res = subprocess.run(
            [str(BIN / "pftp-coordinator"), *argv[1:], "--help"],
            capture_output=True, text=True, timeout=120,
        )
        assert res.returncode == 0, res.stderr
    env = svc["Environment"].split()
    assert svc["User"] == "pftp" and "PFTP_COORDINATOR_CONFIG=/etc/pftp/coordinator.toml" in env


def test_agent_unit_runs_the_documented_install() -> None:
    unit = _unit(AGENT_UNIT)
    _documentation_is_installed(unit)
    svc = unit["Service"]
    start = svc["ExecStart"].split()
    assert start[0] == f"{VENV_BIN}/pftp-agent"
    # The root-only config reaches the dynamic user as a credential (%d = its directory).
    assert svc["LoadCredential"] == "agent.conf:/etc/pftp/agent.conf"
    assert start[1:] == ["--config", "%d/agent.conf"] and svc["DynamicUser"] == "yes"
    res = subprocess.run(
        [str(BIN / "pftp-agent"), "--help"], capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0 and "--config" in res.stdout, res.stderr
    readme = (REPO / "README.md").read_text()
    assert f"{VENV_BIN}/pip install -c constraints.txt ./common ./probe-agent" in readme
    assert f"{VENV_BIN}/pip install -c constraints.txt ./common" in readme  # coordinator too


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze missing")
@pytest.mark.parametrize("path", [DEPLOY / "pftp-coordinator.service", AGENT_UNIT])
def test_systemd_unit_verifies(tmp_path: Path, path: Path) -> None:
    # Same unit with the venv's binary (systemd-analyze checks that ExecStart exists).
    text = path.read_text().replace(VENV_BIN, str(BIN))
    unit = tmp_path / path.name
    unit.write_text(text)
    res = subprocess.run(
        ["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60
    )
    problems = [line for line in (res.stdout + res.stderr).splitlines() if path.name in line]
    assert res.returncode == 0 and not problems, res.stdout + res.stderr


def test_agent_sample_config_matches_the_coordinator() -> None:
    from pftp_agent.config import from_file

    values = from_file(AGENT_SAMPLE)
    url = str(values["coordinator_url"])
    # The coordinator serves plain HTTP; TLS belongs to a reverse proxy in front of it.
    assert url.startswith("http://") and url.endswith(f":{Settings.model_fields['port'].default}")
    assert "reverse proxy" in AGENT_SAMPLE.read_text()


def test_backup_doc_names_the_state() -> None:
    text = (DEPLOY / "BACKUP.md").read_text()
    for needle in ("pg_dump", "pg_restore", ".backup", "coordinator.db", "/etc/pftp"):
        assert needle in text
