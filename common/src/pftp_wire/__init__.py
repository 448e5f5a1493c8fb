"""Wire models shared by the P-FTP coordinator, client and agent.

This package is the single definition of what crosses the network between the
three programs; none of them copies these shapes. Field names follow the
contract in the coordinator issue exactly.

The models are imported on first use (``from pftp_wire import DownloadReport``
works as before): ``import pftp_wire`` and its constants do not load pydantic,
which a coordinated ``pftp get`` would otherwise pay for before its first
request (see ``pftp_wire.plain``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pftp_wire.constants import ANNOUNCE_PORT, API_PREFIX

if TYPE_CHECKING:
    from pftp_wire.models import (
        Announcement,
        Assignment,
        AssignmentRequest,
        AssignmentResponse,
        Backup,
        DownloadReport,
        FileInfo,
        MirrorReport,
        Protocol,
        ReportAck,
        SamplesAck,
        UtilizationBatch,
        UtilizationSample,
    )

__all__ = [
    "ANNOUNCE_PORT",
    "API_PREFIX",
    "Announcement",
    "Assignment",
    "AssignmentRequest",
    "AssignmentResponse",
    "Backup",
    "DownloadReport",
    "FileInfo",
    "MirrorReport",
    "Protocol",
    "ReportAck",
    "SamplesAck",
    "UtilizationBatch",
    "UtilizationSample",
]

_CONSTANTS = {"ANNOUNCE_PORT", "API_PREFIX"}


def __getattr__(name: str) -> Any:
    if name in __all__ and name not in _CONSTANTS:
        from pftp_wire import models

        value = getattr(models, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
