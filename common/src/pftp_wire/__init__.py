"""Wire models shared by the P-FTP coordinator, client and agent.

This package is the single definition of what crosses the network between the
three programs; none of them copies these shapes. Field names follow the
contract in the coordinator issue exactly.
"""

from pftp_wire.models import (
    ANNOUNCE_PORT,
    API_PREFIX,
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
