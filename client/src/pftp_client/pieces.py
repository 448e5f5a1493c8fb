"""Piece geometry: the unit of verification, checkpointing and work splitting.

Flows stream long ranges (no gap between blocks, which is what pipelining buys
in paper 000, section III), but the bookkeeping works in pieces: a piece is
verified and recorded in the control file when its last byte is written, and
work is split only at piece boundaries, so an interrupted download loses at
most the one partial piece of each connection.
"""

from __future__ import annotations

from dataclasses import dataclass

from pftp_client.piece_size import (  # noqa: F401  (the geometry's constants, here too)
    KIB,
    MAX_PIECE,
    MIB,
    MIN_PIECE,
    PIECES_PER_FLOW,
    choose_piece_size,
)

# Work is split at multiples of this (not of the piece size): paper 000's
# termination idle time is bounded by one split unit over the slowest rate, and
# with 256 KiB pieces a 2 Mbit/s mirror would hold the download ~1 s at the end.
SPLIT_UNIT = 16 * KIB


def split_unit(piece_size: int) -> int:
    """Granularity of tail splits: ``SPLIT_UNIT``, or the piece when smaller. A
    split inside a piece is harmless: the piece is verified when its last byte
    is written, whoever wrote it, and a bad piece with two writers makes both
    suspects (engine.py); resume still restarts at most the partial piece."""
    return max(1, min(piece_size, SPLIT_UNIT))


@dataclass(frozen=True)
class PieceGrid:
    size: int
    piece_size: int

    def __post_init__(self) -> None:
        if self.piece_size <= 0:
            raise ValueError("piece_size must be > 0")

    @property
    def count(self) -> int:
        return -(-self.size // self.piece_size)

    def bounds(self, index: int) -> tuple[int, int]:
        start = index * self.piece_size
        return start, min(start + self.piece_size, self.size)

    def index_of(self, offset: int) -> int:
        return offset // self.piece_size

    def touching(self, start: int, end: int) -> range:
        """Indices of the pieces that overlap [start, end)."""
        if end <= start:
            return range(0)
        return range(start // self.piece_size, (end - 1) // self.piece_size + 1)

    def align_up(self, offset: int) -> int:
        p = self.piece_size
        return min(self.size, -(-offset // p) * p)

    def align_down(self, offset: int) -> int:
        return (offset // self.piece_size) * self.piece_size
