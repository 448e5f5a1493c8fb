"""GET /healthz: liveness plus a cheap database check."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

router = APIRouter(tags=["operations"])


@router.get("/healthz", summary="Liveness and database reachability")
def healthz(request: Request) -> JSONResponse:
    state = request.app.state
    try:
        with state.engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except SQLAlchemyError as exc:
        return JSONResponse(
            {"status": "degraded", "database": f"unreachable: {type(exc).__name__}"},
            status_code=503,
        )
    return JSONResponse({"status": "ok", "database": "ok"})
