"""The ``pftp`` command's entry point: the head start (early.py), then the CLI.

Kept apart from cli.py so that the probes start before the CLI's own imports.

It also decides how Ctrl-C (SIGINT) and SIGTERM end the process, from its first
line on. Only while a download's engine runs, with its part and control files
open, does a signal raise KeyboardInterrupt (``Terminated`` for SIGTERM): the
engine stops its flows and the control file keeps what was done. Before that
(imports, the head start, argument parsing, the size probes) and after it (the
summary, the interpreter's exit) the process ends at once with one line on
stderr and exit 130 (143): there is nothing to save, and an exception raised
there is unsafe. While other threads import modules (the head start, the
background imports), a KeyboardInterrupt raised inside the import system can
leave the import lock held, and both threads then wait forever (seen in
testing), or be swallowed by a weakref callback; at the exit it would turn a
finished run into a traceback from atexit. On disk an exit at once leaves what
a crash leaves, which a rerun resumes from (notes/ctrl-c.md).
"""

from __future__ import annotations

# _imp, _signal (signal's C half): loaded with the interpreter (signal.py loads enum)
import _imp
import _signal
import os
import sys

TYPE_CHECKING = False  # (typing.TYPE_CHECKING without importing typing)
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

EXIT_INTERRUPTED = 130  # (cli.EXIT_INTERRUPTED, without importing the CLI)
EXIT_TERMINATED = 143
RESUME_HINT = "run the same command again to resume"


class Terminated(KeyboardInterrupt):
    """SIGTERM (a service manager, `kill`): ended like Ctrl-C, so the control file
    is saved and the download resumes; exit 143 as a process killed by it."""


# What a signal does now (_on_signal).
_AT_ONCE = "at once"  # nothing to save: exit
_RAISE = "raise"  # the engine runs: KeyboardInterrupt / Terminated
_HOLD = "hold"  # a step that must not be cut short (the display's last frame)
_phase = _AT_ONCE
_held: int | None = None  # a signal that came during _HOLD
_ended = False  # the download's files were closed
_shown = False  # the CLI printed its result (--json: a JSON object on stdout)


def result_shown() -> None:
    """The CLI printed its --json result: an exit at once adds no failure object."""
    global _shown
    _shown = True


def show_result(write: Callable[[], None]) -> None:
    """Print the CLI's --json result with signals held, and mark it shown: a
    signal between the write and the mark printed a failure object after it
    (two JSON objects on stdout). A signal held meanwhile acts after."""
    global _phase
    before = _phase
    _phase = _HOLD
    try:
        write()
        result_shown()
    finally:
        _enter(before)


def catch_signals() -> None:
    """Let _on_signal handle SIGINT and SIGTERM (again: idempotent)."""
    _signal.signal(_signal.SIGINT, _on_signal)
    _signal.signal(_signal.SIGTERM, _on_signal)


def _on_signal(signum: int, frame: object) -> None:
    global _held
    if _phase == _RAISE:
        raise Terminated if signum == _signal.SIGTERM else KeyboardInterrupt
    if _phase == _HOLD:
        if _held is None:
            _held = signum
        return
    _exit_now(signum)


def _exit_now(signum: int) -> None:
    """End the process now: one line on stderr (with --json, unless the CLI printed
    its result, the failure object cli._json_failure prints), exit 130 or 143."""
    terminated = signum == _signal.SIGTERM
    code = EXIT_TERMINATED if terminated else EXIT_INTERRUPTED
    why = "terminated" if terminated else "interrupted"
    text = why if _ended else f"{why}; {RESUME_HINT}"
    for stream in (sys.stdout, sys.stderr):
        try:  # (what was printed before goes out first)
            stream.flush()
        except (AttributeError, OSError, ValueError, RuntimeError):
            # (None, closed, or interrupted in its own write: nothing more to do)
            continue
    if not _shown and "--json" in sys.argv[1:]:
        _write(1, json_failure_text(code, text))
    _write(2, f"pftp: {text}\n")
    os._exit(code)


def json_failure_text(code: int, message: str) -> str:
    """json.dumps({"error": message, "exit_code": code}, indent=2) + "\\n" for a
    message with nothing to escape, without loading json (a unit test compares)."""
    return f'{{\n  "error": "{message}",\n  "exit_code": {code}\n}}\n'


def _write(fd: int, text: str) -> None:
    # os.write, not the stream: the main thread may be inside that stream's write
    data = text.encode()
    try:
        while data:
            data = data[os.write(fd, data):]
    except OSError:
        return


def _enter(phase: str) -> None:
    """Switch to ``phase``, then act on a signal held meanwhile as it says."""
    global _phase, _held
    _phase = phase
    held, _held = _held, None
    if held is not None:
        _on_signal(held, None)


class DownloadPhases:
    """The CLI's progress display, wrapped so that the signal phases follow the
    download: ``start`` comes once the part and control files are open and the
    engine is about to run, ``finish`` once they are closed (downloader's
    _run_locked); the CLI calls ``finish(None)`` again when an interrupt reaches
    it (a no-op when the download already did)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def start(self, name: str, size: int, mirrors: Sequence[str]) -> None:
        global _phase, _ended
        _ended = False
        _phase = _HOLD  # (a Live display started halfway would stay on screen)
        try:
            self.inner.start(name, size, mirrors)
        finally:
            _enter(_RAISE)

    def update(self, done: int, size: int, elapsed: float, mirrors: Sequence[Any],
               rates: dict[str, float | None]) -> None:
        self.inner.update(done, size, elapsed, mirrors, rates)

    def finish(self, summary: Any) -> None:
        global _phase, _ended
        _phase = _HOLD  # (the last frame and the terminal's cursor are restored)
        try:
            self.inner.finish(summary)
        finally:
            _ended = True
            _enter(_AT_ONCE)

    def message(self, text: str) -> None:
        self.inner.message(text)


def main() -> None:
    catch_signals()  # (first: from here on no KeyboardInterrupt can escape)
    if _imp.lock_held():
        # A Ctrl-C before that line was raised in a module lock's weakref callback,
        # which reports it as ignored and goes on with the import lock held: the
        # first thread to import would wait forever (seen in testing). Honoured now.
        _exit_now(_signal.SIGINT)
    from pftp_client import early

    early.start(sys.argv[1:])
    from pftp_client.cli import main as cli_main

    cli_main()
