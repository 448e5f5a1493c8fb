"""Configs and command lines of the real servers a lab mirror runs: vsftpd, pure-ftpd, proftpd,
nginx.

Pure functions: each returns the argv to run inside the mirror's namespace (after writing its
config under `conf_dir`). Starting, tracking and killing the processes is topology.py's job.
"""

from __future__ import annotations

import grp
import os
import pwd
import shlex
import subprocess
from pathlib import Path

from .netns import LabError, find_tool

FTP_KINDS = ("vsftpd", "pure-ftpd", "proftpd")
PASV_PORTS = (30000, 30999)

# Debian's vsftpd, pure-ftpd and proftpd-core all declare Conflicts: ftp-server, so installing
# one with apt removes the others (and the `ftp` user); scripts/install-system-deps.sh unpacks
# the .debs under /opt/pftp-lab/<package> instead, which is looked at first.
PROFTPD_PACKAGE = "proftpd-core"
LAB_OPT = Path(os.environ.get("PFTP_LAB_OPT", "/opt/pftp-lab"))


def _tool(name: str, package: str | None = None) -> str:
    unpacked = LAB_OPT / (package or name) / "usr" / "sbin" / name
    path = find_tool(name, str(unpacked), prefer_extra=True)
    if path is None:
        raise LabError(
            f"`{name}` is not installed; run `make system-deps` (scripts/install-system-deps.sh)"
        )
    return path


def _with_anon_home(conf_dir: Path, root: Path, server: list[str]) -> list[str]:
    """Run `server` under a shell that first bind-mounts a copy of /etc/passwd whose `ftp`
    entry (uid nobody) has `root` as its home.

    Both FTP servers serve the home of the system user `ftp` to anonymous users (vsftpd
    chdirs into it even with anon_root), and that user comes and goes with Debian's FTP
    packages. `ip netns exec` gives each command a private (slave) mount namespace, so the
    bind is seen by this server only and goes away with it.
    """
    passwd = conf_dir / "passwd"
    host = [ln for ln in Path("/etc/passwd").read_text().splitlines()
            if ln and not ln.startswith("ftp:")]
    anon = f"ftp:x:65534:65534:lab anonymous:{root}:/usr/sbin/nologin"
    passwd.write_text("\n".join([*host, anon]) + "\n")
    passwd.chmod(0o644)
    script = (
        f"mount --bind {shlex.quote(str(passwd))} /etc/passwd && exec "
        + " ".join(shlex.quote(a) for a in server)
    )
    (conf_dir / f"{Path(server[0]).name}.sh").write_text(script + "\n")
    return ["/bin/sh", "-c", script]


def vsftpd_argv(
    conf_dir: Path, root: Path, addr: str, port: int = 21, conn_rate_Bps: int | None = None,
    max_per_ip: int | None = None,
) -> list[str]:
    """vsftpd serving `root` anonymously, read-only, in the foreground.

    isolate/isolate_network=NO keep every session process in the mirror's namespace so a
    kill by namespace pids really stops transfers (DESIGN.md, 'lab' traps).
    """
    empty = conf_dir / "vsftpd-empty"
    empty.mkdir(mode=0o755, exist_ok=True)
    conf = conf_dir / "vsftpd.conf"
    lines = {
        "listen": "YES",
        "listen_ipv6": "NO",
        "listen_address": addr,
        "listen_port": str(port),
        "background": "NO",
        "anonymous_enable": "YES",
        "local_enable": "NO",
        "write_enable": "NO",
        "anon_root": str(root),
        "no_anon_password": "YES",
        "ftp_username": "ftp",
        "secure_chroot_dir": str(empty),
        "isolate": "NO",
        "isolate_network": "NO",
        "seccomp_sandbox": "NO",
        "pasv_enable": "YES",
        "pasv_min_port": str(PASV_PORTS[0]),
        "pasv_max_port": str(PASV_PORTS[1]),
        "port_enable": "YES",
        "connect_from_port_20": "NO",
        "max_clients": "0",
        "max_per_ip": str(max_per_ip or 0),
        "idle_session_timeout": "120",
        "data_connection_timeout": "120",
        "xferlog_enable": "NO",
        "vsftpd_log_file": str(conf_dir / "vsftpd.log"),
        "dirmessage_enable": "NO",
        "use_localtime": "NO",
    }
    if conn_rate_Bps:
        lines["anon_max_rate"] = str(int(conn_rate_Bps))
    conf.write_text("".join(f"{k}={v}\n" for k, v in lines.items()))
    conf.chmod(0o600)
    return _with_anon_home(conf_dir, root, [_tool("vsftpd"), str(conf)])


def vsftpd_plain_conf(
    root: Path, work: Path, host: str, port: int, pasv: tuple[int, int]
) -> dict[str, object]:
    """vsftpd settings for a server outside the lab's namespaces (tests, loopback bench):
    anonymous and read-only from `root`, no privilege switch (we may be root and the `ftp`
    user may not exist; vsftpd still looks ftp_username up, and nobody always exists),
    sessions kept in our network namespace and process tree. Write it with
    ``"".join(f"{k}={v}\\n" ...)``; `work / "empty"` must exist."""
    v6 = ":" in host
    return {
        "listen": "NO" if v6 else "YES",
        "listen_ipv6": "YES" if v6 else "NO",
        ("listen_address6" if v6 else "listen_address"): host,
        "listen_port": port,
        "background": "NO",
        "anonymous_enable": "YES",
        "local_enable": "NO",
        "write_enable": "NO",
        "anon_root": root,
        "no_anon_password": "YES",
        "run_as_launching_user": "YES",
        "ftp_username": "nobody",
        "secure_chroot_dir": work / "empty",
        "pasv_enable": "YES",
        "pasv_min_port": pasv[0],
        "pasv_max_port": pasv[1],
        "isolate": "NO",
        "isolate_network": "NO",
        "seccomp_sandbox": "NO",
        "xferlog_enable": "NO",
        "dirmessage_enable": "NO",
        "max_clients": 200,
        "max_per_ip": 200,
        "pam_service_name": "ftp",
        "vsftpd_log_file": work / "vsftpd.log",
    }


def pureftpd_argv(
    conf_dir: Path, root: Path, addr: str, port: int = 21, conn_rate_Bps: int | None = None,
    max_per_ip: int | None = None,
) -> list[str]:
    """pure-ftpd serving `root` anonymously, read-only, in the foreground."""
    server = [
        _tool("pure-ftpd"),
        "--bind", f"{addr},{port}",
        "--anonymousonly",
        "--anonymouscantupload",
        "--passiveportrange", f"{PASV_PORTS[0]}:{PASV_PORTS[1]}",
        "--maxclientsnumber", "500",
        "--maxclientsperip", str(max_per_ip or 500),
        "--dontresolve",
        "--maxload", "1000",
        "--pidfile", str(conf_dir / "pure-ftpd.pid"),
    ]
    if conn_rate_Bps:  # KB/s per session
        server += ["--anonymousbandwidth", str(max(1, round(conn_rate_Bps / 1024)))]
    return _with_anon_home(conf_dir, root, server)


def pureftpd_user_argv(
    binary: str, pure_pw: str, work: Path, root: Path, addr: str, port: int,
    user: str, password: str, pasv: tuple[int, int], extra: list[str] | None = None,
) -> list[str]:
    """pure-ftpd with one virtual user chrooted to `root` (anonymous pure-ftpd needs
    the system user `ftp`, which comes and goes with Debian's FTP packages). Writes
    the password file and its database under `work`; needs openssl."""
    # A cheap SHA-512 crypt hash (pure-pw's default argon2 costs seconds per login).
    hashed = subprocess.run(
        ["openssl", "passwd", "-6", "-stdin"],
        input=password, capture_output=True, text=True, check=True,
    ).stdout.strip()
    passwd = work / "pureftpd.passwd"
    # Home ending in "/./" chroots the user there; uid/gid of nobody.
    passwd.write_text(f"{user}:{hashed}:65534:65534::{root}/./::::::::::::\n")
    pdb = work / "pureftpd.pdb"
    subprocess.run([pure_pw, "mkdb", str(pdb), "-f", str(passwd)], check=True,
                   capture_output=True)
    return [
        binary,
        "-S", f"{addr},{port}",
        "-l", f"puredb:{pdb}",
        "-E",  # no anonymous logins
        "-H",  # no reverse DNS
        "-A",  # chroot everyone
        "-p", f"{pasv[0]}:{pasv[1]}",
        "-c", "100",
        "-C", "100",
        "-g", str(work / "pure-ftpd.pid"),
        *(extra or []),
    ]


def proftpd_conf(
    root: Path, work: Path, host: str, port: int, pasv: tuple[int, int],
    extra: dict[str, str] | None = None,
) -> str:
    """proftpd.conf for a standalone server serving `root` anonymously and read-only.

    The <Anonymous> block names its directory, so no system `ftp` user is needed: sessions
    run as nobody, chrooted to `root` (which nobody must be able to read). No PAM, no
    wtmp, no reverse DNS, no mod_delay (it would pad every login by design). `extra`
    adds or replaces top-level directives, e.g. ``{"TransferRate": "RETR 200"}``.
    """
    nobody = pwd.getpwuid(65534).pw_name
    nogroup = grp.getgrgid(65534).gr_name
    v6 = ":" in host
    top = {
        "ServerName": '"pftp lab"',
        "ServerType": "standalone",
        "Port": str(port),
        "DefaultAddress": host,
        "SocketBindTight": "on",
        "UseIPv6": "on" if v6 else "off",
        "User": nobody,
        "Group": nogroup,
        "PidFile": str(work / "proftpd.pid"),
        "ScoreboardFile": str(work / "proftpd.scoreboard"),
        "DelayEngine": "off",
        "WtmpLog": "off",
        "UseReverseDNS": "off",
        "PassivePorts": f"{pasv[0]} {pasv[1]}",
        "MaxInstances": "500",
        "TransferLog": "NONE",
        "SystemLog": str(work / "proftpd.log"),
        "RequireValidShell": "off",
        "AuthPAM": "off",
        "AuthOrder": "mod_auth_unix.c",
        "TimeoutIdle": "120",
        **(extra or {}),
    }
    lines = [f"{k} {v}" for k, v in top.items()]
    lines += [
        f"<Anonymous {root}>",
        f"  User {nobody}",
        f"  Group {nogroup}",
        f"  UserAlias anonymous {nobody}",
        "  RequireValidShell off",
        "  <Limit WRITE>",
        "    DenyAll",
        "  </Limit>",
        "</Anonymous>",
    ]
    return "\n".join(lines) + "\n"


def proftpd_argv(
    conf_dir: Path, root: Path, addr: str, port: int = 21, conn_rate_Bps: int | None = None,
    max_per_ip: int | None = None,
) -> list[str]:
    """proftpd serving `root` anonymously, read-only, in the foreground (-n)."""
    conf = conf_dir / "proftpd.conf"
    extra = {"TransferRate": f"RETR {conn_rate_Bps / 1024:.1f}"} if conn_rate_Bps else {}
    if max_per_ip:
        extra["MaxClientsPerHost"] = str(max_per_ip)
    conf.write_text(proftpd_conf(root, conf_dir, addr, port, PASV_PORTS, extra))
    return [_tool("proftpd", PROFTPD_PACKAGE), "-n", "-q", "-c", str(conf)]


def nginx_argv(
    conf_dir: Path, root: Path, addr: str, port: int = 80, conn_rate_Bps: int | None = None,
    max_per_ip: int | None = None, tls: bool = False,
) -> list[str]:
    """nginx serving `root` over HTTP (Range supported), in the foreground; with
    ``max_per_ip``, at most that many requests at once from one address (limit_conn:
    the others are answered 503, as a mirror's admin sets it); with ``tls``, also
    over HTTPS on 443 with a self-signed certificate for ``addr`` (``cert.pem`` in
    ``conf_dir``: a client trusts it as its own CA)."""
    limit = f"limit_rate {int(conn_rate_Bps)};" if conn_rate_Bps else ""
    zone = ""
    if max_per_ip:
        zone = "limit_conn_zone $binary_remote_addr zone=perip:1m;"
        limit += f" limit_conn perip {int(max_per_ip)};"
    binary = _tool("nginx")
    tmp = conf_dir / "nginx-tmp"
    tmp.mkdir(exist_ok=True)
    https = ""
    if tls:
        cert, key = conf_dir / "cert.pem", conf_dir / "key.pem"
        # (once per mirror: a server started again, after a kill, keeps the
        # certificate its clients were given to trust)
        if not cert.exists():
            subprocess.run(
                [_tool("openssl"), "req", "-x509", "-newkey", "ec", "-pkeyopt",
                 "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2", "-keyout", str(key),
                 "-out", str(cert), "-subj", f"/CN={addr}",
                 "-addext", f"subjectAltName=IP:{addr}"],
                check=True, capture_output=True,
            )
        # (TLS 1.3 as mirrors serve it now: nginx before 1.23.4 offers up to 1.2
        # unless told, and 1.2's handshake takes a round trip more)
        https = (f"server {{ listen {addr}:443 ssl; ssl_protocols TLSv1.2 TLSv1.3; "
                 f"ssl_certificate {cert}; ssl_certificate_key {key}; root {root}; "
                 f"location / {{ {limit} }} }}")
    conf = conf_dir / "nginx.conf"
    conf.write_text(
        f"""daemon off;
master_process on;
worker_processes 1;
user root root;
pid {conf_dir / 'nginx.pid'};
error_log {conf_dir / 'nginx-error.log'} warn;
events {{ worker_connections 512; }}
http {{
    access_log off;
    sendfile on;
    tcp_nopush on;
    keepalive_timeout 30;
    default_type application/octet-stream;
    {zone}
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    server {{
        listen {addr}:{port};
        root {root};
        location / {{ {limit} }}
    }}
    {https}
}}
"""
    )
    return [binary, "-p", str(conf_dir), "-e", str(conf_dir / "nginx-error.log"), "-c", str(conf)]


def ftp_argv(
    kind: str, conf_dir: Path, root: Path, addr: str, port: int = 21,
    conn_rate_Bps: int | None = None, max_per_ip: int | None = None,
) -> list[str]:
    if kind == "vsftpd":
        return vsftpd_argv(conf_dir, root, addr, port, conn_rate_Bps, max_per_ip)
    if kind == "pure-ftpd":
        return pureftpd_argv(conf_dir, root, addr, port, conn_rate_Bps, max_per_ip)
    if kind == "proftpd":
        return proftpd_argv(conf_dir, root, addr, port, conn_rate_Bps, max_per_ip)
    raise LabError(f"unknown FTP server kind {kind!r}; choose one of {', '.join(FTP_KINDS)}")
