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
from typing import Any

# Only the standard library and the light client modules are imported up front:
# start-up time is part of every download's time. download() imports the engine
# while the mirrors answer the size probe; the exceptions it may raise are told
# apart by module (_exit_code) so that the CLI does not import them first.
from pftp_client.downloader import UsageError, download
from pftp_client.launch import DownloadPhases, Terminated, catch_signals, show_result
from pftp_client.progress import choose_progress
from pftp_client.settings import SettingsError, load_settings

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_VERIFY = 3
EXIT_NO_MIRROR = 4
EXIT_OTHER = 5
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143


def _connections(text: str) -> int:
    """argparse type: connections per mirror, 1 to 16."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if not 1 <= value <= 16:
        raise argparse.ArgumentTypeError(f"must be from 1 to 16, not {value}")
    return value


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
        "--max-connections",
        type=_connections,
        default=None,
        metavar="N",
        help="connections per mirror at most; more than one only to a mirror whose one "
        "connection leaves its path idle (a per-connection rate limit, loss), and kept only "
        "while they pay (default 8, or the config file's max_connections; 1: one each)",
    )
    get.add_argument(
        "--no-cross-check",
        action="store_true",
        help="with no SHA-256 known, do not compare spots of each mirror's bytes with "
        "another mirror's copy (or the config file's cross_check = false)",
    )
    get.add_argument(
        "--no-discovery",
        action="store_true",
        help="do not look for a coordinator by DNS SRV / broadcast",
    )
    get.add_argument(
        "--plot",
        default=None,
        metavar="PATH",
        help="write an SVG chart of each mirror's throughput over time to PATH (- : stdout), "
        "also when the download fails",
    )
    plot = sub.add_parser(
        "plot",
        help="chart a download's throughput per mirror (SVG) from its --json summary",
        description="Write an SVG chart of each mirror's throughput over time, with the "
        "mirrors' events, from the summary `pftp get --json` printed.",
        formatter_class=_HelpFormatter,
    )
    plot.add_argument(
        "summary", metavar="SUMMARY.json", help="the output of `pftp get --json` (- : stdin)"
    )
    plot.add_argument(
        "--output", "-o", default=None, metavar="PATH",
        help="the SVG file (default: the summary's path with .svg for .json; - : stdout)",
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
    max_connections: int | None = None,
    no_discovery: bool = False,
    plot: str | None = None,
    no_cross_check: bool = False,
) -> None:
    """Download NAME via the coordinator, or the file behind --mirror URLs."""
    mirrors = list(mirror or [])
    if plot is not None:
        # (before the download: not after ten minutes of it)
        problem = (
            "--plot - and --json would both write to stdout" if plot == "-" and json_out
            else None if plot == "-" else _plot_path_problem(plot)
        )
        if problem is not None:
            _json_failure(json_out, EXIT_USAGE, problem)
            raise _fail(EXIT_USAGE, problem)
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
    # (Ctrl-C raises KeyboardInterrupt only while the engine runs: launch.py)
    progress = DownloadPhases(choose_progress(quiet, json_out))
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
            max_connections=(settings.max_connections if max_connections is None
                             else max_connections),
            cross_check=settings.cross_check and not no_cross_check,
            progress=progress,
        )
    except UsageError as exc:
        _json_failure(json_out, EXIT_USAGE, str(exc))
        raise _fail(EXIT_USAGE, str(exc)) from exc
    except KeyboardInterrupt as exc:
        progress.finish(None)  # (if the download did not: a second Ctrl-C ends us at once)
        why = "terminated" if isinstance(exc, Terminated) else "interrupted"
        code = EXIT_TERMINATED if why == "terminated" else EXIT_INTERRUPTED
        message = f"{why}; run the same command again to resume"
        _json_failure(json_out, code, message, exc)
        _plot_failure(plot, code, message, exc, quiet)
        print(f"pftp: {message}", file=sys.stderr)
        raise CliExit(code) from exc
    except Exception as exc:
        code = _exit_code(exc)
        if code is None:
            raise
        resumable = _is(exc, "control_file", "ResumeMismatch")
        hint = " (use --restart to discard it)" if resumable else ""
        _json_failure(json_out, code, f"{exc}{hint}", exc)
        _plot_failure(plot, code, f"{exc}{hint}", exc, quiet)
        raise _fail(code, f"{exc}{hint}") from exc
    out = summary.to_json_dict() if json_out or plot is not None else {}
    if json_out:
        _print_json(_json_text(out) + "\n")  # (a Ctrl-C now adds no failure object)
    if plot is not None:
        problem = _write_plot(plot, out)
        if problem is not None:  # (the file is in place; the chart asked for is not)
            raise _fail(EXIT_USAGE, problem)
        if not quiet:
            print(f"pftp: throughput plot written to {plot}", file=sys.stderr)


def _failure(code: int, message: str, exc: BaseException | None) -> dict[str, Any]:
    """What --json prints for a failed download: the exit code and the message
    (which names each mirror's reason), and the timeline when transfers ran."""
    from pftp_client.transports.base import redacted

    out: dict[str, Any] = {"error": redacted(message), "exit_code": code}
    timeline = getattr(exc, "timeline", None)
    if timeline is not None:
        out["timeline"] = timeline.to_json_dict()
    return out


def _json_failure(
    json_out: bool, code: int, message: str, exc: BaseException | None = None
) -> None:
    """With --json, a failed download still leaves one JSON object on stdout."""
    if json_out:
        _print_json(_json_text(_failure(code, message, exc)) + "\n")


def _print_json(text: str) -> None:
    """The --json result on stdout, in one write, with signals held until it is out
    and marked shown (launch.show_result): one JSON object whatever comes when."""

    def write() -> None:
        # one write: with PYTHONUNBUFFERED, json.dump writes every token on its own
        sys.stdout.write(text)
        sys.stdout.flush()

    show_result(write)


def _plot_failure(
    plot: str | None, code: int, message: str, exc: BaseException, quiet: bool
) -> None:
    """--plot after a failed download, when the transfers had begun (a warning if
    it cannot be written: the download's own exit code stands)."""
    if plot is None or getattr(exc, "timeline", None) is None:
        return
    problem = _write_plot(plot, _failure(code, message, exc))
    if problem is not None:
        print(f"pftp: warning: {problem}", file=sys.stderr)
    elif not quiet:
        print(f"pftp: throughput plot written to {plot}", file=sys.stderr)


def _json_text(obj: dict[str, Any]) -> str:
    """json.dumps(obj, indent=2), but each mirror's bins of the timeline on one
    line (indent=2 would give each of thousands of numbers a line)."""
    import json

    tl = obj.get("timeline")
    if not isinstance(tl, dict) or not isinstance(tl.get("mirrors"), dict):
        return json.dumps(obj, indent=2)
    nonce = os.urandom(8).hex()  # (no mirror name or detail can guess it)
    rows = {f"@bins-{nonce}-{i}": bins for i, bins in enumerate(tl["mirrors"].values())}
    tokens = iter(rows)
    mirrors = {name: next(tokens) for name in tl["mirrors"]}
    text = json.dumps({**obj, "timeline": {**tl, "mirrors": mirrors}}, indent=2)
    for token, bins in rows.items():
        text = text.replace(f'"{token}"', json.dumps(bins), 1)
    return text


def _plot_path_problem(path: str, option: str = "--plot") -> str | None:
    """Why the chart could not be written to ``path``, or None."""
    p = os.path.expanduser(path)
    if os.path.isdir(p):
        return f"{option} {path} is a directory; give a file name such as " \
            f"{p.rstrip('/')}/plot.svg"
    parent = os.path.dirname(p) or "."
    if not os.path.isdir(parent):
        return f"{option} {path}: no directory {parent}"
    if not os.access(parent, os.W_OK) or (os.path.exists(p) and not os.access(p, os.W_OK)):
        return f"{option} {path}: not writable"
    return None


def _write_plot(path: str, summary: dict[str, Any]) -> str | None:
    """Write the chart of ``summary`` (a --json dict) to ``path``; the problem if
    it could not be written, else None."""
    from pftp_client.plot_svg import svg_from_summary

    return _write_svg(path, svg_from_summary(summary))


def _write_svg(path: str, svg: str) -> str | None:
    if path == "-":
        sys.stdout.write(svg)
        sys.stdout.flush()
        return None
    try:
        with open(os.path.expanduser(path), "w", encoding="utf-8") as f:
            f.write(svg)
    except OSError as exc:
        return f"cannot write the plot to {path}: {exc.strerror or exc}"
    return None


def plot_summary(summary: str, output: str | None = None) -> None:
    """``pftp plot SUMMARY.json [-o OUT.svg]``."""
    import json

    from pftp_client.plot_svg import svg_from_summary

    src = "standard input" if summary == "-" else summary
    try:
        if summary == "-":
            text = sys.stdin.read()
        else:
            with open(os.path.expanduser(summary), encoding="utf-8") as f:
                text = f.read()
    except OSError as exc:
        raise _fail(EXIT_USAGE, f"cannot read {src}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise _fail(EXIT_USAGE, f"{src} is not JSON (not UTF-8 text); give the output "
                    "of `pftp get --json`") from exc
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise _fail(EXIT_USAGE, f"{src} is not JSON ({exc}); give the output of "
                    "`pftp get --json`") from exc
    try:
        svg = svg_from_summary(data)
    except ValueError as exc:
        raise _fail(EXIT_USAGE, f"cannot plot {src}: {exc}") from exc
    if output is None:
        stem, ext = os.path.splitext(summary)
        output = "-" if summary == "-" else (stem if ext == ".json" else summary) + ".svg"
    problem = (_plot_path_problem(output, "-o") if output != "-" else None) or _write_svg(
        output, svg
    )
    if problem is not None:
        raise _fail(EXIT_USAGE, problem)


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
    command = opts.pop("command")
    try:
        if command == "plot":
            plot_summary(**opts)
        else:
            get(**opts)
    except CliExit as exc:
        return exc.code
    return EXIT_OK


def main() -> None:
    catch_signals()  # (launch.main did already; `python -c "...cli import main"` did not)
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
