"""numpy, loaded on a thread of its own before the engine needs it.

The engine reads flows' arrivals with numpy (the early look, the monitor round's
stream signals) while it holds its lock. numpy's first import costs ~0.15 s of
CPU here (more with the flows running): made under that lock, it held every
flow's writes for as long, in their slow start (wide-area, coordinated: 1.15x ->
1.18x). ``start`` loads it on a daemon thread; the engine's readers ask ``ready``
and wait a little rather than import it themselves.
"""

from __future__ import annotations

import logging
import threading

_LOG = logging.getLogger(__name__)
_loaded = threading.Event()
_start_lock = threading.Lock()
_started = False


def _load() -> None:
    try:
        import numpy  # noqa: F401
    except ImportError as exc:  # a broken install: the reader's own import says so
        _LOG.debug("numpy did not load: %s", exc)
    finally:
        # (set either way: a reader then imports it itself and meets the error)
        _loaded.set()


def start() -> None:
    """Load numpy on a daemon thread, once per process (no-op afterwards)."""
    global _started
    with _start_lock:
        if _started:
            return
        _started = True
    threading.Thread(target=_load, name="pftp-numpy-load", daemon=True).start()


def ready() -> bool:
    """Whether numpy can be used without paying its import: loaded by ``start``.
    Not started yet: starts it and says no."""
    if _loaded.is_set():
        return True
    start()
    return False
