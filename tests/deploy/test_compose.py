"""docker-compose.yml and the Dockerfiles: structure, and every command is a real entry
point. No Docker engine runs here; tests/lab/test_discovery_failover.py runs the
coordinator and agent commands from this compose file inside network namespaces."""

from __future__ import annotations

import json
import subprocess

import pytest
from deploy_spec import (
    BIN,
    REPO,
    command_argv,
    command_steps,
    dockerfile_instructions,
    load_compose,
    project_scripts,
)
from pftp_agent.config import AgentConfig
from pftp_coordinator.config import Settings

BUILT = {"coordinator": "server/Dockerfile", "agent": "probe-agent/Dockerfile"}


@pytest.fixture(scope="module")
def compose() -> dict:
    return load_compose()


def test_services_and_dependencies(compose: dict) -> None:
    services = compose["services"]
    assert set(services) == {"postgres", "coordinator", "agent"}
    pg = services["postgres"]
    assert pg["image"].startswith("postgres:")
    assert "pg_isready" in " ".join(pg["healthcheck"]["test"])
    assert any(v.startswith("pgdata:") for v in pg["volumes"]) and "pgdata" in compose["volumes"]
    coord = services["coordinator"]
    assert coord["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert services["agent"]["depends_on"]["coordinator"]["condition"] == "service_healthy"
    for name, dockerfile in BUILT.items():
        assert services[name]["build"] == {"context": ".", "dockerfile": dockerfile}
        assert (REPO / dockerfile).is_file()


def test_coordinator_environment_is_understood(compose: dict) -> None:
    coord = compose["services"]["coordinator"]
    env = coord["environment"]
    for key in env:
        assert key.startswith("PFTP_")
        field = key.removeprefix("PFTP_").lower()
        assert field in Settings.model_fields, f"{key} is not a coordinator setting"
    assert env["PFTP_DATABASE_URL"].startswith("postgresql://")
    assert "@postgres:5432/" in env["PFTP_DATABASE_URL"]
    assert env["PFTP_ENVIRONMENT"] == "production"
    assert env["PFTP_ADMIN_TOKEN"].startswith("${PFTP_ADMIN_TOKEN:?")  # no default secret
    port = env["PFTP_PORT"]
    assert f"{port}:{port}" in coord["ports"]
    assert f"127.0.0.1:{port}/healthz" in " ".join(coord["healthcheck"]["test"])


def test_agent_environment_is_understood(compose: dict) -> None:
    env = compose["services"]["agent"]["environment"]
    fields = set(AgentConfig.__dataclass_fields__)
    for key in env:
        assert key.startswith("PFTP_AGENT_") and key.removeprefix("PFTP_AGENT_").lower() in fields
    assert env["PFTP_AGENT_COORDINATOR_URL"] == "http://coordinator:8470"


def test_coordinator_migrates_before_serving(compose: dict) -> None:
    steps = command_steps(command_argv(compose["services"]["coordinator"]))
    assert steps == [["pftp-coordinator", "migrate"], ["pftp-coordinator", "serve"]]


@pytest.mark.parametrize("service", ["coordinator", "agent"])
def test_commands_are_real_entry_points(compose: dict, service: str) -> None:
    for step in command_steps(command_argv(compose["services"][service])):
        exe = BIN / step[0]
        assert exe.is_file(), f"{step[0]} is not installed in {BIN}"
        res = subprocess.run(
            [str(exe), *step[1:], "--help"], capture_output=True, text=True, timeout=120
        )
        assert res.returncode == 0, f"{' '.join(step)} --help failed: {res.stderr[-1500:]}"
        assert "usage" in (res.stdout + res.stderr).lower()


@pytest.mark.parametrize("service", ["coordinator", "agent"])
def test_dockerfile_builds_what_compose_runs(compose: dict, service: str) -> None:
    instr = dockerfile_instructions(REPO / BUILT[service])
    assert instr[0] == ("FROM", "python:3.11-slim")
    copies = [args.split()[0] for op, args in instr if op == "COPY"]
    for src in copies:
        assert (REPO / src).exists(), f"COPY source {src} missing"
    assert "constraints.txt" in copies
    runs = " ".join(args for op, args in instr if op == "RUN")
    assert "pip install -c constraints.txt" in runs
    installed = [w.strip('"').split("[")[0] for w in runs.split() if w.strip('"').startswith("./")]
    scripts: dict[str, str] = {}
    for pkg in installed:
        assert (REPO / pkg / "pyproject.toml").is_file(), f"{pkg} is not a package"
        scripts.update(project_scripts(REPO / pkg))
    cmd = command_argv(compose["services"][service])
    for step in command_steps(cmd):
        assert step[0] in scripts, f"{step[0]} is not provided by {installed}"
    # The image's default command is the compose command (one source of truth for both).
    cmd_line = next(args for op, args in instr if op == "CMD")
    assert json.loads(cmd_line) == cmd
    assert any(op == "USER" and args != "root" for op, args in instr)  # not running as root
