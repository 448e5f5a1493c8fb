"""Head start for ``pftp get --mirror ftp://...``: the network work that does not
depend on anything the CLI still has to load.

A Python client spends ~0.1 s importing before it can deal out ranges; curl's first
byte arrives ~15 ms after exec (notes/head-start.md). So the entry point
(launch.py) starts, before the CLI's imports, what every such download does
first: connect and log in to each mirror, ask for the size, and on the first
mirror start the transfer from byte 0. That is where the first flow begins in
every plan dealt from scratch: the leader of a lead start gets the whole file,
and the first of an even start gets the first block. Its data is read into
memory (FtpFetcher.start_head) until the engine takes the transfer over, while
the engine's modules load. The other mirrors check REST, and start at their
first block when the engine will deal evenly (EarlyProbe).

``download()`` takes these probes over (``take``) instead of starting its own.
It discards them when it ends up not needing them (a coordinator's plan, another
timeout). A first request at another offset (a resume) aborts the head
transfer first. Only for mirror-only downloads from the command line: the
library API and the coordinator path start where they always did.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Sequence

from pftp_client.lazy import LazyLogger

TYPE_CHECKING = False  # (typing.TYPE_CHECKING without importing typing)
if TYPE_CHECKING:
    from typing import Any

# get's options that take a value (cli.build_parser), and those that do not.
_WITH_VALUE = {
    "--max-connections",
    "--mirror",
    "-m",
    "--backup",
    "--congestion",
    "--output",
    "-o",
    "--coordinator",
    "--sha256",
    "--stall-timeout",
    "--plot",
}
_FLAGS = {"--quiet", "-q", "--json", "--restart", "--no-discovery", "--no-cross-check"}
# While the probes run, the main thread imports (CPU-bound, holding the GIL). A
# probe thread woken by a reply would wait up to the 5 ms default switch interval
# for it, once per round trip.
_SWITCH_INTERVAL_S = 0.0005

log = LazyLogger(__name__)
_lock = threading.Lock()
_probes: dict[str, EarlyProbe] = {}  # not taken yet
_started: list[EarlyProbe | EarlyPlan] = []  # still running


def parse_get(argv: Sequence[str]) -> tuple[str | None, list[str], list[str], str | None] | None:
    """(NAME or None, mirrors, backups, --coordinator or None) of ``pftp get ...`` as
    the CLI would parse them; None for anything else, including what argparse
    would reject or read differently (left to argparse)."""
    if not argv or argv[0] != "get":
        return None
    name: str | None = None
    coordinator: str | None = None
    mirrors: list[str] = []
    backups: list[str] = []
    args = list(argv[1:])
    i = 0
    while i < len(args):
        arg = args[i]
        opt, eq, value = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        if opt in ("-m", "-o") or (opt in _WITH_VALUE and opt.startswith("--")):
            if not eq:
                if i + 1 >= len(args) or args[i + 1].startswith("-"):
                    return None
                i += 1
                value = args[i]
            if opt in ("--mirror", "-m"):
                mirrors.append(value)
            elif opt == "--backup":
                backups.append(value)
            elif opt == "--coordinator":
                coordinator = value
        elif arg.startswith("-m") and len(arg) > 2 and not arg.startswith("--"):
            mirrors.append(arg[2:])
        elif not arg.startswith("-") and name is None and arg:
            name = arg
        elif arg not in _FLAGS or eq:
            return None  # a second NAME, -h, an abbreviation, a combined flag...
        i += 1
    return name, mirrors, backups, coordinator


def _max_connections(argv: Sequence[str]) -> int:
    """``--max-connections N`` of a get's argv as download() will take it; the
    default when absent or not a number (download() then says what is wrong)."""
    from pftp_client.advice import DEFAULT_MAX_CONNECTIONS

    value = None
    for i, arg in enumerate(argv):
        if arg == "--max-connections" and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith("--max-connections="):
            value = arg.partition("=")[2]
    try:
        return int(value) if value is not None else DEFAULT_MAX_CONNECTIONS
    except ValueError:
        return DEFAULT_MAX_CONNECTIONS


def plan_transfers(answer: Any, access_bps: float | None, max_connections: int) -> list[
    tuple[str, int]
] | None:
    """(url, offset) of the transfers a coordinator's answer (plain JSON) begins
    with: each portion's start, and the starts of the connections it advises
    (advice.transfer_starts, cut as the engine will cut them). None when the
    answer is not shaped so (download() checks it and says what is wrong)."""
    from pftp_client.advice import transfer_starts
    from pftp_client.piece_size import choose_piece_size

    try:
        f = answer["file"]
        size, hashed = f["size"], f.get("piece_size")
        portions = []
        for a in answer["assignments"]:
            url, offset, length = a["url"], a["offset"], a["length"]
            conns, expected = a.get("connections", 1), a.get("expected_bps")
            if not (isinstance(url, str) and isinstance(offset, int) and offset >= 0
                    and isinstance(length, int) and length >= 0
                    and isinstance(conns, int) and conns >= 1):
                return None
            expected = expected if isinstance(expected, int | float) else None
            portions.append((url, offset, offset + length, conns, expected))
        if not isinstance(size, int) or not isinstance(hashed, int | None):
            return None
    except (KeyError, TypeError, AttributeError):
        return None
    active = sum(1 for p in portions if p[2] > p[1])
    piece = choose_piece_size(size, active, hashed)
    return transfer_starts(portions, size, piece, max_connections, access_bps=access_bps)


def mirror_urls(argv: Sequence[str]) -> tuple[list[str], list[str]] | None:
    """(mirrors, backups) of ``pftp get --mirror URL ...`` without a NAME, as the
    CLI would parse them; None for anything else (parse_get)."""
    parsed = parse_get(argv)
    if parsed is None or parsed[0] is not None or not parsed[1]:
        return None
    return parsed[1], parsed[2]


# How long a mirror waits for the first mirror's transfer to show that it falls
# short of the access link (then every mirror starts at once), from that
# transfer's first byte. A verdict needs a few round trips of data (lead.py); on
# a long path none comes in time, and the engine decides as it always does.
_VERDICT_WAIT_S = 0.05
# The mirrors given a head start. HTTP's fetcher (httpx) is imported in the probe
# threads: ~0.1 s of imports, which download() would load anyway before its probes.
_HEAD_START_SCHEMES = ("ftp://", "http://", "https://")
# A transfer started on a guess (an offset past 0) holds at most this much unread.
_GUESS_BUFFER_BYTES = 1024 * 1024
# REST checked from the data (EarlyProbe._start_at): equal first bytes over this
# many cannot tell, and the probe decides. The wait for the first mirror's bytes is
# bounded, but not by this mirror's round trips: the first mirror may be the far one
# (its bytes come ~6 of its round trips after it starts: 0.55 s at 80 ms), and
# meanwhile this transfer goes on into its buffer, so waiting costs little. Giving
# up cost a restart: 0.6 s of a 20 Mbit/s mirror at 40 ms (session 10).
_REST_SAMPLE_BYTES = 4096
_REST_WAIT_S = 1.5
# With no reference from the first mirror this long after this mirror's transfer
# began (and 8 of the first mirror's round trips once it has connected, else 4 of
# this mirror's), REST is checked on a second connection to this mirror instead
# (FtpFetcher.prepare: REST size-1) while the transfer goes on. A first mirror
# that is down or hung held every other mirror for _REST_WAIT_S and then cost a
# restart that threw their bytes away: 1.5 s of the whole download (sweep
# dark-first, coordinated: 1.19-1.41x). A check aside that was not needed costs
# a login and one byte.
_REST_ASIDE_AFTER_S = 0.15
# A mirror this near (its path's RTT) probes REST first when the first mirror has not
# logged in yet (EarlyProbe._leader_connects): the probe's two round trips cost it
# little. A farther one starts its transfer at once and is checked later (its buffer
# fills slowly in slow start; the probe first cost the coordinated wide-area 0.03x).
_REST_PROBE_FIRST_RTT_S = 0.01


class _AsideRestCheck:
    """REST checked on a second connection to an FTP mirror, in its own thread
    (FtpFetcher.prepare), while the first connection's transfer goes on. ``done``
    once it has ended; ``proof`` (FtpFetcher.rest_proof) when the server honours
    REST, ``ignored`` when it showed that it does not. A server that refuses the
    second connection (a per-address limit) leaves both unset."""

    def __init__(self, url: str, timeout: float) -> None:
        self.url = url
        self.timeout = timeout
        self.done = threading.Event()
        self.proof: tuple[str, int] | None = None
        self.ignored = False
        self._lock = threading.Lock()
        self._closed = False
        self._fetcher: Any = None
        threading.Thread(target=self._run, name=f"pftp-rest-{url}", daemon=True).start()

    def _run(self) -> None:
        from pftp_client.transports.base import RangeNotHonoured, TransferError
        from pftp_client.transports.ftp import FtpFetcher

        f: FtpFetcher | None = None
        try:
            f = FtpFetcher(self.url, timeout=self.timeout)
            with self._lock:
                if self._closed:
                    f.close()
                    return
                self._fetcher = f
            f.prepare(threading.Event())
            self.proof = f.rest_proof
        except RangeNotHonoured as exc:
            self.ignored = f is not None and f.rest_honoured is False  # (not "cannot verify")
            log.debug("%s: REST checked aside: %s", self.url, exc)
        except (TransferError, OSError, ValueError) as exc:
            log.debug("%s: no REST check aside: %s", self.url, exc)
        finally:
            self.done.set()
            self.close()

    def close(self) -> None:
        """Close its connection (now, or when its thread gets one)."""
        with self._lock:
            self._closed = True
            f, self._fetcher = self._fetcher, None
        if f is not None:
            f.close()


class EarlyProbe:
    """The size probe of one mirror, started early in its own thread. The first
    mirror (``slot`` 0 of ``slots``) also starts its transfer from byte 0
    (FtpFetcher.start_head). Each other mirror checks REST, and starts its
    transfer at its first block of an even start (ranges.first_offsets) when the
    engine will deal that way: no access bandwidth is configured (an even start),
    or the first mirror's transfer soon falls short of it (lead start's verdict,
    lead.judge_start, then deals the same: engine._deal_as_even_start)."""

    def __init__(
        self, url: str, timeout: float, slot: int | None, slots: int,
        leader: EarlyProbe | None = None, at: int | None = None,
    ) -> None:
        self.url = url
        self.timeout = timeout
        self.slot = slot  # place among the --mirror URLs (None: a backup)
        self.slots = slots
        self.at = at  # where the coordinator's portion starts (start_portions)
        self.head = slot == 0 or at == 0
        self.leader = leader
        self._head_get: Any = None  # its HeadGet, if it began one (http://)
        self._fetcher: Any = None  # its fetcher once made (for path_rtt)
        # time.monotonic() when the mirror answered the size: the REST check and
        # the transfer's start that follow may wait on another mirror
        self.sized_at: float | None = None
        self.begun_at = time.monotonic()  # (its connect goes out now)
        self._done = threading.Event()
        self._value: tuple[str, Any, int | None, str] = (url, None, None, "not finished")
        self._error: BaseException | None = None
        threading.Thread(target=self._run, name=f"pftp-early-{url}", daemon=True).start()

    def _run(self) -> None:
        try:
            self._value = self._probe()
        except BaseException as exc:  # re-raised by result() in download()'s thread
            self._error = exc
        finally:
            self._done.set()
            _restore_switch_interval()

    def _probe(self) -> tuple[str, Any, int | None, str]:
        # The same steps as download._start_probes, with the same outcomes.
        from pftp_client.transports.base import TransferError, reason

        ftp = self.url[:6].lower() == "ftp://"
        # http://: the first request goes out before httpx is loaded (http_head)
        head_get = self._head_get = None if ftp else self._start_head_get()
        try:
            if ftp:  # (FtpFetcher, without the registry's imports)
                from pftp_client.transports.ftp import FtpFetcher

                f = FtpFetcher(self.url, timeout=self.timeout)
            else:  # (http, https: HttpFetcher, with what fetcher_for_url checks)
                from pftp_client.transports.registry import fetcher_for_url

                f = fetcher_for_url(self.url, timeout=self.timeout)
            self._fetcher = f
        except (TransferError, ValueError, OSError) as exc:
            if head_get is not None:
                head_get.stop()
            return self.url, None, None, reason(exc)
        if head_get is not None:
            from pftp_client.transports.http_head import HeadUnusable

            why = head_get.result(self.timeout)
            if why is None:
                f.adopt_head(head_get)
                return self.url, f, head_get.total, ""
            if not isinstance(why, HeadUnusable):
                # (no connection, or it broke: asking again would double the wait
                # for a mirror that is down)
                f.close()
                from pftp_client.transports.http import certificate_refusal

                refused = certificate_refusal(self.url, why)
                if refused is not None:  # (the same certificate next time)
                    return self.url, None, None, reason(refused)
                return self.url, None, None, f"{self.url}: cannot connect: {why}"
            # asked again below, the usual way (a redirect elsewhere, an odd answer)
            log.debug("%s: no head start before httpx: %s", self.url, why)
        begun = False
        try:
            if self.head:
                f.start_head()
            elif self.at and not ftp:
                # HTTP checks each range from its response: the portion's GET goes
                # out now and its Content-Range total answers size() below (no HEAD
                # first: a round trip sooner to the data)
                f.start_head(self.at)
                begun = True
            elif self.leader is None:
                # Every mirror but the first starts at an offset: its first request
                # checks that REST works. Done now, it is off the path of that
                # request (a standby's join, an even start's block). With a first
                # mirror sending from 0, _start_at checks it from the data instead.
                f.prepare(threading.Event())
            # (either asks the size on the way, its passive port in the same write)
        except (TransferError, OSError) as exc:
            # a server ignoring REST is remembered by the fetcher; anything else,
            # size() below or the first fetch asks again and reports
            log.debug("%s: %s", self.url, exc)
        try:
            # every way on below (a transfer, or a standby's prepare) wants a passive
            # port: asked with the size, it costs no round trip of its own
            size = f.size(passive=not self.head)
        except (TransferError, OSError) as exc:
            f.close()
            return self.url, None, None, reason(exc)
        self.sized_at = time.monotonic()
        if not self.head and not begun and size:
            try:
                if self.at:  # (a coordinator's portion: the fetcher's own buffer)
                    self._start_at(f, self.at, size, None)
                elif offset := self._guessed_offset(size):
                    self._start_at(f, offset, size, _GUESS_BUFFER_BYTES)
                else:
                    f.prepare(threading.Event())  # (a standby: for its join)
            except (TransferError, OSError) as exc:
                log.debug("%s: no transfer ahead: %s", self.url, exc)
        return self.url, f, size, ""

    def _start_head_get(self) -> Any:
        """A HeadGet (transports/http_head.py) for this http(s):// mirror, its request on
        its way while httpx loads: from byte 0 for the first mirror, at a
        coordinator's portion, else at this mirror's guessed block (_guessed_offset)
        once the size is known, from the first mirror's answer when it came in time
        (no HEAD). None where it cannot serve (credentials in the URL, a proxy)."""
        from pftp_client.transports import http_head

        if not http_head.usable(self.url):
            return None
        if self.head or self.at:
            return http_head.HeadGet(self.url, self.at or 0, timeout=self.timeout)
        return http_head.HeadGet(
            self.url, None, timeout=self.timeout, limit=_GUESS_BUFFER_BYTES,
            offset_for=self._guessed_offset, size_hint=self._leaders_size,
        )

    def _leaders_size(self, wait_s: float = 0.0) -> int | None:
        """The size the first mirror's head start answered, if it has by now or
        within ``wait_s``."""
        leader = self.leader
        head_get = leader._head_get if leader is not None else None
        if head_get is None:
            return None
        if wait_s > 0:
            head_get.checked.wait(wait_s)
        if not head_get.checked.is_set() or head_get.error is not None:
            return None
        return head_get.total

    def _guessed_offset(self, size: int) -> int | None:
        """This mirror's first block of an even start, when the engine will deal that
        way (class doc); None otherwise."""
        if not self.slot or self.leader is None:
            return None
        from pftp_client.ranges import first_offsets

        offset = first_offsets(size, self.slots)[self.slot]
        return offset if offset and self._all_start_at_once() else None

    def _start_at(self, f: Any, offset: int, size: int, limit: int | None) -> None:
        """Start the transfer at ``offset``. REST is checked from its first bytes
        against the first mirror's bytes at 0 (FtpFetcher.confirm_rest), which
        saves the probe's round trips on the way to the data; when they cannot
        tell (equal bytes, no data in time) the probe decides, and the transfer
        starts again after it."""
        kw = {} if limit is None else {"limit": limit}
        if f.rest_honoured is None and self.leader is not None and (
                (f.path_rtt() or 0.0) > _REST_PROBE_FIRST_RTT_S or self._leader_connects()):
            f.start_head(offset, rest_checked_later=True, **kw)
            if self._rest_shown(f, min(_REST_SAMPLE_BYTES, size - offset)):
                return
        f.prepare(threading.Event())  # (aborts an unconfirmed transfer first)
        f.start_head(offset, **kw)

    def _leader_connects(self) -> bool:
        """Has the first mirror connected, or does it within as long again as this
        mirror took to connect and learn the size (_REST_ASIDE_AFTER_S at most)?
        One that has not is down, or farther than this one: its bytes would come
        long after this near mirror's own REST probe (_REST_PROBE_FIRST_RTT_S),
        which is then made first, on a link this mirror's transfer has not filled
        yet. Checked aside instead, behind that transfer, it took 0.5 s (sweep r3:
        a first mirror at 250 ms, a near one behind a 68 Mbit/s access link and its
        1 MB of buffered data)."""
        assert self.leader is not None
        until = time.monotonic() + min(_REST_ASIDE_AFTER_S, time.monotonic() - self.begun_at)
        while True:
            first = self.leader._fetcher
            if first is not None and first.path_rtt() is not None:
                return True
            if time.monotonic() >= until or self.leader._done.is_set():
                return False
            time.sleep(0.001)

    def _rest_shown(self, f: Any, need: int) -> bool:
        """Waits (bounded) until REST is shown honoured: by this mirror's first
        bytes against the first mirror's (confirm_rest), or, when the first
        mirror has none to compare with in time, by a probe on a second
        connection (_AsideRestCheck). False when neither shows it."""
        leader = self.leader
        assert leader is not None
        begun = time.monotonic()
        deadline = begun + _REST_WAIT_S
        aside: _AsideRestCheck | None = None
        try:
            while True:
                verdict = self._leader_verdict(f, leader, need)
                if verdict is not None:
                    return verdict
                if aside is None and time.monotonic() >= self._aside_at(f, leader, begun):
                    aside = _AsideRestCheck(self.url, self.timeout)
                if aside is not None and aside.done.is_set():
                    if aside.proof is not None and f.trust_rest(aside.proof):
                        return True
                    if aside.ignored:
                        return False  # (prepare says so and remembers it)
                now = time.monotonic()
                # (a check aside under way is waited for a while longer: giving up
                # costs the same round trips on this connection, and the bytes)
                if now >= deadline and (aside is None or aside.done.is_set()
                                        or now >= deadline + _REST_WAIT_S):
                    return False
                time.sleep(0.001)
        finally:
            if aside is not None:
                aside.close()

    @staticmethod
    def _leader_verdict(f: Any, leader: EarlyProbe, need: int) -> bool | None:
        """confirm_rest against the first mirror's bytes from 0: None while there
        are none to compare with (not yet, or the first mirror sends none)."""
        if not leader._done.is_set():
            return None
        first = leader._value[1]
        ref = first.head_bytes(need) if first is not None else None
        if ref is None:
            return None
        reference, final = ref
        return f.confirm_rest(reference, len(reference) if final else need)

    @staticmethod
    def _aside_at(f: Any, leader: EarlyProbe, begun: float) -> float:
        """When to check REST on a second connection (see _REST_ASIDE_AFTER_S):
        the first mirror's bytes come some 6 of its round trips after its
        connect; one that has not connected is down, or farther than this one."""
        first = leader._fetcher
        rtt = first.path_rtt() if first is not None else None
        if rtt is None:
            own = f.path_rtt()
            return begun + max(_REST_ASIDE_AFTER_S, 4 * (own or 0.0))
        return begun + max(_REST_ASIDE_AFTER_S, 8 * rtt)

    def _all_start_at_once(self) -> bool:
        try:
            access_bps = _configured_access_bps()
        except (ValueError, OSError):  # (SettingsError is a ValueError)
            return False  # the CLI reports it
        from pftp_client.lead import LeadSettings, pays_off

        if not access_bps or not pays_off(self.slots, access_bps / 8, LeadSettings()):
            return True  # an even start (engine._lead_applies)
        return self.leader is not None and self.leader.falls_short(access_bps / 8)

    def take(self, size: int) -> Any:
        """The fetcher once the probe has ended, if it found a file of ``size``
        bytes; None otherwise (its connection closed). Waits as long as the
        probe's own timeouts let it, as a new connection would."""
        self._done.wait()
        _url, f, got, _err = self._value
        if f is not None and (self._error is not None or got != size):
            f.close()
            return None
        return f

    def falls_short(self, access_Bps: float) -> bool:
        """Waits for this (the first) mirror's head transfer to show that it falls
        short of the access link (lead.judge_start), for up to _VERDICT_WAIT_S after
        its first byte. False when it does not show it in time, or fills the link.
        True, without waiting for its probe, once it has not carried the link
        within the lead start's budget (lead.budget_s) from its connect: down, or
        farther than the wait is worth; the engine's judge, counting from the same
        moment (DownloadEngine began_at), releases the others the same way."""
        from pftp_client.lead import LeadSettings, budget_s, judge_start

        settings = LeadSettings()
        budget = budget_s(self.slots, access_Bps, settings)
        while True:
            now = time.monotonic()
            # (an http first mirror's head start before its probe has ended, then
            # what the probe's fetcher has of it)
            progress = self._head_get_progress()
            if progress is None and self._done.is_set():
                f = self._value[1]
                progress = f.head_progress() if f is not None else None
                if progress is None:
                    break
            if (progress is None or not progress[1]) and now - self.begun_at >= budget:
                return True  # (no byte yet, so it does not carry the link)
            if progress is None:
                self._done.wait(0.002)
                continue
            requested_at, samples, rtt = progress
            if not samples:
                if now - requested_at > settings.max_wait_s:
                    return False
            else:
                first_t = samples[0][0]
                if rtt is None:  # RETR to first byte: a round trip and the server's start
                    rtt = first_t - requested_at
                verdict, _ = judge_start(samples, started=min(requested_at, self.begun_at),
                                         now=now, rtt_s=rtt, access_Bps=access_Bps, s=settings,
                                         budget=budget)
                if verdict != "wait" or now - first_t > _VERDICT_WAIT_S:
                    return verdict == "release"
            time.sleep(0.002)
        return False  # no head transfer, or the engine took it over: its judge decides


    def _head_get_progress(self) -> tuple[float, list[tuple[float, int]], float | None] | None:
        """An http(s):// first mirror's head start before httpx is loaded and its
        probe has ended: (time.monotonic() of its GET, its arrivals, the path's RTT
        or None), as HttpFetcher.head_progress has them once it took the head over;
        None once the probe has ended (or there is no such head start). Read
        without waiting for the probe: the standbys' verdict then does not wait for
        httpx's import (~0.2 s here)."""
        if self._done.is_set():
            return None
        head_get = self._head_get
        if head_get is None or head_get.claimed or head_get.error is not None:
            return None
        rtt = None
        if head_get.sock is not None:
            from pftp_client.transports.window import smoothed_rtt

            try:
                rtt = smoothed_rtt(head_get.sock)
            except (OSError, ValueError):
                rtt = None
        return head_get.requested_at, head_get.arrivals(), rtt

    def wait(self, timeout: float | None) -> bool:
        """True once the probe has ended (waits at most ``timeout``)."""
        return self._done.wait(timeout)

    def result(self) -> tuple[str, Any, int | None, str]:
        """What download()'s probe returns: (url, fetcher or None, size, error).
        Bounded like that probe: by the fetcher's timeouts."""
        self._done.wait()
        if self._error is not None:
            raise self._error
        return self._value

    def discard(self) -> None:
        """Close the connection once the probe ends (in its thread if still running)."""

        def close() -> None:
            self._done.wait()
            f = self._value[1]
            if f is not None:
                f.close()

        if self._done.is_set():
            close()
        else:
            threading.Thread(target=close, name="pftp-early-discard", daemon=True).start()


def _configured_access_bps() -> int | None:
    """The configured access bandwidth (bits/s; None: none). The environment is
    read without loading the settings (pathlib, dataclasses: ~10 ms of imports
    while the CLI loads too); only a config file needs them. ValueError (and
    SettingsError, one) on a bad figure."""
    from pftp_client.bandwidth_setting import configured_access_bandwidth

    if os.environ.get("PFTP_ACCESS_BANDWIDTH"):
        return configured_access_bandwidth()[0]
    from pftp_client.settings import load_settings

    return configured_access_bandwidth(load_settings().access_bandwidth)[0]


_saved_interval: float | None = None


def _launch(probe: Any) -> Any:
    """Lock held: count ``probe`` (an EarlyProbe or EarlyPlan) as running; while any
    runs, the short switch interval. Returns it."""
    global _saved_interval
    if _saved_interval is None:
        _saved_interval = sys.getswitchinterval()
        sys.setswitchinterval(_SWITCH_INTERVAL_S)
    _started.append(probe)
    return probe


def _restore_switch_interval() -> None:
    """When no early probe runs any more: the interpreter's own switch interval."""
    global _saved_interval
    with _lock:
        _started[:] = [p for p in _started if not p._done.is_set()]
        if _saved_interval is not None and not _started:
            sys.setswitchinterval(_saved_interval)
            _saved_interval = None


def start(argv: Sequence[str]) -> int:
    """Start the probes (and the first mirror's head transfer) for ``pftp get
    argv`` when it is a mirror-only download over FTP, or the coordinator's plan
    for ``pftp get NAME`` (EarlyPlan). Returns how many probes started.
    Nothing is reported here: download() reports what its probes found."""
    parsed = parse_get(argv)
    if parsed is None:
        return 0
    name, mirrors_given, backups, coordinator = parsed
    if name is not None:
        if "://" not in name:
            global _plan
            with _lock:
                if _plan is None:
                    _plan = _launch(EarlyPlan(name, coordinator, _max_connections(argv)))
                plan = _plan
            # The CLI's imports would hold the GIL while the request is being
            # written (~30 ms later in the lab); its few milliseconds go first.
            plan.sent.wait(_PLAN_HEAD_START_S)
            if plan.key is not None:
                # What the answer's transfers need, loaded here while it is on its
                # way: loaded by the plan's and the probes' threads, each import
                # shared the GIL with the CLI's, and the first SYN left 30-50 ms
                # after the answer had come (lab, session 25). The CLI needs them
                # anyway. The probes' transport first: the plan's own are light.
                for module in ("pftp_client.transports.ftp", "pftp_client.advice",
                               "pftp_client.piece_size"):
                    __import__(module)
        return 0
    # Imported here, not in the probe threads: they would compete with the CLI's
    # imports for the GIL, and the CLI needs this module anyway. Nothing else is
    # loaded first (the settings would cost pathlib and dataclasses): the probes
    # use the default timeout, and download() takes them only if the settings
    # agree.
    from pftp_client.transports.ftp import DEFAULT_TIMEOUT_S

    urls = [*mirrors_given, *backups]
    mirrors = list(dict.fromkeys(mirrors_given))  # (download() probes a repeated URL once)
    with _lock:
        leader: EarlyProbe | None = None
        for url in urls:
            if url in _probes or not url.lower().startswith(_HEAD_START_SCHEMES):
                continue  # (a malformed URL fails in its probe, as in download()'s)
            slot = mirrors.index(url) if url in mirrors else None
            probe = _launch(EarlyProbe(url, DEFAULT_TIMEOUT_S, slot, len(mirrors), leader))
            if slot == 0:
                leader = probe
            _probes[url] = probe
        started = len(_probes)
    if started > 1:
        # What the other mirrors' decision needs (_guessed_offset), loaded here while
        # they log in: loaded by their threads instead, it waited for the CLI's
        # imports (each module's import lock, the GIL) until ~30 ms after their REST
        # checks had ended.
        import pftp_client.bandwidth_setting
        import pftp_client.lead
        import pftp_client.ranges  # noqa: F401
    return started


def start_portions(portions: Sequence[tuple[str, int]], timeout: float) -> list[EarlyProbe]:
    """For a coordinator's plan: connect to each FTP mirror and start its transfer at
    the start of its portion ((url, start) pairs; several for one mirror where the
    coordinator advised several connections: plan_transfers), while the engine's
    modules load. download() hands each to the flow that asks for that mirror at
    that offset (``take``)."""
    ours = sorted(
        (start, url) for url, start in portions if url.lower().startswith(_HEAD_START_SCHEMES)
    )
    probes: list[EarlyProbe] = []
    with _lock:
        for start, url in ours:
            # the portion at 0, started first, lets the others check REST from
            # their data (_start_at)
            leader = probes[0] if probes and probes[0].at == 0 else None
            probes.append(_launch(EarlyProbe(url, timeout, None, 0, leader, at=start)))
    return probes


class EarlyPlan:
    """The coordinator's plan for ``pftp get NAME``, asked for while the CLI loads,
    and the mirrors' transfers started at their portions as soon as it answers
    (start_portions; they only read into memory until the engine, with the plan
    checked, takes them over).

    The CLI's own way there loads ~0.1 s of modules first (the settings,
    http.client, the wire format). This asks the same question with none of
    them: a plain HTTP/1.1 POST of the body download() would send, for the
    simple case only: an http:// coordinator from --coordinator or
    $PFTP_COORDINATOR, the access bandwidth from $PFTP_ACCESS_BANDWIDTH, and no
    config file (which could name other coordinators or another timeout).
    Anything else is left to download(). download() takes the answer
    (take_plan) only if its own request is this one, and checks it as it checks
    its own (coordinator.plan_from_answer)."""

    def __init__(
        self, name: str, coordinator: str | None, max_connections: int | None = None
    ) -> None:
        self.name = name
        self.coordinator = coordinator
        self.max_connections = max_connections
        # (name, coordinators, access bandwidth setting, timeout) when asked; None: not
        self.key: tuple[str, tuple[str, ...], str | None, float] | None = None
        self.bandwidth: tuple[int | None, str] = (None, "")
        self.payload: dict[str, Any] = {}
        self.answer: tuple[str, int, bytes] | None = None  # (coordinator, status, body)
        # How the attempt failed (no answer, or a 5xx), as coordinator's retries say it
        self.failures: list[str] = []
        self.probes: list[EarlyProbe] = []
        self.error: BaseException | None = None
        self._keyed = threading.Event()  # key is final
        self.sent = threading.Event()  # the request is out (or will not be sent)
        self._done = threading.Event()
        threading.Thread(target=self._run, name="pftp-early-plan", daemon=True).start()

    def _run(self) -> None:
        try:
            self._ask()
        except Exception as exc:  # download() asks again, and reports
            self.error = exc
            log.debug("early plan: %s", exc)
        finally:
            self._keyed.set()
            self.sent.set()
            self._done.set()
            _restore_switch_interval()

    def _ask(self) -> None:
        env = os.environ
        coordinator = self.coordinator or env.get("PFTP_COORDINATOR")
        if (not coordinator or not coordinator.lower().startswith("http://")
                or not env.get("PFTP_ACCESS_BANDWIDTH") or _config_file_exists(env)):
            return
        # (with --mirror URLs too, cli.get asks exactly this coordinator: there is
        # no config file to name others)
        from pftp_client.bandwidth_setting import configured_access_bandwidth

        self.bandwidth = configured_access_bandwidth()  # (a bad figure: download() says so)
        # the settings' defaults without a config file (settings.ClientSettings)
        self.key = (self.name, (coordinator,), None, _DEFAULT_TIMEOUT_S)
        self._keyed.set()
        self.payload = assignment_payload(self.name, self.bandwidth[0])
        import json

        body = json.dumps(self.payload, ensure_ascii=False, separators=(",", ":"),
                          allow_nan=False).encode()
        try:
            status, content = _http_post(
                coordinator.rstrip("/") + _API_PREFIX + "/assignments", body,
                min(_DEFAULT_TIMEOUT_S, 10.0), self.sent,
            )
        except (OSError, ValueError) as exc:
            self.failures.append(f"{coordinator}: {type(exc).__name__}: {exc}")
            raise
        if status >= 500:
            self.failures.append(f"{coordinator}: HTTP {status} {content[:200]!r}")
            return
        self.answer = (coordinator, status, content)
        if status != 200:
            return
        from pftp_client.advice import DEFAULT_MAX_CONNECTIONS

        transfers = plan_transfers(json.loads(content), self.bandwidth[0],
                                   self.max_connections or DEFAULT_MAX_CONNECTIONS)
        if transfers is not None:
            self.probes = start_portions(transfers, _DEFAULT_TIMEOUT_S)

    def plan(self, request: Any) -> tuple[str, Any]:
        """(coordinator, Plan) from the answer, checked as download()'s own
        (coordinator.plan_from_answer); the transfers are closed if it fails."""
        from pftp_client.coordinator import plan_from_answer

        assert self.answer is not None
        try:
            return plan_from_answer(*self.answer, request)
        except BaseException:
            self.discard()
            raise

    def discard(self) -> None:
        """Close the transfers started at the portions (in the background if the
        plan is still on its way)."""

        def close() -> None:
            self._done.wait()
            for probe in self.probes:
                probe.discard()

        if self._done.is_set():
            close()
        else:
            threading.Thread(target=close, name="pftp-early-discard", daemon=True).start()


# settings.ClientSettings.timeout; pftp_wire.constants.API_PREFIX (test_early_start
# checks both)
_DEFAULT_TIMEOUT_S = 30.0
_API_PREFIX = "/api/v1"
# start() waits at most this long for the early plan's request to be sent.
_PLAN_HEAD_START_S = 0.05


# The protocols the client asks the coordinator for, in its order of preference for
# a mirror's URLs: https only where a mirror has neither of the others (TLS costs a
# round trip per connection, and the file's SHA-256 is checked anyway). Without
# https, a mirror registered only with an https:// URL could not serve at all.
CLIENT_PROTOCOLS = ("ftp", "http", "https")


def assignment_payload(name: str, access_bandwidth_bps: int | None) -> dict[str, Any]:
    """AssignmentRequest(file=name, access_bandwidth_bps=..., protocols=CLIENT_PROTOCOLS)
    as pftp_wire's dump() writes it, without loading pftp_wire (test_early_plan
    compares the two)."""
    return {"file": name, "access_bandwidth_bps": access_bandwidth_bps,
            "protocols": list(CLIENT_PROTOCOLS)}


def _config_file_exists(env: Any) -> bool:
    """Whether the client's config file exists (settings.config_path)."""
    if env.get("PFTP_CLIENT_CONFIG"):
        path = env["PFTP_CLIENT_CONFIG"]
    else:
        base = env.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
        path = os.path.join(base, "pftp", "client.toml")
    return os.path.exists(path)


def _http_post(
    url: str, body: bytes, timeout: float, sent: threading.Event | None = None
) -> tuple[int, bytes]:
    """POST a JSON body over plain HTTP/1.1 (Connection: close); (status, body).
    http.client would cost ~15 ms of imports here, on the way to the plan. Only
    for a plain http:// URL (plain_url_parts); raises ValueError for any other,
    or for a reply it does not understand, OSError for the network."""

    from pftp_client.plain_url import plain_url_parts

    parts = plain_url_parts(url)
    if parts is None or parts[0] != "http" or not parts[1] or parts[4] is not None:
        raise ValueError(f"not a plain http:// URL: {url!r}")
    _scheme, host, port, path, _user, _password = parts
    request = (
        f"POST {path or '/'} HTTP/1.1\r\nHost: {host}{f':{port}' if port else ''}\r\n"
        "Content-Type: application/json\r\nAccept: application/json\r\n"
        f"User-Agent: pftp-client\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode("ascii") + body
    from pftp_client.transports.connect import connect

    with connect(host.encode(), port or 80, timeout) as sock:
        sock.sendall(request)
        if sent is not None:
            sent.set()
        chunks = []
        while data := sock.recv(65536):
            chunks.append(data)
    head, sep, content = b"".join(chunks).partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = lines[0].split(" ", 2)
    if not sep or len(status) < 2 or not status[0].startswith("HTTP/1.") or not status[1].isdigit():
        raise ValueError(f"not an HTTP reply: {lines[0][:80]!r}")
    headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:])}
    if "chunked" in headers.get("transfer-encoding", "").lower():
        content = _unchunk(content)
    elif "content-length" in headers and len(content) != int(headers["content-length"]):
        raise ValueError("reply shorter than its Content-Length")
    return int(status[1]), content


def _unchunk(data: bytes) -> bytes:
    out = []
    while True:
        size_line, sep, data = data.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16) if sep else -1
        if size < 0 or len(data) < size:
            raise ValueError("truncated chunked reply")
        if size == 0:
            return b"".join(out)
        out.append(data[:size])
        data = data[size + 2 :]


_plan: EarlyPlan | None = None


def take_plan(
    name: str, coordinators: Sequence[str], access_setting: str | None, timeout: float
) -> EarlyPlan | None:
    """The early plan, now the caller's (once), if it was asked with these
    arguments (download()'s); waits until it is known whether it was."""
    global _plan
    with _lock:
        plan, _plan = _plan, None
    if plan is None:
        return None
    plan._keyed.wait()
    if plan.key != (name, tuple(coordinators), access_setting, timeout):
        plan.discard()
        return None
    plan._done.wait()  # (bounded by its own timeout, as download()'s request is)
    if plan.answer is None and not plan.failures:
        return None  # nothing asked: download() asks itself
    return plan  # answered, or its one attempt failed (download() makes the others)


def take(url: str, timeout: float) -> EarlyProbe | None:
    """The early probe of ``url`` made with ``timeout``, now the caller's (once)."""
    with _lock:
        probe = _probes.get(url)
        if probe is None or probe.timeout != timeout:
            return None
        del _probes[url]
        return probe


def discard_all() -> None:
    """Close every early probe nobody took (download() no longer needs them)."""
    global _plan
    with _lock:
        left = list(_probes.values())
        _probes.clear()
        plan, _plan = _plan, None
    for p in left:
        p.discard()
    if plan is not None:
        plan.discard()
