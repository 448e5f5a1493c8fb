"""Utilization agents' endpoint and the admin's manual scan/probe triggers (issue 4).

- POST /api/v1/agents/samples: Bearer <agent token>; the mirror is the token's,
  so an agent can only report for its own mirror. Wrong or missing token: 401,
  and a log line with the client address.
- POST /api/v1/admin/mirrors/{name}/scan and .../probe: admin token.
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from datetime import timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pftp_wire.models import API_PREFIX, SamplesAck, UtilizationBatch

from pftp_coordinator import metrics
from pftp_coordinator.agent_tokens import authenticate
from pftp_coordinator.api.deps import AdminDep, SessionDep, SettingsDep
from pftp_coordinator.models import Mirror, UtilizationSample, utcnow
from pftp_coordinator.probes.service import mirror_by_name, probe_mirror
from pftp_coordinator.scans.service import scan_mirror
from pftp_coordinator.services.errors import NotFound

log = logging.getLogger(__name__)

router = APIRouter()
_bearer = HTTPBearer(auto_error=False, description="the mirror agent's token")

MAX_CLOCK_SKEW = timedelta(minutes=5)


@router.post(f"{API_PREFIX}/agents/samples", tags=["agents"], response_model=SamplesAck)
def post_samples(
    batch: UtilizationBatch,
    request: Request,
    session: SessionDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> SamplesAck:
    token = (
        credentials.credentials if credentials and credentials.scheme.lower() == "bearer" else None
    )
    agent = authenticate(session, token)
    if agent is None:
        reason = "wrong" if token else "missing"
        log.warning(
            "agent samples refused from %s: %s token",
            request.client.host if request.client else "?",
            reason,
        )
        metrics.record_agent_refused(reason)
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "invalid or missing agent token",
            headers={"WWW-Authenticate": "Bearer"},
        )
    now = utcnow()
    for smp in batch.samples:
        ts = smp.ts if smp.ts.tzinfo else smp.ts.replace(tzinfo=now.tzinfo)
        # An agent clock far ahead would make its samples look fresh forever.
        ts = min(ts, now + MAX_CLOCK_SKEW)
        session.add(
            UtilizationSample(mirror_id=agent.mirror_id, ts=ts, **smp.model_dump(exclude={"ts"}))
        )
    agent.last_seen_at = now
    mirror = session.get(Mirror, agent.mirror_id)
    if mirror is not None:
        metrics.record_agent_report(mirror.name, len(batch.samples))
    return SamplesAck(accepted=len(batch.samples), mirror=mirror.name if mirror else None)


admin_router = APIRouter(prefix=f"{API_PREFIX}/admin", tags=["admin"], dependencies=[AdminDep])


def _mirror_id(session: Any, name: str) -> int:
    try:
        return mirror_by_name(session, name).id
    except LookupError as exc:
        raise NotFound(str(exc)) from exc


@admin_router.post("/mirrors/{name}/scan")
def scan_now(
    name: str, request: Request, session: SessionDep, settings: SettingsDep
) -> dict[str, Any]:
    """Scan one mirror's tree for its registered replicas now."""
    mirror_id = _mirror_id(session, name)
    session.close()
    outcome = scan_mirror(
        request.app.state.session_factory, mirror_id, timeout_s=max(30.0, settings.probe_timeout_s)
    )
    if outcome is None:
        raise HTTPException(status.HTTP_409_CONFLICT, f"mirror {name} is disabled or has no URL")
    cache = getattr(request.app.state, "snapshot_cache", None)
    if cache is not None:
        cache.invalidate_replicas()
    return asdict(outcome)


@admin_router.post("/mirrors/{name}/probe")
def probe_now(
    name: str, request: Request, session: SessionDep, settings: SettingsDep
) -> dict[str, Any]:
    """Probe one mirror now (RTT, capacity where root, ranged read)."""
    mirror_id = _mirror_id(session, name)
    session.close()
    outcome = probe_mirror(request.app.state.session_factory, mirror_id, settings)
    if outcome is None:
        raise HTTPException(status.HTTP_409_CONFLICT, f"mirror {name} is disabled or has no URL")
    return asdict(outcome)


router.include_router(admin_router)
