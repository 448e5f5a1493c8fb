"""One probe round of one mirror: measure, store path_probes rows, update state.

Network I/O runs with no database session open; rows are written after each
attempt. A failed attempt is retried quickly (``retry_pause_s``) until it
succeeds or ``down_after_failures`` consecutive failures mark the mirror down,
so a dead mirror is marked down within one probe interval; the first successful
probe marks it up again.

What counts as failure: the mirror's service did not answer over its own
protocol: the ranged read failed, or (when the mirror has no verified replica to
read from yet) the TCP handshake to its service port failed.

Held connections: when the read looks held below its path's rate by the server
(``throughput.held_reason``), the same file is read over several connections at
once (``parallel_ranged_read``, up to ``probe_max_connections``), after one
connection's read again, both with no other mirror's read beside them (``READS``,
read_gate.py: two mirrors behind one link, probed at once, look held). When they carry
PARALLEL_GAIN times one connection's rate or more, the throughput row records
their aggregate rate and in ``connections`` how many connections that rate needs
(clients are told to open that many, planner.py); else the single read's rate
with connections 1. A failed parallel read is not a failed probe: the single read
succeeded.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from urllib.parse import urlsplit

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from pftp_coordinator import metrics
from pftp_coordinator.active_downloads import ActiveDownloads
from pftp_coordinator.config import Settings
from pftp_coordinator.db import session_scope
from pftp_coordinator.models import File, Mirror, PathProbe, Replica, utcnow
from pftp_coordinator.probes import capacity as capacity_mod
from pftp_coordinator.probes import rtt as rtt_mod
from pftp_coordinator.probes.read_gate import ReadGate
from pftp_coordinator.probes.throughput import (
    ParallelResult,
    ProbeError,
    ThroughputResult,
    held_reason,
    join_url,
    paced_bps,
    parallel_ranged_read,
    ranged_read,
)

log = logging.getLogger(__name__)

PROTOCOL_PREFERENCE = ("ftp", "http", "https")
DEFAULT_PORTS = {"ftp": 21, "http": 80, "https": 443}
RTT_SAMPLES = 5
# Several connections must carry this much more than one before clients are told
# to open several: less is within what one probe to the next varies.
PARALLEL_GAIN = 1.4
# With only the capacity's word for it, each of the connections must carry this share
# of what one carried alone (gain_needed).
SCALING = 0.75
# Connections told: what the aggregate needs at one connection's rate, with this
# much to spare. The single read is often the faster (a shaper's bucket lets its
# first bytes through at line rate: lab, 12.7 Mbit/s for a 10 Mbit/s limit, whose
# four connections filled 38 of 40 Mbit/s and rated "3"); one connection more
# than the path needs costs a client nothing, one fewer a trial of its own.
CONNECTION_SLACK = 1.25
# A parallel read whose connections each carried this share of the server's pace
# (paced_bps) or more is read again over twice as many, up to probe_max_connections.
PACE_KEPT = 0.85
# Every throughput read of this process passes it (read_gate.py): a mirror's
# parallel read and its baseline run with no other mirror's read beside them.
READS = ReadGate()


@dataclass(frozen=True)
class ProbeTarget:
    """What the prober needs to know about a mirror, read before any network I/O."""

    mirror_id: int
    name: str
    protocol: str
    host: str
    port: int
    read_url: str | None  # a replica to read from, None when none is known yet
    read_size: int
    read_max: int = 0  # how far the read may go while the path is in slow start
    file_size: int = 0  # of the file read (where parallel reads may start)


@dataclass
class ProbeOutcome:
    mirror: str
    ok: bool
    state: str
    attempts: int
    rows: list[dict] = field(default_factory=list)


def mirror_by_name(session: Session, name: str) -> Mirror:
    mirror = session.scalar(select(Mirror).where(Mirror.name == name))
    if mirror is None:
        raise LookupError(f"no mirror named {name!r}")
    return mirror


def load_target(
    session: Session, mirror_id: int, read_size: int, read_max: int = 0
) -> ProbeTarget | None:
    """None when the mirror is unknown, disabled or has no URL."""
    mirror = session.get(Mirror, mirror_id)
    if mirror is None or not mirror.enabled or not mirror.urls:
        return None
    urls = sorted(
        mirror.urls,
        key=lambda u: (
            PROTOCOL_PREFERENCE.index(u.protocol) if u.protocol in PROTOCOL_PREFERENCE else 99
        ),
    )
    url = urls[0]
    parts = urlsplit(url.base_url)
    if not parts.hostname:
        raise ValueError(f"mirror {mirror.name}: base URL {url.base_url!r} has no host")
    # Read from the biggest replica whose size matched at the last scan (or not yet scanned).
    row = session.execute(
        select(Replica.path, File.size)
        .join(File, File.id == Replica.file_id)
        .where(
            Replica.mirror_id == mirror_id,
            Replica.present.is_(True),
            File.size > 0,
            (Replica.size_seen.is_(None)) | (Replica.size_seen == File.size),
        )
        .order_by(File.size.desc())
        .limit(1)
    ).first()
    read_url = join_url(url.base_url, row.path) if row else None
    return ProbeTarget(
        mirror_id=mirror.id,
        name=mirror.name,
        protocol=url.protocol,
        host=parts.hostname,
        port=parts.port or DEFAULT_PORTS.get(url.protocol, 21),
        read_url=read_url,
        read_size=min(read_size, row.size) if row else 0,
        read_max=min(read_max, row.size) if row else 0,
        file_size=row.size if row else 0,
    )


def parallel_connections(n: int, capacity_bps: float | None, single_bps: float) -> int:
    """Pure: how many connections the parallel read opens: enough to fill the path's
    capacity at one connection's rate when the capacity is known, else ``n`` (the
    configured maximum); at least 2, at most ``n``."""
    want = math.ceil(capacity_bps / single_bps) if capacity_bps and single_bps > 0 else n
    return max(2, min(n, want))


def gain_needed(n: int, by_capacity: bool) -> float:
    """Pure: how many times one connection's rate ``n`` connections must carry
    before clients are told to open several. PARALLEL_GAIN when the sender was seen
    pausing (a server's per-connection limit); when only the path's capacity said
    the read was held, nearly ``n`` times (SCALING each): on a path others load,
    more connections take a larger share of it, not more of the mirror (lab,
    shared-bottleneck: 4 connections against a competitor's 1 carried 1.6x one and
    were told, and the client's 4 then crowded the mirror sharing that link)."""
    return max(PARALLEL_GAIN, SCALING * n) if by_capacity else PARALLEL_GAIN


def connections_needed(
    aggregate_bps: float, single_bps: float, n: int, slack: float = CONNECTION_SLACK
) -> int:
    """Pure: connections that carry ``aggregate_bps`` at ``single_bps`` each, with
    ``slack`` to spare: 2..n."""
    if single_bps <= 0:
        return n
    return max(2, min(n, math.ceil(aggregate_bps / single_bps * slack - 1e-9)))


def _held(tp: ThroughputResult, capacity_bps: float | None) -> tuple[str | None, bool]:
    """Why one connection's read ``tp`` looks held below its path's rate (None: it
    does not), and whether only the path's capacity says so: the sender's own
    pauses are read first, as they say the server holds the connection."""
    why = held_reason(tp.bps, tp.samples, tp.waited)
    if why is not None:
        return why, False
    return held_reason(tp.bps, capacity_bps=capacity_bps), True


def _throughput_row(
    target: ProbeTarget, settings: Settings, tp: ThroughputResult, capacity_bps: float | None
) -> dict:
    """The ok throughput row of a successful single read ``tp``: with a parallel
    read over several connections when the single one looks held (module doc)."""
    single = {"method": tp.method, "ok": True, "throughput_bps": tp.bps, "rtt_s": None}
    max_n = settings.probe_max_connections
    why, by_capacity = _held(tp, capacity_bps)
    if why is None or max_n < 2 or not target.read_url:
        return {**single, "connections": 1}
    with READS.alone():
        # (the first read ran beside other mirrors' probes, maybe over a link one of
        # them shares: read again with none beside it, for the baseline)
        try:
            tp = ranged_read(target.read_url, target.read_size,
                             timeout_s=settings.probe_timeout_s, max_size=target.read_max)
        except ProbeError as exc:
            log.info("probe %s: the read alone failed, keeping the first: %s", target.name, exc)
            which = "first read"
        else:
            which = "read alone"
            single = {**single, "throughput_bps": tp.bps}
            why, by_capacity = _held(tp, capacity_bps)
            if why is None:
                log.info("probe %s: read alone, one connection carried %.1f Mbit/s and "
                         "does not look held", target.name, tp.bps / 1e6)
                return {**single, "connections": 1}
        n = parallel_connections(max_n, capacity_bps, tp.bps)
        log.info("probe %s: one connection looks held, %s (%s): reading over %d "
                 "connections", target.name, which, why, n)
        # The rate the server paces one connection to, when its pauses show it.
        paced = None if by_capacity else paced_bps(tp.samples, tp.waited)
        url = target.read_url

        def read_over(k: int) -> ParallelResult:
            return parallel_ranged_read(url, target.read_size, k,
                                        timeout_s=settings.probe_timeout_s,
                                        max_size=target.read_max,
                                        file_size=target.file_size or None)
        try:
            par = read_over(n)
            # Every connection carried the server's pace: the path may take more
            # (the capacity reading that chose n is often far off on a shaped link:
            # lab, 12 Mbit/s for a 50 Mbit/s one, and 2 connections told).
            while paced and n < max_n and par.bps >= PACE_KEPT * par.connections * paced:
                n = min(max_n, 2 * n)
                log.info("probe %s: %d connections each carried the server's pace: "
                         "reading over %d", target.name, par.connections, n)
                par = read_over(n)
        except ProbeError as exc:
            log.info("probe %s: parallel read failed, keeping the single read: %s",
                     target.name, exc)
            return {**single, "connections": None}  # (unknown: not measured this time)
    if par.errors:
        log.info("probe %s: %d of %d parallel reads failed: %s",
                 target.name, len(par.errors), n, "; ".join(par.errors))
    need = gain_needed(par.connections, by_capacity)
    if par.bps < need * tp.bps:
        log.info(
            "probe %s: %d connections carried %.1f Mbit/s, one %.1f: "
            "below %.1fx, so one connection is what the path gives",
            target.name, par.connections, par.bps / 1e6, tp.bps / 1e6, need,
        )
        return {**single, "connections": 1}
    # The server's pace counts the connections the aggregate needs without the
    # single read's slack (its start: 4 connections of 10 Mbit/s filling a 40 Mbit/s
    # link were told 5-6).
    if paced:
        conns = connections_needed(par.bps, paced, par.connections, slack=1.0)
    else:
        conns = connections_needed(par.bps, tp.bps, par.connections)
    log.info(
        "probe %s: %d connections carried %.1f Mbit/s (%.1fx one connection's %.1f over "
        "%.2f s together%s): clients open %d",
        target.name, par.connections, par.bps / 1e6, par.bps / tp.bps, tp.bps / 1e6,
        par.window_s, f"; the server paces one to {paced / 1e6:.1f}" if paced else "", conns,
    )
    return {**single, "throughput_bps": par.bps, "connections": conns}


def measure(
    target: ProbeTarget,
    settings: Settings,
    *,
    allow_raw: bool | None,
    with_path: bool,
    active: ActiveDownloads | None = None,
) -> tuple[bool, list[dict]]:
    """Network only: returns (service ok, path_probes rows as dicts).

    Not beside the downloads this coordinator assigned to the mirror (``active``,
    active_downloads.py): the first attempt waits up to probe_busy_wait_s for none
    to have run there for probe_quiet_s; if that does not come, the path is measured
    but its throughput is not read this round (the service is then checked by
    connecting, as without a replica). A read that a download began during is not
    kept."""
    rows: list[dict] = []
    timeout = settings.probe_timeout_s
    service_ok = False
    capacity_bps: float | None = None  # the path's, measured in this call
    read_url = target.read_url
    begun = 0
    if read_url and active is not None:
        why = active.wait_idle(
            target.name,
            settings.probe_busy_wait_s if with_path else 0,
            quiet_s=settings.probe_quiet_s,
        )
        if why:
            log.info("probe %s: throughput not read this round: %s", target.name, why)
            read_url = None
        begun = active.begun(target.name)
    if with_path:
        for res in rtt_mod.measure_rtt(
            target.host,
            target.port,
            count=RTT_SAMPLES,
            timeout_s=min(timeout, 3.0),
            allow_raw=allow_raw,
        ):
            err = None
            if not res.ok:
                err = f"{res.refused} of {res.sent} refused" if res.refused else "no answer"
            rows.append(
                {
                    "method": res.method,
                    "ok": res.ok,
                    "rtt_s": res.rtt_median_s,
                    "loss": res.loss,
                    "error": err,
                }
            )
            log.debug(
                "probe %s %s min=%s median=%s loss=%.2f",
                target.name,
                res.method,
                res.rtt_min_s,
                res.rtt_median_s,
                res.loss,
            )
            if res.method in ("tcp-syn", "tcp-connect") and res.ok:
                service_ok = True
        raw = rtt_mod.raw_sockets_allowed() if allow_raw is None else allow_raw
        ip = rtt_mod.resolve_ipv4(target.host)
        if raw and ip:
            cap = capacity_mod.packet_train(ip, timeout_s=min(timeout, 3.0))
            capacity_bps = cap.capacity_bps if cap.ok else None
            rows.append(
                {
                    "method": cap.method,
                    "ok": cap.ok,
                    "capacity_bps": cap.capacity_bps,
                    "error": None
                    if cap.ok
                    else f"{cap.replies}/{cap.sent} replies"
                    + (" (sender-limited: lower bound)" if cap.sender_limited else ""),
                }
            )
    if read_url:
        try:
            with READS.shared(settings.probe_read_concurrency):
                tp = ranged_read(read_url, target.read_size, timeout_s=timeout,
                                 max_size=target.read_max)
            service_ok = True
        except ProbeError as exc:
            rows.append({"method": f"{target.protocol}-range", "ok": False, "error": str(exc)})
            service_ok = False
        else:
            row = _throughput_row(target, settings, tp, capacity_bps)
            if active is not None and active.begun(target.name) != begun:
                # (it shared the path with a client: low, and not the path's)
                log.info("probe %s: a download began there during the read: not kept", target.name)
            else:
                rows.append(row)
    elif not with_path:
        res = rtt_mod.summarize_rtts(
            "tcp-connect", *rtt_mod.tcp_connect_rtts(target.host, target.port, 1, min(timeout, 3.0))
        )
        rows.append(
            {
                "method": res.method,
                "ok": res.ok,
                "rtt_s": res.rtt_median_s,
                "loss": res.loss,
                "error": None if res.ok else "connect failed",
            }
        )
        service_ok = res.ok
    return service_ok, rows


def record(
    session: Session, mirror_id: int, ok: bool, rows: list[dict], *, now: datetime, down_after: int
) -> str:
    """Store rows and update the mirror's health; returns the new state."""
    for row in rows:
        session.add(PathProbe(mirror_id=mirror_id, ts=now, **row))
    mirror = session.get(Mirror, mirror_id)
    if mirror is None:
        return "gone"
    mirror.last_probe_at = now
    if ok:
        if mirror.state != "up":
            log.info("mirror %s is up", mirror.name)
        mirror.consecutive_failures = 0
        mirror.state = "up"
    else:
        mirror.consecutive_failures = (mirror.consecutive_failures or 0) + 1
        if mirror.consecutive_failures >= down_after and mirror.state != "down":
            log.warning(
                "mirror %s is down after %d failed probes: %s",
                mirror.name,
                mirror.consecutive_failures,
                "; ".join(r["error"] for r in rows if r.get("error")),
            )
            mirror.state = "down"
    return mirror.state


def probe_mirror(
    factory: sessionmaker[Session],
    mirror_id: int,
    settings: Settings,
    *,
    allow_raw: bool | None = None,
    retry_pause_s: float | None = None,
    clock: Callable[[], datetime] = utcnow,
    active: ActiveDownloads | None = None,
) -> ProbeOutcome | None:
    """A full probe round with a quick retry burst on failure (see module doc).
    ``active``: downloads this coordinator assigned; the throughput read waits
    for the mirror's to end (measure)."""
    with session_scope(factory) as s:
        target = load_target(s, mirror_id, settings.throughput_probe_bytes,
                             settings.throughput_probe_max_bytes)
    if target is None:
        return None
    pause = (
        retry_pause_s
        if retry_pause_s is not None
        else min(2.0, settings.probe_interval_s / (4 * settings.down_after_failures))
    )
    outcome = ProbeOutcome(target.name, False, "unknown", 0)
    while True:
        outcome.attempts += 1
        # Retries check the service only: RTT and capacity were measured once.
        ok, rows = measure(
            target, settings, allow_raw=allow_raw, with_path=outcome.attempts == 1, active=active
        )
        with session_scope(factory) as s:
            state = record(
                s, mirror_id, ok, rows, now=clock(), down_after=settings.down_after_failures
            )
        for row in rows:
            metrics.record_probe(row["method"], row["ok"], row.get("rtt_s"))
        if state in ("up", "down"):  # stays absent while unknown
            metrics.set_mirror_up(target.name, state == "up")
        outcome.rows.extend(rows)
        outcome.ok, outcome.state = ok, state
        if ok or state in ("down", "gone"):
            return outcome
        time.sleep(pause)
