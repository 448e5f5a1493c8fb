"""A real coordinator inside the lab's coordinator namespace, for the `pftp+coordinator` runs.

It gets its own PostgreSQL database (over the Unix socket, which every namespace shares),
learns the lab's mirrors, file and replicas through its CLI, probes the mirrors itself from
inside the lab, then serves its API on the coordinator address. Any step that fails makes
the pftp+coordinator entries 'unavailable' with the reason; the rest of the bench goes on.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pftp_lab import PG_SOCKET_DIR, Lab, pg_unix_url

COORD = str(Path(sys.executable).parent / "pftp-coordinator")
PORT = 8470


@dataclass
class CoordinatorRun:
    url: str | None = None
    reason: str = ""
    database: str | None = None
    probes: dict[str, str] = field(default_factory=dict)
    setup_s: float = 0.0
    steps_s: dict[str, float] = field(default_factory=dict)


def _create_db(name: str) -> str | None:
    try:
        import psycopg

        with psycopg.connect(host=PG_SOCKET_DIR, user="postgres", dbname="postgres",
                             autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return pg_unix_url(name)
    except Exception as exc:  # no PostgreSQL here: the coordinator's SQLite default will do
        print(f"  (PostgreSQL unavailable, coordinator uses SQLite: {exc})", flush=True)
        return None


def drop_db(name: str | None) -> None:
    if not name:
        return
    import psycopg

    with psycopg.connect(host=PG_SOCKET_DIR, user="postgres", dbname="postgres",
                         autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


_STEPS_SCRIPT = """
import contextlib, io, json, sys, time
from pftp_coordinator.cli import app
for argv in json.loads(sys.argv[1]):
    buf, t0 = io.StringIO(), time.monotonic()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        try:
            code = app(argv, standalone_mode=False) or 0
        except SystemExit as exc:
            code = exc.code or 0
        except Exception as exc:
            print(f"{type(exc).__name__}: {exc}")
            code = 1
    print(json.dumps({"argv": argv, "code": code if isinstance(code, int) else 1,
                      "out": buf.getvalue()[-40000:], "s": round(time.monotonic() - t0, 2)}),
          flush=True)
"""


def _rows_summary(rows: list[Any]) -> str:
    parts = []
    for r in rows:
        if isinstance(r, dict):
            val = {k: v for k, v in r.items() if k not in ("method", "ok", "error") and v}
            parts.append(f"{r.get('method')}={'ok' if r.get('ok') else 'FAILED'} "
                         f"{val or ''}{(r.get('error') or '')[:120]}".strip())
    return "; ".join(parts)


def _probe_summaries(text: str) -> dict[str, str]:
    """`probe --all`'s JSON (a list of outcomes) -> mirror -> 'ok|FAILED: method=...' pairs."""
    try:
        start = min(i for i in (text.find("["), text.find("{")) if i >= 0)
        data = json.loads(text[start:])
    except ValueError:
        return {"?": text.strip()[-300:]}
    outcomes = data if isinstance(data, list) else [data]
    return {str(o.get("mirror")): f"{'ok' if o.get('ok') else 'FAILED'} "
                                  f"({o.get('attempts')} attempt(s)): "
                                  + _rows_summary(o.get("rows") or [])
            for o in outcomes if isinstance(o, dict)}


def start(lab: Lab, master: Path, fname: str) -> CoordinatorRun:
    t0 = time.monotonic()
    run = CoordinatorRun()
    if not Path(COORD).exists():
        run.reason = f"{COORD} is not installed (server package)"
        return run
    db_name = f"pftp_bench_{lab.lab_id}"
    db_url = _create_db(db_name)
    run.database = db_name if db_url else None
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(lab.workdir),
        "PFTP_DATA_DIR": str(lab.workdir / "coordinator"),
        "PFTP_DATABASE_URL": db_url or f"sqlite:///{lab.workdir / 'coordinator.db'}",
        "PFTP_HOST": lab.coordinator_addr,
        "PFTP_PORT": str(PORT),
    }

    steps: list[list[str]] = [["migrate"]]
    for m in lab.mirrors:
        urls = ["--url", f"ftp://{m.addr}/"] + (["--url", f"http://{m.addr}/"] if m.http else [])
        steps.append(["mirror", "add", m.name, *urls])
    steps.append(["file", "add", fname, "--from-path", str(master)])
    steps += [["replica", "add", m.name, fname] for m in lab.mirrors]
    # One interpreter for all the CLI steps: each `pftp-coordinator` start costs seconds on
    # a loaded 2-core machine, and these are the same commands an operator would type.
    # Last, the coordinator measures the lab's paths itself, from inside the lab: one
    # `probe --all`, which probes every mirror at once (threads, like the scheduler) and
    # returns when all are done, so the set-up waits for the slowest probe only.
    steps.append(["probe", "--all"])
    proc = lab.popen_in("coordinator", [sys.executable, "-c", _STEPS_SCRIPT, json.dumps(steps)],
                        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    done: list[dict[str, Any]] = [json.loads(ln) for ln in out.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or len(done) != len(steps):
        run.reason = (f"coordinator setup failed after {len(done)}/{len(steps)} steps: "
                      f"{(err or out).strip()[-300:]}")
        return run
    run.steps_s = {" ".join(step["argv"][:2]): step["s"] for step in done}
    for step in done:
        if step["argv"][0] == "probe":
            # A failed probe (exit 2) leaves the other mirrors' and methods' data: recorded,
            # not fatal.
            run.probes = _probe_summaries(step["out"])
        elif step["code"] != 0:
            run.reason = (f"`pftp-coordinator {' '.join(step['argv'])}` failed ({step['code']}): "
                          f"{step['out'].strip()[-300:]}")
            return run
    log = open(lab.workdir / "coordinator.log", "wb")  # noqa: SIM115 - lives with the process
    proc = lab.popen_in("coordinator", [COORD, "serve", "--host", lab.coordinator_addr,
                                        "--port", str(PORT)],
                        env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log.close()
            tail = (lab.workdir / "coordinator.log").read_text(errors="replace")[-400:]
            run.reason = f"`pftp-coordinator serve` exited ({proc.returncode}): {tail}"
            return run
        probe = lab.run_in("client", ["bash", "-c",
                                      f"exec 3<>/dev/tcp/{lab.coordinator_addr}/{PORT}"])
        if probe.returncode == 0:
            run.url = f"http://{lab.coordinator_addr}:{PORT}"
            run.setup_s = time.monotonic() - t0
            return run
        time.sleep(0.3)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    run.reason = "`pftp-coordinator serve` did not listen within 60 s"
    return run
