"""The ``pftp`` command's entry point: the head start (early.py), then the CLI.

Kept apart from cli.py so that the probes start before the CLI's own imports."""

from __future__ import annotations

import sys

EXIT_INTERRUPTED = 130  # (cli.EXIT_INTERRUPTED, without importing the CLI)


def main() -> None:
    try:
        from pftp_client import early

        early.start(sys.argv[1:])
        from pftp_client.cli import main as cli_main
    except KeyboardInterrupt:
        # Ctrl-C while the CLI loads: nothing was written yet
        sys.stderr.write("pftp: interrupted\n")
        sys.exit(EXIT_INTERRUPTED)
    cli_main()
