"""Each program installs on its own with only what its users need: the client must
not pull the coordinator's database stack, the agent not even a web client."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, distribution

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

SERVER_STACK = {
    "sqlalchemy", "fastapi", "starlette", "uvicorn", "alembic", "psycopg", "apscheduler",
}


def runtime_closure(name: str) -> set[str]:
    """Names of every distribution installed for ``name`` (no extras), transitively."""
    seen: set[str] = set()
    todo = [canonicalize_name(name)]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        try:
            requires = distribution(current).requires or []
        except PackageNotFoundError:
            continue  # an optional platform dependency not installed here
        for line in requires:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(canonicalize_name(req.name))
    return seen


def test_closure_sees_the_coordinator_stack():
    # Guards the check below against a closure that finds nothing.
    assert SERVER_STACK - {"starlette"} <= runtime_closure("pftp-coordinator")


def test_client_does_not_pull_the_server_stack():
    deps = runtime_closure("pftp-client")
    assert "httpx" in deps and "pftp-wire" in deps
    assert not deps & SERVER_STACK, deps & SERVER_STACK


def test_agent_stays_small():
    deps = runtime_closure("pftp-agent")
    assert {"psutil", "pftp-wire"} <= deps
    assert not deps & (SERVER_STACK | {"httpx", "numpy", "rich", "scapy"}), deps
