"""P-FTP client library: parallel, adaptive, verified downloads from several mirrors.

from pftp_client import download
summary = download("ubuntu.iso", coordinator="http://coord:8000")
summary = download(mirrors=["ftp://a/f.iso", "http://b/f.iso"], sha256="...", output="f.iso")
"""

from __future__ import annotations

from pftp_client.lazy import lazy_attributes

TYPE_CHECKING = False  # (typing.TYPE_CHECKING without importing typing)
if TYPE_CHECKING:
    from pftp_client.control_file import ResumeMismatch
    from pftp_client.coordinator import (
        CoordinatorAnswerError,
        CoordinatorError,
        CoordinatorRefused,
        CoordinatorUnavailable,
    )
    from pftp_client.downloader import UsageError, download
    from pftp_client.engine import EngineConfig, NoMirrorCouldServe
    from pftp_client.flow_observer import FlowControl, FlowObserver, FlowTimings
    from pftp_client.integrity import VerificationFailed
    from pftp_client.summary import DownloadSummary, MirrorEvent, MirrorStats

# The public API is imported on first use (start-up time: `pftp` connects to the
# mirrors before the CLI, the engine, hashing and summary modules load; early.py).
_LAZY = {
    "CoordinatorAnswerError": "pftp_client.coordinator",
    "CoordinatorError": "pftp_client.coordinator",
    "CoordinatorRefused": "pftp_client.coordinator",
    "CoordinatorUnavailable": "pftp_client.coordinator",
    "DownloadSummary": "pftp_client.summary",
    "EngineConfig": "pftp_client.engine",
    "FlowControl": "pftp_client.flow_observer",
    "FlowObserver": "pftp_client.flow_observer",
    "FlowTimings": "pftp_client.flow_observer",
    "MirrorEvent": "pftp_client.summary",
    "MirrorStats": "pftp_client.summary",
    "NoMirrorCouldServe": "pftp_client.engine",
    "ResumeMismatch": "pftp_client.control_file",
    "VerificationFailed": "pftp_client.integrity",
    "UsageError": "pftp_client.downloader",
    "download": "pftp_client.downloader",
}


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY)

__all__ = [
    "CoordinatorAnswerError",
    "CoordinatorError",
    "CoordinatorRefused",
    "CoordinatorUnavailable",
    "DownloadSummary",
    "EngineConfig",
    "FlowControl",
    "FlowObserver",
    "FlowTimings",
    "MirrorEvent",
    "MirrorStats",
    "NoMirrorCouldServe",
    "ResumeMismatch",
    "UsageError",
    "VerificationFailed",
    "download",
]
