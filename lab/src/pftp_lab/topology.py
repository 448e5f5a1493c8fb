"""The lab: a client behind a shaped access link, a core router, N shaped mirrors running real
FTP/HTTP servers, optional shared-bottleneck routers in front of groups of mirrors.

    client ──(access, shaped)── router ──(shaped)── mirror m0
                                   │ └──(shaped)── mirror m1
                                   └──(bottleneck, shaped)── bneck b0 ──(shaped)── m2, m3

Address plan (inside the lab's namespaces only): link k is 10.77.k.0/30, the router side .1,
the leaf side .2; k = 0 client, 1 coordinator, 10+i mirror i, 200+j bottleneck j.
Every lab has its own id, so namespaces are pl<id>-c, pl<id>-r, pl<id>-m0, pl<id>-b0, ...
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import delayline, freezer, netns
from .netns import LabError
from .registry import PREFIX, LabRecord, registry_dir
from .servers import FTP_KINDS, ftp_argv, nginx_argv

PG_SOCKET_DIR = "/var/run/postgresql"
MAX_MIRRORS = 180


@dataclass(frozen=True)
class MirrorSpec:
    """One mirror: its link rate (bit/s, None = unshaped), FTP server kind, whether it also
    serves HTTP (nginx), and the shared bottleneck it sits behind (a BottleneckSpec name).

    rtt_ms adds that much round-trip time to the mirror's link (half each way) and loss drops
    that fraction of the frames in each direction: a delay line (delayline.py) then sits
    between the mirror and its upstream router, after the mirror's shaping."""

    rate_bps: int | None = 10_000_000
    kind: str = "vsftpd"
    http: bool = False
    bottleneck: str | None = None
    name: str | None = None
    rtt_ms: float = 0.0
    loss: float = 0.0
    # the servers' own limit per connection (bytes/s), as a mirror admin sets it:
    # vsftpd anon_max_rate, pure-ftpd --anonymousbandwidth, proftpd TransferRate,
    # nginx limit_rate. Each connection is held to it; several share the link.
    conn_rate_Bps: int | None = None
    # the servers' limit on connections from one address (vsftpd max_per_ip,
    # pure-ftpd --maxclientsperip, proftpd MaxClientsPerHost; nginx limit_conn, on
    # requests at once: 503 to the others); None: the lab's 500 (nginx: none)
    max_per_ip: int | None = None
    # nginx also serves HTTPS on 443 (implies http), with a self-signed certificate
    # for the mirror's address; Lab.ca_file trusts every mirror's
    https: bool = False


@dataclass(frozen=True)
class BottleneckSpec:
    """A router in front of a group of mirrors whose uplink (toward the core) is shaped."""

    name: str
    rate_bps: int


@dataclass
class Mirror:
    name: str
    index: int
    ns: str
    addr: str
    dev: str
    kind: str
    http: bool
    rate_bps: int | None
    bottleneck: str | None
    root: Path
    conf_dir: Path
    conn_rate_Bps: int | None = None
    max_per_ip: int | None = None
    https: bool = False
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    alive: bool = False
    frozen: bool = False  # freeze()d: its processes SIGSTOPped

    def ftp_url(self, fname: str) -> str:
        return f"ftp://{self.addr}/{fname}"

    def http_url(self, fname: str) -> str:
        if not self.http:
            raise LabError(f"mirror {self.name} does not serve HTTP (MirrorSpec(http=True))")
        return f"http://{self.addr}/{fname}"

    def https_url(self, fname: str) -> str:
        if not self.https:
            raise LabError(f"mirror {self.name} does not serve HTTPS (MirrorSpec(https=True))")
        return f"https://{self.addr}/{fname}"

    @property
    def pids(self) -> list[int]:
        """The mirror's own processes: its servers and their per-session children."""
        return netns.namespace_pids(self.ns)


@dataclass
class Bottleneck:
    name: str
    index: int
    ns: str
    dev: str
    addr: str
    rate_bps: int
    mirrors: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class LabEvent:
    t: float  # seconds since the lab started
    kind: str
    target: str
    detail: str


def _link(k: int) -> tuple[str, str]:
    """(upstream address, leaf address) of link k, both /30."""
    return f"10.77.{k}.1", f"10.77.{k}.2"


def _check_fname(fname: str) -> str:
    if not fname or "/" in fname or fname.startswith(".") or "\0" in fname:
        raise LabError(f"file names served by the lab are plain names (no '/', no leading '.'): "
                       f"{fname!r}")
    return fname


def sha256_file(path: Path | str, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def make_file(path: Path | str, size: int, seed: int = 0) -> str:
    """Write `size` pseudo-random bytes (reproducible from `seed`); return their SHA-256."""
    h = hashlib.sha256()
    block = hashlib.sha256(f"pftp-lab-{seed}".encode()).digest() * 2048  # 64 KiB pattern
    counter = 0
    with open(path, "wb") as f:
        left = size
        while left > 0:
            # vary every block so ranges cannot be confused with one another
            piece = hashlib.sha256(counter.to_bytes(8, "big") + block[:32]).digest() + block[32:]
            piece = piece[: min(left, len(piece))]
            f.write(piece)
            h.update(piece)
            left -= len(piece)
            counter += 1
    return h.hexdigest()


def pg_unix_url(database: str, user: str = "postgres") -> str:
    """SQLAlchemy URL reaching the machine's PostgreSQL from inside any lab namespace (the
    Unix socket directory is shared; 127.0.0.1 inside a namespace is that namespace's own)."""
    return f"postgresql+psycopg://{user}@/{database}?host={PG_SOCKET_DIR}"


# --- process-wide safety net: close every live lab on SIGTERM/SIGINT/SIGHUP and at exit -----
_LIVE: set[Lab] = set()
_LIVE_LOCK = threading.Lock()
_PREVIOUS_HANDLERS: dict[int, Any] = {}
_ATEXIT_DONE = False
_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def close_all_labs() -> None:
    with _LIVE_LOCK:
        labs = list(_LIVE)
    for lab in labs:
        lab.close()


def _on_signal(signum: int, frame: Any) -> None:
    close_all_labs()
    previous = _PREVIOUS_HANDLERS.get(signum, signal.SIG_DFL)
    if callable(previous):
        previous(signum, frame)
    elif previous == signal.SIG_IGN:
        return
    else:
        raise SystemExit(128 + signum)


def _register(lab: Lab) -> None:
    global _ATEXIT_DONE
    with _LIVE_LOCK:
        first = not _LIVE
        _LIVE.add(lab)
    if not _ATEXIT_DONE:
        atexit.register(close_all_labs)
        _ATEXIT_DONE = True
    if first and threading.current_thread() is threading.main_thread():
        for sig in _SIGNALS:
            current = signal.getsignal(sig)
            if current is not _on_signal:
                _PREVIOUS_HANDLERS[sig] = current
                signal.signal(sig, _on_signal)


def _unregister(lab: Lab) -> None:
    with _LIVE_LOCK:
        _LIVE.discard(lab)
        last = not _LIVE
    if last and threading.current_thread() is threading.main_thread():
        for sig, previous in list(_PREVIOUS_HANDLERS.items()):
            if signal.getsignal(sig) is _on_signal:
                signal.signal(sig, previous if previous is not None else signal.SIG_DFL)
            del _PREVIOUS_HANDLERS[sig]


class Lab:
    """A network of namespaces with shaped links and real mirrors; use as a context manager.

    files: name -> source path or bytes; every mirror serves the same content under that name.
    access_bps: the client's access link (None = unshaped). coordinator: also build an
    unshaped namespace for a coordinator (`coordinator_ns`, `coordinator_addr`).
    """

    def __init__(
        self,
        mirrors: Sequence[MirrorSpec | int],
        *,
        files: Mapping[str, Path | str | bytes],
        access_bps: int | None = 1_000_000_000,
        bottlenecks: Sequence[BottleneckSpec] = (),
        coordinator: bool = False,
        ready_timeout: float = 30.0,
    ) -> None:
        specs = [m if isinstance(m, MirrorSpec) else MirrorSpec(rate_bps=int(m)) for m in mirrors]
        if not specs:
            raise LabError("a lab needs at least one mirror")
        if len(specs) > MAX_MIRRORS:
            raise LabError(f"at most {MAX_MIRRORS} mirrors per lab, got {len(specs)}")
        names = [s.name or f"m{i}" for i, s in enumerate(specs)]
        if len(set(names)) != len(names):
            raise LabError(f"mirror names must be unique: {names}")
        bnames = [b.name for b in bottlenecks]
        if len(set(bnames)) != len(bnames) or len(bnames) > 50:
            raise LabError(f"bottleneck names must be unique (at most 50): {bnames}")
        for s, n in zip(specs, names, strict=True):
            if s.kind not in FTP_KINDS:
                raise LabError(f"mirror {n}: unknown kind {s.kind!r}; one of {FTP_KINDS}")
            if s.bottleneck is not None and s.bottleneck not in bnames:
                raise LabError(f"mirror {n}: unknown bottleneck {s.bottleneck!r}; known {bnames}")
            if not (0 <= s.rtt_ms <= 10_000 and 0 <= s.loss < 1):
                raise LabError(f"mirror {n}: rtt_ms must be in [0, 10000] and loss in [0, 1); "
                               f"got {s.rtt_ms}, {s.loss}")
        if not files:
            raise LabError("a lab needs at least one file to serve (files={'name': path})")
        self._specs = specs
        self._names = names
        self._bottleneck_specs = list(bottlenecks)
        self._files = {_check_fname(k): v for k, v in files.items()}
        self.access_bps = access_bps
        self.with_coordinator = coordinator
        self.ready_timeout = ready_timeout
        self.lab_id = ""
        self.workdir = Path()
        self.mirrors: list[Mirror] = []
        self.bottlenecks: list[Bottleneck] = []
        self.events: list[LabEvent] = []
        self.file_sha256: dict[str, str] = {}
        self._namespaces: list[str] = []
        self._procs: list[subprocess.Popen[Any]] = []
        self._timers: list[threading.Timer] = []
        self._freeze_groups: dict[str, freezer.FreezeGroup] = {}  # mirror name -> its group
        self._record: LabRecord | None = None
        self._t0 = 0.0
        self._closed = False
        self._started = False
        self._lock = threading.RLock()

    # --- names -----------------------------------------------------------------------------
    @property
    def client_ns(self) -> str:
        return f"{PREFIX}{self.lab_id}-c"

    @property
    def router_ns(self) -> str:
        return f"{PREFIX}{self.lab_id}-r"

    @property
    def coordinator_ns(self) -> str:
        if not self.with_coordinator:
            raise LabError("this lab has no coordinator namespace (Lab(..., coordinator=True))")
        return f"{PREFIX}{self.lab_id}-k"

    @property
    def client_addr(self) -> str:
        return _link(0)[1]

    @property
    def coordinator_addr(self) -> str:
        self.coordinator_ns  # noqa: B018 - raises when absent
        return _link(1)[1]

    @property
    def namespaces(self) -> list[str]:
        return list(self._namespaces)

    def mirror(self, key: Mirror | str | int) -> Mirror:
        if isinstance(key, Mirror):
            return key
        if isinstance(key, int):
            if not 0 <= key < len(self.mirrors):
                raise LabError(f"no mirror #{key}; the lab has {len(self.mirrors)}")
            return self.mirrors[key]
        for m in self.mirrors:
            if key in (m.name, m.ns):
                return m
        raise LabError(f"no mirror {key!r}; mirrors are {[m.name for m in self.mirrors]}")

    def ca_file(self) -> Path:
        """A bundle of the HTTPS mirrors' self-signed certificates, for a client to
        trust (SSL_CERT_FILE, curl --cacert, aria2c --ca-certificate)."""
        certs = [m.conf_dir / "cert.pem" for m in self.mirrors if m.https]
        if not certs:
            raise LabError("no mirror serves HTTPS (MirrorSpec(https=True))")
        bundle = self.workdir / "ca.pem"
        bundle.write_text("".join(c.read_text() for c in certs))
        bundle.chmod(0o644)
        return bundle

    def bottleneck(self, name: str) -> Bottleneck:
        for b in self.bottlenecks:
            if b.name == name:
                return b
        known = [b.name for b in self.bottlenecks]
        raise LabError(f"no bottleneck {name!r}; bottlenecks are {known}")

    def ns(self, target: Mirror | str) -> str:
        """Namespace of 'client', 'router', 'coordinator', a mirror or bottleneck (by name)."""
        if isinstance(target, Mirror):
            return target.ns
        aliases = {"client": self.client_ns, "router": self.router_ns}
        if self.with_coordinator:
            aliases["coordinator"] = self.coordinator_ns
        if target in aliases:
            return aliases[target]
        if target in self._namespaces:
            return target
        for m in self.mirrors:
            if target == m.name:
                return m.ns
        for b in self.bottlenecks:
            if target == b.name:
                return b.ns
        raise LabError(f"unknown namespace {target!r} (try 'client', 'router', a mirror name)")

    # --- lifecycle -------------------------------------------------------------------------
    def __enter__(self) -> Lab:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> Lab:
        if self._started:
            raise LabError("this lab was already started; build a new Lab")
        netns.require_root()
        self._started = True
        self._t0 = time.monotonic()
        _register(self)
        try:
            self._choose_id()
            self._build()
            self._start_all_servers()
        except BaseException:
            self.close()
            raise
        return self

    def _choose_id(self) -> None:
        existing = netns.list_namespaces()
        for _ in range(100):
            lab_id = secrets.token_hex(2)
            if not any(n.startswith(f"{PREFIX}{lab_id}-") for n in existing) and not (
                registry_dir() / f"{lab_id}.json"
            ).exists():
                break
        else:
            raise LabError("could not find a free lab id; run `python -m pftp_lab.cleanup`")
        self.lab_id = lab_id
        self.workdir = Path(tempfile.mkdtemp(prefix=f"pftp-lab-{lab_id}-"))
        self.workdir.chmod(0o755)
        self._record = LabRecord(lab_id=lab_id, owner_pid=os.getpid(), workdir=str(self.workdir))
        self._record.save()

    def _add_ns(self, name: str) -> str:
        self._namespaces.append(name)
        assert self._record is not None
        self._record.namespaces = list(self._namespaces)
        self._record.save()
        netns.add_namespace(name)
        return name

    def _build(self) -> None:
        p = f"{PREFIX}{self.lab_id}"
        router = self._add_ns(self.router_ns)
        netns.enable_forwarding(router)

        # client access link
        client = self._add_ns(self.client_ns)
        up, leaf = _link(0)
        netns.add_veth(f"{p}c", client, f"{p}rc", router)
        netns.add_address(router, f"{p}rc", f"{up}/30")
        netns.add_address(client, f"{p}c", f"{leaf}/30")
        netns.add_route(client, "default", up)
        if self.access_bps is not None:
            netns.set_shaping(router, f"{p}rc", self.access_bps)  # download direction
            netns.set_shaping(client, f"{p}c", self.access_bps)  # upload direction

        if self.with_coordinator:
            coord = self._add_ns(self.coordinator_ns)
            up, leaf = _link(1)
            netns.add_veth(f"{p}k", coord, f"{p}rk", router)
            netns.add_address(router, f"{p}rk", f"{up}/30")
            netns.add_address(coord, f"{p}k", f"{leaf}/30")
            netns.add_route(coord, "default", up)

        for j, bspec in enumerate(self._bottleneck_specs):
            bns = self._add_ns(f"{p}-b{j}")
            netns.enable_forwarding(bns)
            up, leaf = _link(200 + j)
            netns.add_veth(f"{p}b{j}", bns, f"{p}rb{j}", router)
            netns.add_address(router, f"{p}rb{j}", f"{up}/30")
            netns.add_address(bns, f"{p}b{j}", f"{leaf}/30")
            netns.add_route(bns, "default", up)
            netns.set_shaping(bns, f"{p}b{j}", bspec.rate_bps)
            self.bottlenecks.append(
                Bottleneck(bspec.name, j, bns, f"{p}b{j}", leaf, bspec.rate_bps)
            )

        master = self.workdir / "files"
        master.mkdir(mode=0o755)
        for fname, src in self._files.items():
            dst = master / fname
            if isinstance(src, bytes):
                dst.write_bytes(src)
            else:
                shutil.copyfile(src, dst)
            dst.chmod(0o644)
            self.file_sha256[fname] = sha256_file(dst)

        for i, (spec, name) in enumerate(zip(self._specs, self._names, strict=True)):
            mns = self._add_ns(f"{p}-m{i}")
            up, leaf = _link(10 + i)
            if spec.bottleneck is None:
                upstream_ns = router
            else:
                b = self.bottleneck(spec.bottleneck)
                b.mirrors.append(name)
                upstream_ns = b.ns
                netns.add_route(router, f"10.77.{10 + i}.0/30", b.addr)
            if spec.rtt_ms or spec.loss:
                self._add_delay_line(i, spec, mns, upstream_ns)
            else:
                netns.add_veth(f"{p}m{i}", mns, f"{p}u{i}", upstream_ns)
            netns.add_address(upstream_ns, f"{p}u{i}", f"{up}/30")
            netns.add_address(mns, f"{p}m{i}", f"{leaf}/30")
            netns.add_route(mns, "default", up)
            if spec.rate_bps is not None:
                netns.set_shaping(mns, f"{p}m{i}", spec.rate_bps)
            mdir = self.workdir / f"m{i}"
            root = mdir / "root"
            conf = mdir / "conf"
            root.mkdir(mode=0o755, parents=True)
            conf.mkdir(mode=0o700)
            mdir.chmod(0o755)
            for fname in self._files:
                os.link(master / fname, root / fname)  # corrupt() breaks the link first
            self.mirrors.append(Mirror(
                name=name, index=i, ns=mns, addr=leaf, dev=f"{p}m{i}", kind=spec.kind,
                http=spec.http or spec.https, rate_bps=spec.rate_bps,
                bottleneck=spec.bottleneck, root=root, conf_dir=conf,
                conn_rate_Bps=spec.conn_rate_Bps, max_per_ip=spec.max_per_ip,
                https=spec.https,
            ))

    def _add_delay_line(self, i: int, spec: MirrorSpec, mns: str, upstream_ns: str) -> None:
        """mirror ──veth── [namespace -d<i>: delayline] ──veth── upstream, at layer 2."""
        p = f"{PREFIX}{self.lab_id}"
        dns = self._add_ns(f"{p}-d{i}")
        netns.sh(["ip", "netns", "exec", dns, "sysctl", "-qw",
                  "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1"])
        netns.add_veth(f"{p}m{i}", mns, f"{p}dm{i}", dns)
        netns.add_veth(f"{p}du{i}", dns, f"{p}u{i}", upstream_ns)
        for ns, dev in ((mns, f"{p}m{i}"), (dns, f"{p}dm{i}"), (dns, f"{p}du{i}"),
                        (upstream_ns, f"{p}u{i}")):
            delayline.offloads_off(ns, dev)
        argv = delayline.argv(f"{p}dm{i}", f"{p}du{i}", spec.rtt_ms / 2000, spec.loss,
                              seed=1000 + i)
        log = self.workdir / f"delayline-m{i}.log"
        proc = self._spawn(dns, argv, log)
        self._procs.append(proc)
        deadline = time.monotonic() + 10
        while b"<->" not in (log.read_bytes() if log.exists() else b""):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise LabError(f"mirror {self._names[i]}: delay line did not start:\n"
                               f"{log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.01)

    # --- servers ---------------------------------------------------------------------------
    def _spawn(self, ns: str, argv: list[str], log: Path) -> subprocess.Popen[bytes]:
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                ["ip", "netns", "exec", ns, *argv],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True, env=netns.env_with_sbin(),
            )
        return proc

    def _start_all_servers(self) -> None:
        for m in self.mirrors:
            self._start_servers(m)
        for m in self.mirrors:
            self.wait_ready(m)

    def _start_servers(self, m: Mirror) -> None:
        m.procs = [self._spawn(m.ns, ftp_argv(m.kind, m.conf_dir, m.root, m.addr,
                                              conn_rate_Bps=m.conn_rate_Bps,
                                              max_per_ip=m.max_per_ip),
                               m.conf_dir / f"{m.kind}.out")]
        if m.http:
            m.procs.append(self._spawn(m.ns, nginx_argv(m.conf_dir, m.root, m.addr,
                                                        conn_rate_Bps=m.conn_rate_Bps,
                                                        max_per_ip=m.max_per_ip,
                                                        tls=m.https),
                                       m.conf_dir / "nginx.out"))
        m.alive = True

    def wait_ready(self, mirror: Mirror | str | int) -> None:
        """Block until the mirror's servers accept connections from the client namespace."""
        m = self.mirror(mirror)
        ports = [21] + ([80] if m.http else []) + ([443] if m.https else [])
        deadline = time.monotonic() + self.ready_timeout
        for port in ports:
            while True:
                for proc in m.procs:
                    if proc.poll() is not None:
                        raise LabError(f"mirror {m.name}: server exited ({proc.returncode}): "
                                       f"{' '.join(map(str, proc.args))}\n{self._logs(m)}")
                probe = subprocess.run(
                    ["ip", "netns", "exec", self.client_ns, "bash", "-c",
                     f"exec 3<>/dev/tcp/{m.addr}/{port}"],
                    capture_output=True, timeout=30, env=netns.env_with_sbin(),
                )
                if probe.returncode == 0:
                    break
                if time.monotonic() > deadline:
                    raise LabError(f"mirror {m.name} ({m.kind}) not reachable on "
                                   f"{m.addr}:{port} after {self.ready_timeout}s\n{self._logs(m)}")
                time.sleep(0.1)

    def _logs(self, m: Mirror) -> str:
        parts = []
        for log in sorted(m.conf_dir.glob("*.out")) + sorted(m.conf_dir.glob("*.log")):
            with contextlib.suppress(OSError):
                parts.append(f"--- {log.name}\n{log.read_text(errors='replace')[-2000:]}")
        return "\n".join(parts)

    # --- events ----------------------------------------------------------------------------
    def _event(self, kind: str, target: str, detail: str = "") -> None:
        self.events.append(LabEvent(round(time.monotonic() - self._t0, 3), kind, target, detail))

    def set_rate(self, mirror: Mirror | str | int, rate_bps: int | None) -> None:
        """Change a mirror's link rate at run time (None removes the shaping)."""
        m = self.mirror(mirror)
        netns.set_shaping(m.ns, m.dev, rate_bps)
        m.rate_bps = rate_bps
        self._event("set_rate", m.name, str(rate_bps))

    def set_access_rate(self, rate_bps: int | None) -> None:
        p = f"{PREFIX}{self.lab_id}"
        netns.set_shaping(self.router_ns, f"{p}rc", rate_bps)
        netns.set_shaping(self.client_ns, f"{p}c", rate_bps)
        self.access_bps = rate_bps
        self._event("set_access_rate", "client", str(rate_bps))

    def set_bottleneck_rate(self, name: str, rate_bps: int) -> None:
        b = self.bottleneck(name)
        netns.set_shaping(b.ns, b.dev, rate_bps)
        b.rate_bps = rate_bps
        self._event("set_bottleneck_rate", name, str(rate_bps))

    def kill(self, mirror: Mirror | str | int) -> None:
        """The mirror dies: SIGKILL its servers and every per-session child in its namespace
        (open transfers end abruptly)."""
        m = self.mirror(mirror)
        if m.frozen:
            self.thaw(m)  # (a frozen process takes its SIGKILL only once thawed)
        netns.kill_namespace_processes(m.ns)
        for proc in m.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
        m.alive = m.frozen = False
        self._event("kill", m.name)

    def restart(self, mirror: Mirror | str | int) -> None:
        """Start a killed mirror's servers again."""
        m = self.mirror(mirror)
        if m.alive:
            raise LabError(f"mirror {m.name} is running; kill() it first")
        self._start_servers(m)
        self.wait_ready(m)
        self._event("restart", m.name)

    def freeze(self, mirror: Mirror | str | int) -> None:
        """The mirror hangs: every process in its namespace is frozen (freezer.py). Its
        kernel still completes TCP handshakes (a path check gets through) and
        acknowledges data, but no server answers or sends a byte until thaw()."""
        m = self.mirror(mirror)
        group = self._freeze_groups.get(m.name)
        if group is None:
            group = self._freeze_groups[m.name] = freezer.group(
                f"{PREFIX}{self.lab_id}-m{m.index}")
        group.add(netns.namespace_pids(m.ns))
        group.set_frozen(True)
        m.frozen = True
        self._event("freeze", m.name)

    def thaw(self, mirror: Mirror | str | int) -> None:
        """A frozen mirror's processes run again: its sessions carry on where they were."""
        m = self.mirror(mirror)
        group = self._freeze_groups.get(m.name)
        if group is not None:
            group.set_frozen(False)
        m.frozen = False
        self._event("thaw", m.name)

    def disconnect(self, mirror: Mirror | str | int) -> None:
        """The mirror becomes unreachable (link down): transfers stall instead of ending."""
        m = self.mirror(mirror)
        netns.sh(["ip", "-n", m.ns, "link", "set", m.dev, "down"])
        self._event("disconnect", m.name)

    def link_up(self, mirror: Mirror | str | int) -> bool:
        """False while the mirror is disconnect()ed."""
        m = self.mirror(mirror)
        out = subprocess.run(["ip", "-n", m.ns, "-o", "link", "show", m.dev],
                             capture_output=True, text=True, check=True).stdout
        return ",UP" in out or "<UP" in out

    def reconnect(self, mirror: Mirror | str | int) -> None:
        m = self.mirror(mirror)
        netns.sh(["ip", "-n", m.ns, "link", "set", m.dev, "up"])
        up = _link(10 + m.index)[0]
        netns.add_route(m.ns, "default", up)
        self._event("reconnect", m.name)

    def corrupt(self, mirror: Mirror | str | int, offset: int, length: int,
                fname: str | None = None) -> None:
        """Flip every bit of `length` bytes at `offset` in this mirror's copy only."""
        m = self.mirror(mirror)
        name = _check_fname(fname) if fname else next(iter(self._files))
        path = m.root / name
        if not path.exists():
            raise LabError(f"mirror {m.name} serves no file {name!r}")
        size = path.stat().st_size
        if offset < 0 or length <= 0 or offset >= size:
            raise LabError(f"corrupt range [{offset}, +{length}) is outside {name} ({size} bytes)")
        length = min(length, size - offset)
        tmp = path.with_name(f".{name}.corrupt")
        shutil.copyfile(path, tmp)  # own copy: the others keep the good bytes
        with open(tmp, "r+b") as f:
            f.seek(offset)
            data = f.read(length)
            f.seek(offset)
            f.write(bytes(b ^ 0xFF for b in data))
        tmp.chmod(0o644)
        tmp.replace(path)
        self._event("corrupt", m.name, f"{name}@{offset}+{length}")

    def at(self, delay_s: float, action: Callable[..., object], *args: object) -> threading.Timer:
        """Run `action(*args)` after `delay_s` seconds (cancelled when the lab closes)."""
        timer = threading.Timer(delay_s, action, args)
        timer.daemon = True
        with self._lock:
            if self._closed:
                raise LabError("the lab is closed")
            self._timers.append(timer)
        timer.start()
        return timer

    # --- running things inside the lab -----------------------------------------------------
    def run_in(self, target: Mirror | str, argv: Sequence[str], *, timeout: float = 120.0,
               check: bool = False, text: bool = True, input: str | bytes | None = None,
               env: Mapping[str, str] | None = None, cwd: Path | str | None = None
               ) -> subprocess.CompletedProcess[Any]:
        """Run a command inside a lab namespace and wait for it (output captured)."""
        ns = self.ns(target)
        proc = subprocess.run(
            ["ip", "netns", "exec", ns, *argv], capture_output=True, text=text, input=input,
            timeout=timeout, env=netns.env_with_sbin(dict(env) if env is not None else None),
            cwd=cwd,
        )
        if check and proc.returncode != 0:
            raise LabError(f"in {ns}: `{' '.join(argv)}` failed ({proc.returncode}): "
                           f"{(proc.stderr or '')[-2000:]}")
        return proc

    def popen_in(self, target: Mirror | str, argv: Sequence[str], **kwargs: Any
                 ) -> subprocess.Popen[Any]:
        """Start a process inside a lab namespace; it is killed when the lab closes.

        `env` (if given) is used as the whole environment, with the sbin dirs added to PATH."""
        ns = self.ns(target)
        env = kwargs.pop("env", None)
        kwargs.setdefault("start_new_session", True)
        proc = subprocess.Popen(["ip", "netns", "exec", ns, *argv],
                                env=netns.env_with_sbin(env), **kwargs)
        with self._lock:
            self._procs.append(proc)
        return proc

    def describe(self) -> dict[str, Any]:
        """Plain-data description of the topology (for reports)."""
        return {
            "lab_id": self.lab_id,
            "access_bps": self.access_bps,
            "mirrors": {
                m.name: {"addr": m.addr, "kind": m.kind, "http": m.http,
                         "rate_bps": m.rate_bps, "bottleneck": m.bottleneck,
                         "rtt_ms": spec.rtt_ms, "loss": spec.loss}
                for m, spec in zip(self.mirrors, self._specs, strict=True)
            },
            "bottlenecks": {b.name: {"rate_bps": b.rate_bps, "mirrors": b.mirrors}
                            for b in self.bottlenecks},
            "events": [e.__dict__ for e in self.events],
        }

    # --- cleanup ---------------------------------------------------------------------------
    def close(self) -> None:
        """Remove everything this lab created; safe to call more than once, from any thread."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            timers = list(self._timers)
        for timer in timers:
            timer.cancel()
        errors: list[str] = []
        groups = list(self._freeze_groups.values())
        for group in groups:  # (a frozen process takes its SIGKILL only once thawed)
            try:
                group.set_frozen(False)
            except (LabError, OSError) as exc:
                errors.append(f"thaw {group.path}: {exc}")
        for ns in reversed(self._namespaces):
            try:
                netns.kill_namespace_processes(ns)
            except LabError as exc:
                errors.append(str(exc))
        for proc in [*self._procs, *(p for m in self.mirrors for p in m.procs)]:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
        for m in self.mirrors:
            m.alive = False
        for ns in reversed(self._namespaces):
            try:
                netns.delete_namespace(ns)
            except LabError as exc:
                errors.append(str(exc))
        for group in groups:
            try:
                group.remove()
            except (LabError, OSError) as exc:
                errors.append(f"remove {group.path}: {exc}")
        if self.workdir != Path() and self.workdir.is_dir():
            shutil.rmtree(self.workdir, ignore_errors=True)
        left = [n for n in netns.list_namespaces() if n in self._namespaces]
        if self._record is not None and not left:
            self._record.remove()
        _unregister(self)
        if left or errors:
            raise LabError(f"lab {self.lab_id} cleanup incomplete: namespaces left {left}; "
                           f"{'; '.join(errors)} (run `python -m pftp_lab.cleanup`)")
