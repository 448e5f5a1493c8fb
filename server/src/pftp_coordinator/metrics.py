"""Prometheus metrics of the coordinator, in one place.

Other modules call the small ``record_*`` functions instead of touching metric objects,
so label names stay consistent. Exposed at GET /metrics by ``metrics_router``.
Label values are bounded: routes are path templates (never raw paths), mirrors are the
registered ones, modes/outcomes are short fixed words.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

# Latency buckets from 1 ms (cached assignment) to 10 s (cold database).
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

HTTP_REQUESTS = Counter(
    "pftp_http_requests_total",
    "HTTP requests handled, by endpoint (route template) and status code.",
    ["method", "route", "status"],
)
HTTP_LATENCY = Histogram(
    "pftp_http_request_duration_seconds",
    "Time to handle an HTTP request, by endpoint (route template).",
    ["method", "route"],
    buckets=_LATENCY_BUCKETS,
)
ASSIGNMENTS = Counter(
    "pftp_assignments_total",
    "Assignment responses sent to clients, by selection mode (ranked or balanced).",
    ["mode"],
)
ASSIGNED_MIRRORS = Histogram(
    "pftp_assignment_mirrors",
    "Number of mirrors in one assignment (backups not counted).",
    buckets=(1, 2, 3, 4, 6, 8, 12, 16),
)
PROBE_RESULTS = Counter(
    "pftp_probe_results_total",
    "Path probes run by the scheduler, by method and outcome (ok or failed).",
    ["method", "outcome"],
)
PROBE_RTT = Histogram(
    "pftp_probe_rtt_seconds",
    "RTT measured by successful probes, by method.",
    ["method"],
    buckets=(0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
)
MIRROR_UP = Gauge(
    "pftp_mirror_up",
    "1 when the mirror's last probes succeeded, 0 when it is down (absent: unknown).",
    ["mirror"],
)
JOB_RUNS = Counter(
    "pftp_job_runs_total",
    "Scheduled job runs on this replica, by job and outcome (ok or failed).",
    ["job", "outcome"],
)
JOB_DURATION = Histogram(
    "pftp_job_duration_seconds",
    "Duration of scheduled job runs, by job.",
    ["job"],
    buckets=(0.01, 0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0),
)
AGENT_REPORTS = Counter(
    "pftp_agent_reports_total",
    "Utilization reports received from mirror agents, by mirror.",
    ["mirror"],
)
AGENT_SAMPLES = Counter(
    "pftp_agent_samples_total",
    "Utilization samples accepted from mirror agents, by mirror.",
    ["mirror"],
)
AGENT_REFUSALS = Counter(
    "pftp_agent_refusals_total",
    "Agent sample posts refused for their token, by reason (missing or wrong).",
    ["reason"],
)
AGENTS_REPORTING = Gauge(
    "pftp_agents_reporting",
    "Agents that reported within the last 5 minutes (from the database, at each scrape).",
)
CLIENT_REPORTS = Counter(
    "pftp_client_reports_total",
    "Download reports received from clients, by verification outcome (ok or bad).",
    ["outcome"],
)
ANNOUNCER_ACTIVE = Gauge(
    "pftp_announcer_active",
    "1 while this coordinator broadcasts announcements (primary or backup that took over), "
    "0 while it stands by behind a better one.",
)
ANNOUNCEMENTS_SENT = Counter(
    "pftp_announcements_sent_total", "UDP discovery announcements broadcast by this coordinator."
)
ANNOUNCER_TAKEOVERS = Counter(
    "pftp_announcer_takeovers_total",
    "Times this coordinator started announcing because a better one fell silent.",
)


def _outcome(ok: bool) -> str:
    return "ok" if ok else "failed"


# Labelled children by label values: .labels() validates and locks on every call,
# which is measurable at thousands of requests per second. Label values are bounded
# (see above), and so are these dicts.
_request_children: dict[tuple[str, str, int], tuple[Any, Any]] = {}
_assignment_children: dict[str, Any] = {}


def observe_request(method: str, route: str, status: int, seconds: float) -> None:
    key = (method, route, status)
    children = _request_children.get(key)
    if children is None:
        children = (
            HTTP_REQUESTS.labels(method, route, str(status)),
            HTTP_LATENCY.labels(method, route),
        )
        _request_children[key] = children
    children[0].inc()
    children[1].observe(seconds)


def record_assignment(mode: str, mirrors: int | None = None) -> None:
    child = _assignment_children.get(mode)
    if child is None:
        child = _assignment_children[mode] = ASSIGNMENTS.labels(mode)
    child.inc()
    if mirrors is not None:
        ASSIGNED_MIRRORS.observe(mirrors)


def record_probe(method: str, ok: bool, rtt_s: float | None = None) -> None:
    PROBE_RESULTS.labels(method, _outcome(ok)).inc()
    if ok and rtt_s is not None:
        PROBE_RTT.labels(method).observe(rtt_s)


def set_mirror_up(mirror: str, up: bool) -> None:
    MIRROR_UP.labels(mirror).set(1 if up else 0)


def record_job_run(job: str, ok: bool, seconds: float | None = None) -> None:
    JOB_RUNS.labels(job, _outcome(ok)).inc()
    if seconds is not None:
        JOB_DURATION.labels(job).observe(seconds)


def record_agent_report(mirror: str, samples: int | None = None) -> None:
    AGENT_REPORTS.labels(mirror).inc()
    if samples is not None:
        AGENT_SAMPLES.labels(mirror).inc(samples)


def record_agent_refused(reason: str) -> None:
    AGENT_REFUSALS.labels(reason).inc()


def set_agents_reporting(count: int) -> None:
    AGENTS_REPORTING.set(count)


def record_client_report(sha256_ok: bool) -> None:
    CLIENT_REPORTS.labels("ok" if sha256_ok else "bad").inc()


def render_metrics(registry: CollectorRegistry = REGISTRY) -> tuple[bytes, str]:
    """Prometheus text exposition of ``registry`` and its content type."""
    return generate_latest(registry), CONTENT_TYPE_LATEST


metrics_router = APIRouter(tags=["metrics"])


@metrics_router.get("/metrics", include_in_schema=False)
def metrics_endpoint(request: Request) -> Response:
    factory = getattr(request.app.state, "session_factory", None)
    if factory is not None:  # gauges that come from the shared database, fresh per scrape
        from pftp_coordinator.status.service import count_agents_reporting

        with factory() as session:
            set_agents_reporting(count_agents_reporting(session))
    body, content_type = render_metrics()
    return Response(content=body, media_type=content_type)
