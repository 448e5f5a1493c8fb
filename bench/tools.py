"""The download tools compared by the lab benchmark: how each is invoked, and one timed run.

Every tool runs inside the lab's client namespace against the same mirrors and file. A tool
that is not installed (or whose CLI lacks what we need) is reported as unavailable with the
reason instead of failing the benchmark.
"""

from __future__ import annotations

import contextlib
import functools
import json
import random
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pftp_lab import Lab, sha256_file

from .scenarios import Event, Scenario

PFTP = str(Path(sys.executable).parent / "pftp")


@dataclass
class RunContext:
    lab: Lab
    scenario: Scenario
    fname: str
    sha256: str
    file_bytes: int
    out_dir: Path
    timeout_s: float
    coordinator_url: str | None = None
    coordinator_reason: str = "no coordinator in this run"
    rng: random.Random = field(default_factory=random.Random)

    def urls(self, names: list[str] | None = None) -> list[str]:
        mirrors = self.lab.mirrors if names is None else [self.lab.mirror(n) for n in names]
        return [m.ftp_url(self.fname) for m in mirrors]


@dataclass
class RunResult:
    seconds: float
    ok: bool  # every process exited 0 and the output's SHA-256 matched
    sha256_ok: bool
    error: str = ""
    detail: str = ""


@dataclass(frozen=True)
class Tool:
    name: str
    commands: Callable[[RunContext, Path], list[list[str]]]  # started together
    unavailable: Callable[[RunContext], str | None] = lambda ctx: None
    parts: bool = False  # commands write <out>.part<i>, concatenated afterwards
    # A single shaped TCP flow repeats to within 1 % (seen: 9.91 s three times), so the
    # slower single-mirror baselines run once; their minutes go to the compared tools.
    max_runs: int | None = None


def _need(binary: str) -> Callable[[RunContext], str | None]:
    def check(ctx: RunContext) -> str | None:
        return None if shutil.which(binary) else f"`{binary}` is not installed"
    return check


@functools.lru_cache(maxsize=4)
def _help_text(argv: tuple[str, ...]) -> tuple[int, str]:
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=60,
                              env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})
    except (OSError, subprocess.TimeoutExpired) as exc:
        return -1, str(exc)
    return proc.returncode, proc.stdout + proc.stderr


def _pftp_unavailable(option: str) -> str | None:
    if not Path(PFTP).exists():
        return f"{PFTP} is not installed (client package)"
    code, text = _help_text((PFTP, "get", "--help"))
    if code != 0:
        last = text.strip().splitlines()[-1] if text.strip() else f"exit {code}"
        return f"`pftp get --help` fails: {last[:200]}"
    if option not in text:
        return f"`pftp get` has no {option} option yet"
    return None


def _access_env(ctx: RunContext) -> list[str]:
    # The client's access bandwidth, as the admin of a campus with a slower uplink
    # would put it in the machine's config file: left alone, the client reports its
    # interface's link speed, which in the lab is the veth's nominal 10 Gbit/s, not
    # the shaped access link. Both pftp modes read it (coordinated: to ask for
    # enough mirrors; mirror-only: to see when its flows fill the access link).
    return [f"PFTP_ACCESS_BANDWIDTH={ctx.scenario.access_bps}"] if ctx.scenario.access_bps else []


def _pftp_dynamic(ctx: RunContext, out: Path) -> list[list[str]]:
    argv = ["env", *_access_env(ctx), PFTP, "get"]
    for url in ctx.urls():
        argv += ["--mirror", url]
    # no coordinator in this mode: do not spend time looking for one
    if "--no-discovery" in _help_text((PFTP, "get", "--help"))[1]:
        argv.append("--no-discovery")
    return [[*argv, "--sha256", ctx.sha256, "-o", str(out), "--quiet", "--json"]]


def _pftp_coordinated(ctx: RunContext, out: Path) -> list[list[str]]:
    assert ctx.coordinator_url is not None
    # The coordinator selects mirrors until their rates cover the access bandwidth.
    return [["env", *_access_env(ctx), PFTP, "get", ctx.fname, "--coordinator", ctx.coordinator_url,
             "--sha256", ctx.sha256, "-o", str(out), "--quiet", "--json"]]


def _pftp_coord_unavailable(ctx: RunContext) -> str | None:
    if ctx.coordinator_url is None:
        return ctx.coordinator_reason
    return _pftp_unavailable("--coordinator")


def _aria2(split: int, per_server: int) -> Callable[[RunContext, Path], list[list[str]]]:
    def build(ctx: RunContext, out: Path) -> list[list[str]]:
        n = split or len(ctx.lab.mirrors)
        return [[
            "aria2c", f"--split={n}", f"--max-connection-per-server={per_server}",
            "--min-split-size=1M", "--uri-selector=adaptive", "--file-allocation=none",
            "--allow-overwrite=true", "--auto-file-renaming=false", "--check-certificate=false",
            "--console-log-level=warn", "--summary-interval=0", "--download-result=hide",
            "--connect-timeout=5", "--timeout=10", "--max-tries=5", "--retry-wait=1",
            f"--checksum=sha-256={ctx.sha256}",
            "-d", str(out.parent), "-o", out.name, *ctx.urls(),
        ]]
    return build


def _axel(ctx: RunContext, out: Path) -> list[list[str]]:
    return [["axel", "-q", "-n", str(len(ctx.lab.mirrors)), "-T", "10", "-o", str(out),
             *ctx.urls()]]


def _lftp(ctx: RunContext, out: Path) -> list[list[str]]:
    url = ctx.lab.mirror(ctx.scenario.fastest_mirror()).ftp_url(ctx.fname)
    n = len(ctx.lab.mirrors)
    script = (f"set net:timeout 10; set net:max-retries 3; set net:reconnect-interval-base 1; "
              f"set xfer:clobber on; pget -n {n} {url} -o {out}")
    return [["lftp", "-c", script]]


def _curl_from(mirror: str) -> Callable[[RunContext, Path], list[list[str]]]:
    def build(ctx: RunContext, out: Path) -> list[list[str]]:
        url = ctx.lab.mirror(mirror).ftp_url(ctx.fname)
        return [["curl", "-sS", "--max-time", str(int(ctx.timeout_s)), "-o", str(out), url]]
    return build


def _equal_portions(pick: str, k: int) -> Callable[[RunContext, Path], list[list[str]]]:
    """Paper 004 table 1, methods 1 and 2: the file cut in k equal portions, each fetched
    from one mirror (the k best by rate, or k chosen at random), all at once."""
    def build(ctx: RunContext, out: Path) -> list[list[str]]:
        if pick == "best":
            names = ctx.scenario.best_mirrors(k)
        else:
            names = ctx.rng.sample(ctx.scenario.names(), k)
        size = ctx.file_bytes
        cmds = []
        for i, name in enumerate(names):
            lo, hi = i * size // k, (i + 1) * size // k - 1
            cmds.append(["curl", "-sS", "--max-time", str(int(ctx.timeout_s)), "-r",
                         f"{lo}-{hi}", "-o", f"{out}.part{i}",
                         ctx.lab.mirror(name).ftp_url(ctx.fname)])
        return cmds
    return build


def tools_for(scenario: Scenario, quick: bool = False) -> list[Tool]:
    tools = [
        Tool("pftp+coordinator", _pftp_coordinated, _pftp_coord_unavailable),
        Tool("pftp-dynamic", _pftp_dynamic, lambda ctx: _pftp_unavailable("--mirror")),
        Tool("aria2c-split", _aria2(0, 1), _need("aria2c")),
        Tool("aria2c-many", _aria2(16, 4), _need("aria2c")),
        Tool("axel", _axel, _need("axel")),
        Tool("lftp-pget", _lftp, _need("lftp")),
    ]
    if scenario.equal_split:
        k = scenario.equal_split
        tools += [
            Tool(f"equal-best{k}", _equal_portions("best", k), _need("curl"), parts=True),
            Tool(f"equal-random{k}", _equal_portions("random", k), _need("curl"), parts=True),
        ]
    if scenario.per_mirror_curl and not quick:
        best = scenario.fastest_mirror()
        tools += [
            Tool(f"curl:{n}", _curl_from(n), _need("curl"), max_runs=None if n == best else 1)
            for n in scenario.names()
        ]
    else:
        best = scenario.fastest_mirror()
        tools.append(Tool(f"curl:{best}", _curl_from(best), _need("curl")))
    return tools


def _rx_bytes(pid: int, dev: str) -> int | None:
    """Bytes received on `dev` in the network namespace of process `pid`."""
    try:
        text = Path(f"/proc/{pid}/net/dev").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        if name.strip() == dev:
            return int(rest.split()[0])
    return None


class EventTrigger(threading.Thread):
    """Fires the scenario's events once the client has received a fraction of the file."""

    def __init__(self, ctx: RunContext, pid: int, events: tuple[Event, ...]) -> None:
        super().__init__(daemon=True)
        self.ctx, self.pid = ctx, pid
        self.pending = sorted(events, key=lambda e: e.at_fraction)
        self.dev = f"pl{ctx.lab.lab_id}c"
        self.stop = threading.Event()
        self.fired: list[str] = []
        self.base = _rx_bytes(pid, self.dev)

    def run(self) -> None:
        while self.pending and not self.stop.wait(0.02):
            now = _rx_bytes(self.pid, self.dev)
            if now is None or self.base is None:
                if self.base is None:
                    self.base = now
                continue
            while self.pending and now - self.base >= self.pending[0].at_fraction * \
                    self.ctx.file_bytes:
                ev = self.pending.pop(0)
                apply_event(self.ctx.lab, ev)
                self.fired.append(f"{ev.kind}:{ev.mirror}")


def _json_summary(text: str) -> str:
    """pftp --json's summary, compacted (the whole text's tail if it is not JSON),
    without its timeline (bytes per mirror per 0.25 s: tens of KB per run)."""
    start = text.find("{")
    if start >= 0:
        with contextlib.suppress(ValueError):
            summary = json.loads(text[start:])
            if isinstance(summary, dict):
                summary.pop("timeline", None)
            return json.dumps(summary, separators=(",", ":"))[:20000]
    return text.strip()[-1000:]


def apply_event(lab: Lab, ev: Event) -> None:
    """One scenario event on the running lab (kinds: bench.scenarios.Event)."""
    if ev.kind == "kill":
        lab.kill(ev.mirror)
    elif ev.kind == "restart":
        lab.restart(ev.mirror)
    elif ev.kind == "disconnect":
        lab.disconnect(ev.mirror)
    elif ev.kind == "reconnect":
        lab.reconnect(ev.mirror)
    elif ev.kind == "freeze":
        lab.freeze(ev.mirror)
    elif ev.kind == "thaw":
        lab.thaw(ev.mirror)
    elif ev.kind == "access":
        lab.set_access_rate(ev.rate_bps)
    elif ev.kind == "slow":
        lab.set_rate(ev.mirror, ev.rate_bps)
    else:
        raise ValueError(f"unknown event kind {ev.kind!r}")


def reset_lab(ctx: RunContext) -> None:
    """Undo the previous run's events: original rates, frozen servers thawed, killed
    servers back, links up, the access link's rate."""
    for spec, m in zip(ctx.scenario.mirrors, ctx.lab.mirrors, strict=True):
        if m.frozen:
            ctx.lab.thaw(m)
        if not m.alive:
            ctx.lab.restart(m)
        if m.rate_bps != spec.rate_bps:
            ctx.lab.set_rate(m, spec.rate_bps)
    if any(ev.kind == "disconnect" for ev in ctx.scenario.events):
        for m in ctx.lab.mirrors:
            if not ctx.lab.link_up(m):
                ctx.lab.reconnect(m)
    if ctx.lab.access_bps != ctx.scenario.access_bps:
        ctx.lab.set_access_rate(ctx.scenario.access_bps)


def _wait_all(procs: list[subprocess.Popen[bytes]], deadline: float) -> list[int | None]:
    """Each process's exit code, None for one killed at ``deadline`` (monotonic).
    A blocking wait returns at the exit itself: Popen.wait(timeout=...) polls, with
    sleeps that grow to 50 ms, which added 0-50 ms to every measured time."""
    killed: set[int] = set()
    lock = threading.Lock()

    def expire() -> None:
        with lock:
            for proc in procs:
                if proc.poll() is None:
                    killed.add(proc.pid)
                    proc.kill()

    watchdog = threading.Timer(max(0.1, deadline - time.monotonic()), expire)
    watchdog.daemon = True
    watchdog.start()
    try:
        codes = [proc.wait() for proc in procs]
    finally:
        watchdog.cancel()
    with lock:
        return [None if p.pid in killed else code for p, code in zip(procs, codes, strict=True)]


def run_once(tool: Tool, ctx: RunContext, run_index: int) -> RunResult:
    reset_lab(ctx)
    out = ctx.out_dir / f"{tool.name.replace(':', '_')}-{run_index}.bin"
    for stale in ctx.out_dir.glob(out.name + "*"):
        stale.unlink()
    cmds = tool.commands(ctx, out)
    logs = [ctx.out_dir / f"{out.name}.{i}.log" for i in range(len(cmds))]
    procs: list[subprocess.Popen[bytes]] = []
    trigger: EventTrigger | None = None
    t0 = time.monotonic()
    try:
        for argv, log in zip(cmds, logs, strict=True):
            with open(log, "wb") as fh:
                procs.append(ctx.lab.popen_in("client", argv, stdout=fh,
                                              stderr=subprocess.STDOUT))
        if ctx.scenario.events:
            trigger = EventTrigger(ctx, procs[0].pid, ctx.scenario.events)
            trigger.start()
        codes = _wait_all(procs, t0 + ctx.timeout_s)
        if tool.parts and all(c == 0 for c in codes):
            with open(out, "wb") as dst:
                for i in range(len(cmds)):
                    part = Path(f"{out}.part{i}")
                    with open(part, "rb") as src:
                        shutil.copyfileobj(src, dst, 1 << 20)
                    part.unlink()
        elapsed = time.monotonic() - t0
    finally:
        if trigger is not None:
            trigger.stop.set()
            trigger.join(timeout=5)
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=10)
    sha_ok = out.exists() and sha256_file(out) == ctx.sha256
    error = ""
    if any(c is None for c in codes):
        error = f"timed out after {ctx.timeout_s:.0f}s"
    elif any(c != 0 for c in codes):
        tails = [log.read_text(errors="replace").strip()[-300:] for log in logs]
        error = f"exit codes {codes}: " + " | ".join(t for t in tails if t)
    elif not sha_ok:
        error = "output missing or SHA-256 mismatch"
    detail = ""
    if tool.name.startswith("pftp") and logs[0].exists():
        detail = _json_summary(logs[0].read_text(errors="replace"))
    if trigger is not None:
        detail = (detail + " events=" + ",".join(trigger.fired)).strip()
    with contextlib.suppress(FileNotFoundError):
        out.unlink()
    for log in logs:
        log.unlink(missing_ok=True)
    return RunResult(elapsed, not error, sha_ok, error, detail)
