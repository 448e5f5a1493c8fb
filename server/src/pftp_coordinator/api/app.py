"""The coordinator's FastAPI application (OpenAPI at /docs)."""

from __future__ import annotations

import logging
import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from pftp_coordinator import migrate
from pftp_coordinator.active_downloads import ActiveDownloads
from pftp_coordinator.api import admin, assignments, health, reports
from pftp_coordinator.config import Settings, get_settings
from pftp_coordinator.db import create_db_engine, make_session_factory
from pftp_coordinator.logging_setup import RequestContextMiddleware
from pftp_coordinator.metrics import metrics_router
from pftp_coordinator.ranking_inputs import SnapshotCache
from pftp_coordinator.recent_assignments import RecentAssignments
from pftp_coordinator.request_rate import RequestRateMeter
from pftp_coordinator.services.errors import AlreadyExists, InvalidInput, NotFound, ServiceError

log = logging.getLogger(__name__)

_STATUS_FOR_ERROR: dict[type[ServiceError], int] = {
    NotFound: 404,
    AlreadyExists: 409,
    InvalidInput: 422,
}


async def _service_error(_request: Request, exc: Exception) -> JSONResponse:
    code = next((c for t, c in _STATUS_FOR_ERROR.items() if isinstance(exc, t)), 400)
    return JSONResponse({"detail": str(exc)}, status_code=code)


def _stop(thing: Any, label: str) -> None:
    try:
        if hasattr(thing, "shutdown"):
            thing.shutdown()
        else:
            thing.stop()
    except Exception:  # shutting down anyway: say what failed, go on with the rest
        log.exception("stopping the %s failed", label)


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    settings: Settings = app.state.settings
    if app.state.check_schema:
        migrate.require_up_to_date(app.state.engine)
    cache: SnapshotCache = app.state.snapshot_cache
    # Load the ranking inputs before accepting requests (the first load of a big
    # replica map takes seconds), then keep them fresh in a background thread.
    await run_in_threadpool(cache.refresh)
    cache.start()
    started: list[tuple[Any, str]] = []
    try:
        if settings.scheduler_enabled:
            from pftp_coordinator.scheduler import start_scheduler

            started.append(
                (
                    start_scheduler(
                        settings, app.state.session_factory, app.state.active_downloads
                    ),
                    "scheduler",
                )
            )
        if settings.announce_enabled:
            from pftp_coordinator.discovery import start_announcer

            started.append((start_announcer(settings), "announcer"))
        yield
    finally:
        for thing, label in reversed(started):
            _stop(thing, label)
        cache.close()
        app.state.engine.dispose()


def create_app(
    settings: Settings | None = None, *, check_schema: bool = True, fast_path: bool = True
) -> FastAPI:
    """The application for ``settings``. ``check_schema`` makes startup fail on an
    unmigrated database, with the command to run. ``fast_path`` serves
    POST /api/v1/assignments from a pure ASGI layer (see api/assignments.py);
    without it the FastAPI route answers, identically but slower."""
    settings = settings or get_settings()
    engine = create_db_engine(settings.effective_database_url)
    session_factory = make_session_factory(engine)

    app = FastAPI(
        title="P-FTP coordinator",
        version="0.1.0",
        summary="Ranks mirrors and hands out byte-range assignments for parallel downloads.",
        lifespan=_lifespan,
    )
    app.state.settings = settings
    app.state.check_schema = check_schema
    app.state.engine = engine
    app.state.session_factory = session_factory
    app.state.snapshot_cache = SnapshotCache(session_factory, settings)
    app.state.request_rate = RequestRateMeter()
    app.state.rng = random.Random()
    app.state.recent_modes = RecentAssignments()
    app.state.active_downloads = ActiveDownloads()

    app.add_exception_handler(ServiceError, _service_error)
    if fast_path:
        # Added first = innermost: inside RequestContextMiddleware (request ids,
        # access log, metrics), before Starlette's routing.
        app.add_middleware(assignments.AssignmentsFastPath)
    app.add_middleware(RequestContextMiddleware)

    from pftp_coordinator.api import agents
    from pftp_coordinator.status import views as status_views

    for router in (
        assignments.router,
        reports.router,
        admin.router,
        agents.router,
        health.router,
        metrics_router,
        status_views.router,
    ):
        app.include_router(router)
    return app
