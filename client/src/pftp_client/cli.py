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
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from pftp_client.control_file import ResumeMismatch
from pftp_client.coordinator import CoordinatorError
from pftp_client.download import UsageError, download
from pftp_client.engine import EngineConfig, NoMirrorCouldServe
from pftp_client.integrity import VerificationFailed
from pftp_client.progress import choose_progress
from pftp_client.settings import SettingsError, load_settings

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_VERIFY = 3
EXIT_NO_MIRROR = 4
EXIT_OTHER = 5
EXIT_INTERRUPTED = 130

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="P-FTP: parallel, verified downloads from several mirrors.",
)


@app.callback()
def _root() -> None:
    """P-FTP client."""


def _fail(code: int, message: str) -> typer.Exit:
    typer.echo(f"pftp: error: {message}", err=True)
    return typer.Exit(code)


@app.command()
def get(
    name: Annotated[
        str | None, typer.Argument(help="logical file name (asks the coordinator) or a URL")
    ] = None,
    mirror: Annotated[
        list[str] | None, typer.Option("--mirror", "-m", help="mirror URL; repeat for several")
    ] = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="where to put the file")
    ] = None,
    coordinator: Annotated[
        str | None,
        typer.Option(help="coordinator URL (else $PFTP_COORDINATOR, config file, discovery)"),
    ] = None,
    sha256: Annotated[str | None, typer.Option(help="expected SHA-256 (hex)")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="no progress output")] = False,
    json_out: Annotated[
        bool, typer.Option("--json", help="print a JSON summary on stdout")
    ] = False,
    restart: Annotated[
        bool, typer.Option(help="discard an interrupted download of the same target")
    ] = False,
    stall_timeout: Annotated[
        float | None, typer.Option(help="seconds without data before a mirror counts as failed")
    ] = None,
    no_discovery: Annotated[
        bool, typer.Option(help="do not look for a coordinator by DNS SRV / broadcast")
    ] = False,
) -> None:
    """Download NAME via the coordinator, or the file behind --mirror URLs."""
    mirrors = list(mirror or [])
    try:
        settings = load_settings()
    except SettingsError as exc:
        raise _fail(EXIT_USAGE, str(exc)) from exc
    coordinators: list[str] = []
    if (name and not mirrors) or (name and (coordinator or settings.coordinators)):
        coordinators = [coordinator] if coordinator else list(settings.coordinators)
        if not coordinators and not no_discovery and not mirrors:
            from pftp_client.discovery import discover_coordinators

            coordinators = discover_coordinators(domain=settings.domain, listen_s=1.0)
    cfg = EngineConfig(
        timeout=settings.timeout, stall_timeout=stall_timeout or settings.stall_timeout
    )
    progress = choose_progress(quiet, json_out)
    try:
        summary = download(
            name,
            mirrors=mirrors,
            output=output,
            coordinator=coordinators,
            sha256=sha256,
            access_bandwidth_setting=settings.access_bandwidth,
            resume=not restart,
            config=cfg,
            progress=progress,
        )
    except UsageError as exc:
        raise _fail(EXIT_USAGE, str(exc)) from exc
    except VerificationFailed as exc:
        raise _fail(EXIT_VERIFY, str(exc)) from exc
    except NoMirrorCouldServe as exc:
        raise _fail(EXIT_NO_MIRROR, str(exc)) from exc
    except (CoordinatorError, ResumeMismatch) as exc:
        hint = " (use --restart to discard it)" if isinstance(exc, ResumeMismatch) else ""
        raise _fail(EXIT_OTHER, f"{exc}{hint}") from exc
    except KeyboardInterrupt as exc:
        typer.echo("pftp: interrupted; run the same command again to resume", err=True)
        raise typer.Exit(EXIT_INTERRUPTED) from exc
    except OSError as exc:
        raise _fail(EXIT_OTHER, str(exc)) from exc
    if json_out:
        json.dump(summary.to_json_dict(), sys.stdout, indent=2)
        sys.stdout.write("\n")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
