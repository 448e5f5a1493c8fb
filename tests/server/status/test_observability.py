"""Request ids, structured logs and the ops metrics, on the real app."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from coordinator_testkit import running_app
from pftp_coordinator import metrics
from pftp_coordinator.logging_setup import (
    JsonFormatter,
    RequestIdFilter,
    accept_request_id,
    configure_logging,
)


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []
        self.addFilter(RequestIdFilter())
        self.setFormatter(JsonFormatter())

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


def test_request_id_echoed_and_logged(sqlite_url: str, tmp_path: Path) -> None:
    capture = _Capture()
    access = logging.getLogger("pftp_coordinator.access")
    access.addHandler(capture)
    old_level = access.level
    access.setLevel(logging.INFO)
    try:
        with running_app(sqlite_url, tmp_path) as client:
            r = client.get("/healthz", headers={"X-Request-ID": "trace-abc.123"})
            assert r.headers["x-request-id"] == "trace-abc.123"
            fresh = client.get("/healthz").headers["x-request-id"]
            assert len(fresh) == 32 and fresh != "trace-abc.123"
            bad = client.get("/healthz", headers={"X-Request-ID": "no spaces\tallowed"})
            assert bad.headers["x-request-id"] != "no spaces\tallowed"
    finally:
        access.removeHandler(capture)
        access.setLevel(old_level)
    records = [json.loads(line) for line in capture.lines]
    mine = [r for r in records if r["request_id"] == "trace-abc.123"]
    assert mine and mine[0]["route"] == "/healthz" and mine[0]["status"] == 200
    assert {"ts", "level", "logger", "msg", "duration_ms"} <= set(mine[0])


def test_accept_request_id() -> None:
    assert accept_request_id("abc-1") == "abc-1"
    assert accept_request_id(None) != accept_request_id(None)
    assert accept_request_id("x" * 65) != "x" * 65


def test_configure_logging_json(capsys: pytest.CaptureFixture[str]) -> None:
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    try:
        configure_logging("DEBUG", json_output=True)
        logging.getLogger("pftp_coordinator.test").info("hello %s", "world", extra={"k": 1})
        line = capsys.readouterr().err.strip().splitlines()[-1]
        rec = json.loads(line)
        assert rec["msg"] == "hello world" and rec["k"] == 1 and rec["request_id"] == "-"
        with pytest.raises(ValueError, match="log level"):
            configure_logging("LOUD")
    finally:
        for h in list(root.handlers):
            root.removeHandler(h)
        for h in saved[0]:
            root.addHandler(h)
        root.setLevel(saved[1])


def test_ops_metrics_are_exposed(sqlite_url: str, tmp_path: Path) -> None:
    metrics.record_probe("tcp-connect", True, 0.012)
    metrics.record_probe("tcp-connect", False)
    metrics.record_job_run("probe", True, 1.5)
    metrics.record_job_run("scan", False, 0.2)
    metrics.record_agent_report("m-obs")
    metrics.set_mirror_up("m-obs", True)
    with running_app(sqlite_url, tmp_path) as client:
        client.get("/healthz")
        text = client.get("/metrics").text
    for needle in (
        'pftp_http_requests_total{method="GET",route="/healthz",status="200"}',
        "pftp_http_request_duration_seconds_bucket",
        'pftp_probe_results_total{method="tcp-connect",outcome="failed"}',
        'pftp_job_runs_total{job="scan",outcome="failed"}',
        'pftp_agent_reports_total{mirror="m-obs"}',
        'pftp_mirror_up{mirror="m-obs"} 1.0',
        "pftp_announcer_active",
        "pftp_assignments_total",
    ):
        assert needle in text, needle
