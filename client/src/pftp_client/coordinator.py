"""Talking to the coordinator: ask for assignments, send the report afterwards.

Paper 001, Algorithm P-FTP Client lines 1-11: the request is sent up to three
times; with no answer the client downloads without the coordinator (the caller
decides how: dynamic access over the user's mirrors, or one plain download).
An answer that arrives but cannot be used (bad JSON, fields missing, portions
that overlap or leave holes) is a ``CoordinatorAnswerError``, never a guess.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from pftp_client.plan import Plan, PlanError, plan_from_assignments

if TYPE_CHECKING:  # imported where used: a --mirror download never loads httpx/pydantic
    import httpx
    from pftp_wire import AssignmentRequest, DownloadReport, ReportAck

ATTEMPTS = 3  # paper 001, line 9
BACKOFF_S = (0.5, 1.0)


class CoordinatorError(Exception):
    """Base class: something about the coordinator prevents a coordinated download."""


class CoordinatorUnavailable(CoordinatorError):
    """No answer after every attempt (connection refused, timeout, 5xx)."""


class CoordinatorAnswerError(CoordinatorError):
    """The coordinator answered, but the answer cannot be used."""


class CoordinatorRefused(CoordinatorError):
    """The coordinator answered with a 4xx (e.g. the file is unknown)."""


def _detail(resp: httpx.Response) -> str:
    try:
        body = resp.json()
        if isinstance(body, dict) and "detail" in body:
            return str(body["detail"])
    except ValueError:
        pass
    return resp.text[:200]


def _post_with_retries(
    urls: Sequence[str],
    path: str,
    payload: dict,
    *,
    timeout: float,
    attempts: int,
    sleep: Callable[[float], None],
    transport: httpx.BaseTransport | None = None,
) -> tuple[str, httpx.Response]:
    import httpx
    from pftp_wire import API_PREFIX

    errors: list[str] = []
    with httpx.Client(timeout=timeout, transport=transport, trust_env=False) as client:
        for base in urls:
            for attempt in range(attempts):
                if attempt:
                    sleep(BACKOFF_S[min(attempt, len(BACKOFF_S)) - 1])
                try:
                    resp = client.post(base.rstrip("/") + API_PREFIX + path, json=payload)
                except httpx.HTTPError as exc:
                    errors.append(f"{base}: {type(exc).__name__}: {exc}")
                    continue
                if resp.status_code >= 500:
                    errors.append(f"{base}: HTTP {resp.status_code} {_detail(resp)}")
                    continue
                return base, resp
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
) -> tuple[str, Plan]:
    """POST /api/v1/assignments to the first coordinator that answers; returns
    (the coordinator's URL, the validated plan)."""
    import pydantic
    from pftp_wire import AssignmentResponse

    if not urls:
        raise CoordinatorUnavailable("no coordinator URL known")
    base, resp = _post_with_retries(
        urls,
        "/assignments",
        request.model_dump(mode="json"),
        timeout=timeout,
        attempts=attempts,
        sleep=sleep,
    )
    if resp.status_code >= 400:
        raise CoordinatorRefused(
            f"coordinator {base} refused the request for {request.file!r}: "
            f"HTTP {resp.status_code} {_detail(resp)}"
        )
    try:
        answer = AssignmentResponse.model_validate_json(resp.content)
    except pydantic.ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in exc.errors()[:5]
        )
        raise CoordinatorAnswerError(
            f"malformed answer from coordinator {base}: {problems}"
        ) from exc
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
    import pydantic
    from pftp_wire import ReportAck

    _, resp = _post_with_retries(
        [base_url],
        "/reports",
        report.model_dump(mode="json"),
        timeout=timeout,
        attempts=attempts,
        sleep=sleep,
    )
    if resp.status_code >= 400:
        raise CoordinatorRefused(f"report refused: HTTP {resp.status_code} {_detail(resp)}")
    try:
        return ReportAck.model_validate_json(resp.content)
    except pydantic.ValidationError as exc:
        raise CoordinatorAnswerError(f"malformed report acknowledgement: {exc}") from exc
