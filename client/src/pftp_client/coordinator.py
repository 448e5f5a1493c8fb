"""Talking to the coordinator: ask for assignments, send the report afterwards.

Paper 001, Algorithm P-FTP Client lines 1-11: the request is sent up to three
times; with no answer the client downloads without the coordinator (the caller
decides how: dynamic access over the user's mirrors, or one plain download).
An answer that arrives but cannot be used (bad JSON, fields missing, portions
that overlap or leave holes) is a ``CoordinatorAnswerError``, never a guess.

Start-up cost (notes/client-coordinated-path.md): the two POSTs use the standard
library's HTTP client, not httpx, and the messages are encoded and checked by
``pftp_wire.plain``, not the pydantic models: together ~0.25 s less before the
request of every coordinated download.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from functools import cache
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from pftp_client.plan import Plan, PlanError, plan_from_assignments

if TYPE_CHECKING:  # http.client/ssl are imported where used: not on a --mirror download
    import socket
    import ssl

    from pftp_wire.plain import AssignmentRequest, DownloadReport, ReportAck

ATTEMPTS = 3  # paper 001, line 9
BACKOFF_S = (0.5, 1.0)
USER_AGENT = "pftp-client"


class CoordinatorError(Exception):
    """Base class: something about the coordinator prevents a coordinated download."""


class CoordinatorUnavailable(CoordinatorError):
    """No answer after every attempt (connection refused, timeout, 5xx)."""


class CoordinatorAnswerError(CoordinatorError):
    """The coordinator answered, but the answer cannot be used."""


class CoordinatorRefused(CoordinatorError):
    """The coordinator answered with a 4xx (e.g. the file is unknown)."""


def _detail(body: bytes) -> str:
    try:
        parsed = json.loads(body)
        if isinstance(parsed, dict) and "detail" in parsed:
            return str(parsed["detail"])
    except ValueError:
        pass
    return body.decode("utf-8", errors="replace")[:200]


def load_http() -> None:
    """Import what a request needs now, in the caller's thread (download() then
    imports the engine in the background while the coordinator answers)."""
    import http.client  # noqa: F401

    from pftp_wire import constants, plain  # noqa: F401


@cache
def _tls_context() -> ssl.SSLContext:
    """Certificate and host name checks on; built once, and only for https://."""
    import ssl

    return ssl.create_default_context()


def _staggered(address: tuple[str, int], timeout: float, *_source: object) -> socket.socket:
    """http.client's connection maker, as transports.connect.connect."""
    from pftp_client.transports.connect import connect

    return connect(address[0], address[1], timeout)


def _post(url: str, body: bytes, timeout: float) -> tuple[int, bytes]:
    """One POST of a JSON body; (status, response body). Proxy variables in the
    environment are not consulted (the coordinator is on the campus network).
    Raises OSError (refused, timeout, TLS), http.client.HTTPException (garbled
    reply) or ValueError (not an http(s) URL)."""
    import http.client

    from pftp_client.settings import coordinator_url_ok

    if not coordinator_url_ok(url):
        raise ValueError(f"not an http:// or https:// URL: {url!r}")
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    conn: http.client.HTTPConnection
    if scheme == "https":
        conn = http.client.HTTPSConnection(
            parts.hostname, parts.port, timeout=timeout, context=_tls_context()
        )
    else:
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    # (every address of the coordinator's name, staggered: transports/connect.py;
    # http.client tries them one after the other, each for the whole timeout)
    conn._create_connection = _staggered  # type: ignore[attr-defined]
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        conn.request(
            "POST",
            target,
            body=body,
            headers={
                "Content-Type": "application/json",
                "Accept": "application/json",
                "User-Agent": USER_AGENT,
            },
        )
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def _post_with_retries(
    urls: Sequence[str],
    path: str,
    payload: dict,
    *,
    timeout: float,
    attempts: int,
    sleep: Callable[[float], None],
    earlier: Sequence[str] = (),
    on_retry: Callable[[str], None] | None = None,
) -> tuple[str, int, bytes]:
    """POST ``payload`` to the first coordinator that answers, ``attempts`` tries
    each; returns (its URL, status, body). 5xx and transport errors are retried.
    ``earlier``: how the first coordinator's attempts made elsewhere failed (the
    entry point's, early.EarlyPlan): they count, and are waited after.
    ``on_retry`` hears of each failed attempt before the next one (a coordinator
    that hangs costs a timeout per attempt: the user should not wait in silence)."""
    import http.client

    from pftp_wire.constants import API_PREFIX

    body = json.dumps(payload, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    raw = body.encode("utf-8")
    errors: list[str] = list(earlier)
    for i, base in enumerate(urls):
        done = len(earlier) if i == 0 else 0
        last = max(attempts, done + 1)  # (one more at least)
        for attempt in range(done, last):
            if attempt:
                if on_retry is not None and errors:
                    on_retry(f"coordinator: {errors[-1]}; attempt {attempt + 1} of {last}")
                sleep(BACKOFF_S[min(attempt, len(BACKOFF_S)) - 1])
            try:
                status, content = _post(base.rstrip("/") + API_PREFIX + path, raw, timeout)
            except (OSError, http.client.HTTPException, ValueError) as exc:
                errors.append(f"{base}: {type(exc).__name__}: {exc}")
                continue
            if status >= 500:
                errors.append(f"{base}: HTTP {status} {_detail(content)}")
                continue
            return base, status, content
    raise CoordinatorUnavailable(
        f"no answer from the coordinator after {attempts} attempts: " + "; ".join(errors[-3:])
    )


def request_plan(
    urls: Sequence[str],
    request: AssignmentRequest,
    *,
    timeout: float = 5.0,
    attempts: int = ATTEMPTS,
    sleep: Callable[[float], None] = time.sleep,
    earlier: Sequence[str] = (),
    on_retry: Callable[[str], None] | None = None,
) -> tuple[str, Plan]:
    """POST /api/v1/assignments to the first coordinator that answers; returns
    (the coordinator's URL, the validated plan). A request that breaks its
    definition raises pftp_wire.plain.WireError (a ValueError) before any I/O."""
    from pftp_wire.plain import dump

    if not urls:
        raise CoordinatorUnavailable("no coordinator URL known")
    base, status, content = _post_with_retries(
        urls,
        "/assignments",
        dump(request),
        timeout=timeout,
        attempts=attempts,
        sleep=sleep,
        earlier=earlier,
        on_retry=on_retry,
    )
    return plan_from_answer(base, status, content, request)


def plan_from_answer(
    base: str, status: int, content: bytes, request: AssignmentRequest
) -> tuple[str, Plan]:
    """request_plan's checks of an answer to POST /api/v1/assignments (also one
    asked for by the entry point, early.EarlyPlan)."""
    from pftp_wire.plain import AssignmentResponse, WireError, parse

    if status >= 400:
        raise CoordinatorRefused(
            f"coordinator {base} refused the request for {request.file!r}: "
            f"HTTP {status} {_detail(content)}"
        )
    try:
        answer = parse(AssignmentResponse, content)
    except WireError as exc:
        raise CoordinatorAnswerError(f"malformed answer from coordinator {base}: {exc}") from exc
    try:
        return base, plan_from_assignments(answer)
    except PlanError as exc:
        raise CoordinatorAnswerError(f"unusable answer from coordinator {base}: {exc}") from exc


def send_report(
    base_url: str,
    report: DownloadReport,
    *,
    timeout: float = 5.0,
    attempts: int = 2,
    sleep: Callable[[float], None] = time.sleep,
) -> ReportAck:
    """POST /api/v1/reports (issue 3: after the download)."""
    from pftp_wire.plain import ReportAck, WireError, dump, parse

    _, status, content = _post_with_retries(
        [base_url],
        "/reports",
        dump(report),
        timeout=timeout,
        attempts=attempts,
        sleep=sleep,
    )
    if status >= 400:
        raise CoordinatorRefused(f"report refused: HTTP {status} {_detail(content)}")
    try:
        return parse(ReportAck, content)
    except WireError as exc:
        raise CoordinatorAnswerError(f"malformed report acknowledgement: {exc}") from exc
