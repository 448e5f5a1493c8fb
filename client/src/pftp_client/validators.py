"""What each mirror said about its copy's version, kept across an interruption.

Without a SHA-256 a resume could not tell that a mirror's file changed between
the interrupted run and this one (same size, new content): the kept bytes and
the new ones would be mixed and put in place. So every fetcher reports the
validator its server gives with the file (HTTP: a strong ETag, else
Last-Modified; FTP: the MDTM time, asked with the login), the control file keeps
them per URL, and on a resume a mirror whose validator differs from the recorded
one is refused before it hands over a byte (``FileChanged``). Its bytes from the
interrupted run were of the old version, like every other mirror's then, so the
mirrors that did not change finish the file; when none is left, the download
stops and the user is told to ``--restart``.

A mirror with no recorded version to compare (added on resume, silent the first
time, or silent now) is checked by its bytes instead: a few kept ranges are fetched
from it and compared with the part file (``sample``); different bytes refuse it like
a changed validator. When that cannot be done (the fetch fails) it is refused once
another mirror's copy is known to have changed, and the download is not put in
place when such a mirror wrote bytes while another was refused
(``downloader._run_plan``): it may have served the new version.

Validators of different mirrors are never compared with each other (mirrors sync
at different times and name their versions differently), only one URL's now with
its own before. A mirror that gives none is not checked (as before).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping

from pftp_client.transports.base import FileChanged, shown


class ValidatorBook:
    """The validators recorded by the interrupted run, and the ones seen in this one.
    ``sample(url)``: whether that mirror's bytes over a few kept ranges equal the
    part file's (None: could not tell); given on a resume without a SHA-256."""

    def __init__(
        self, recorded: Mapping[str, str] | None = None,
        sample: Callable[[str], bool | None] | None = None,
    ) -> None:
        self._recorded = dict(recorded or {})
        self._sample = sample
        self._sampled: dict[str, bool | None] = {}
        self._seen: dict[str, str] = {}
        self._changed: dict[str, tuple[str, str]] = {}
        self._blind: set[str] = set()  # not checked: no version to compare, no sample
        self._lock = threading.Lock()

    def vet(self, url: str, validator: str | None) -> None:
        """A fetcher's report (transports.base.Vet): raises FileChanged when the
        URL's copy is not the one recorded (by its validator, or by its bytes when
        there is no validator to compare), or when it could not be checked while
        another mirror's copy is known to have changed (it may be serving the new
        version too)."""
        old = self._recorded.get(url)
        same_bytes = None
        if (old is None or not validator) and self._sample is not None:
            same_bytes = self._sampled_once(url)
        with self._lock:
            if same_bytes is False:
                self._changed[url] = ("the kept bytes", "other bytes")
                raise FileChanged(
                    f"{shown(url)}: its bytes differ from the ones kept by the interrupted "
                    "download (the file changed since); they are not mixed"
                )
            if same_bytes is not True and (old is None or not validator) and self._changed:
                raise FileChanged(
                    f"{shown(url)}: another mirror's copy changed since the interrupted "
                    "download, and this one could not be compared"
                )
            if not validator:
                if same_bytes is not True:
                    self._blind.add(url)
                return
            if old is not None and old != validator:
                self._changed[url] = (old, validator)
                raise FileChanged(
                    f"{shown(url)}: the file changed since the interrupted download "
                    f"({old} then, {validator} now); its bytes are not mixed with "
                    "the ones kept"
                )
            self._seen[url] = validator
            if old is None and same_bytes is not True and self._sample is not None:
                self._blind.add(url)

    def same_copy(self, url: str, validator: str | None) -> None:
        """For a connection that only reads a few bytes to compare them
        (cross_check.py): raises FileChanged when the URL's copy is not the one
        this download's flows (or the interrupted run) saw, or was refused already.
        Records nothing: what the flows saw stays what the control file keeps."""
        with self._lock:
            known = self._seen.get(url) or self._recorded.get(url)
            refused = url in self._changed
        if refused or (validator and known and validator != known):
            raise FileChanged(
                f"{shown(url)}: its copy is not the one this download fetched "
                f"({known} then, {validator} now)"
            )

    def _sampled_once(self, url: str) -> bool | None:
        with self._lock:
            if url in self._sampled:
                return self._sampled[url]
        assert self._sample is not None
        got = self._sample(url)  # (network: outside the lock)
        with self._lock:
            self._sampled.setdefault(url, got)
            return self._sampled[url]

    def snapshot(self) -> dict[str, str]:
        """What the control file keeps: the recorded validators (the kept bytes are
        of those versions; a changed mirror stays refused next time too), and the
        ones seen for URLs new to this download."""
        with self._lock:
            return {**self._seen, **self._recorded}

    def changed(self) -> dict[str, tuple[str, str]]:
        """URL -> (recorded, now) for each mirror refused so far."""
        with self._lock:
            return dict(self._changed)

    def changed_text(self) -> str:
        """"the file changed on <mirrors> since the interrupted download" (messages)."""
        names = ", ".join(map(shown, self.changed()))
        return f"the file changed on {names} since the interrupted download"

    def unchecked(self) -> set[str]:
        """URLs this resume could not check (no version to compare, no sample)."""
        with self._lock:
            return set(self._blind)
