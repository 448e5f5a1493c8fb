"""POST /api/v1/reports: the client's report after a download."""

from __future__ import annotations

from fastapi import APIRouter, Request
from pftp_wire import API_PREFIX, DownloadReport, ReportAck

from pftp_coordinator import metrics
from pftp_coordinator.api.deps import SessionDep, SettingsDep
from pftp_coordinator.services import reports as report_service

router = APIRouter(prefix=API_PREFIX, tags=["client"])


@router.post(
    "/reports",
    response_model=ReportAck,
    summary="Per-mirror outcome of a download (feeds throughput history and congestion)",
)
def create_report(
    body: DownloadReport, request: Request, session: SessionDep, settings: SettingsDep
) -> ReportAck:
    mode = request.app.state.recent_modes.get(body.request_id)
    request.app.state.active_downloads.end(body.request_id)  # (probes may read its mirrors)
    download = report_service.record_report(
        session,
        report=body,
        penalty_ttl_s=settings.congestion_penalty_s,
        client_addr=request.client.host if request.client else None,
        mode=mode,
    )
    metrics.record_client_report(body.sha256_ok)
    return ReportAck(accepted=True, download_id=download.id)
