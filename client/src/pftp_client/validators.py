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

Validators of different mirrors are never compared with each other (mirrors sync
at different times and name their versions differently), only one URL's now with
its own before. A mirror that gives none is not checked (as before).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from pftp_client.transports.base import FileChanged


class ValidatorBook:
    """The validators recorded by the interrupted run, and the ones seen in this one."""

    def __init__(self, recorded: Mapping[str, str] | None = None) -> None:
        self._recorded = dict(recorded or {})
        self._seen: dict[str, str] = {}
        self._changed: dict[str, tuple[str, str]] = {}
        self._lock = threading.Lock()

    def vet(self, url: str, validator: str | None) -> None:
        """A fetcher's report (transports.base.Vet): raises FileChanged when the
        URL's copy is not the one recorded."""
        if not validator:
            return
        with self._lock:
            old = self._recorded.get(url)
            if old is not None and old != validator:
                self._changed[url] = (old, validator)
                raise FileChanged(
                    f"{url}: the file changed since the interrupted download "
                    f"({old} then, {validator} now); its bytes are not mixed with "
                    "the ones kept"
                )
            self._seen[url] = validator

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
