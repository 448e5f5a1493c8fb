"""Pick the fetcher for a mirror URL by its scheme."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from pftp_client.transports.base import RangeFetcher

SUPPORTED_SCHEMES = ("ftp", "http", "https")


def fetcher_for_url(
    url: str, *, timeout: float = 30.0, stall_timeout: float = 15.0, **options: Any
) -> RangeFetcher:
    """A new ``RangeFetcher`` for ``url``. Extra keyword options go to the
    fetcher (``netrc_file`` for FTP, ``verify`` for HTTPS).

    Raises ValueError for a malformed URL or a scheme we do not speak.
    """
    if not isinstance(url, str) or not url.strip():
        raise ValueError(f"mirror URL must be a non-empty string, got {url!r}")
    if any(c in url for c in "\r\n\t\0 "):
        raise ValueError(f"mirror URL contains whitespace or control characters: {url!r}")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - property access validates the port
    except ValueError as exc:
        raise ValueError(f"malformed mirror URL {url!r}: {exc}") from exc
    scheme = parts.scheme.lower()
    if not scheme:
        raise ValueError(
            f"mirror URL {url!r} has no scheme; use one of {', '.join(SUPPORTED_SCHEMES)}"
        )
    if scheme not in SUPPORTED_SCHEMES:
        raise ValueError(
            f"unsupported scheme {scheme!r} in {url!r}; use one of {', '.join(SUPPORTED_SCHEMES)}"
        )
    if not parts.hostname:
        raise ValueError(f"mirror URL {url!r} has no host")
    if scheme == "ftp":
        from pftp_client.transports.ftp import FtpFetcher

        return FtpFetcher(url, timeout=timeout, stall_timeout=stall_timeout, **options)
    from pftp_client.transports.http import HttpFetcher

    return HttpFetcher(url, timeout=timeout, stall_timeout=stall_timeout, **options)
