"""HTTP routes of the status page: GET / and GET /status (HTML, no scripts)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from starlette.concurrency import run_in_threadpool

from pftp_coordinator import metrics
from pftp_coordinator.status.render import render_status
from pftp_coordinator.status.service import collect_status

router = APIRouter(tags=["status"])


def _announce_summary(settings) -> str:  # type: ignore[no-untyped-def]
    if not settings.announce_enabled:
        return ""
    return f"broadcast on, priority {settings.announce_priority}"


def _page(request: Request) -> str:
    state = request.app.state
    settings = state.settings
    factory = state.session_factory
    cache = getattr(state, "snapshot_cache", None)
    rate = getattr(state, "request_rate", None)
    with factory() as session:
        data = collect_status(
            session,
            settings=settings,
            snapshot=cache.get() if cache is not None else None,
            request_rate_rps=rate.rate() if rate is not None else 0.0,
            announce=_announce_summary(settings),
        )
    metrics.set_agents_reporting(data.agents_reporting)
    return render_status(data)


@router.get("/", response_class=HTMLResponse, include_in_schema=False)
@router.get("/status", response_class=HTMLResponse)
async def status_page(request: Request) -> HTMLResponse:
    """The status page: mirrors, scores, probe history and recent downloads."""
    html = await run_in_threadpool(_page, request)
    return HTMLResponse(html)
