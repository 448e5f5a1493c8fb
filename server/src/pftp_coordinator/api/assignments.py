"""POST /api/v1/assignments: the client asks which mirrors to fetch which bytes from.

The hot path: no database query here. The planner works on the in-memory
snapshot of ranking inputs (refreshed in the background), so the work is CPU
only, in the event loop.

Two ways in, one behaviour (``answer``):

* ``AssignmentsFastPath``, a pure ASGI layer inside ``RequestContextMiddleware``
  (so request ids, the access log and the per-endpoint metrics stay as for every
  route), answers ``POST /api/v1/assignments`` itself: the body is validated with
  ``AssignmentRequest.model_validate_json`` and the answer is serialised once from
  plain data. This skips Starlette's routing, FastAPI's dependency solving and
  response handling, about a third of the CPU of an answer.
* The FastAPI route below documents the endpoint in the OpenAPI schema (/docs)
  and serves it when the fast path is not installed (``create_app(fast_path=False)``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from pftp_wire import API_PREFIX, AssignmentRequest, AssignmentResponse
from pydantic import ValidationError
from pydantic_core import to_json

from pftp_coordinator import metrics
from pftp_coordinator.planner import NoUsableMirror, UnknownFile, plan_assignments_json

ASSIGNMENTS_PATH = API_PREFIX + "/assignments"
_JSON = "application/json"

router = APIRouter(prefix=API_PREFIX, tags=["client"])


def answer(state: Any, body: AssignmentRequest) -> tuple[int, bytes]:
    """Status and JSON body for one valid request (``state``: the app's state)."""
    state.request_rate.hit()
    snapshot = state.snapshot_cache.get()
    try:
        planned = plan_assignments_json(
            snapshot,
            body,
            settings=state.settings,
            request_rate_rps=state.request_rate.rate(),
            rng=state.rng,
        )
    except UnknownFile as exc:
        metrics.record_assignment("unknown_file")
        return 404, to_json({"detail": str(exc) or "unknown file"})
    except NoUsableMirror as exc:
        metrics.record_assignment("no_mirror")
        return 503, to_json({"detail": str(exc) or "no usable mirror"})
    metrics.record_assignment(planned.mode, planned.n_assignments)
    state.recent_modes.remember(planned.request_id, planned.mode)
    limit = state.settings.active_download_max_s
    expected = planned.expected_s
    state.active_downloads.begin(
        planned.request_id,
        planned.mirrors,
        limit if expected is None else min(max(2 * expected, 30.0), limit),
    )
    return 200, planned.body


def validation_error_body(exc: ValidationError) -> bytes:
    """FastAPI's 422 shape: {"detail": [{"type", "loc": ["body", ...], "msg", ...}]}."""
    errors = [{**e, "loc": ("body", *e["loc"])} for e in exc.errors(include_url=False)]
    return to_json({"detail": errors}, fallback=str)


@router.post(
    "/assignments",
    response_model=AssignmentResponse,
    summary="Byte-range assignments and backup mirrors for one file",
    responses={
        404: {"description": "Unknown file"},
        503: {"description": "No usable mirror for this file (the reason is in detail)"},
    },
)
async def create_assignments(body: AssignmentRequest, request: Request) -> Response:
    # Returning a Response skips FastAPI's second validation of the answer; the
    # response_model above only documents it.
    code, payload = answer(request.app.state, body)
    return Response(payload, status_code=code, media_type=_JSON)


# --- pure ASGI fast path ------------------------------------------------------------

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

MAX_BODY_BYTES = 64 * 1024  # a request is ~100 bytes; a 1 KiB file name at most


class AssignmentsFastPath:
    """Serves POST /api/v1/assignments directly; everything else goes to ``app``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        # The documented route, so metrics label this endpoint as for any route.
        self._route = next(r for r in router.routes if getattr(r, "path", None) == ASSIGNMENTS_PATH)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["path"] != ASSIGNMENTS_PATH
            or scope["method"] != "POST"
        ):
            await self.app(scope, receive, send)
            return
        scope["route"] = self._route
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                await _send(send, 413, to_json({"detail": "request body too large"}))
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        raw = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        try:
            body = AssignmentRequest.model_validate_json(raw)
        except ValidationError as exc:
            await _send(send, 422, validation_error_body(exc))
            return
        code, payload = answer(scope["app"].state, body)
        await _send(send, code, payload)


async def _send(send: Send, status: int, payload: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode("latin-1")),
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})
