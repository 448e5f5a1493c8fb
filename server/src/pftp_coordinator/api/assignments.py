"""POST /api/v1/assignments: the client asks which mirrors to fetch which bytes from.

The hot path: no database query here. The planner works on the in-memory
snapshot of ranking inputs (refreshed in the background), so the route is async
and only does CPU work in the event loop.
"""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Request, status
from fastapi.responses import Response
from pftp_wire import API_PREFIX, AssignmentRequest, AssignmentResponse

from pftp_coordinator import metrics
from pftp_coordinator.planner import NoUsableMirror, UnknownFile, plan_assignments

router = APIRouter(prefix=API_PREFIX, tags=["client"])


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
    state = request.app.state
    state.request_rate.hit()
    snapshot = state.snapshot_cache.get()
    try:
        answer = plan_assignments(
            snapshot,
            body,
            settings=state.settings,
            request_rate_rps=state.request_rate.rate(),
            rng=state.rng,
        )
    except UnknownFile as exc:
        metrics.record_assignment("unknown_file")
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc) or "unknown file") from exc
    except NoUsableMirror as exc:
        metrics.record_assignment("no_mirror")
        raise HTTPException(
            status.HTTP_503_SERVICE_UNAVAILABLE, str(exc) or "no usable mirror"
        ) from exc
    metrics.record_assignment(answer.mode, len(answer.assignments))
    state.recent_modes.remember(answer.request_id, answer.mode)
    # Serialised once by pydantic-core; skips FastAPI's second validation pass.
    return Response(answer.model_dump_json(), media_type="application/json")
