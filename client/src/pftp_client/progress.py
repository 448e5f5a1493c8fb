"""What the user sees while a download runs.

``RichProgress``: a live table on a terminal (total bar, then per mirror: state,
bytes, rate, events). ``PlainProgress``: one line every few seconds when the
output is not a terminal (logs, CI). ``QuietProgress``: nothing but errors.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:  # rich is imported only when a live display is shown (start-up cost)
    from rich.console import Console
    from rich.live import Live

    from pftp_client.summary import DownloadSummary, MirrorStats


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def human_rate(bytes_per_s: float | None) -> str:
    """A download rate as every display shows it: bytes per second in the binary
    units of the sizes beside it ("11.9 MiB/s"; README, "the client")."""
    if bytes_per_s is None:
        return "-"
    return f"{human_bytes(bytes_per_s)}/s"


def total_rate(mirrors: Sequence[MirrorStats], rates: dict[str, float | None]) -> float | None:
    """The sum of the rates the mirror table shows (bytes/s); None: none known yet."""
    known = [r for m in mirrors if (r := rates.get(m.name)) is not None]
    return sum(known) if known else None


class QuietProgress:
    def start(self, name: str, size: int, mirrors: Sequence[str]) -> None:
        pass

    def update(
        self,
        done: int,
        size: int,
        elapsed: float,
        mirrors: Sequence[MirrorStats],
        rates: dict[str, float | None],
    ) -> None:
        pass

    def finish(self, summary: DownloadSummary | None) -> None:
        pass

    def message(self, text: str) -> None:
        pass


class PlainProgress(QuietProgress):
    def __init__(self, stream: TextIO = sys.stderr, every_s: float = 5.0) -> None:
        self.stream = stream
        self.every_s = every_s
        self._last = 0.0

    def _print(self, text: str) -> None:
        print(text, file=self.stream, flush=True)

    def start(self, name: str, size: int, mirrors: Sequence[str]) -> None:
        self._print(f"pftp: {name}: {human_bytes(size)} from {len(mirrors)} mirror(s)")

    def update(
        self,
        done: int,
        size: int,
        elapsed: float,
        mirrors: Sequence[MirrorStats],
        rates: dict[str, float | None],
    ) -> None:
        now = time.monotonic()
        if now - self._last < self.every_s:
            return
        self._last = now
        pct = 100 * done / size if size else 100.0
        per = ", ".join(f"{m.name} {m.state} {human_rate(rates.get(m.name))}" for m in mirrors)
        total = human_rate(total_rate(mirrors, rates))
        self._print(f"pftp: {pct:5.1f}% {human_bytes(done)} in {elapsed:.0f}s, {total} [{per}]")

    def finish(self, summary: DownloadSummary | None) -> None:
        if summary is not None:
            self._print(render_summary_line(summary))

    def message(self, text: str) -> None:
        self._print(f"pftp: {text}")


class RichProgress(QuietProgress):
    def __init__(self, console: Console | None = None) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
        )
        from rich.table import Table

        self.console = console or Console(stderr=True)
        self._bar = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            DownloadColumn(binary_units=True),  # (MiB, as the table: not rich's MB)
            # the table's rates summed, formatted as the table's (not rich's own MB/s
            # estimate over a 30 s window)
            TextColumn("{task.fields[rate]}", markup=False),
            TimeRemainingColumn(),
            console=self.console,
        )
        self._task = None
        self._table = Table()
        self._live: Live | None = None

    def start(self, name: str, size: int, mirrors: Sequence[str]) -> None:
        from rich.console import Group
        from rich.live import Live
        from rich.markup import escape

        # (names and paths are text, not markup: "[draft]" is part of a file name)
        self._task = self._bar.add_task(escape(name), total=size or 1, rate=human_rate(None))
        self._live = Live(Group(self._bar, self._table), console=self.console, refresh_per_second=4)
        self._live.start()

    def update(
        self,
        done: int,
        size: int,
        elapsed: float,
        mirrors: Sequence[MirrorStats],
        rates: dict[str, float | None],
    ) -> None:
        if self._task is None or self._live is None:
            return
        from rich.console import Group

        self._bar.update(
            self._task, completed=done, rate=human_rate(total_rate(mirrors, rates))
        )
        self._live.update(Group(self._bar, self._mirror_table(mirrors, rates)))

    @staticmethod
    def _mirror_table(mirrors: Sequence[MirrorStats], rates: dict[str, float | None]) -> object:
        from rich.table import Table
        from rich.text import Text

        table = Table(box=None, pad_edge=False)
        for col in ("mirror", "state", "bytes", "rate", "events"):
            # (fold, not "…": on a narrow terminal every mirror would read "ftp://…")
            table.add_column(col, overflow="fold" if col == "mirror" else "ellipsis")
        for m in mirrors:
            table.add_row(
                Text(m.name),
                Text(m.state),
                human_bytes(m.bytes),
                human_rate(rates.get(m.name)),
                Text(",".join(m.events)),
            )
        return table

    def finish(self, summary: DownloadSummary | None) -> None:
        if self._live is not None:
            if summary is not None and self._task is not None:
                from rich.console import Group

                self._bar.update(self._task, completed=summary.size or 1,
                                 rate=human_rate(average_rate(summary)))
                # the last frame stays on screen: show how each mirror ended
                # (its last update may be up to 0.5 s old: "fetching", fewer bytes)
                final = {m.name: m.rate_bps / 8 for m in summary.mirrors}
                table = self._mirror_table(summary.mirrors, final)  # type: ignore[arg-type]
                self._live.update(Group(self._bar, table), refresh=True)
            self._live.stop()
            self._live = None
        if summary is not None:
            self.console.print(render_summary_line(summary), markup=False, highlight=False)

    def message(self, text: str) -> None:
        from rich.text import Text

        self.console.print(Text.assemble(("pftp:", "yellow"), " ", text))


def average_rate(s: DownloadSummary) -> float:
    """Bytes per second over the download (this run's bytes: not the resumed ones)."""
    return (s.size - s.resumed_bytes) / s.seconds if s.seconds > 0 else 0.0


def render_summary_line(s: DownloadSummary) -> str:
    check = (
        "SHA-256 verified" if s.sha256_verified
        else f"no SHA-256 known; {s.cross_checked_spots} spot(s) matched another mirror's copy"
        if s.cross_checked_spots else "no SHA-256 known to check against"
    )
    per = "; ".join(
        f"{m.name}: {human_bytes(m.bytes)} {human_rate(m.rate_bps / 8)}"  # (rate_bps: bits)
        + (f" ({','.join(m.events)})" if m.events else "")
        for m in s.mirrors
    )
    head = (f"pftp: {s.path}: {human_bytes(s.size)} in {s.seconds:.1f}s "
            f"({human_rate(average_rate(s))})")
    return f"{head}, {check}. {per}"


def choose_progress(quiet: bool, json_out: bool, stream: TextIO = sys.stderr) -> QuietProgress:
    if quiet:
        return QuietProgress()
    if stream.isatty() and not json_out:
        return RichProgress()
    return PlainProgress(stream)
