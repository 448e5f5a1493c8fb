"""Spot checks between mirrors when no SHA-256 is known (issue 3: never hand over a
wrong file).

With no hash, nothing says which bytes are right, but the mirrors can vouch for
each other. While the download runs, small spots of each mirror's bytes are
fetched again from another mirror (the referee) and compared with what is on
disk: a mirror's first spot once it wrote ``first_bytes``, the next each time its
bytes grow fourfold, each among the bytes it wrote since its last spot (more checks
early, so a lying mirror is stopped before it writes much; each later part of its
bytes gets a spot). A mirror that wrote bytes but never got a spot (a short
download) gets one when the transfers end.

A spot costs the referee's link a new transfer's first window, next to its flow's:
on a far, fast mirror a burst that may cost its flow a loss and a halved window.
So the referees asked first are the idle and the slowest mirrors that served bytes
(``preference``), and the spots are few (4 mirrors, 45 MiB: about 8).

A spot that differs is settled by a third mirror: the two that agree are right
and the other one is blamed (the engine stops using it and hands all its bytes
back to the other flows, which fetch them again alongside their own work; blamed
once the transfers ended, the downloader fetches them again). Before that the writer is asked
for the spot itself: when it now serves the referee's bytes, what is on disk was
damaged here (a crash, then a resume), and its bytes are fetched again with
nobody blamed. With no third mirror, or three
different answers, the disagreement stays undecided and the file is not put in
place. A spot is one small request on a connection of its own (16 KiB: a few
round trips, no bandwidth to speak of).

What it cannot do: a mirror that damages a few bytes here and there is caught
only if a spot falls on them. A hash (``--sha256``, or the coordinator's) checks
every byte and makes these spots unnecessary: they run only without one.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pftp_client.integrity import compare_run
from pftp_client.part_file import PartFile
from pftp_client.transports.base import RangeEnd, TransferError, shown
from pftp_client.transports.fetcher import RangeFetcher

log = logging.getLogger(__name__)

SPOT_BYTES = 16 * 1024
FIRST_CHECK_BYTES = 1024 * 1024
GROWTH = 4  # next spot once a mirror's bytes grew this many times
_ASK_ROUNDS = 3
_ASK_WAIT_S = 0.2

Run = tuple[int, int, str]


@dataclass
class CrossCheckResult:
    """What the spot checks found once the transfers ended."""

    agreed: dict[str, int] = field(default_factory=dict)  # mirror -> spots another matched
    blamed: dict[str, str] = field(default_factory=dict)  # mirror -> why
    undecided: list[str] = field(default_factory=list)  # disagreements nobody could settle
    unchecked: list[str] = field(default_factory=list)  # wrote bytes, no spot compared
    # mirror -> a spot where the bytes kept here differ from what it and its referee
    # serve now: damaged on this side, to fetch again without blame
    damaged: dict[str, str] = field(default_factory=dict)

    @property
    def spots(self) -> int:
        return sum(self.agreed.values())


def runs_minus(runs: Sequence[tuple[int, int]], seen: Sequence[tuple[int, int]]
               ) -> list[tuple[int, int]]:
    """The parts of ``runs`` outside ``seen`` (both sorted, disjoint)."""
    out: list[tuple[int, int]] = []
    j = 0
    for s, e in runs:
        pos = s
        while j < len(seen) and seen[j][1] <= pos:
            j += 1
        k = j
        while pos < e and k < len(seen) and seen[k][0] < e:
            if seen[k][0] > pos:
                out.append((pos, seen[k][0]))
            pos = max(pos, seen[k][1])
            k += 1
        if pos < e:
            out.append((pos, e))
    return out


def pick_spot(runs: Sequence[tuple[int, int]], length: int, rng: random.Random
              ) -> tuple[int, int] | None:
    """A range of up to ``length`` bytes inside one of ``runs``, uniformly placed
    over their bytes (a mirror cannot tell which of its bytes will be compared)."""
    total = sum(e - s for s, e in runs)
    if total <= 0:
        return None
    at = rng.randrange(total)
    for s, e in runs:
        if at < e - s:
            start = s + at
            # (a spot stays inside its run: one writer, one answer to compare)
            start = max(s, min(start, e - length))
            return start, min(e, start + length)
        at -= e - s
    return None  # unreachable: at < total


class CrossChecker:
    """Runs the spot checks of one download (module docstring).

    ``urls``: every mirror that may serve the file, name -> URL (the referees).
    ``runs()``: who wrote which bytes so far (engine.written_runs). ``on_blame(m,
    why)``: called once per mirror found serving wrong bytes, from a worker thread.
    ``open_fetcher(url)``: a fetcher on a connection of its own. ``preference()``:
    mirror -> how much asking it costs (its flow's current rate; 0 idle), for the
    mirrors fit to referee; the others are asked after them. ``on_undecided(text)``:
    two mirrors disagree and no other is left to settle it, so the download cannot
    end well; called once, to stop it now rather than at its end."""

    def __init__(
        self,
        urls: dict[str, str],
        runs: Callable[[], list[Run]],
        part: PartFile,
        open_fetcher: Callable[[str], RangeFetcher],
        *,
        on_blame: Callable[[str, str], object] = lambda _m, _why: None,
        say: Callable[[str], None] = lambda _t: None,
        preference: Callable[[], dict[str, float]] | None = None,
        on_undecided: Callable[[str], None] | None = None,
        spot_bytes: int = SPOT_BYTES,
        first_bytes: int = FIRST_CHECK_BYTES,
        interval_s: float = 0.25,
        rng: random.Random | None = None,
    ) -> None:
        self.urls = dict(urls)
        self._runs = runs
        self._part = part
        self.open_fetcher = open_fetcher
        self._on_blame = on_blame
        self._say = say
        self._preference = preference
        self._on_undecided = on_undecided
        self.spot_bytes = spot_bytes
        self.first_bytes = first_bytes
        self.interval_s = interval_s
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self._next: dict[str, int] = {}  # mirror -> its bytes at which to check again
        self._seen: dict[str, list[tuple[int, int]]] = {}  # its bytes already sampled from
        # one check at a time per mirror, each on a daemon thread: a referee that
        # hangs until its timeout must not hold up the exit after Ctrl-C
        self._inflight: dict[str, threading.Thread] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.result = CrossCheckResult()

    # -- scheduling ----------------------------------------------------------
    def start(self) -> CrossChecker:
        self._thread = threading.Thread(target=self._loop, name="pftp-crosscheck-sched",
                                        daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._schedule(final=False)

    def _schedule(self, final: bool) -> None:
        runs = self._runs()
        per: dict[str, list[tuple[int, int]]] = {}
        for s, e, m in runs:
            per.setdefault(m, []).append((s, e))
        with self._lock:
            for m, mine in per.items():
                if (m not in self.urls or m in self.result.blamed or m in self._inflight
                        or (self._stop.is_set() and not final)):
                    continue
                written = sum(e - s for s, e in mine)
                if final:
                    if self.result.agreed.get(m):
                        continue  # checked while the transfers ran
                elif written < self._next.get(m, self.first_bytes):
                    continue
                fresh = runs_minus(mine, self._seen.get(m, []))
                spot = pick_spot(fresh or mine, self.spot_bytes, self._rng)
                if spot is None:
                    continue
                self._next[m] = GROWTH * written
                self._seen[m] = mine
                worker = threading.Thread(target=self._check, args=(m, spot),
                                          name="pftp-crosscheck", daemon=True)
                self._inflight[m] = worker
                worker.start()

    def finish(self, timeout: float) -> CrossCheckResult:
        """The transfers ended: stop scheduling, give every mirror that wrote bytes
        and has no agreeing spot one now, and wait for the checks in flight."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._schedule(final=True)
        with self._lock:
            pending = list(self._inflight.values())
        deadline = time.monotonic() + timeout
        for worker in pending:
            worker.join(max(0.0, deadline - time.monotonic()))
            if worker.is_alive():
                log.info("cross-check: a spot check did not end within %.0f s", timeout)
        wrote = {m for _s, _e, m in self._runs() if m in self.urls}
        with self._lock:
            res = self.result
            res.unchecked = sorted(m for m in wrote if not res.agreed.get(m)
                                   and m not in res.blamed and m not in res.damaged)
            return res

    def close(self) -> None:
        """Stop without waiting (a failed download); checks in flight end on their
        own (daemon threads)."""
        self._stop.set()

    # -- one check -----------------------------------------------------------
    def _referees(self, mirror: str, exclude: set[str]) -> list[str]:
        """Other mirrors to ask: by ``preference`` (cheapest first), else those that
        served bytes (they answer), then the rest."""
        if self._preference is not None:
            cost = self._preference()
        else:
            cost = {m: 0.0 for _s, _e, m in self._runs()}
        with self._lock:
            bad = set(self.result.blamed)
        names = [m for m in self.urls if m != mirror and m not in exclude and m not in bad]
        return sorted(names, key=lambda m: (m not in cost, cost.get(m, 0.0)))

    def _owner(self, s: int, e: int) -> str | None:
        """The one mirror that wrote all of [s, e), or None."""
        over = [(rs, re_, m) for rs, re_, m in self._runs() if rs < e and re_ > s]
        owners = {m for _rs, _re, m in over}
        covered = sum(min(e, re_) - max(s, rs) for rs, re_, _m in over)
        return next(iter(owners)) if len(owners) == 1 and covered == e - s else None

    def _fetch(self, mirror: str, s: int, e: int) -> bytes:
        buf = bytearray(e - s)
        got = [0]

        def sink(offset: int, data: memoryview, _arrival_ns: int) -> None:
            buf[offset - s: offset - s + len(data)] = data
            got[0] = max(got[0], offset - s + len(data))

        fetcher = self.open_fetcher(self.urls[mirror])
        try:
            fetcher.fetch(s, RangeEnd(e), sink, threading.Event())
        finally:
            fetcher.close()
        if got[0] < e - s:
            raise TransferError(f"{shown(self.urls[mirror])}: spot [{s}, {e}) ended short")
        return bytes(buf)

    def _ask(self, mirror: str, s: int, e: int, exclude: set[str]) -> tuple[str, bytes] | None:
        """The first referee not in ``exclude`` that serves [s, e), and its bytes.
        Those that fail are asked again, up to _ASK_ROUNDS rounds: a refused or
        reset data connection may work a moment later, and a spot left unchecked or
        a disagreement left unsettled costs more than the wait."""
        for round_ in range(_ASK_ROUNDS):
            if round_:
                time.sleep(_ASK_WAIT_S)
            for ref in self._referees(mirror, exclude):
                try:
                    return ref, self._fetch(ref, s, e)
                except (TransferError, OSError, ValueError) as exc:
                    log.info("cross-check: %s could not serve [%d, %d): %s", ref, s, e, exc)
        return None

    def _check(self, mirror: str, spot: tuple[int, int]) -> None:
        try:
            self._compare(mirror, spot)
        except Exception as exc:  # a worker thread: say it, never lose it silently
            log.warning("cross-check of %s failed: %s", mirror, exc, exc_info=True)
        finally:
            with self._lock:
                self._inflight.pop(mirror, None)

    def _compare(self, mirror: str, spot: tuple[int, int]) -> None:
        s, e = spot
        if self._owner(s, e) != mirror:
            return  # rewritten since it was picked: the next round picks again
        tried: set[str] = set()
        while True:
            first = self._ask(mirror, s, e, tried)
            if first is None:
                return  # nobody to compare with (yet): unchecked unless a later spot is
            ref, theirs = first
            mine = self._part.pread(e - s, s)
            if self._owner(s, e) != mirror:
                return
            if mine == theirs:
                with self._lock:
                    self.result.agreed[mirror] = self.result.agreed.get(mirror, 0) + 1
                return
            tried.add(ref)
            with self._lock:
                if mirror in self.result.blamed:
                    return  # found lying meanwhile: its bytes are fetched again anyway
                if ref not in self.result.blamed:
                    break
            # (the referee was found lying meanwhile, by another check: ask another)
        where = f"[{s}, {e})"
        try:
            own = self._fetch(mirror, s, e)
        except (TransferError, OSError, ValueError) as exc:
            log.info("cross-check: %s could not serve its own [%d, %d): %s", mirror, s, e, exc)
            own = None
        if own == theirs:
            # It serves what the referee does: the bytes kept here were damaged on
            # this side (a crash before they reached the disk, then a resume), not
            # served wrong. Its bytes are fetched again; nobody is blamed.
            self._say(f"cross-check: the bytes kept at {where} differ from what {mirror} "
                      f"and {ref} serve; {mirror}'s bytes are fetched again")
            with self._lock:
                self.result.damaged.setdefault(mirror, where)
            return
        third = self._ask(mirror, s, e, tried)
        if third is not None and third[1] == theirs:
            self._blame(mirror, f"its bytes at {where} differ from what {third[0]} and "
                                f"{ref} serve")
        elif third is not None and third[1] == mine:
            self._blame(ref, f"it serves other bytes at {where} than {mirror} and "
                             f"{third[0]}")
            with self._lock:
                self.result.agreed[mirror] = self.result.agreed.get(mirror, 0) + 1
        elif not self._explained(mirror, ref):
            who = f"{mirror}, {ref} and {third[0]}" if third else f"{mirror} and {ref}"
            text = f"{who} serve different bytes at {where}"
            with self._lock:
                first = not self.result.undecided
                self.result.undecided.append(text)
                hopeless = len(set(self.urls) - set(self.result.blamed)) <= 2
            if first:
                self._say(f"cross-check: {text}, and no other mirror can tell which is right")
                if hopeless and self._on_undecided is not None:
                    self._on_undecided(text)

    def _explained(self, mirror: str, ref: str) -> bool:
        """One of the two that disagree was found lying meanwhile (by another check):
        that explains the difference, and the liar's bytes are fetched again anyway."""
        with self._lock:
            return mirror in self.result.blamed or ref in self.result.blamed

    def _blame(self, mirror: str, why: str) -> None:
        with self._lock:
            if mirror in self.result.blamed:
                return
            self.result.blamed[mirror] = why
        self._say(f"cross-check: {mirror} serves wrong bytes: {why}")
        self._on_blame(mirror, why)


def refetch_runs(
    part: PartFile,
    runs: Sequence[tuple[int, int]],
    referees: Sequence[str],
    open_fetcher: Callable[[str], RangeFetcher],
) -> tuple[int, int]:
    """Fetch ``runs`` again from the first of ``referees`` that serves each and
    write what differs over the part file (integrity's compare-and-keep, with the
    part file as its own side file): (bytes fetched, bytes that differed). Raises
    TransferError when no referee could serve a run."""
    fetched = differed = 0
    for s, e in runs:
        for ref in referees:
            spans: list[tuple[int, int]] = []
            try:
                fetcher = open_fetcher(ref)
                try:
                    fetched += compare_run(part, part, fetcher, s, e, spans)
                finally:
                    fetcher.close()
            except (TransferError, OSError, ValueError) as exc:
                # (what it fixed before failing stays fixed; the next one goes over it)
                log.info("cross-check: %s could not serve [%d, %d) again: %s", ref, s, e, exc)
                continue
            finally:
                differed += sum(j - i for i, j in spans)
            break
        else:
            raise TransferError(f"no mirror could serve [{s}, {e}) again")
    return fetched, differed


def repair(
    found: CrossCheckResult, result: Any, good: Sequence[str], part: PartFile,
    events: list[Any], at_s: float, say: Callable[[str], None],
    open_fetcher: Callable[[str], RangeFetcher],
) -> int:
    """After the run (``result``: engine.EngineResult): every byte a blamed mirror
    still owns (one blamed mid-run had its bytes handed back to the engine, which
    fetched them again: none, or a few written in the instant of its blame; one
    blamed by the final spots: all) fetched again from the ``good`` URLs
    (refetch_runs), and the mirror marked
    corrupt (state, events); the same for a mirror whose bytes were damaged here,
    without blame. Returns the bytes fetched. Raises VerificationFailed when no good
    mirror can serve them (the part file is kept)."""
    from pftp_client.integrity import VerificationFailed
    from pftp_client.summary import MirrorEvent

    fetched = 0
    damaged = [(n, "") for n in found.damaged if n not in found.blamed]
    for name, why in [*found.blamed.items(), *damaged]:
        runs = [(s, e) for s, e, m in result.owners if m == name]
        try:
            got, differed = refetch_runs(part, runs, good, open_fetcher)
        except TransferError as exc:
            what = f"served wrong bytes ({why})" if why else "wrote bytes damaged here"
            raise VerificationFailed(
                f"{name} {what}, and no other mirror could serve them again: {exc}; "
                f"{part.path} kept, not renamed"
            ) from exc
        fetched += got
        if runs:  # (a mirror blamed mid-run has had its bytes fetched again already)
            say(f"cross-check: the {got} bytes {name} wrote were fetched again; "
                f"{differed} differed")
        if not why:
            continue  # damaged here, not served wrong
        if not any(ev.kind == "corrupt" and ev.mirror == name for ev in events):
            events.append(MirrorEvent("corrupt", name, at_s, why))
        for st in result.mirrors:
            if st.name == name:
                if "corrupt" not in st.events:
                    st.events.append("corrupt")
                st.state = "corrupt"
    return fetched
