"""``pftp``: the command line (thin: parse, call ``download``, format the result).

Exit codes:
  0  the file is in place (and its SHA-256 matched, when one was known)
  2  usage error (bad options, bad URL, nothing to download)
  3  verification failed: the file did not match its SHA-256 and could not be
     repaired; it was NOT put in place (the .pftp-part file is kept)
  4  no mirror could serve the file (all failed, none reachable)
  5  coordinator or other error: coordinator unreachable with no mirror to
     fall back to, malformed coordinator answer, refusing to resume onto a
     different file, local I/O error
130 interrupted (Ctrl-C); run the same command again to resume
143 terminated (SIGTERM); likewise
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import threading
from collections.abc import Sequence

# Only the standard library and the light client modules are imported up front:
# start-up time is part of every download's time. download() imports the engine
# while the mirrors answer the size probe; the exceptions it may raise are told
# apart by module (_exit_code) so that the CLI does not import them first.
from pftp_client.downloader import UsageError, download
from pftp_client.progress import choose_progress
from pftp_client.settings import SettingsError, load_settings

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_VERIFY = 3
EXIT_NO_MIRROR = 4
EXIT_OTHER = 5
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143


def _positive_seconds(text: str) -> float:
    """argparse type: a number of seconds above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, not {text!r}")
    return value


class CliExit(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def _fail(code: int, message: str) -> CliExit:
    from pftp_client.transports.base import redacted

    print(f"pftp: error: {redacted(message)}", file=sys.stderr)
    return CliExit(code)


def _terminal_columns() -> int:
    """shutil.get_terminal_size().columns without importing shutil (which loads
    zlib, bz2 and lzma: ~3 ms of start-up)."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


class _HelpFormatter(argparse.HelpFormatter):
    # argparse builds a formatter for every add_argument (to check the metavar);
    # the default one imports shutil to ask for the terminal width.
    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
                 width: int | None = None) -> None:
        if width is None:
            width = _terminal_columns() - 2
        super().__init__(prog, indent_increment, max_help_position, width)


class _VersionAction(argparse.Action):
    """--version; importlib.metadata is loaded only when it is asked for (start-up)."""

    def __init__(self, option_strings: list[str], dest: str, **kw: object) -> None:
        super().__init__(
            option_strings, argparse.SUPPRESS, nargs=0, default=argparse.SUPPRESS,
            help="show the version and exit",
        )

    def __call__(self, parser: argparse.ArgumentParser, *args: object) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            v = version("pftp-client")
        except PackageNotFoundError:
            v = "unknown"
        sys.stdout.write(f"pftp {v}\n")  # (stdout, as argparse's own version action)
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pftp",
        description="P-FTP: parallel, verified downloads from several mirrors.",
        formatter_class=_HelpFormatter,
    )
    parser.add_argument("--version", action=_VersionAction)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    get = sub.add_parser(
        "get",
        help="download a file",
        description="Download NAME via the coordinator, or the file behind --mirror URLs.",
        formatter_class=_HelpFormatter,
    )
    get.add_argument(
        "name",
        nargs="?",
        default=None,
        metavar="NAME",
        help="logical file name (asks the coordinator) or a URL",
    )
    get.add_argument(
        "--mirror",
        "-m",
        action="append",
        default=None,
        metavar="URL",
        help="mirror URL; repeat for several",
    )
    get.add_argument(
        "--backup",
        action="append",
        default=None,
        metavar="URL",
        help="mirror URL kept in reserve (replaces a failed, slow or congested mirror)",
    )
    get.add_argument(
        "--congestion",
        choices=["auto", "off", "packet", "kernel", "app"],
        default="auto",
        help="shared-congestion detection and its timestamp source: auto = packet capture "
        "(root/CAP_NET_RAW) > kernel receive times (FTP) > receive-call times (default: auto)",
    )
    get.add_argument(
        # (str, not Path: Path drops the trailing "/" that says "a directory")
        "--output", "-o", default=None, metavar="PATH",
        help="target file, or a directory to put it in (a trailing / makes one)",
    )
    get.add_argument(
        "--coordinator",
        default=None,
        metavar="URL",
        help="coordinator URL (else $PFTP_COORDINATOR, config file, discovery)",
    )
    get.add_argument("--sha256", default=None, metavar="HEX", help="expected SHA-256 (hex)")
    get.add_argument("--quiet", "-q", action="store_true", help="no progress output")
    get.add_argument(
        "--json", dest="json_out", action="store_true", help="print a JSON summary on stdout"
    )
    get.add_argument(
        "--restart",
        action="store_true",
        help="discard an interrupted download of the same target",
    )
    get.add_argument(
        "--stall-timeout",
        type=_positive_seconds,
        default=None,
        metavar="SECONDS",
        help="seconds without data before a mirror counts as failed (default 15, or the "
        "config file's stall_timeout)",
    )
    get.add_argument(
        "--no-discovery",
        action="store_true",
        help="do not look for a coordinator by DNS SRV / broadcast",
    )
    return parser


def get(
    name: str | None = None,
    mirror: list[str] | None = None,
    backup: list[str] | None = None,
    congestion: str = "auto",
    output: str | None = None,
    coordinator: str | None = None,
    sha256: str | None = None,
    quiet: bool = False,
    json_out: bool = False,
    restart: bool = False,
    stall_timeout: float | None = None,
    no_discovery: bool = False,
) -> None:
    """Download NAME via the coordinator, or the file behind --mirror URLs."""
    mirrors = list(mirror or [])
    try:
        settings = load_settings()
    except SettingsError as exc:
        raise _fail(EXIT_USAGE, str(exc)) from exc
    if settings.unknown and not quiet:
        from pftp_client.settings import KNOWN_KEYS

        print(f"pftp: warning: {settings.source}: unknown setting(s) "
              f"{', '.join(settings.unknown)} ignored (known: {', '.join(KNOWN_KEYS)})",
              file=sys.stderr)
    coordinators: list[str] = []
    if (name and not mirrors) or (name and (coordinator or settings.coordinators)):
        coordinators = [coordinator] if coordinator else list(settings.coordinators)
        if not coordinators and not no_discovery and not mirrors:
            from pftp_client.discovery import discover_coordinators

            coordinators = discover_coordinators(domain=settings.domain)
    progress = choose_progress(quiet, json_out)
    try:
        summary = download(
            name,
            mirrors=mirrors,
            backups=list(backup or []),
            congestion=congestion,
            output=output,
            coordinator=coordinators,
            sha256=sha256,
            access_bandwidth_setting=settings.access_bandwidth,
            resume=not restart,
            timeout=settings.timeout,
            stall_timeout=settings.stall_timeout if stall_timeout is None else stall_timeout,
            progress=progress,
        )
    except UsageError as exc:
        _json_failure(json_out, EXIT_USAGE, str(exc))
        raise _fail(EXIT_USAGE, str(exc)) from exc
    except KeyboardInterrupt as exc:
        why = "terminated" if isinstance(exc, Terminated) else "interrupted"
        code = EXIT_TERMINATED if why == "terminated" else EXIT_INTERRUPTED
        _json_failure(json_out, code, f"{why}; run the same command again to resume")
        print(f"pftp: {why}; run the same command again to resume", file=sys.stderr)
        raise CliExit(code) from exc
    except Exception as exc:
        code = _exit_code(exc)
        if code is None:
            raise
        resumable = _is(exc, "control_file", "ResumeMismatch")
        hint = " (use --restart to discard it)" if resumable else ""
        _json_failure(json_out, code, f"{exc}{hint}")
        raise _fail(code, f"{exc}{hint}") from exc
    if json_out:
        import json

        # one write: with PYTHONUNBUFFERED, json.dump writes every token on its own
        sys.stdout.write(json.dumps(summary.to_json_dict(), indent=2) + "\n")
        sys.stdout.flush()


def _json_failure(json_out: bool, code: int, message: str) -> None:
    """With --json, a failed download still leaves one JSON object on stdout: the
    exit code and the message (which names each mirror's reason)."""
    if json_out:
        import json

        from pftp_client.transports.base import redacted

        sys.stdout.write(
            json.dumps({"error": redacted(message), "exit_code": code}, indent=2) + "\n"
        )
        sys.stdout.flush()


def _is(exc: BaseException, module: str, name: str) -> bool:
    """isinstance(exc, pftp_client.<module>.<name>), without importing the module:
    an exception whose module never loaded cannot have been raised. Nor one whose
    module is still loading in another thread (the engine's modules load in the
    background) and has not defined it yet."""
    cls = getattr(sys.modules.get(f"pftp_client.{module}"), name, None)
    return cls is not None and isinstance(exc, cls)


def _exit_code(exc: Exception) -> int | None:
    """The exit code for an exception download() raises (module doc); None: a bug."""
    if _is(exc, "integrity", "VerificationFailed"):
        return EXIT_VERIFY
    if _is(exc, "engine", "NoMirrorCouldServe"):
        return EXIT_NO_MIRROR
    if _is(exc, "coordinator", "CoordinatorError") or _is(exc, "control_file", "ResumeMismatch"):
        return EXIT_OTHER
    if _is(exc, "engine", "EngineAborted"):  # a local error mid-download (disk full)
        return EXIT_OTHER
    if isinstance(exc, OSError):
        return EXIT_OTHER
    return None


def run(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and run the command; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    opts = vars(args)
    opts.pop("command")
    try:
        get(**opts)
    except CliExit as exc:
        return exc.code
    return EXIT_OK


class Terminated(KeyboardInterrupt):
    """SIGTERM (a service manager, `kill`): ended like Ctrl-C, so the control file
    is saved and the download resumes; exit 143 as a process killed by it."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise Terminated


def main() -> None:
    import signal

    signal.signal(signal.SIGTERM, _on_sigterm)
    _exit(run())


def _normal_exit(code: int) -> None:
    # Everything is done (file in place, report sent). Freezing the heap spares the
    # interpreter's final collections over every object of pydantic/numpy/...
    gc.freeze()
    sys.exit(code)


def _exit(code: int) -> None:
    """sys.exit(code), minus the interpreter's teardown (~5 ms of freeing every
    module): flush the streams and run the atexit handlers as the interpreter
    would, then end the process. Only when no other non-daemon thread runs (the
    interpreter would wait for it) and the streams flushed; else a normal exit."""
    others = [
        t
        for t in threading.enumerate()
        if t is not threading.current_thread() and not t.daemon and t.is_alive()
    ]
    if others or threading.current_thread() is not threading.main_thread():
        _normal_exit(code)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        _normal_exit(code)  # let the interpreter report it as it always does
    import atexit

    atexit._run_exitfuncs()
    os._exit(code)


if __name__ == "__main__":
    main()
