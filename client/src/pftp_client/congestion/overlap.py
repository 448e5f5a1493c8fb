"""Input checks and the common time window of two or more flows.

Detectors compare flows over the interval in which all of them were
receiving; packets outside it say nothing about sharing.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

Timestamps = npt.NDArray[np.int64]


def as_timestamps(values: Sequence[int] | npt.ArrayLike, name: str = "flow") -> Timestamps:
    """Validate one flow's arrival times (ns): 1-D, integer-valued, sorted."""
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ValueError(f"{name}: arrival timestamps must be a 1-D array, got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.number):
        raise ValueError(f"{name}: arrival timestamps must be numbers (ns), got {arr.dtype}")
    arr = arr.astype(np.int64, copy=False)
    if arr.size > 1 and np.any(np.diff(arr) < 0):
        raise ValueError(f"{name}: arrival timestamps must be sorted (non-decreasing)")
    return arr


def common_window(flows: Sequence[Timestamps]) -> tuple[int, int]:
    """[start, end] during which every flow has packets; start > end if none."""
    if any(f.size == 0 for f in flows):
        return 1, 0
    return int(max(f[0] for f in flows)), int(min(f[-1] for f in flows))


def clip_to_common_window(flows: Sequence[Timestamps]) -> list[Timestamps]:
    start, end = common_window(flows)
    if start > end:
        return [f[:0] for f in flows]
    return [f[(f >= start) & (f <= end)] for f in flows]


def last_packets(flow: Timestamps, count: int) -> Timestamps:
    """The newest ``count`` packets (a sliding detection window)."""
    return flow[-count:] if count > 0 else flow
