"""Shared-congestion detection in real downloads (issue 6, "In the client").

``download()`` attaches the SharedCongestionMonitor (congestion/monitor.py) to
every download that can have two flows at once, with the best timestamp source
this process may use (notes/congestion.md has the accuracy of each):

  packet-afpacket  an AF_PACKET capture of the mirrors' data packets, with kernel
                   receive times: needs root or CAP_NET_RAW, and endpoints the
                   capture can tell apart (see ``capture_plan``);
  app-kernel       SO_TIMESTAMPNS on the data socket (kernel receive time of each
                   receive call): FTP only - httpx hides its socket, so a download
                   with any HTTP mirror stays on app-recv (the clocks are never mixed);
  app-recv         the engine's clock after each receive call; always available.

The pure parts (``choose_source``, ``capture_plan``, ``congested_with``) take
their facts as arguments; ``CongestionSession`` holds the side effects (capture
thread, events) for one download. Nothing here imports numpy until a detector
is really attached, so a single-mirror download or ``--congestion off`` pays
nothing.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

MODES = ("auto", "off", "packet", "kernel", "app")
PACKET = "packet-afpacket"
KERNEL = "app-kernel"
APP = "app-recv"
DETECTOR = "entropy"


class CongestionSourceUnavailable(ValueError):
    """The caller asked for a timestamp source this process cannot use."""


def choose_source(
    mode: str, *, multi_mirror: bool, capture_ok: bool, kernel_ok: bool
) -> str | None:
    """The timestamp source to detect with, or None for no detection.

    ``auto`` takes the best available (packet > kernel > app); an explicit source
    that is not available is an error (a silent downgrade would hide the reason
    why detection is worse than asked)."""
    if mode not in MODES:
        raise CongestionSourceUnavailable(
            f"unknown congestion mode {mode!r}; choose from {', '.join(MODES)}"
        )
    if mode == "off" or not multi_mirror:
        return None
    if mode == "auto":
        return PACKET if capture_ok else KERNEL if kernel_ok else APP
    if mode == "packet" and not capture_ok:
        raise CongestionSourceUnavailable(
            "--congestion packet needs an AF_PACKET capture (root or CAP_NET_RAW) and mirrors "
            "the capture can tell apart (distinct addresses for FTP mirrors, IPv4)"
        )
    if mode == "kernel" and not kernel_ok:
        raise CongestionSourceUnavailable(
            "--congestion kernel needs FTP mirrors only (kernel receive timestamps are read "
            "from the FTP data socket; HTTP through httpx gives receive-call times only)"
        )
    return {"packet": PACKET, "kernel": KERNEL, "app": APP}[mode]


# (ip, port) or, for FTP, (ip, None, control port): what monitor.Remote expects
Endpoint = tuple[str, int] | tuple[str, None, int]


@dataclass(frozen=True)
class CapturePlan:
    ports: tuple[int, ...] = ()  # BPF on source ports (every mirror is HTTP)
    addresses: tuple[str, ...] = ()  # BPF on IPv4 source addresses (some FTP mirror)
    endpoints: dict[str, Endpoint] = field(default_factory=dict)  # mirror name -> endpoint


def capture_plan(mirrors: dict[str, tuple[str, str]]) -> CapturePlan | None:
    """How a packet capture can attribute packets to flows, or None when it cannot.

    ``mirrors``: name -> (url, resolved ip). HTTP data comes from the URL's port,
    so a port filter suffices. FTP data comes from a passive port that changes
    with every transfer: such a mirror is recognised by its address alone, so it
    needs an IPv4 address no other mirror has and that is not loopback (there the
    client's own packets carry the same source address)."""
    endpoints: dict[str, Endpoint] = {}
    ftp_ips: list[str] = []
    all_ips: list[str] = []
    for name, (url, ip) in mirrors.items():
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        port = parts.port or {"ftp": 21, "http": 80, "https": 443}[scheme]
        all_ips.append(ip)
        if scheme == "ftp":
            addr = ipaddress.ip_address(ip)
            if addr.version != 4 or addr.is_loopback:
                return None
            ftp_ips.append(ip)
            endpoints[name] = (ip, None, port)
        else:
            endpoints[name] = (ip, port)
    if not endpoints:
        return None
    if ftp_ips:
        if any(all_ips.count(ip) > 1 for ip in ftp_ips):
            return None
        if any(ipaddress.ip_address(e[0]).version != 4 for e in endpoints.values()):
            return None
        return CapturePlan(addresses=tuple(sorted(set(all_ips))), endpoints=endpoints)
    if len(set(endpoints.values())) != len(endpoints):
        return None  # two mirrors behind one ip:port cannot be told apart
    ports = tuple(sorted({e[1] for e in endpoints.values() if e[1] is not None}))
    return CapturePlan(ports=ports, endpoints=endpoints)


def resolve(url: str, timeout: float = 5.0) -> str | None:
    """The first address ``url``'s host resolves to (what the transports connect to)."""
    parts = urlsplit(url)
    host = parts.hostname
    if not host:
        return None
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    result: list[str] = []

    def lookup() -> None:
        try:
            infos = socket.getaddrinfo(host, parts.port or 0, type=socket.SOCK_STREAM)
        except OSError:
            return
        if infos:
            result.append(str(infos[0][4][0]))

    t = threading.Thread(target=lookup, daemon=True)
    t.start()
    t.join(timeout)
    return result[0] if result else None


def kernel_timestamps_possible(urls: Iterable[str]) -> bool:
    """app-kernel needs every mirror on FTP (one clock for all flows) and Linux."""
    urls = list(urls)
    return (
        bool(urls)
        and hasattr(socket, "CMSG_SPACE")
        and all(urlsplit(u).scheme.lower() == "ftp" for u in urls)
    )


def congested_with(events: Sequence[dict[str, Any]]) -> dict[str, list[str]]:
    """Mirror -> the other mirrors it was found to share a congested link with
    (every member of a shared set, kept or dropped), for MirrorReport.congested_with.
    A set found while the flows filled the client's access link says nothing about
    the mirrors' own paths, so it is not reported; nor is one found before that could
    be told (the aggregate not measured yet): in paper 004's table 1 such early sets
    named the fast mirrors with each other, and the coordinator, avoiding those
    pairs, then chose the slow ones (33 of 40 Mbit/s). Nor is one ``refuted``: the
    mirror parked for it was put back to work because the flows left carried
    clearly less without it (lab, lossy-path: a false pair in one run kept a mirror
    out of the coordinator's next choice, 1.39x). Nor is one ``harmless``
    (held_back_none). Nor one that held every flow of the download: the link
    they all cross may be the client's own, slower than its configured figure (lab
    r30: the access link cut from 1 Gbit/s to 21 Mbit/s mid-download; the pair
    reported, the next coordinated download got one mirror, 1.86x)."""
    out: dict[str, list[str]] = {}
    for ev in events:
        if (ev.get("access_link") or ev.get("access_unknown") or ev.get("refuted")
                or ev.get("harmless") or ev.get("everyone")):
            continue
        members = list(ev["mirrors"])
        for m in members:
            others = out.setdefault(m, [])
            for o in members:
                if o != m and o not in others:
                    others.append(o)
    return out


def held_back_none(
    event: dict[str, Any],
    rates_bps: dict[str, float | None],
    expected_bps: dict[str, float | None],
    share: float = 0.9,
) -> bool:
    """A shared set acted on by no one (nothing dropped or parked) whose every
    mirror still carried ``share`` of the rate the coordinator expected of it: a
    link they share, if any, held none of them back, so it is no reason for the
    coordinator to keep them apart. Such a pair, reported, cost the next download a
    mirror for the penalty's half hour (lab, three 25 Mbit/s mirrors 60 ms away, one
    lossy: the two clean ones named together at 1.2 s, each at 22 Mbit/s; the next
    coordinated run got two mirrors, 1.61x). Unknown rates: not harmless."""
    if event.get("dropped"):
        return False
    members = list(event.get("mirrors") or ())
    if len(members) < 2:
        return False
    for m in members:
        rate, expected = rates_bps.get(m), expected_bps.get(m)
        if not rate or not expected or rate < share * expected:
            return False
    return True


class CongestionSession:
    """Detection for one download: chooses the source, runs the capture, builds
    the engine's detector factory and collects what was detected."""

    def __init__(
        self,
        mode: str,
        *,
        active: Sequence[tuple[str, str, float | None]],  # (name, url, suitability)
        backups: Sequence[tuple[str, str, float | None]],
        rank_by_rate: bool,
        say: Callable[[str], None],
        capture_permitted: Callable[[], bool] | None = None,
        t0: float | None = None,
    ) -> None:
        self.mode = mode
        self.say = say
        self.t0 = time.monotonic() if t0 is None else t0
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._starting: threading.Thread | None = None
        self._observer: Any = None
        self._stopped = False
        self.capture: Any = None
        self.endpoints: dict[str, Endpoint] = {}
        mirrors = [*active, *backups]
        self.order = {name: i for i, (name, _u, _s) in enumerate(mirrors)}
        self.suitability = {name: s for name, _u, s in mirrors}
        self.rank_by_rate = rank_by_rate
        multi = len(active) >= 2  # two flows at once; a lone backup only replaces
        urls = [u for _n, u, _s in mirrors]
        plan: CapturePlan | None = None
        capture_ok = False
        if multi and mode in ("auto", "packet"):
            if capture_permitted is None:
                from pftp_client.congestion.capture import afpacket_capture_available

                capture_permitted = afpacket_capture_available
            if capture_permitted():
                resolved = {name: (u, resolve(u)) for name, u, _s in mirrors}
                if all(ip for _u, ip in resolved.values()):
                    plan = capture_plan({n: (u, ip) for n, (u, ip) in resolved.items() if ip})
                capture_ok = plan is not None
        self.source = choose_source(
            mode,
            multi_mirror=multi,
            capture_ok=capture_ok,
            kernel_ok=kernel_timestamps_possible(urls),
        )
        self._plan = plan if self.source == PACKET else None

    @property
    def kernel_timestamps(self) -> bool:
        """Transports should pass SO_TIMESTAMPNS receive times (FTP)."""
        return self.source == KERNEL

    def start(self) -> None:
        if self._plan is None:
            return
        from pftp_client.congestion.capture import PacketCapture

        try:
            self.capture = PacketCapture(
                self._plan.ports, source_addresses=self._plan.addresses, max_per_flow=4096
            ).start()
        except OSError as exc:
            self.say(f"packet capture failed ({exc}); congestion detection on receive times")
            self.source = APP
            self._plan = None
            return
        self.endpoints = dict(self._plan.endpoints)

    def start_in_background(self) -> None:
        """``start`` in its own thread: opening the capture socket and draining what
        it caught before its filter was attached takes ~20 ms, while the first
        decisions need hundreds of packets. ``factory`` and ``stop`` wait for it."""
        self._starting = threading.Thread(target=self.start, name="pftp-capture-start",
                                          daemon=True)
        self._starting.start()

    def _started(self) -> None:
        if self._starting is not None:
            self._starting.join()

    def stop(self, wait: bool = True) -> None:
        """Stop detection. ``wait=False`` (the download is over) only signals the
        monitor and capture threads: a detection round or a capture drain in progress
        finishes on its own (daemon threads) instead of delaying the exit, and an
        event it would still report is ignored."""
        self._started()  # (else a capture opened after this would never stop)
        with self._lock:
            self._stopped = True
        obs = self._observer
        if obs is not None:
            obs.monitor.stop(wait=wait)
        if self.capture is not None:
            self.capture.stop(wait=wait)
            self.capture = None

    def _rank(self, name: str) -> float | None:
        s = self.suitability.get(name)
        if s is not None and not self.rank_by_rate:
            return s
        # without a suitability: plan order (the coordinator's order, or the order
        # the user gave), first is best; measured rates override it in dynamic mode
        return -1e9 - self.order.get(name, len(self.order))

    def _on_event(self, event: Any) -> None:
        with self._lock:
            if self._stopped:
                return
            self.events.append(
                {
                    "at_s": round(event.at_ns / 1e9 - self.t0, 3),
                    "mirrors": list(event.mirrors),
                    "kept": event.mirrors[0] if event.mirrors else str(event.kept),
                    "dropped": [str(f) for f in event.dropped],
                    "detector": event.detector,
                    "source": str(event.source),
                    "confidence": round(float(event.confidence), 3),
                    "packets": int(event.packets),
                    "access_link": bool(getattr(event, "access_link", False)),
                    "access_unknown": bool(getattr(event, "access_unknown", False)),
                    "everyone": bool(getattr(event, "everyone", False)),
                    "thinned_by": list(getattr(event, "thinned_by", [])),
                }
            )
        if getattr(event, "access_link", False):
            self.say(
                f"shared congested link: {', '.join(event.mirrors)} ({event.source}, "
                f"confidence {event.confidence:.2f}, {event.packets} packets), but the flows "
                "together fill the access link: that is the shared link; "
                + (f"parking {', '.join(str(f) for f in event.dropped)}" if event.dropped
                   else "nothing dropped")
            )
            return
        if getattr(event, "access_unknown", False):
            self.say(
                f"shared congested link: {', '.join(event.mirrors)} ({event.source}, "
                f"confidence {event.confidence:.2f}, {event.packets} packets); whether it is "
                "the access link cannot be told yet (the flows' aggregate is not measured): "
                "nothing dropped, not reported"
            )
            return
        thinned = getattr(event, "thinned_by", [])
        if thinned:
            self.say(
                f"shared congested link: {', '.join(event.mirrors)} "
                f"({event.source}, confidence {event.confidence:.2f}, {event.packets} "
                f"packets); nothing dropped: {', '.join(thinned)} already carries what an "
                "earlier set left on that link (one drop per link)"
            )
            return
        unreported = ("; every flow of the download crosses it, so it may be this "
                      "client's own link: not reported" if getattr(event, "everyone", False)
                      else "")
        if not event.dropped:
            self.say(
                f"shared congested link: {', '.join(event.mirrors)} "
                f"({event.source}, confidence {event.confidence:.2f}, {event.packets} "
                "packets); nothing dropped: no backup is left to take a place, and the "
                f"flows share the link's rate{unreported}"
            )
            return
        self.say(
            f"shared congested link: {', '.join(event.mirrors)} "
            f"({event.source}, confidence {event.confidence:.2f}, {event.packets} packets); "
            f"keeping {event.mirrors[0] if event.mirrors else event.kept}, dropping "
            f"{', '.join(str(f) for f in event.dropped)}{unreported}"
        )

    def _keep_observer(self, obs: Any) -> None:
        self._observer = obs

    def lazy_factory(self) -> Any:
        """Like ``factory`` but imports nothing until the engine calls it (from its
        detector-start thread, after the flows started), or None when detection is off."""
        if self.source is None:
            return None

        def build(control: Any, timings: Any) -> Any:
            real = self.factory()
            return None if real is None else real(control, timings)

        return build

    def factory(self) -> Any:
        """The engine's detector factory, or None when detection is off."""
        self._started()
        if self.source is None:
            return None
        from pftp_client.congestion.monitor import congestion_detector_factory
        from pftp_client.congestion.timestamps import TimestampSource

        app_source = (
            TimestampSource.APP_KERNEL if self.source == KERNEL else (TimestampSource.APP_RECV)
        )
        return congestion_detector_factory(
            rank_of=self._rank,
            endpoint_of=(lambda name: self.endpoints.get(name)) if self.capture else None,
            on_event=self._on_event,
            rank_by_rate=self.rank_by_rate,
            on_observer=self._keep_observer,
            capture=self.capture,
            app_source=app_source,
        )

    def sources_used(self) -> list[str]:
        """Sources the monitor really decided on (it falls back to the application
        source while the capture has not seen packets of every flow)."""
        seen = {e["source"] for e in self.events}
        obs = self._observer
        if obs is not None and obs.monitor.last_source is not None:
            seen.add(str(obs.monitor.last_source))
        return sorted(seen)

    def summary(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "source": self.source,
            "sources_used": self.sources_used(),
            "detector": DETECTOR if self.source else None,
            "events": list(self.events),
        }
