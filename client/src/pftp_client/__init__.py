"""P-FTP client library: parallel, adaptive, verified downloads from several mirrors.

from pftp_client import download
summary = download("ubuntu.iso", coordinator="http://coord:8000")
summary = download(mirrors=["ftp://a/f.iso", "http://b/f.iso"], sha256="...", output="f.iso")
"""

from pftp_client.control_file import ResumeMismatch
from pftp_client.coordinator import (
    CoordinatorAnswerError,
    CoordinatorError,
    CoordinatorRefused,
    CoordinatorUnavailable,
)
from pftp_client.download import UsageError, download
from pftp_client.engine import EngineConfig, NoMirrorCouldServe
from pftp_client.flow_observer import FlowControl, FlowObserver, FlowTimings
from pftp_client.integrity import VerificationFailed
from pftp_client.summary import DownloadSummary, MirrorEvent, MirrorStats

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
