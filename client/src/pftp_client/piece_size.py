"""The piece size a download uses (pieces.py holds the rest of the geometry).

Apart from pieces.py so that the coordinator's answer can be turned into
transfers (early.plan_transfers) before the CLI has loaded dataclasses: pieces.py
costs ~10 ms of imports, this module none."""

KIB = 1024
MIB = 1024 * KIB
MIN_PIECE = 64 * KIB
MAX_PIECE = 4 * MIB
# Paper 000 III: the number of blocks B should be much larger than the number
# of servers M; 16 blocks per flow keeps the tail short for small files.
PIECES_PER_FLOW = 16


def choose_piece_size(size: int, flows: int, hashed_piece_size: int | None = None) -> int:
    """Piece hashes fix the piece size; otherwise the largest power of two with
    at least ``PIECES_PER_FLOW`` pieces per flow, clamped to [64 KiB, 4 MiB]."""
    if hashed_piece_size:
        return hashed_piece_size
    target = size // max(1, flows * PIECES_PER_FLOW)
    piece = MIN_PIECE
    while piece * 2 <= target and piece < MAX_PIECE:
        piece *= 2
    return piece
