"""A small private network-namespace topology for the shared-congestion benchmark.

    mirror m0 ─┐
    mirror m1 ─┴─ router b0 ══(tbf, shared link B)══ client
    mirror m2 ─── router b1 ══(tbf, own link)═══════ client
    cross  x0 ─── router b0   (iperf3 cross traffic over link B)

Every mirror sits behind one bottleneck router; a router with one mirror is a
separately congested path, a router with several is a shared congested link
(paper 001 figs 12-15). The client namespace has one veth per router, so the
client's own access link is not a bottleneck (as in the paper's test bed,
where link A carries four sessions). Namespaces are cg<tag>-c, cg<tag>-b<j>,
cg<tag>-m<i>, cg<tag>-x<j>; everything is deleted by close(), also on errors.

Each mirror runs ``python -m bench.congestion_topology serve``: a TCP sender
that answers a line "offset length\\n" with ``length`` bytes (a range server,
like FTP REST+RETR stripped to the bone).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SERVE_PORT = 5001
CROSS_PORT = 5201
HTTP_PORT = 80
MTU_BYTES = 1514


def sh(argv: Sequence[str], *, check: bool = True, timeout: float = 30.0) -> str:
    res = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)
    if check and res.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({res.returncode}): {res.stderr.strip()}")
    return res.stdout


def require_root() -> None:
    if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("tc") is None:
        raise RuntimeError("the congestion topology needs root, ip and tc")


@dataclass(frozen=True)
class Link:
    """A bottleneck router: its link to the client is shaped to ``rate_bps``."""

    rate_bps: int
    mirrors: int = 1
    cross_traffic: bool = False


@dataclass
class Topology:
    """Build with ``Topology(links).start()``; use as a context manager."""

    links: Sequence[Link]
    queue_ms: float = 40.0
    http_root: Path | None = None  # also serve this directory over HTTP (nginx, port 80)
    tag: str = field(default_factory=lambda: secrets.token_hex(2))
    prefix: str = "cg"  # namespace prefix: each helper/test suite owns its own
    procs: list[subprocess.Popen] = field(default_factory=list)
    namespaces: list[str] = field(default_factory=list)
    mirror_addrs: list[str] = field(default_factory=list)  # index = mirror number
    mirror_link: list[int] = field(default_factory=list)  # mirror -> link index
    cross_addrs: dict[int, str] = field(default_factory=dict)

    @property
    def client_ns(self) -> str:
        return f"{self.prefix}{self.tag}-c"

    def _ns(self, name: str) -> str:
        ns = f"{self.prefix}{self.tag}-{name}"
        sh(["ip", "netns", "add", ns])
        self.namespaces.append(ns)
        sh(["ip", "-n", ns, "link", "set", "lo", "up"])
        return ns

    def _veth(self, ns_a: str, dev_a: str, ns_b: str, dev_b: str) -> None:
        sh(["ip", "-n", ns_a, "link", "add", dev_a, "type", "veth", "peer", "name", dev_b,
            "netns", ns_b])
        for ns, dev in ((ns_a, dev_a), (ns_b, dev_b)):
            # One skb per MSS segment: with TSO/GSO the kernel would hand tbf 64 kB
            # super-packets and the inter-arrival times would be those of bursts.
            sh(["ip", "-n", ns, "link", "set", dev, "gso_max_size", "1500", "gso_max_segs", "1"],
               check=False)
            sh(["ip", "-n", ns, "link", "set", dev, "up"])

    def start(self) -> Topology:
        require_root()
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def _build(self) -> None:
        client = self._ns("c")
        mirror_no = 0
        for j, link in enumerate(self.links):
            router = self._ns(f"b{j}")
            sh(["ip", "netns", "exec", router, "sysctl", "-qw", "net.ipv4.ip_forward=1"])
            self._veth(client, f"to-b{j}", router, "to-c")
            sh(["ip", "-n", client, "addr", "add", f"10.88.{j}.1/30", "dev", f"to-b{j}"])
            sh(["ip", "-n", router, "addr", "add", f"10.88.{j}.2/30", "dev", "to-c"])
            sh(["ip", "-n", router, "route", "add", "default", "via", f"10.88.{j}.1"])
            self.shape(j, link.rate_bps)
            leaves = [(f"m{mirror_no + k}", mirror_no + k) for k in range(link.mirrors)]
            if link.cross_traffic:
                leaves.append((f"x{j}", None))
            for k, (name, mno) in enumerate(leaves):
                ns = self._ns(name)
                sub = 10 * j + k
                self._veth(router, f"to-{name}", ns, "to-b")
                sh(["ip", "-n", router, "addr", "add", f"10.89.{sub}.1/30", "dev", f"to-{name}"])
                sh(["ip", "-n", ns, "addr", "add", f"10.89.{sub}.2/30", "dev", "to-b"])
                sh(["ip", "-n", ns, "route", "add", "default", "via", f"10.89.{sub}.1"])
                sh(["ip", "-n", client, "route", "add", f"10.89.{sub}.0/30", "via",
                    f"10.88.{j}.2"])
                addr = f"10.89.{sub}.2"
                if mno is None:
                    self.cross_addrs[j] = addr
                else:
                    self.mirror_addrs.append(addr)
                    self.mirror_link.append(j)
                    self._spawn(ns, [sys.executable, "-m", "bench.congestion_topology", "serve",
                                     "--port", str(SERVE_PORT)])
                    if self.http_root is not None:
                        self._spawn(ns, ["nginx", "-c", str(self._nginx_conf(name))])
            mirror_no += link.mirrors
        for addr in self.mirror_addrs:
            self._wait_port(addr, SERVE_PORT)
            if self.http_root is not None:
                self._wait_port(addr, HTTP_PORT)

    def _nginx_conf(self, name: str) -> Path:
        assert self.http_root is not None
        run = self.http_root.parent / f"nginx-{name}"
        run.mkdir(parents=True, exist_ok=True)
        conf = run / "nginx.conf"
        conf.write_text(
            "daemon off; worker_processes 1; user root;\n"
            f"pid {run}/nginx.pid; error_log {run}/error.log;\n"
            "events { worker_connections 64; }\n"
            "http { access_log off; sendfile on; tcp_nopush off;\n"
            f"  client_body_temp_path {run}/body; proxy_temp_path {run}/proxy;\n"
            f"  fastcgi_temp_path {run}/fcgi; uwsgi_temp_path {run}/uwsgi;\n"
            f"  scgi_temp_path {run}/scgi;\n"
            f"  server {{ listen {HTTP_PORT}; root {self.http_root}; }} }}\n"
        )
        return conf

    def shape(self, link: int, rate_bps: int) -> None:
        """(Re)shape link ``link``: tbf with a small burst (a few packets, so that
        packets leave a busy link one transmission time apart) and a queue of
        ``queue_ms``."""
        router = f"{self.prefix}{self.tag}-b{link}"
        burst = max(4 * MTU_BYTES, rate_bps // 8 // 1000)  # >= 1 ms worth
        limit = max(int(rate_bps / 8 * self.queue_ms / 1000), 8 * MTU_BYTES)
        sh(["tc", "-n", router, "qdisc", "replace", "dev", "to-c", "root", "tbf", "rate",
            f"{int(rate_bps)}bit", "burst", str(burst), "limit", str(limit)])

    def _spawn(self, ns: str, argv: Sequence[str], **kw) -> subprocess.Popen:
        p = subprocess.Popen(["ip", "netns", "exec", ns, *argv], cwd=REPO,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True, **kw)
        self.procs.append(p)
        return p

    def _wait_port(self, addr: str, port: int, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            res = subprocess.run(["ip", "netns", "exec", self.client_ns, sys.executable, "-c",
                                  f"import socket; socket.create_connection(('{addr}', {port}), 2)"
                                  ".close()"], capture_output=True, timeout=30)
            if res.returncode == 0:
                return
            time.sleep(0.2)
        raise RuntimeError(f"mirror {addr}:{port} did not come up")

    def start_cross_traffic(self, seconds: float) -> list[subprocess.Popen]:
        """iperf3 from each link's cross host to the client, over the shared link."""
        if not self.cross_addrs:
            return []
        started = [self._spawn(self.client_ns, ["iperf3", "-s", "-p", str(CROSS_PORT)])]
        time.sleep(0.5)
        for j, addr in self.cross_addrs.items():
            started.append(self._spawn(f"{self.prefix}{self.tag}-x{j}", [
                "iperf3", "-c", f"10.88.{j}.1", "-p", str(CROSS_PORT),
                "-t", str(max(1, round(seconds))), "-B", addr]))
        return started

    def run_in_client(self, argv: Sequence[str], timeout: float) -> subprocess.CompletedProcess:
        return subprocess.run(["ip", "netns", "exec", self.client_ns, *argv], cwd=REPO,
                              capture_output=True, text=True, timeout=timeout)

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
        for p in self.procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                print(f"process {p.pid} did not exit", file=sys.stderr)
        self.procs.clear()
        for ns in reversed(self.namespaces):
            out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
            for pid in out.stdout.split():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        self.namespaces.clear()

    def __enter__(self) -> Topology:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- the mirror side: a range sender ----------------------------------------------------------
def _serve_one(conn: socket.socket) -> None:
    chunk = b"\0" * 65536
    try:
        line = b""
        while not line.endswith(b"\n") and len(line) < 100:
            part = conn.recv(100)
            if not part:
                return
            line += part
        _offset, length = (int(x) for x in line.split())
        while length > 0:
            n = conn.send(chunk[: min(length, len(chunk))])
            length -= n
    except (OSError, ValueError):
        return
    finally:
        conn.close()


def serve(port: int) -> None:
    srv = socket.create_server(("0.0.0.0", port), backlog=64, reuse_port=True)
    while True:
        conn, _ = srv.accept()
        threading.Thread(target=_serve_one, args=(conn,), daemon=True).start()


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--port", type=int, default=SERVE_PORT)
    args = ap.parse_args(argv)
    if args.cmd == "serve":
        serve(args.port)


if __name__ == "__main__":
    main()
