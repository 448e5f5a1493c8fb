"""HTTP scan: HEAD per registered file over one keep-alive connection."""

from __future__ import annotations

from collections.abc import Iterable

import httpx

from pftp_coordinator.probes.throughput import join_url

Seen = dict[str, int | None]


def scan_http(base_url: str, paths: Iterable[str], *, timeout_s: float = 30.0) -> Seen:
    """Sizes of the ``paths`` that answer HEAD with 2xx; 404/410 = missing.
    Other statuses raise: a broken server must not make every replica vanish."""
    seen: Seen = {}
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    with httpx.Client(
        timeout=timeout_s,
        limits=limits,
        follow_redirects=True,
        headers={"User-Agent": "pftp-coordinator-scan"},
    ) as client:
        for p in paths:
            resp = client.head(join_url(base_url, p))
            if resp.status_code in (404, 410):
                continue
            if resp.status_code >= 400:
                raise httpx.HTTPStatusError(
                    f"HEAD {resp.request.url}: HTTP {resp.status_code}",
                    request=resp.request,
                    response=resp,
                )
            length = resp.headers.get("content-length")
            seen[p] = int(length) if length and length.isdigit() else None
    return seen
