"""One download from start to end: plan -> parallel fetch -> verify -> rename -> report.

This is the library entry point behind ``pftp_client.download`` and ``pftp get``.
Side effects (network, clock, disk) come in through the arguments so tests run
the same code against real servers on loopback.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import unquote, urlsplit

# Start-up cost is part of every download: only what is needed up to the size
# probe is imported here. The engine, hashing, control/part file and summary
# modules (and the coordinator client when one is asked) are imported by a
# background thread while the mirrors answer the probe (``_load_run_modules``).
from pftp_client import early
from pftp_client.lazy import lazy_attributes
from pftp_client.plan import FileIdentity, Plan, PlanError, check_url, dynamic_plan
from pftp_client.transports.base import (
    PermanentError,
    RangeFetcher,
    Refusal,
    TransferError,
    Vet,
    reason,
    redacted,
    shown,
)
from pftp_client.transports.base import open_fetcher as default_open_fetcher

if TYPE_CHECKING:
    from pftp_client.engine import EngineConfig
    from pftp_client.flow_observer import DetectorFactory
    from pftp_client.summary import DownloadSummary, MirrorStats

log = logging.getLogger("pftp_client")

AUTO = "auto"
# congestion_wiring.MODES (a test keeps them equal): that module loads in the background
CONGESTION_MODES = ("auto", "off", "packet", "kernel", "app")
MAX_PROBES = 16  # size probes at once
# When no mirror could be asked the size, they are asked again after these waits.
PROBE_RETRY_S = (1.0, 2.0)
# How long the other mirrors' size answers are waited for once one has come: at
# least this, and at least 3 x the time the first took (_probe_results).
PROBE_GRACE_S = 2.0


class UsageError(ValueError):
    """The caller asked for something impossible (no name and no mirror, bad hash...)."""


class Progress(Protocol):
    def start(self, name: str, size: int, mirrors: Sequence[str]) -> None: ...

    def update(
        self,
        done: int,
        size: int,
        elapsed: float,
        mirrors: Sequence[MirrorStats],
        rates: dict[str, float | None],
    ) -> None: ...

    def finish(self, summary: DownloadSummary | None) -> None: ...

    def message(self, text: str) -> None: ...


def _looks_like_url(text: str) -> bool:
    return urlsplit(text).scheme in ("ftp", "http", "https")


def _basename(name_or_url: str) -> str:
    path = urlsplit(name_or_url).path if _looks_like_url(name_or_url) else name_or_url
    base = PurePosixPath(unquote(path)).name
    return base or "download"


class _Background:
    """``fn()`` in a daemon thread, started at once; ``result()`` joins it and
    returns its value or raises its exception."""

    def __init__(self, fn: Callable[[], Any], name: str, url: str = "") -> None:
        self.url = url
        self._fn = fn
        self._value: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._value = self._fn()
        except BaseException as exc:  # re-raised by result() in the caller's thread
            self._error = exc

    def result(self) -> Any:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value

    def wait(self, timeout: float | None) -> bool:
        """True once it has ended (waits at most ``timeout``)."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def discard(self) -> None:
        """Close the probe's connection once it ends (in its own thread)."""

        def close() -> None:
            self._thread.join()
            value = self._value
            if self._error is None and value is not None and value[1] is not None:
                value[1].close()

        threading.Thread(target=close, name="pftp-probe-discard", daemon=True).start()


def _load_run_modules() -> None:
    """Import what ``_run_plan`` needs. Runs in a background thread while the
    mirrors (or the coordinator) answer: ~30 ms of imports off the path to the
    first connect. access_bandwidth is for the end (history of achieved rates)."""
    import pftp_client.access_bandwidth
    import pftp_client.congestion_wiring
    import pftp_client.control_file
    import pftp_client.engine
    import pftp_client.integrity
    import pftp_client.part_file
    import pftp_client.pieces
    import pftp_client.ranges
    import pftp_client.summary
    import pftp_client.timeline  # noqa: F401


class _CaptureCheck:
    """afpacket.afpacket_capture_available in a thread started before
    the first connect; ``result()`` waits for the answer, not for the close."""

    def __init__(self) -> None:
        self._ok = False
        self._known = threading.Event()
        threading.Thread(target=self._run, name="pftp-capture-check", daemon=True).start()

    def _run(self) -> None:
        from pftp_client.afpacket import afpacket_capture_available

        try:
            afpacket_capture_available(on_known=self._answer)
        finally:
            self._known.set()  # also when the check itself failed: no capture

    def _answer(self, ok: bool) -> None:
        self._ok = ok
        self._known.set()

    def result(self) -> bool:
        self._known.wait()
        return self._ok


def _start_probes(
    urls: Sequence[str],
    open_fetcher: Callable[..., RangeFetcher],
    timeout: float,
) -> list[_Background | early.EarlyProbe]:
    """Ask every mirror for the size (SIZE / HEAD), one thread each, at once."""

    slots = threading.BoundedSemaphore(MAX_PROBES)

    def probe(url: str) -> Callable[[], tuple[str, RangeFetcher | None, int | None, str]]:
        def run() -> tuple[str, RangeFetcher | None, int | None, str]:
            with slots:
                try:
                    f = open_fetcher(url, timeout=timeout)
                except (TransferError, ValueError, OSError) as exc:
                    return url, None, None, reason(exc)
                try:
                    return url, f, f.size(), ""
                except (TransferError, OSError) as exc:
                    f.close()
                    return url, None, None, reason(exc)

        return run

    if open_fetcher is not default_open_fetcher:
        return [_Background(probe(u), f"pftp-probe-{i}", u) for i, u in enumerate(urls)]
    # The entry point may have started them already (early.py).
    early_probes = [early.take(u, timeout) for u in urls]
    early.discard_all()  # started for another command line; not needed
    pairs = list(zip(urls, early_probes, strict=True))
    if any(p is None and urlsplit(u).scheme.lower() == "ftp" for u, p in pairs):
        # before the threads start: they would all wait for this import anyway
        import pftp_client.transports.ftp  # noqa: F401
    return [
        p if p is not None else _Background(probe(u), f"pftp-probe-{i}", u)
        for i, (u, p) in enumerate(pairs)
    ]


def _probe_results(
    probes: Sequence[_Background | early.EarlyProbe], say: Callable[[str], None],
    grace_s: float = PROBE_GRACE_S, errors: dict[str, str] | None = None,
    late: list[_Background | early.EarlyProbe] | None = None,
    provisional: list[early.EarlyProbe] | None = None,
) -> tuple[dict[str, int], dict[str, RangeFetcher]]:
    """The probes' answers in mirror order; keeps the connections that answered.
    Once one mirror has answered with a size, the others are waited for at most
    max(grace_s, 3 x the time it took); a mirror that has not answered by then (a
    server that accepts and never speaks, a blackholed address) is left out
    instead of holding the whole download for its timeouts: into ``late`` (it may
    join the download when it answers), else discarded. With ``provisional``, the
    entry point's probes (early.py) still running max(50 ms, 2 x the first
    answer's time, to its size) after it go there instead: their transfers have
    begun at their blocks and stall once their buffers are full, so the download
    starts with them and each flow waits for its own (_cached_opener, ``strict``)."""
    t0 = time.monotonic()
    done: dict[int, Any] = {}
    first_at: float | None = None
    answered_in = 0.0
    error: BaseException | None = None
    while len(done) < len(probes):
        for i, p in enumerate(probes):
            if i in done or not p.wait(0):
                continue
            try:
                done[i] = p.result()
            except Exception as exc:  # raised in the probe thread (a transport's bug)
                error = error or exc
                done[i] = (p.url, None, None, str(exc))
                continue
            if first_at is None and done[i][2] is not None:
                first_at = time.monotonic()
                # (an entry point's probe that then waited on another mirror for its
                # REST check: its answer came when it had the size)
                answered_in = min(first_at, getattr(p, "sized_at", None) or first_at) - t0
        now = time.monotonic()
        if first_at is not None and now >= first_at + max(grace_s, 3 * (first_at - t0)):
            break
        pending = [p for i, p in enumerate(probes) if i not in done]
        if (
            provisional is not None and first_at is not None and pending
            and all(isinstance(p, early.EarlyProbe) for p in pending)
            and now >= first_at + max(0.05, 2 * answered_in)
        ):
            break
        if pending:
            pending[0].wait(0.005)  # (returns at once when that one ends)
    for i, p in enumerate(probes):
        if i not in done and provisional is not None and isinstance(p, early.EarlyProbe):
            provisional.append(p)
            continue
        if i not in done:
            if late is None:
                p.discard()
            else:
                late.append(p)
            assert first_at is not None
            say(f"mirror {shown(p.url)} has not answered after {time.monotonic() - t0:.1f} s "
                f"(another answered in {first_at - t0:.2f} s): going on without it"
                + (" until it does" if late is not None else ""))
    results = [done[i] for i in sorted(done)]
    if error is not None:
        for _u, f, _s, _e in results:
            if f is not None:
                f.close()
        raise error
    sizes: dict[str, int] = {}
    fetchers: dict[str, RangeFetcher] = {}
    for url, f, size, err in results:
        if f is None:
            say(f"mirror {shown(url)} is not usable: {err}")
            if errors is not None:
                errors[url] = err
            continue
        fetchers[url] = f
        if size is None:
            say(f"mirror {shown(url)} did not report the file size")
            if errors is not None:
                errors[url] = "did not report the file size"
        else:
            sizes[url] = size
    return sizes, fetchers


def _probe_sizes(
    urls: Sequence[str],
    open_fetcher: Callable[..., RangeFetcher],
    timeout: float,
    say: Callable[[str], None],
) -> tuple[dict[str, int], dict[str, RangeFetcher]]:
    """Ask every mirror for the size (SIZE / HEAD) in parallel; keep the connections."""
    return _probe_results(_start_probes(urls, open_fetcher, timeout), say)


def _size_groups(sizes: dict[str, int]) -> list[tuple[int, list[str]]]:
    """The mirrors grouped by the size they report, the likeliest first: the most
    mirrors, then the larger size (a copy still being written or cut short is the
    usual odd one out, and it is shorter)."""
    groups: dict[int, list[str]] = {}
    for url, size in sizes.items():
        groups.setdefault(size, []).append(url)
    return sorted(groups.items(), key=lambda g: (-len(g[1]), -g[0]))


def _majority_size(sizes: dict[str, int], say: Callable[[str], None]) -> tuple[int, list[str]]:
    size, agree = _size_groups(sizes)[0]
    for u, s in sizes.items():
        if s != size:
            say(f"mirror {shown(u)} reports {s} bytes, {len(agree)} other(s) {size}: not used")
    return size, agree


def _output_path(output: str | os.PathLike[str] | None, name: str) -> Path:
    if output is None:
        p = Path.cwd() / _basename(name)
    else:
        text = os.fspath(output)
        p = Path(text).expanduser()
        # "-o dir/": a directory, made if missing (not a file named "dir")
        if p.is_dir() or text.endswith(("/", os.sep)):
            if p.exists() and not p.is_dir():
                raise UsageError(f"the output {text} ends with '/' but {p} is not a directory")
            p = p / _basename(name)
    if p.is_dir():  # (checked before a byte is fetched: the rename would fail at the end)
        raise UsageError(f"the output {p} is a directory; name a file with -o")
    return p


def _configured_figure(setting: str | None) -> bool:
    """Is the access bandwidth configured (environment or config file)?"""
    from pftp_client.bandwidth_setting import configured_access_bandwidth

    return configured_access_bandwidth(setting)[0] is not None


def download(
    name: str | None = None,
    *,
    mirrors: Sequence[str] = (),
    backups: Sequence[str] = (),
    output: str | os.PathLike[str] | None = None,
    coordinator: str | Sequence[str] | None = None,
    sha256: str | None = None,
    access_bandwidth_bps: int | str | None = AUTO,
    access_bandwidth_setting: str | None = None,
    resume: bool = True,
    config: EngineConfig | None = None,
    progress: Progress | None = None,
    detector_factory: DetectorFactory | None = None,
    open_fetcher: Callable[..., RangeFetcher] = default_open_fetcher,
    report: bool = True,
    congestion: str = "auto",
    timeout: float | None = None,
    stall_timeout: float | None = None,
    max_connections: int | None = None,
    cross_check: bool = True,
) -> DownloadSummary:
    """Download ``name`` (via the coordinator) or the file behind ``mirrors``.

    - ``coordinator`` given and ``name`` given: ask it for assignments (3 attempts,
      paper 001); when it cannot be reached, fall back to ``mirrors`` (dynamic
      parallel access) or, when ``name`` is a URL, to a plain download of it.
    - otherwise: dynamic parallel access (paper 000) over ``mirrors``.
    ``resume=False`` discards an interrupted download of the same target.
    ``backups``: mirror URLs kept in reserve in dynamic mode (started when a flow
    fails, is cut for slowness or dropped for shared congestion).
    ``congestion``: shared-congestion detection (issue 6) on every download with
    two or more active mirrors: ``auto`` picks the best timestamp source (packet
    capture > kernel receive times > receive-call times), ``packet``/``kernel``/
    ``app`` insist on one (UsageError when unavailable), ``off`` disables it. A
    ``detector_factory`` given by the caller replaces it.
    ``timeout``/``stall_timeout``: override ``config``'s (connect/reply timeout,
    seconds without data before a flow fails); the CLI passes its settings this
    way, so the engine module loads while the mirrors are probed.
    ``max_connections``: per mirror at most (``config.max_streams``; default 8):
    a mirror gets more than one only when its one connection leaves the path
    idle (a per-connection rate limit, loss) and keeps them only while they pay.
    ``cross_check``: with no SHA-256 known and two or more mirrors, compare spots
    of each mirror's bytes with another mirror's copy while the download runs
    (cross_check.py); a mirror found serving wrong bytes is blamed and its bytes
    fetched again, a disagreement no third mirror settles fails the download.

    Raises UsageError, CoordinatorError, ResumeMismatch, NoMirrorCouldServe,
    VerificationFailed (see cli.py for the exit codes they map to). An exception
    raised once the transfers began (Ctrl-C included) carries what they did as
    ``exc.timeline`` (timeline.Timeline, as ``summary.timeline``).
    """
    notes: list[str] = []

    def say(text: str) -> None:
        text = redacted(text)  # (messages are printed, kept in --json, pasted)
        notes.append(text)
        log.info(text)
        if progress is not None:
            progress.message(text)

    if congestion not in CONGESTION_MODES:
        raise UsageError(
            f"unknown congestion mode {congestion!r}; choose from {', '.join(CONGESTION_MODES)}"
        )
    urls = [check_url_or_usage(u) for u in mirrors]
    spare = [check_url_or_usage(u) for u in backups if u not in mirrors]
    if name and _looks_like_url(name):
        check_url_or_usage(name)
        urls = [name, *[u for u in urls if u != name]]
    if spare and not urls:
        raise UsageError("--backup needs at least one --mirror URL")
    if not name and not urls:
        raise UsageError("give a file name (with a coordinator) or at least one --mirror URL")
    if max_connections is not None and (
        isinstance(max_connections, bool) or not isinstance(max_connections, int)
        or not 1 <= max_connections <= 16
    ):
        raise UsageError(f"max_connections must be from 1 to 16, not {max_connections!r}")
    for what, value in (("timeout", timeout), ("stall_timeout", stall_timeout)):
        if value is not None and not (isinstance(value, int | float) and 0 < value < float("inf")):
            raise UsageError(f"{what} must be a positive number of seconds, not {value!r}")
    if access_bandwidth_bps == AUTO and (
        access_bandwidth_setting or os.environ.get("PFTP_ACCESS_BANDWIDTH")
    ):
        from pftp_client.bandwidth_setting import configured_access_bandwidth

        try:  # (a bad figure is the caller's error, before anything is fetched)
            configured_access_bandwidth(access_bandwidth_setting)
        except ValueError as exc:
            raise UsageError(str(exc)) from exc
    if sha256 is not None:
        sha256 = sha256.strip().lower()
        if len(sha256) != 64 or any(c not in "0123456789abcdef" for c in sha256):
            raise UsageError("--sha256 must be 64 hex digits")
    # (a directory in the way fails now, not after the download)
    target = _output_path(output, name or urls[0])
    coordinators = [coordinator] if isinstance(coordinator, str) else list(coordinator or [])
    from pftp_client.settings import coordinator_url_ok

    for c in coordinators:
        if not coordinator_url_ok(c):
            raise UsageError(f"bad coordinator URL {c!r} (need http:// or https://host[:port])")
    if os.environ.get("PFTP_ACCESS_PROBE", "").strip():
        # (read by the probe, and after every verified download by record_download:
        # a bad value must stop us now, not after the file is in place)
        from pftp_client.bandwidth_setting import probe_setting

        try:
            probe_setting(os.environ)
        except ValueError as exc:
            raise UsageError(str(exc)) from exc
    if name and not urls and not coordinators:
        from pftp_client.coordinator import CoordinatorUnavailable

        raise CoordinatorUnavailable(
            f"no coordinator known to ask for {name!r} (use --coordinator, PFTP_COORDINATOR or the "
            "config file) and no --mirror URL to download from"
        )
    if timeout is None:
        if config is None:  # the engine's default (the CLI always passes its own)
            from pftp_client.engine import EngineConfig

            config = EngineConfig()
        timeout = config.timeout

    t0 = time.monotonic()
    bw: int | None = None
    # The entry point may have asked the coordinator already (early.EarlyPlan).
    early_plan = (
        early.take_plan(name, coordinators, access_bandwidth_setting, timeout)
        if name and coordinators and access_bandwidth_bps == AUTO
        and open_fetcher is default_open_fetcher
        else None
    )
    if access_bandwidth_bps == AUTO:
        # The coordinator bounds its selection by it, so it is measured when one is
        # asked. A mirror-only download takes a configured figure only (no probe):
        # with it the engine tells the client's own full link from a shared one.
        if early_plan is not None:
            bw, source = early_plan.bandwidth
            say(f"access bandwidth: {_fmt_bw(bw)} ({source})")
        elif name and coordinators:
            from pftp_client.access_bandwidth import access_bandwidth

            bw, source = access_bandwidth(access_bandwidth_setting)
            say(f"access bandwidth: {_fmt_bw(bw)} ({source})")
        elif access_bandwidth_setting or os.environ.get("PFTP_ACCESS_BANDWIDTH"):
            # (only then; bandwidth_setting is light: it loads nothing but re)
            from pftp_client.bandwidth_setting import configured_access_bandwidth

            bw, source = configured_access_bandwidth(access_bandwidth_setting)
            if bw:
                say(f"access bandwidth: {_fmt_bw(bw)} ({source})")
    elif isinstance(access_bandwidth_bps, int) or access_bandwidth_bps is None:
        bw = access_bandwidth_bps
    else:
        raise UsageError(f"bad access bandwidth {access_bandwidth_bps!r}")
    # (a figure the client measured, not one it was given: it may be tested)
    measured_figure = bool(bw) and access_bandwidth_bps == AUTO and not _configured_figure(
        access_bandwidth_setting
    )

    capture_check: _CaptureCheck | None = None
    if detector_factory is None and congestion in ("auto", "packet"):
        capture_check = _CaptureCheck()  # (CongestionSession asks it after the probe)
    # Started once the first request is on its way, so they do not delay it: the
    # rest of the imports.
    background: list[_Background] = []

    def start_background() -> None:
        if not background:
            background.append(_Background(_load_run_modules, "pftp-imports"))

    plan: Plan | None = None
    used_coordinator: str | None = None
    if name and coordinators:
        from pftp_wire.plain import AssignmentRequest, dump

        from pftp_client.coordinator import (
            CoordinatorError,
            CoordinatorUnavailable,
            load_http,
            request_plan,
        )

        request = AssignmentRequest(file=name, access_bandwidth_bps=bw,
                                    protocols=list(early.CLIENT_PROTOCOLS))
        earlier: list[str] = []
        if early_plan is not None and early_plan.payload != dump(request):
            early_plan.discard()  # (asked differently: a bug, caught by the tests)
            early_plan = None
        elif early_plan is not None and early_plan.answer is None:
            # its one attempt failed: the first of the three
            earlier, early_plan = early_plan.failures, None
        load_http()
        start_background()
        try:
            if early_plan is not None:
                used_coordinator, plan = early_plan.plan(request)
            else:
                used_coordinator, plan = request_plan(
                    coordinators, request, timeout=min(timeout, 10.0), earlier=earlier,
                    on_retry=say,
                )
        except CoordinatorUnavailable as exc:
            if not urls:
                raise
            how = (
                "dynamic parallel access over the given mirrors"
                if len(urls) > 1
                else f"a plain download from {urls[0]}"
            )
            say(f"{exc}; continuing with {how}")
        if plan is not None and sha256 and plan.file.sha256 != sha256:
            if early_plan is not None:
                early_plan.discard()
            raise CoordinatorError(
                f"the coordinator's SHA-256 for {name!r} ({plan.file.sha256}) is not the one given "
                f"with --sha256 ({sha256})"
            )

    fetcher_cache: dict[str, list[RangeFetcher]] = {}
    starting: dict[str, list[early.EarlyProbe]] = {}
    if plan is not None and plan.portions and open_fetcher is default_open_fetcher:
        # Each mirror's transfer starts at its portion while the engine's modules load
        # (or started as soon as the early plan came); so do the other connections the
        # coordinator advised, where the engine will begin them (advice.transfer_starts).
        for probe in (early_plan.probes if early_plan is not None else early.start_portions(
            _plan_transfers(plan, bw, config, max_connections), timeout
        )):
            taken = starting.setdefault(probe.url, [])
            if any(p.at == probe.at for p in taken):
                probe.discard()  # (one per offset)
            else:
                taken.append(probe)
    began_at: float | None = None  # (the entry point's first connects: a lead start's clock)
    if plan is None:
        asked_at = time.monotonic()
        probes = _start_probes([*urls, *spare], open_fetcher, timeout)
        began_at = min((p.begun_at for p in probes if isinstance(p, early.EarlyProbe)),
                       default=None)
        start_background()
        why_not: dict[str, str] = {}
        late: list[_Background | early.EarlyProbe] = []
        pending: list[early.EarlyProbe] = []
        sizes, probed = _probe_results(
            probes, say, errors=why_not, late=late,
            provisional=pending if open_fetcher is default_open_fetcher else None,
        )
        # (only --mirror URLs are waited for in their flows; a late backup stays out)
        for p in [*[p for p in pending if p.url in spare], *[p for p in late if p.url in spare]]:
            p.discard()
        late = [p for p in late if p.url not in spare]
        pending = [p for p in pending if p.url not in spare]
        for wait in PROBE_RETRY_S:
            # (a missing file or a refused login is not asked again: Refusal)
            again = [u for u in [*urls, *spare]
                     if u not in probed and not isinstance(why_not.get(u), Refusal)]
            if sizes or not again or time.monotonic() - asked_at > timeout / 2:
                # (mirrors that took most of the timeout to fail, silent or
                # blackholed, would only take it again)
                break
            # A server restarting, a full server (421), a link that just went down
            # for a moment: asked again before giving up.
            say(f"no mirror reported the size; asking again in {wait:g} s")
            time.sleep(wait)
            more_sizes, more = _probe_results(
                _start_probes(again, open_fetcher, timeout), say, errors=why_not
            )
            sizes.update(more_sizes)
            probed.update(more)
        for u, f in probed.items():
            fetcher_cache.setdefault(u, []).append(f)
        if not sizes:
            for p in pending:
                p.discard()
            _close_cache(fetcher_cache)
            from pftp_client.engine import NoMirrorCouldServe

            raise NoMirrorCouldServe(
                "no mirror could be reached or reported the file size: "
                + "; ".join(
                    why if (why := why_not.get(u, "no answer")).startswith(u)
                    else f"{shown(u)}: {why}"
                    for u in [*urls, *spare]
                )
            )
        size, agree = _majority_size(sizes, say)
        failed = [u for u in urls if u not in probed and not isinstance(why_not.get(u), Refusal)
                  and all(p.url != u for p in [*late, *pending])]
        # With a SHA-256 to check against, mirrors of another size are tried next
        # when this group's file does not verify (the majority may be the wrong copy),
        # and when every mirror of this group fails (a size reported by a server that
        # then cannot serve it says nothing). Without one, only a group as large as
        # this one, when this one fails: the tie was broken for the larger size, a
        # guess (a majority that fails is not overruled by a copy nobody agrees with).
        other_groups = [g for g in _size_groups(sizes)[1:] if sha256 or len(g[1]) >= len(agree)]
        ident = FileIdentity(name=_basename(name or urls[0]), size=size, sha256=sha256)
        waited = {p.url for p in pending}
        # (in the order given: the entry point began each transfer at its slot's block)
        active = [u for u in urls if u in waited or (u in agree and u not in spare)]
        active = active or agree[:1]
        plan = dynamic_plan(ident, active, [u for u in agree if u not in active])
        for p in pending:
            starting[p.url] = [p]
        strict = waited
    else:
        other_groups = []
        late = []
        failed = []
        strict = set()

    late_mirrors = _LateMirrors(
        late, fetcher_cache, say, failed=failed,
        reprobe=lambda u: _start_probes([u], open_fetcher, timeout)[0],
    )
    first_try = True
    try:
        background[0].result()  # the imports
        from pftp_client.engine import EngineConfig, NoMirrorCouldServe
        from pftp_client.integrity import VerificationFailed

        cfg = config or EngineConfig()
        changes: dict[str, float] = {}
        if cfg.timeout != timeout:
            changes["timeout"] = timeout
        if stall_timeout is not None and cfg.stall_timeout != stall_timeout:
            changes["stall_timeout"] = stall_timeout
        if max_connections is not None and cfg.max_streams != max_connections:
            changes["max_streams"] = max_connections
        if measured_figure and not cfg.test_access_figure:
            changes["test_access_figure"] = True
        if changes:
            cfg = dataclasses.replace(cfg, **changes)
        while True:
            try:
                return _run_plan(
                    plan,
                    target,
                    cfg=cfg,
                    resume=resume,
                    progress=progress,
                    say=say,
                    notes=notes,
                    detector_factory=detector_factory,
                    congestion=congestion,
                    capture_permitted=capture_check.result if capture_check is not None else None,
                    open_fetcher=_cached_opener(
                        open_fetcher, fetcher_cache, starting, plan.file.size, strict
                    ),
                    coordinator=used_coordinator if report else None,
                    access_bw=bw,
                    t0=t0,
                    began_at=began_at if first_try else None,
                    late=late_mirrors if first_try else None,
                    cross_check=cross_check,
                )
            except (VerificationFailed, NoMirrorCouldServe) as exc:
                if not other_groups or (isinstance(exc, VerificationFailed) and not sha256):
                    raise
                size, agree = other_groups.pop(0)
                say(f"{exc}; trying the mirror(s) that report {size} bytes: "
                    + ", ".join(map(shown, agree))
                    + ("" if sha256 else " (no SHA-256 given: which size is right is not known)"))
                ident = dataclasses.replace(plan.file, size=size)
                active = [u for u in agree if u not in spare] or agree[:1]
                plan = dynamic_plan(ident, active, [u for u in agree if u not in active])
                resume = False  # (the part file is of the other size)
                first_try = False  # (the late ones answered for the first group's size)
    finally:
        late_mirrors.done.set()
        for probe in late_mirrors.probes:  # (discard waits for it in a thread of its own)
            probe.discard()
        for probes in starting.values():  # not asked for by any flow
            for probe in probes:
                probe.discard()
        _close_cache(fetcher_cache)


def _plan_transfers(
    plan: Plan, access_bps: int | None, config: EngineConfig | None,
    max_connections: int | None,
) -> list[tuple[str, int]]:
    """(url, offset) of the transfers ``plan`` begins with, as the engine will cut
    them (advice.transfer_starts, with the engine's settings)."""
    from pftp_client.advice import DEFAULT_MAX_CONNECTIONS, MIN_PART_BYTES, transfer_starts
    from pftp_client.pieces import choose_piece_size

    most = max_connections or (config.max_streams if config else DEFAULT_MAX_CONNECTIONS)
    min_part = config.advised_min_part_bytes if config else MIN_PART_BYTES
    piece = choose_piece_size(plan.file.size, len(plan.active), plan.file.piece_size)
    portions = [(p.mirror.url, p.start, p.end, p.mirror.connections, p.mirror.expected_bps)
                for p in plan.portions]
    return transfer_starts(portions, plan.file.size, piece, most, min_part, access_bps)


def check_url_or_usage(url: str) -> str:
    try:
        return check_url(url)
    except PlanError as exc:
        raise UsageError(str(exc)) from exc


class _LateMirrors:
    """Mirrors whose size probe had not answered when the download started
    (_probe_results): each that answers with the file's size joins the running
    download as a backup flow, on the connection its probe made."""

    def __init__(
        self, probes: list[_Background | early.EarlyProbe],
        cache: dict[str, list[RangeFetcher]], say: Callable[[str], None],
        failed: Sequence[str], reprobe: Callable[[str], _Background | early.EarlyProbe],
    ) -> None:
        self.probes = probes
        self.cache = cache
        self.say = say
        # Mirrors whose probe failed while others answered (a 503, a server
        # restarting): asked again in the background, after PROBE_RETRY_S.
        self.failed = list(failed)
        self.reprobe = reprobe
        self.done = threading.Event()

    def watch(self, engine: Any, size: int) -> None:
        for probe in self.probes:
            threading.Thread(
                target=self._join, args=(probe, engine, size), name="pftp-late", daemon=True
            ).start()
        for url in self.failed:
            threading.Thread(
                target=self._ask_again, args=(url, engine, size), name="pftp-late", daemon=True
            ).start()

    def _ask_again(self, url: str, engine: Any, size: int) -> None:
        for wait in PROBE_RETRY_S:
            if self.done.wait(wait):
                return
            probe = self.reprobe(url)
            self.probes.append(probe)  # (discarded with the others at the end)
            if self._join(probe, engine, size):
                return
            with contextlib.suppress(Exception):  # (raised in the probe: _join said so)
                if isinstance(probe.result()[3], Refusal):
                    return  # (a missing file or a refused login: not asked a third time)

    def _join(self, probe: _Background | early.EarlyProbe, engine: Any, size: int) -> bool:
        """Once ``probe`` ends: True if its mirror joined the download."""
        probe.wait(None)  # (bounded by its own timeouts)
        try:
            url, fetcher, got, _error = probe.result()
        except Exception as exc:  # raised in the probe thread: reported, not joined
            self.say(f"mirror {probe.url}: {exc}")
            return False
        if fetcher is None or got != size:
            return False  # (discarded with the others: download()'s finally)
        ready = self.cache.setdefault(url, [])
        ready.append(fetcher)  # (before the join: its flow opens with it at once)
        if engine.join(url, "its size probe answered after the download had started"):
            return True
        if fetcher in ready:  # (not taken: no flow of its own will ask for it)
            ready.remove(fetcher)
        fetcher.close()
        return False


def _take_starting(
    starting: dict[str, list[early.EarlyProbe]], url: str, at: int | None
) -> early.EarlyProbe | None:
    """The transfer started for ``url`` at ``at`` if there is one, else any started
    for ``url`` (begun elsewhere, it starts again where asked); lock held."""
    probes = starting.get(url)
    if not probes:
        return None
    pick = next((p for p in probes if at is not None and p.at == at), probes[0])
    probes.remove(pick)
    if not probes:
        del starting[url]
    return pick


def _cached_opener(
    open_fetcher: Callable[..., RangeFetcher],
    cache: dict[str, list[RangeFetcher]],
    starting: dict[str, list[early.EarlyProbe]] | None = None,
    size: int = 0,
    strict: set[str] | frozenset[str] = frozenset(),
) -> Callable[..., RangeFetcher]:
    """Hands out the probes' connections first. ``starting``: connections still
    being made (early.start_portions, or the entry point's probes the download
    did not wait for); the flow that asks waits for its own, which is never later
    than making a new one: the one started at the offset it asks for (``at``),
    where a mirror has several. A URL in ``strict`` has not shown the file's size
    yet: if its probe fails or finds another size, the flow fails with that."""
    lock = threading.Lock()
    starting = starting if starting is not None else {}

    def opener(url: str, at: int | None = None, **kw: Any) -> RangeFetcher:
        with lock:
            ready = cache.get(url)
            f = ready.pop() if ready else None
            probe = _take_starting(starting, url, at) if f is None else None
        if probe is not None:
            f = probe.take(size)
            if f is None and url in strict:
                try:
                    _u, _f, got, err = probe.result()
                except Exception as exc:  # raised in the probe thread
                    err, got = str(exc), None
                raise PermanentError(
                    err or f"{url}: reports {got} bytes, the other mirrors {size}"
                )
        if f is None:
            f = open_fetcher(url, **kw)
        elif "stall_timeout" in kw and hasattr(f, "stall_timeout"):
            f.stall_timeout = kw["stall_timeout"]  # (probed before the engine's settings)
        if size and hasattr(f, "expect_size"):
            try:
                f.expect_size(size)
            except BaseException:
                f.close()
                raise
        return f

    opener.takes_at = True  # type: ignore[attr-defined]  # (engine: passes the offset)
    return opener


def _vetted(
    open_fetcher: Callable[..., RangeFetcher], vet: Vet
) -> Callable[..., RangeFetcher]:
    """Fetchers that tell ``vet`` their file's version before their first byte (the
    flows: ValidatorBook.vet; cross_check.py's spots and repairs: same_copy)."""

    def opener(url: str, **kw: Any) -> RangeFetcher:
        f = open_fetcher(url, **kw)
        if hasattr(f, "vet"):
            f.vet = vet  # type: ignore[attr-defined]
        return f

    opener.takes_at = getattr(open_fetcher, "takes_at", False)  # type: ignore[attr-defined]
    return opener


# A resumed mirror with no version to compare is compared by these bytes instead.
_SAMPLE_BYTES = 4096


def _sampler(part: Any, done: Any, cfg: EngineConfig) -> Callable[[str], bool | None]:
    """sample(url) for validators.ValidatorBook: the mirror's bytes at a few kept
    ranges against the part file's (integrity.kept_bytes_match); None when they
    could not be fetched. On a connection of its own (the flow's may carry a
    transfer begun ahead)."""
    from pftp_client.integrity import kept_bytes_match, sample_spots

    spots = sample_spots(done, _SAMPLE_BYTES)

    def sample(url: str) -> bool | None:
        if not spots:
            return None
        try:
            f = default_open_fetcher(url, timeout=cfg.timeout, stall_timeout=cfg.stall_timeout)
        except (TransferError, ValueError, OSError):
            return None
        try:
            return kept_bytes_match(part, f, spots)
        except (TransferError, OSError) as exc:
            log.info("%s: kept bytes not compared: %s", shown(url), exc)
            return None
        finally:
            f.close()

    return sample


def _with_kernel_timestamps(
    open_fetcher: Callable[..., RangeFetcher],
) -> Callable[..., RangeFetcher]:
    """Fetchers that can (FTP) pass kernel receive times as arrival_ns."""

    def opener(url: str, **kw: Any) -> RangeFetcher:
        f = open_fetcher(url, **kw)
        if hasattr(f, "kernel_timestamps"):
            f.kernel_timestamps = True  # type: ignore[attr-defined]
        return f

    opener.takes_at = getattr(open_fetcher, "takes_at", False)  # type: ignore[attr-defined]
    return opener


def _close_cache(cache: dict[str, list[RangeFetcher]]) -> None:
    for fs in cache.values():
        while fs:
            fs.pop().close()


def _run_plan(plan: Plan, target: Path, **kw: Any) -> DownloadSummary:
    """_run_locked while holding the target's lock (part_file.lock_target)."""
    from pftp_client.part_file import lock_target, unlock_target

    target.parent.mkdir(parents=True, exist_ok=True)
    fd = lock_target(target)
    try:
        return _run_locked(plan, target, **kw)
    finally:
        unlock_target(target, fd)


def _run_locked(
    plan: Plan,
    target: Path,
    *,
    cfg: EngineConfig,
    resume: bool,
    progress: Progress | None,
    say: Callable[[str], None],
    notes: list[str],
    detector_factory: DetectorFactory | None,
    congestion: str,
    open_fetcher: Callable[..., RangeFetcher],
    coordinator: str | None,
    access_bw: int | None,
    t0: float,
    began_at: float | None = None,
    capture_permitted: Callable[[], bool] | None = None,
    late: _LateMirrors | None = None,
    cross_check: bool = True,
) -> DownloadSummary:
    from pftp_client import control_file
    from pftp_client.congestion_wiring import (
        CongestionSession,
        CongestionSourceUnavailable,
        congested_with,
        held_back_none,
    )
    from pftp_client.control_file import ControlState, ResumeMismatch, ctl_path
    from pftp_client.engine import DownloadEngine, NoMirrorCouldServe
    from pftp_client.integrity import PrefixHasher, VerificationFailed, find_culprits_and_repair
    from pftp_client.part_file import PartFile, flush_every, part_path
    from pftp_client.pieces import PieceGrid, choose_piece_size
    from pftp_client.ranges import RangeOwners, RangeSet
    from pftp_client.summary import DownloadSummary, MirrorEvent
    from pftp_client.timeline import Timeline, TimelineSampler
    from pftp_client.validators import ValidatorBook

    ident = plan.file
    urls = plan.urls
    if access_bw and cfg.access_bps is None:
        # lets the engine tell the client's own access link from a shared upstream one
        cfg = dataclasses.replace(cfg, access_bps=float(access_bw))
    ctl = ctl_path(target)
    part_p = part_path(target)
    done = RangeSet()
    owners = RangeOwners()
    piece_size = choose_piece_size(ident.size, len(plan.active), ident.piece_size)
    old = None
    if resume:
        try:
            old = control_file.load(ctl)
        except ValueError as exc:
            say(f"ignoring {ctl}: {exc}")
    if old is not None:
        control_file.check_same_file(old, size=ident.size, sha256=ident.sha256, urls=urls)
        if old.sha256 and not ident.sha256:
            # The interrupted run knew the file's hash: the bytes it kept are checked
            # against it too (a mirror's file may have changed since).
            ident = dataclasses.replace(ident, sha256=old.sha256)
            plan = dataclasses.replace(plan, file=ident)
            say("checking against the SHA-256 the interrupted download was given")
        # (starting over: the old record goes before the part file is made anew,
        # or a crash between the two would leave its ranges marked done over zeros)
        if not part_p.exists() or part_p.stat().st_size != ident.size:
            say(f"{part_p} is missing or has the wrong size; starting over")
            control_file.remove(ctl)
        elif ident.piece_size and old.piece_size != ident.piece_size:
            say("the piece size changed since the interrupted download; starting over")
            control_file.remove(ctl)
        else:
            done, owners, piece_size = old.done, RangeOwners(old.written_by), old.piece_size
            say(f"resuming: {done.total()} of {ident.size} bytes already downloaded")
    elif not resume:
        control_file.remove(ctl)
    resumed = done.total()
    grid = PieceGrid(ident.size, piece_size)
    target.parent.mkdir(parents=True, exist_ok=True)
    part = PartFile(part_p, ident.size, reuse=resumed > 0)
    part.start_flusher(flush_every(ident.size))
    # The mirrors' versions of the file: a mirror whose copy changed since the
    # interrupted run is refused before it writes a byte (validators.py).
    book = ValidatorBook(
        old.validators if old is not None and resumed else None,
        # (with a SHA-256 the kept bytes are checked anyway, at the end)
        sample=_sampler(part, done, cfg) if resumed and not ident.sha256 else None,
    )
    open_fetcher = _vetted(open_fetcher, book.vet)
    state = ControlState(
        ident.name, ident.size, ident.sha256, piece_size, urls, done, owners.runs(),
        book.snapshot(),
    )
    try:
        control_file.save(ctl, state)
    except OSError:
        part.close()
        if not resumed:  # nothing of value in it: do not leave it filling the disk
            part_p.unlink(missing_ok=True)
        raise
    ckpt_lock = threading.Lock()

    def checkpoint(committed: RangeSet, runs: list[tuple[int, int, str]]) -> None:
        with ckpt_lock:
            state.done, state.written_by = committed, runs
            state.validators = book.snapshot()
            control_file.save(ctl, state)

    session: CongestionSession | None = None
    if detector_factory is None:
        try:
            session = CongestionSession(
                congestion,
                active=[(m.name, m.url, m.suitability) for m in plan.active],
                backups=[(m.name, m.url, m.suitability) for m in plan.backups],
                rank_by_rate=plan.mode != "coordinated",
                say=say,
                capture_permitted=capture_permitted,
                t0=t0,
            )
        except CongestionSourceUnavailable as exc:
            part.close()
            raise UsageError(str(exc)) from exc
        session.start_in_background()
        # Deferred: building the factory imports numpy and the detectors (~0.2 s);
        # the engine calls it from a background thread once the flows run.
        detector_factory = session.lazy_factory()
        if session.kernel_timestamps:
            open_fetcher = _with_kernel_timestamps(open_fetcher)
    hasher = PrefixHasher(part)
    engine = DownloadEngine(
        plan=plan,
        part=part,
        grid=grid,
        done=done,
        owners=owners,
        open_fetcher=open_fetcher,
        config=cfg,
        detector_factory=detector_factory,
        checkpoint=checkpoint,
        on_prefix=hasher.advance,
        log=lambda m: log.info(m),
        began_at=began_at,
    )
    hasher.advance(done.contiguous_end(0))
    if late is not None:
        late.watch(engine, ident.size)
    checker = _cross_checker(plan, part, engine, cfg, book, say) if cross_check else None
    if progress is not None:
        progress.start(ident.name, ident.size, [m.name for m in plan.active])
    ticker_stop = threading.Event()

    def tick() -> None:
        while not ticker_stop.wait(0.5):
            got, stats = engine.snapshot()
            progress.update(got, ident.size, engine.elapsed(), stats, engine.rates())  # type: ignore[union-attr]

    ticker = threading.Thread(target=tick, name="pftp-progress", daemon=True)
    if progress is not None:
        ticker.start()
    # Throughput per mirror over time (timeline.py), on every download: a copy of
    # the counters every 0.25 s on its own thread, nothing in the data path. Timed
    # from the download's start (a head start's bytes came before the engine's).
    sampler = TimelineSampler(
        lambda: [(s.name, s.received) for s in engine.snapshot()[1]],
        lambda: time.monotonic() - t0,
    )
    engine_start_s = time.monotonic() - t0 - engine.elapsed()
    sampler.start()
    timeline: Timeline | None = None
    summary: DownloadSummary | None = None
    # fsync overlaps the final hash (finalize's own fsync then finds little to flush)
    syncer = threading.Thread(target=part.sync, name="pftp-fsync", daemon=True)
    result = None
    try:
        finished = False
        try:
            result = engine.run()
            finished = True
        except NoMirrorCouldServe as exc:
            if book.changed():
                raise ResumeMismatch(
                    f"{book.changed_text()}, and no other mirror could finish it: {exc}"
                ) from exc
            raise
        finally:
            ticker_stop.set()
            if ticker.is_alive():
                ticker.join()
            if engine.access_raised_from is not None and engine.cfg.access_bps:
                notes.append(
                    f"access bandwidth: the flows carried {engine.cfg.access_bps / 1e6:.1f} "
                    f"Mbit/s, above the {engine.access_raised_from / 1e6:.1f} Mbit/s figure; "
                    "taken as the link's from then on"
                )
            timeline = sampler.stop(
                [(s.name, s.received) for s in
                 (result.mirrors if result is not None else engine.snapshot()[1])],
                list(engine.events),
                engine_start_s,
            )
            log.debug("timeline: %d samples, %.1f ms of CPU", sampler.samples,
                      sampler.cpu_s * 1e3)
            if session is not None:
                # Every byte is in: a detection round or capture drain in progress
                # cannot change anything, so do not wait for it (~0.1 s).
                session.stop(wait=not finished)
        if book.changed() and not ident.sha256:
            # A mirror that could not be checked wrote bytes while another one's copy
            # changed: it may have served the new version (validators.py)
            wrote = [s.url for s in result.mirrors if s.bytes and s.url in book.unchecked()]
            if wrote:
                raise ResumeMismatch(
                    f"{book.changed_text()}, and " + ", ".join(map(shown, wrote))
                    + " (no version recorded to compare) wrote part of it; "
                    + f"{part_p} kept, not put in place"
                )
        if resumed and not ident.sha256 and book.unchecked():
            say("resumed without a SHA-256 and without a recorded version of the file for "
                + ", ".join(map(shown, sorted(book.unchecked())))
                + ": their bytes could not be checked against the ones kept")
        congestion_info = (
            session.summary() if session is not None else {"mode": "custom", "source": None}
        )
        for ev in congestion_info.get("events", []):
            # (its dropped mirror was parked, and the flows left then carried clearly
            # less: the engine put it back; not a pair for the coordinator to avoid)
            if set(ev.get("dropped") or ()) & result.refuted:
                ev["refuted"] = True
        if result.refuted:
            congestion_info["refuted"] = sorted(result.refuted)
        expected = {m.name: m.expected_bps for m in (*plan.active, *plan.backups)}
        rates = {st.name: st.steady_bps or st.rate_bps for st in result.mirrors}
        for ev in congestion_info.get("events", []):
            if held_back_none(ev, rates, expected):
                ev["harmless"] = True
        shared_with = congested_with(congestion_info.get("events", []))
        for s in result.mirrors:
            s.congested_with = list(shared_with.get(s.name, []))
        syncer.start()
        digest = hasher.finish(ident.size)
        events = list(result.events)
        refetched = result.refetched_bytes
        cross_spots = 0
        if checker is not None:
            cc = checker.finish(timeout=cfg.timeout)
            cross_spots = cc.spots
            if cc.undecided:
                raise _undecided(cc.undecided[0], part_p)
            if cc.blamed or cc.damaged:
                from pftp_client.cross_check import repair

                refetched += repair(
                    cc, result, [m.url for m in [*plan.active, *plan.backups]
                                 if m.name not in cc.blamed],
                    part, events, engine.elapsed(), say, checker.open_fetcher,
                )
                from pftp_client.integrity import sha256_of_range

                digest = sha256_of_range(part, 0, ident.size)
            if cc.unchecked:
                say("cross-check: no other mirror served a spot of the bytes of "
                    + ", ".join(cc.unchecked) + ": not compared")
        if ident.sha256 and digest != ident.sha256:
            if ident.piece_sha256 is not None:
                raise VerificationFailed(
                    f"every piece matched its hash but the file's SHA-256 is {digest}, expected "
                    f"{ident.sha256}: the coordinator's hashes disagree; {part_p} kept, not renamed"
                )
            say("SHA-256 mismatch: re-fetching ranges from other mirrors to find the bad one")
            # (every mirror of the plan: a resumed run with nothing left to fetch
            # started no flow, so result.mirrors may be empty)
            corrupt = {s.name for s in result.mirrors if "corrupt" in s.events}
            usable = {s.name: s.url for s in result.mirrors if s.name not in corrupt}
            for m in [*plan.active, *plan.backups]:
                if m.name not in corrupt:
                    usable.setdefault(m.name, m.url)
            found = find_culprits_and_repair(
                part,
                result.owners,
                usable,
                ident.sha256,
                lambda u: open_fetcher(u, timeout=cfg.timeout, stall_timeout=cfg.stall_timeout),
                log=say,
            )
            refetched += found.refetched_bytes
            if not found.ok:
                control_file.remove(ctl)
                raise VerificationFailed(
                    f"SHA-256 of the download is {found.sha256}, expected {ident.sha256}; "
                    f"{found.detail}; {part_p} kept for inspection, not renamed"
                )
            digest = found.sha256
            for mirror, nbytes in found.blamed.items():
                events.append(
                    MirrorEvent(
                        "corrupt",
                        mirror,
                        engine.elapsed(),  # (the engine's clock, as its own events)
                        f"{nbytes} bytes differed from the other mirrors",
                    )
                )
                for s in result.mirrors:
                    if s.name == mirror and "corrupt" not in s.events:
                        s.events.append("corrupt")
                        s.state = "corrupt"  # (it served wrong bytes: not "done")
        syncer.join()
        part.finalize(target)
        control_file.remove(ctl)
        summary = DownloadSummary(
            name=ident.name,
            path=str(target),
            size=ident.size,
            seconds=time.monotonic() - t0,
            mode=plan.mode,
            sha256=digest,
            expected_sha256=ident.sha256,
            sha256_verified=ident.sha256 is not None and digest == ident.sha256,
            mirrors=result.mirrors,
            events=events,
            resumed_bytes=resumed,
            duplicate_bytes=result.duplicate_bytes,
            refetched_bytes=refetched,
            cross_checked_spots=cross_spots,
            request_id=plan.request_id,
            coordinator=coordinator,
            access_bandwidth_bps=access_bw,
            notes=notes,
            congestion=congestion_info,
            timeline=timeline.with_events(events),
        )
    except BaseException as exc:
        if coordinator is not None and isinstance(
            exc, NoMirrorCouldServe | VerificationFailed | ResumeMismatch
        ):
            # The coordinator most needs to hear of the mirrors that failed or served
            # bad bytes, so that it stops assigning them.
            mirrors = result.mirrors if result is not None else engine.final_stats()
            _report(coordinator, _failed_summary(plan, target, mirrors, t0, access_bw,
                                                  coordinator), say)
        if timeline is not None:
            # what the transfers did, for a plot of the failure (cli: --plot)
            exc.timeline = timeline  # type: ignore[attr-defined]
        raise
    finally:
        if checker is not None:
            checker.close()
        hasher.close()
        if syncer.is_alive():
            syncer.join()  # before the fd is closed (and maybe reused)
        part.close()
        if progress is not None:
            progress.finish(summary)
    if summary.sha256_verified and not all(
        _on_this_host(m.url) for m in summary.mirrors if m.bytes
    ):
        # History of achieved rates backs up the gateway probe next time. (Bytes
        # from this host's own loopback never crossed the access link.)
        from pftp_client.access_bandwidth import record_download

        record_download(summary.size - summary.resumed_bytes, summary.seconds)
    if coordinator is not None:
        _report(coordinator, summary, say)
    return summary


def _cross_checker(plan: Plan, part: Any, engine: Any, cfg: EngineConfig, book: Any,
                   say: Callable[[str], None]) -> Any:
    """Spot checks between the mirrors (cross_check.py) when no SHA-256 is known
    and a second mirror can vouch; None otherwise. Its connections check their copy
    against what the flows saw (validators.ValidatorBook.same_copy): a mirror whose
    copy changed since the flows read it is no referee."""
    if plan.file.sha256:
        return None
    referees = {m.name: m.url for m in [*plan.active, *plan.backups]}
    if len(referees) < 2:
        return None
    from pftp_client.cross_check import CrossChecker

    vetted = _vetted(default_open_fetcher, book.same_copy)

    def preference() -> dict[str, float]:
        # mirrors that served bytes and still work, idle or slowest first
        rates = engine.rates()
        return {st.name: rates.get(st.name) or 0.0 for st in engine.snapshot()[1]
                if st.bytes and st.state not in ("failed", "corrupt")}

    def blame(mirror: str, why: str) -> None:
        handed = engine.blame(mirror, why)
        if handed:
            say(f"cross-check: the {handed} bytes {mirror} wrote go back to the other "
                "mirrors, to fetch again")

    return CrossChecker(
        referees, engine.written_runs, part,
        lambda u: vetted(u, timeout=cfg.timeout, stall_timeout=cfg.stall_timeout),
        on_blame=blame, say=say, preference=preference,
        # (two mirrors that disagree: the download cannot end well, stop it now)
        on_undecided=lambda text: engine.abort(_undecided(text, part.path)),
    ).start()


def _undecided(text: str, part_p: Path) -> Exception:
    """The error for mirrors that disagree with no SHA-256 to settle it. The control
    file stays: the same command with --sha256 resumes, checks the kept bytes
    against it and repairs the ranges of the mirror that served wrong ones."""
    from pftp_client.integrity import VerificationFailed

    return VerificationFailed(
        f"no SHA-256 known to tell which copy is right: {text}; {part_p} kept, not "
        "renamed (run the same command with --sha256 to settle it)"
    )


def _on_this_host(url: str) -> bool:
    """Whether ``url``'s host is this machine's loopback (localhost, 127/8, ::1)."""
    import ipaddress
    from urllib.parse import urlsplit

    try:
        host = urlsplit(url).hostname or ""
    except ValueError:
        return False
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _fmt_bw(bps: int | None) -> str:
    return "unknown" if bps is None else f"{bps / 1e6:.1f} Mbit/s"


def _failed_summary(
    plan: Plan,
    target: Path,
    mirrors: list[MirrorStats],
    t0: float,
    access_bw: int | None,
    coordinator: str,
) -> DownloadSummary:
    """What a download that did not produce a verified file reports."""
    from pftp_client.summary import DownloadSummary

    return DownloadSummary(
        name=plan.file.name,
        path=str(target),
        size=plan.file.size,
        seconds=time.monotonic() - t0,
        mode=plan.mode,
        sha256=None,
        expected_sha256=plan.file.sha256,
        sha256_verified=False,
        mirrors=mirrors,
        request_id=plan.request_id,
        coordinator=coordinator,
        access_bandwidth_bps=access_bw,
    )


def _report(coordinator: str, summary: DownloadSummary, say: Callable[[str], None]) -> None:
    from pftp_wire.plain import DownloadReport, MirrorReport

    from pftp_client.coordinator import CoordinatorError, send_report

    refuted = set(summary.congestion.get("refuted") or ())
    report = DownloadReport(
        request_id=summary.request_id,
        file=summary.name,
        size=summary.size,
        seconds=summary.seconds,
        sha256_ok=summary.sha256_verified,
        access_bandwidth_bps=summary.access_bandwidth_bps,
        mirrors=[
            MirrorReport(
                mirror=m.name,
                url=m.url,
                bytes=m.bytes,
                seconds=m.seconds,
                # (the steady rate: bytes / seconds also counts every range's
                # request and slow start, which made far mirrors look slow)
                throughput_bps=m.steady_bps if m.steady_bps is not None else m.rate_bps,
                failures=m.failures,
                slow=m.slow,
                # (not for a verdict the download disproved: refuted)
                congested=m.congested and m.name not in refuted,
                congested_with=list(m.congested_with),
                bad_data=m.corrupt,
                connections=m.connections,
            )
            for m in summary.mirrors
        ],
    )
    try:
        send_report(coordinator, report)
    except CoordinatorError as exc:
        say(f"could not send the report to {coordinator}: {exc}")


# Names this module used to import at the top, still importable from it.
_LAZY = {
    "ResumeMismatch": "pftp_client.control_file",
    "CoordinatorError": "pftp_client.coordinator",
    "CoordinatorUnavailable": "pftp_client.coordinator",
    "DownloadSummary": "pftp_client.summary",
    "EngineConfig": "pftp_client.engine",
    "MirrorEvent": "pftp_client.summary",
    "MirrorStats": "pftp_client.summary",
    "NoMirrorCouldServe": "pftp_client.engine",
    "VerificationFailed": "pftp_client.integrity",
}


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY)

__all__ = ["AUTO", "Progress", "ResumeMismatch", "UsageError", "download"]  # noqa: F822
