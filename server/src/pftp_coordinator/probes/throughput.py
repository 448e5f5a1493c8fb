"""Throughput probe: a short ranged read over the mirror's own protocol.

FTP: ``REST offset`` + ``RETR`` and hang up after ``size`` bytes; HTTP(S): a
``Range: bytes=offset-(offset+size-1)`` GET. What this measures is what a client
will get (server, path, TCP), so it is the best single predictor of download
speed; it costs ``size`` bytes per probe (see notes/data.md for the fraction of
traffic). Deliberately independent of pftp_client: the coordinator must not
depend on the client package.
"""

from __future__ import annotations

import ftplib
import logging
import time
from dataclasses import dataclass
from urllib.parse import unquote, urljoin, urlsplit

import httpx

from pftp_coordinator.ftp_control import finish_transfer, read_reply, reset_close, url_path

CHUNK = 64 * 1024
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ThroughputResult:
    method: str  # "ftp-range" | "http-range"
    nbytes: int
    seconds: float  # request sent -> last byte
    first_byte_s: float  # request sent -> first byte (includes one RTT + server time)
    bps: float  # bits/s over the data phase (first byte -> last byte)


class ProbeError(Exception):
    """A probe that could not be made; the message says why."""


def join_url(base_url: str, path: str) -> str:
    """Replica path (relative to the mirror's base URL) -> absolute URL."""
    base = base_url if base_url.endswith("/") else base_url + "/"
    return urljoin(base, path.lstrip("/"))


def data_phase_bps(nbytes: int, first_chunk: int, t_first: float, t_last: float) -> float:
    """Pure: rate over the bytes after the first chunk, which arrived with the
    first-byte latency; falls back to the whole transfer when it was one chunk."""
    span = t_last - t_first
    if span <= 0 or nbytes <= first_chunk:
        return float("inf") if span <= 0 else nbytes * 8 / span
    return (nbytes - first_chunk) * 8 / span


def _finish(
    method: str, nbytes: int, first_chunk: int, t0: float, t_first: float | None, t_last: float
) -> ThroughputResult:
    if t_first is None or nbytes == 0:
        raise ProbeError(f"{method}: no data received")
    bps = data_phase_bps(nbytes, first_chunk, t_first, t_last)
    if bps == float("inf"):
        bps = nbytes * 8 / max(t_last - t0, 1e-6)
    return ThroughputResult(method, nbytes, t_last - t0, t_first - t0, bps)


def ftp_ranged_read(
    url: str, size: int, *, offset: int = 0, timeout_s: float = 10.0
) -> ThroughputResult:
    """REST+RETR of exactly ``size`` bytes at ``offset`` from
    ftp://[user[:pass]@]host[:port]/path (fewer only when the file ends first).

    The data connection is reset as soon as ``size`` bytes are in; the server's
    reply to that hang-up is awaited, then the session is ended with QUIT (see
    ``ftp_control.finish_transfer``: vsftpd, pure-ftpd and pyftpdlib each answer
    a hang-up differently). When the server ends the data first, its final reply
    to RETR must be a 2xx, else the read failed.
    """
    parts = urlsplit(url)
    if parts.scheme != "ftp" or not parts.hostname:
        raise ProbeError(f"not an ftp URL: {url!r}")
    if size <= 0:
        raise ProbeError(f"ftp-range: size must be positive, got {size}")
    ftp = ftplib.FTP(timeout=timeout_s)
    deadline = time.monotonic() + timeout_s
    try:
        ftp.connect(parts.hostname, parts.port or 21)
        ftp.login(unquote(parts.username or "anonymous"), unquote(parts.password or "pftp@"))
        ftp.voidcmd("TYPE I")
        t0 = time.perf_counter()
        conn = ftp.transfercmd(f"RETR {url_path(parts.path)}", rest=offset or None)
        nbytes = first_chunk = 0
        t_first: float | None = None
        t_last = t0
        server_ended = False
        try:
            conn.settimeout(timeout_s)
            while nbytes < size:
                if time.monotonic() > deadline:
                    raise ProbeError(f"ftp-range: timed out after {nbytes} bytes")
                data = conn.recv(min(CHUNK, size - nbytes))
                if not data:
                    server_ended = True
                    break
                t_last = time.perf_counter()
                if t_first is None:
                    t_first, first_chunk = t_last, len(data)
                nbytes += len(data)
        finally:
            reset_close(conn)
        result = _finish("ftp-range", nbytes, first_chunk, t0, t_first, t_last)
        # Closing the session gets a few seconds beyond the probe's own budget:
        # the measurement is already taken, and a slow goodbye is not a failure.
        end_by = max(deadline, time.monotonic() + min(5.0, timeout_s))
        if server_ended:
            final = _final_reply(ftp, end_by)
            if not final.startswith("2"):
                raise ProbeError(f"ftp-range: transfer failed after {nbytes} bytes: {final}")
        try:
            replies = finish_transfer(ftp, deadline=end_by, transfer_open=not server_ended)
            log.debug("ftp-range %s: session ended: %s", parts.hostname, replies)
        except (OSError, EOFError, ftplib.Error) as exc:
            log.info("ftp-range %s: no clean QUIT after the read: %s", parts.hostname, exc)
        return result
    except (OSError, EOFError, ftplib.Error) as exc:
        raise ProbeError(f"ftp-range {parts.hostname}: {exc}") from exc
    finally:
        ftp.close()


def _final_reply(ftp: ftplib.FTP, deadline: float) -> str:
    """The completion reply of a transfer the server ended: the first non-1xx
    reply (pure-ftpd may send more 150 lines after the data)."""
    for _ in range(10):
        reply = read_reply(ftp, deadline)
        if not reply:
            raise EOFError("server closed the control connection after the transfer")
        if not reply.startswith("1"):
            return reply
    raise ftplib.error_proto("too many preliminary replies after the transfer")


def http_ranged_read(
    url: str, size: int, *, offset: int = 0, timeout_s: float = 10.0, verify: bool = True
) -> ThroughputResult:
    """GET with ``Range`` of ``size`` bytes at ``offset``; a server without range
    support (200) is read for ``size`` bytes only."""
    headers = {
        "Range": f"bytes={offset}-{offset + size - 1}",
        "User-Agent": "pftp-coordinator-probe",
    }
    deadline = time.monotonic() + timeout_s
    try:
        with httpx.Client(timeout=timeout_s, verify=verify, follow_redirects=True) as client:
            t0 = time.perf_counter()
            with client.stream("GET", url, headers=headers) as resp:
                if resp.status_code not in (200, 206):
                    raise ProbeError(f"http-range {url}: HTTP {resp.status_code}")
                nbytes = first_chunk = 0
                t_first: float | None = None
                t_last = t0
                for data in resp.iter_raw(CHUNK):
                    if time.monotonic() > deadline:
                        raise ProbeError(f"http-range: timed out after {nbytes} bytes")
                    t_last = time.perf_counter()
                    if t_first is None:
                        t_first, first_chunk = t_last, len(data)
                    nbytes += len(data)
                    if nbytes >= size:
                        break
        return _finish(
            "http-range", min(nbytes, size) if nbytes else 0, first_chunk, t0, t_first, t_last
        )
    except (TimeoutError, httpx.HTTPError, OSError) as exc:
        raise ProbeError(f"http-range {url}: {exc}") from exc


def ranged_read(
    url: str, size: int, *, offset: int = 0, timeout_s: float = 10.0
) -> ThroughputResult:
    scheme = urlsplit(url).scheme
    if scheme == "ftp":
        return ftp_ranged_read(url, size, offset=offset, timeout_s=timeout_s)
    if scheme in ("http", "https"):
        return http_ranged_read(url, size, offset=offset, timeout_s=timeout_s)
    raise ProbeError(f"unsupported protocol {scheme!r} in {url!r}")
