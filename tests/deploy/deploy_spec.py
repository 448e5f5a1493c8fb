"""Reading docker-compose.yml and Dockerfiles the way the deploy and lab tests need."""

from __future__ import annotations

import shlex
import sys
import tomllib
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
COMPOSE = REPO / "docker-compose.yml"


def load_compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def command_argv(service: dict[str, Any]) -> list[str]:
    cmd = service["command"]
    return shlex.split(cmd) if isinstance(cmd, str) else list(cmd)


def command_steps(argv: list[str]) -> list[list[str]]:
    """The program invocations of a command: `sh -c "a && exec b"` -> [[a...], [b...]]."""
    if argv[:2] == ["sh", "-c"]:
        steps = []
        for part in argv[2].split("&&"):
            words = shlex.split(part)
            if words and words[0] == "exec":
                words = words[1:]
            steps.append(words)
        return steps
    return [argv]


def dockerfile_instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        word, _, rest = line.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def project_scripts(package_dir: Path) -> dict[str, str]:
    data = tomllib.loads((package_dir / "pyproject.toml").read_text())
    return dict(data["project"].get("scripts", {}))
