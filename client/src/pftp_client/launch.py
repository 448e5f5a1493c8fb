"""The ``pftp`` command's entry point: the head start (early.py), then the CLI.

Kept apart from cli.py so that the probes start before the CLI's own imports."""

from __future__ import annotations

import sys


def main() -> None:
    from pftp_client import early

    early.start(sys.argv[1:])
    from pftp_client.cli import main as cli_main

    cli_main()
