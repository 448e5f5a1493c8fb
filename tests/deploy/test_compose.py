"""docker-compose.yml and the Dockerfiles: structure, and every command is a real entry
point. No Docker engine runs here; tests/lab/test_discovery_failover.py runs the
coordinator and agent commands from this compose file inside network namespaces."""

from __future__ import annotations

import json
import shlex
import subprocess

import pytest
from deploy_spec import (
    BIN,
    COMPOSE,
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
    # `docker compose up` starts only what runs before any token exists; the agent
    # needs a token from the running coordinator and waits behind its profile.
    default = {name for name, svc in services.items() if not svc.get("profiles")}
    assert default == {"postgres", "coordinator"}
    assert services["agent"]["profiles"] == ["agent"]
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
    # Compose interpolates every service before it looks at profiles: a `:?` here would
    # stop the default `docker compose up` (postgres + coordinator) as well.
    assert env["PFTP_AGENT_TOKEN"] == "${PFTP_AGENT_TOKEN:-}"
    agent_text = COMPOSE.read_text().split("\n  agent:\n", 1)[1]
    agent_lines = [ln.split("#")[0] for ln in agent_text.splitlines()]
    assert not [ln for ln in agent_lines if ":?" in ln]


def _header_commands() -> list[list[str]]:
    """The shell lines of the compose file's header comment."""
    lines = []
    for raw in COMPOSE.read_text().splitlines():
        if not raw.startswith("#"):
            break
        line = raw.lstrip("#").strip()
        if "docker compose" in line:
            lines.append(shlex.split(line.split("   #")[0], comments=True))
    return lines


def test_header_walkthrough_starts_the_agent_last() -> None:
    cmds = [" ".join(c) for c in _header_commands()]
    ups = [c for c in cmds if " up " in f"{c} "]
    assert ups[0] == "docker compose up -d --build"
    assert ups[-1].endswith("docker compose --profile agent up -d agent")
    assert ups[-1].startswith("PFTP_AGENT_TOKEN=")
    token = next(i for i, c in enumerate(cmds) if "agent token" in c)
    assert cmds.index(ups[0]) < token < cmds.index(ups[-1])
    readme = (REPO / "README.md").read_text()
    assert "docker compose --profile agent up -d agent" in readme


def test_header_admin_commands_are_real() -> None:
    execs = [c for c in _header_commands() if c[:4] == ["docker", "compose", "exec", "coordinator"]]
    assert len(execs) >= 2
    for cmd in execs:
        argv = cmd[4:]
        assert argv[0] == "pftp-coordinator"
        words = [w for w in argv[1:] if not w.startswith("-")][:3]  # e.g. mirror add m1
        cut = argv.index(words[-1]) + 1
        res = subprocess.run(
            [str(BIN / argv[0]), *argv[1:cut], "--help"],
            capture_output=True, text=True, timeout=120,
        )
        assert res.returncode == 0, f"{' '.join(argv)}: {res.stdout[-800:]} {res.stderr[-800:]}"
        assert "usage" in (res.stdout + res.stderr).lower()


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
