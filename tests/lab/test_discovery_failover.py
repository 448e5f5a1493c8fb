"""Discovery and failover on a campus LAN made of network namespaces (paper 004, 3.2.3-3.2.4).

One L2 segment (a bridge in its own namespace) holds two coordinators, two FTP mirrors and
a client. Both coordinators run the *coordinator command of docker-compose.yml, unchanged*
(`pftp-coordinator migrate && exec pftp-coordinator serve`) on one PostgreSQL database,
the primary with announce priority 10, the backup with 20. An agent runs the compose
agent command on a mirror. Then:
  1. the client hears only the primary;
  2. the primary is killed: the backup announces within misses x interval (+ slack);
  3. a client download started afterwards finds the backup by broadcast and succeeds;
  4. the primary returns: the backup steps back.
Names start with "dc" (this area's namespace prefix) and are removed in finally blocks.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
sys.path.insert(0, str(REPO / "tests" / "deploy"))
from deploy_spec import command_argv, load_compose  # noqa: E402

INTERVAL_S = 1.0
MISSES = 3  # election.DEFAULT_MISSES
LAN = "10.78.0"
BROADCAST = f"{LAN}.255"
HOSTS = {"c": 2, "k1": 11, "k2": 12, "m0": 20, "m1": 21}
FILE_SIZE = 6 * 1024 * 1024


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    from pftp_lab.netns import env_with_sbin

    res = subprocess.run(list(argv), capture_output=True, text=True, timeout=60,
                         env=env_with_sbin())
    if check and res.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {res.stderr}")
    return res


@dataclass
class CampusLan:
    prefix: str
    workdir: Path
    namespaces: list[str] = field(default_factory=list)
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def ns(self, host: str) -> str:
        return f"{self.prefix}-{host}"

    def addr(self, host: str) -> str:
        return f"{LAN}.{HOSTS[host]}"

    def build(self) -> None:
        sw = self.ns("sw")
        sh("ip", "netns", "add", sw)
        self.namespaces.append(sw)
        sh("ip", "-n", sw, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", sw, "link", "set", "br0", "up")
        for host in HOSTS:
            ns = self.ns(host)
            sh("ip", "netns", "add", ns)
            self.namespaces.append(ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            dev, peer = f"{self.prefix}{host}", f"{self.prefix}s{host}"
            sh("ip", "link", "add", dev, "netns", ns, "type", "veth", "peer", "name", peer,
               "netns", sw)
            sh("ip", "-n", sw, "link", "set", peer, "master", "br0")
            sh("ip", "-n", sw, "link", "set", peer, "up")
            sh("ip", "-n", ns, "addr", "add", f"{self.addr(host)}/24", "broadcast", BROADCAST,
               "dev", dev)
            sh("ip", "-n", ns, "link", "set", dev, "up")

    def spawn(self, name: str, host: str, argv: list[str], env: dict[str, str]) -> None:
        log = (self.workdir / f"{name}.log").open("ab")
        self.procs[name] = subprocess.Popen(
            ["ip", "netns", "exec", self.ns(host), *argv],
            env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()

    def kill(self, name: str) -> None:
        proc = self.procs.pop(name)
        if proc.poll() is None:  # our own process group (start_new_session)
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(15)

    def run(self, host: str, argv: list[str], env: dict[str, str], timeout: float = 240
            ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["ip", "netns", "exec", self.ns(host), *argv], env=env,
                              capture_output=True, text=True, timeout=timeout)

    def log(self, name: str) -> str:
        p = self.workdir / f"{name}.log"
        return p.read_text(errors="replace")[-3000:] if p.exists() else ""

    def close(self) -> None:
        from pftp_lab.netns import delete_namespace, kill_namespace_processes

        for name in list(self.procs):
            self.kill(name)
        for ns in self.namespaces:
            kill_namespace_processes(ns)
        for ns in reversed(self.namespaces):
            delete_namespace(ns)


@pytest.fixture
def lan(tmp_path: Path) -> Iterator[CampusLan]:
    from pftp_lab.netns import require_root

    require_root()
    lan = CampusLan(prefix=f"dc{secrets.token_hex(2)}", workdir=tmp_path)
    try:
        lan.build()
        yield lan
    finally:
        lan.close()


@pytest.fixture
def database(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """(url for processes inside namespaces, url from the host): one PostgreSQL database
    through the shared Unix socket, or a SQLite file when PostgreSQL is not running."""
    try:
        import psycopg

        admin = psycopg.connect("postgresql://postgres@127.0.0.1:5432/postgres", autocommit=True)
    except Exception as exc:
        print(f"PostgreSQL unavailable ({exc}); both coordinators share a SQLite file")
        url = f"sqlite:///{tmp_path / 'shared.db'}"
        yield url, url
        return
    name = f"dc_failover_{uuid.uuid4().hex[:10]}"
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        from pftp_lab import pg_unix_url

        yield pg_unix_url(name), f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    finally:
        with psycopg.connect(
            "postgresql://postgres@127.0.0.1:5432/postgres", autocommit=True
        ) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


LISTEN_SCRIPT = textwrap.dedent("""
    import json, sys
    from pftp_client.discovery import listen_for_announcements
    anns = listen_for_announcements(float(sys.argv[1]), after_first_s=float(sys.argv[2]))
    print(json.dumps([a.model_dump() for a in anns]))
""")

COLLECT_SCRIPT = textwrap.dedent("""
    import json, socket, sys, time
    from pftp_coordinator.discovery.announcer import open_announce_socket
    from pftp_wire.models import ANNOUNCE_PORT, Announcement
    s = open_announce_socket(ANNOUNCE_PORT); s.settimeout(0.2)
    end = time.monotonic() + float(sys.argv[1]); out = []
    while time.monotonic() < end:
        try:
            data, addr = s.recvfrom(4096)
        except TimeoutError:
            continue
        out.append([time.monotonic(), Announcement.model_validate_json(data).url])
    print(json.dumps(out))
""")

DOWNLOAD_SCRIPT = textwrap.dedent("""
    import hashlib, json, sys, time
    from pftp_client.discovery import discover_coordinators
    from pftp_client.downloader import download
    t0 = time.monotonic()
    coords = discover_coordinators([], use_srv=False, listen_s=60)
    found = time.monotonic() - t0
    summary = download(sys.argv[1], coordinator=coords, output=sys.argv[2],
                       access_bandwidth_bps=None, resume=False)
    digest = hashlib.sha256(open(sys.argv[2], "rb").read()).hexdigest()
    print(json.dumps({"coordinators": coords, "discovery_s": found, "sha256": digest}))
""")


def python_in(lan: CampusLan, host: str, script: str, *args: str, env: dict[str, str],
              timeout: float = 240) -> object:
    res = lan.run(host, [sys.executable, "-c", script, *args], env, timeout=timeout)
    assert res.returncode == 0, f"script in {host} failed: {res.stderr[-3000:]}"
    return json.loads(res.stdout.strip().splitlines()[-1])


def wait_http(lan: CampusLan, name: str, url: str, env: dict[str, str], timeout: float = 120
              ) -> None:
    check = f"import urllib.request; urllib.request.urlopen('{url}', timeout=3)"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if name in lan.procs and lan.procs[name].poll() is not None:
            raise AssertionError(f"{name} exited: {lan.log(name)}")
        if lan.run("c", [sys.executable, "-c", check], env, timeout=30).returncode == 0:
            return
        time.sleep(0.5)
    raise AssertionError(f"{name} did not answer {url}: {lan.log(name)}")


def seed(host_url: str, lan: CampusLan, data: bytes) -> None:
    from pftp_coordinator import migrate
    from pftp_coordinator.db import create_db_engine, make_session_factory, session_scope
    from pftp_coordinator.models import File, Mirror, MirrorUrl, Replica

    migrate.upgrade(host_url)  # idempotent: the compose command migrates too
    engine = create_db_engine(host_url)
    try:
        with session_scope(make_session_factory(engine)) as s:
            f = File(name="iso/campus.iso", size=len(data), sha256=hashlib.sha256(data).hexdigest())
            s.add(f)
            for host in ("m0", "m1"):
                m = Mirror(name=f"lan-{host}", region="lan")
                m.urls = [MirrorUrl(protocol="ftp", base_url=f"ftp://{lan.addr(host)}:21/")]
                s.add(m)
                s.flush()
                s.add(Replica(mirror_id=m.id, file_id=f.id, path="campus.iso", size_seen=len(data)))
    finally:
        engine.dispose()


def test_backup_takes_over_and_client_downloads(
    lan: CampusLan, database: tuple[str, str], tmp_path: Path
) -> None:
    ns_url, host_url = database
    data = os.urandom(FILE_SIZE)
    root = tmp_path / "ftproot"
    root.mkdir()
    (root / "campus.iso").write_bytes(data)
    os.chmod(tmp_path, 0o755)

    base_env = {k: v for k, v in os.environ.items() if not k.startswith("PFTP_")}
    base_env["PATH"] = f"{BIN}:{base_env.get('PATH', '/usr/bin:/bin')}:/usr/sbin:/sbin"
    base_env["HOME"] = str(tmp_path)  # no user config for the client
    base_env["PFTP_CONFIG"] = str(tmp_path / "no-config.toml")

    for host in ("m0", "m1"):
        lan.spawn(f"ftp-{host}", host, [sys.executable, "-m", "pyftpdlib", "-i", lan.addr(host),
                                         "-p", "21", "-d", str(root)], base_env)
    seed(host_url, lan, data)

    compose = load_compose()["services"]
    coord_cmd = command_argv(compose["coordinator"])
    assert coord_cmd[:2] == ["sh", "-c"]

    def coordinator_env(host: str, priority: int) -> dict[str, str]:
        return {
            **base_env,
            "PFTP_DATABASE_URL": ns_url,
            "PFTP_HOST": "0.0.0.0",
            "PFTP_PORT": "8470",
            "PFTP_ADMIN_TOKEN": "lab-admin-token",
            "PFTP_PUBLIC_URL": f"http://{lan.addr(host)}:8470",
            "PFTP_ANNOUNCE_ENABLED": "true",
            "PFTP_ANNOUNCE_PRIORITY": str(priority),
            "PFTP_ANNOUNCE_INTERVAL_S": str(INTERVAL_S),
            "PFTP_ANNOUNCE_ADDRESS": BROADCAST,
            "PFTP_SCHEDULER_ENABLED": "false",
            "PFTP_LOG_JSON": "true",
            "PFTP_DATA_DIR": str(tmp_path / host),
        }

    primary_url, backup_url = f"http://{lan.addr('k1')}:8470", f"http://{lan.addr('k2')}:8470"
    lan.spawn("k1", "k1", coord_cmd, coordinator_env("k1", 10))
    wait_http(lan, "k1", f"{primary_url}/healthz", base_env)
    lan.spawn("k2", "k2", coord_cmd, coordinator_env("k2", 20))
    wait_http(lan, "k2", f"{backup_url}/healthz", base_env)

    # The compose agent command, on mirror m0, reporting to the primary.
    from pftp_coordinator.agent_tokens import issue_token
    from pftp_coordinator.db import create_db_engine, make_session_factory, session_scope

    engine = create_db_engine(host_url)
    try:
        with session_scope(make_session_factory(engine)) as s:
            token = issue_token(s, "lan-m0")
    finally:
        engine.dispose()
    agent_env = {**base_env, **{k: str(v) for k, v in compose["agent"]["environment"].items()}}
    agent_env.update(PFTP_AGENT_COORDINATOR_URL=primary_url, PFTP_AGENT_TOKEN=token,
                     PFTP_AGENT_INTERVAL_S="2")
    lan.spawn("agent", "m0", command_argv(compose["agent"]), agent_env)

    # 1. Only the primary announces.
    heard = python_in(lan, "c", COLLECT_SCRIPT, str(6 * INTERVAL_S), env=base_env)
    urls = {u for _, u in heard}
    assert urls == {primary_url}, f"expected only the primary, heard {urls}"

    # 2. Kill the primary; the backup must announce within misses x interval (+ slack).
    collector = subprocess.Popen(
        ["ip", "netns", "exec", lan.ns("c"), sys.executable, "-c", COLLECT_SCRIPT, "40"],
        env=base_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        time.sleep(3 * INTERVAL_S)
        killed_at = time.monotonic()
        lan.kill("k1")
        out, err = collector.communicate(timeout=120)
    finally:
        if collector.poll() is None:
            collector.kill()
            collector.wait(10)
    assert collector.returncode == 0, err
    events = json.loads(out.strip().splitlines()[-1])
    backup_times = [t for t, u in events if u == backup_url]
    assert backup_times, f"the backup never announced; backup log: {lan.log('k2')}"
    takeover_s = backup_times[0] - killed_at
    last_primary = max((t for t, u in events if u == primary_url), default=killed_at)
    print(f"\nfailover: backup announced {takeover_s:.2f}s after the primary was killed "
          f"(interval {INTERVAL_S}s, misses {MISSES}; last primary announcement "
          f"{killed_at - last_primary:.2f}s before the kill)")
    allowed = MISSES * INTERVAL_S + 2 * INTERVAL_S + 10.0  # slack for a loaded 2-core machine
    assert 0 < takeover_s <= allowed
    assert all(u == backup_url for t, u in events if t > backup_times[0])

    # 3. A download started now discovers the backup by broadcast and succeeds.
    out_file = tmp_path / "client" / "campus.iso"
    out_file.parent.mkdir()
    result = python_in(lan, "c", DOWNLOAD_SCRIPT, "iso/campus.iso", str(out_file),
                       env=base_env, timeout=300)
    assert result["coordinators"][0] == backup_url
    assert result["sha256"] == hashlib.sha256(data).hexdigest()
    print(f"client: found {result['coordinators']} in {result['discovery_s']:.2f}s, "
          "download verified")

    # 4. The primary comes back: the backup steps back.
    lan.spawn("k1", "k1", coord_cmd, coordinator_env("k1", 10))
    wait_http(lan, "k1", f"{primary_url}/healthz", base_env)
    deadline = time.monotonic() + 60
    while True:
        heard = python_in(lan, "c", COLLECT_SCRIPT, str(4 * INTERVAL_S), env=base_env)
        if heard and {u for _, u in heard} == {primary_url}:
            break
        assert time.monotonic() < deadline, f"backup did not step back: {heard}"

    # The agent's samples reached the coordinators' shared database.
    from pftp_coordinator.models import UtilizationSample
    from sqlalchemy import func, select

    engine = create_db_engine(host_url)
    try:
        with make_session_factory(engine)() as s:
            samples = s.scalar(select(func.count()).select_from(UtilizationSample))
    finally:
        engine.dispose()
    assert samples and samples > 0, f"agent sent nothing: {lan.log('agent')}"
