"""FTP scan: one connection per mirror, each directory listed once (MLSD, else LIST)."""

from __future__ import annotations

import ftplib
import logging
import posixpath
from collections import defaultdict
from collections.abc import Iterable
from urllib.parse import unquote, urlsplit

from pftp_coordinator.ftp_control import url_path
from pftp_coordinator.scans.listing import parse_list_line

log = logging.getLogger(__name__)

Seen = dict[str, int | None]  # replica path -> size (None: present, size unknown); absent = missing


def _list_dir(
    ftp: ftplib.FTP, directory: str, use_mlsd: list[bool]
) -> dict[str, int | None] | None:
    """name -> size of the plain files in ``directory``; None when it does not exist."""
    if use_mlsd[0]:
        try:
            out: dict[str, int | None] = {}
            for name, facts in ftp.mlsd(directory, facts=["type", "size"]):
                if facts.get("type", "file") == "file":
                    out[name] = int(facts["size"]) if "size" in facts else None
            return out
        except ftplib.error_perm as exc:
            code = str(exc)[:3]
            if code == "550":
                return None
            # 500/501/502: MLSD not understood; LIST from now on for this server.
            log.info("MLSD refused (%s), falling back to LIST", exc)
            use_mlsd[0] = False
    lines: list[str] = []
    try:
        ftp.retrlines(f"LIST {directory}" if directory else "LIST", lines.append)
    except ftplib.error_perm as exc:
        if str(exc)[:3] == "550":
            return None
        raise
    out = {}
    for line in lines:
        parsed = parse_list_line(line)
        if parsed and parsed[2]:
            out[parsed[0]] = parsed[1]
    return out


def scan_ftp(base_url: str, paths: Iterable[str], *, timeout_s: float = 30.0) -> Seen:
    """Sizes of the replica ``paths`` (relative to ``base_url``) found on the server."""
    parts = urlsplit(base_url)
    if parts.scheme != "ftp" or not parts.hostname:
        raise ValueError(f"not an ftp URL: {base_url!r}")
    # Relative to the login directory (RFC 1738 3.2), like the probe and the client:
    # "" lists the login directory itself.
    root = url_path(parts.path)
    by_dir: dict[str, list[str]] = defaultdict(list)
    for p in paths:
        full = posixpath.join(root, p.lstrip("/"))
        by_dir[posixpath.dirname(full)].append(p)
    seen: Seen = {}
    ftp = ftplib.FTP(timeout=timeout_s)
    try:
        ftp.connect(parts.hostname, parts.port or 21)
        ftp.login(unquote(parts.username or "anonymous"), unquote(parts.password or "pftp@"))
        use_mlsd = [True]
        for directory, rel_paths in sorted(by_dir.items()):
            listing = _list_dir(ftp, directory, use_mlsd)
            if listing is None:
                continue
            for p in rel_paths:
                name = posixpath.basename(p)
                if name in listing:
                    seen[p] = listing[name]
        try:
            ftp.quit()
        except (OSError, EOFError, ftplib.Error) as exc:
            log.debug("QUIT to %s failed: %s", parts.hostname, exc)
    finally:
        ftp.close()
    return seen
