"""The coordinator's HTTP API against a real app on SQLite and PostgreSQL."""

from __future__ import annotations

import hashlib
import itertools
from pathlib import Path

from coordinator_testkit import AUTH, running_app, settings_for, wait_until
from fastapi.testclient import TestClient
from pftp_coordinator import migrate
from pftp_coordinator.api.app import create_app
from pftp_coordinator.db import create_db_engine, make_session_factory
from pftp_coordinator.models import CongestionPenalty, Download, MirrorReport
from sqlalchemy import select

SIZE = 1_000_003  # odd on purpose: portions must still cover it exactly
SHA = hashlib.sha256(b"x").hexdigest()


def _add_mirror(client, name: str, *urls: str, status: int = 201) -> dict:
    r = client.post("/api/v1/admin/mirrors", json={"name": name, "urls": list(urls)}, headers=AUTH)
    assert r.status_code == status, r.text
    return r.json()


def _seed(client, mirrors: int = 3) -> None:
    for i in range(mirrors):
        _add_mirror(
            client, f"m{i}", f"ftp://127.0.0.1:{2100 + i}/pub", f"http://127.0.0.1:{8100 + i}/"
        )
    r = client.post(
        "/api/v1/admin/files",
        json={"name": "iso/big.iso", "size": SIZE, "sha256": SHA},
        headers=AUTH,
    )
    assert r.status_code == 201, r.text
    for i in range(mirrors):
        r = client.post(
            "/api/v1/admin/replicas",
            json={"mirror": f"m{i}", "file": "iso/big.iso"},
            headers=AUTH,
        )
        assert r.status_code == 201, r.text


def _assign(client, file: str = "iso/big.iso", **body):
    return client.post("/api/v1/assignments", json={"file": file, **body})


def _assigned_mirrors(client, want: int):
    def check():
        r = _assign(client, access_bandwidth_bps=None, protocols=["ftp"])
        return (
            r.json()
            if r.status_code == 200
            and len(r.json()["backups"]) + len(r.json()["assignments"]) == want
            else None
        )

    return wait_until(check, what=f"assignments over {want} mirrors")


def test_an_https_only_mirror_serves_a_client_that_asks_for_https(
    sqlite_url: str, tmp_path: Path
) -> None:
    """A mirror registered with only an https:// URL is usable for the client's
    protocols (ftp, http, https: pftp_client.early.CLIENT_PROTOCOLS), and not for a
    request without https; a mirror that has ftp:// too is given by that URL."""
    with running_app(sqlite_url, tmp_path) as client:
        _seed(client, mirrors=2)
        _add_mirror(client, "tls", "https://127.0.0.1:8443/pub/")
        r = client.post("/api/v1/admin/replicas", json={"mirror": "tls", "file": "iso/big.iso"},
                        headers=AUTH)
        assert r.status_code == 201, r.text

        def used(protocols: list[str]) -> dict[str, str] | None:
            r = _assign(client, access_bandwidth_bps=None, protocols=protocols)
            if r.status_code != 200:
                return None
            body = r.json()
            urls = {e["mirror"]: e["url"] for e in body["assignments"] + body["backups"]}
            return urls if len(urls) == 3 or "https" not in protocols else None

        urls = wait_until(lambda: used(["ftp", "http", "https"]), what="the https mirror planned")
        assert urls["tls"] == "https://127.0.0.1:8443/pub/iso/big.iso"
        assert urls["m0"].startswith("ftp://") and urls["m1"].startswith("ftp://")
        without = used(["ftp", "http"])
        assert without is not None and set(without) == {"m0", "m1"}


def test_health_metrics_docs(db_url: str, tmp_path: Path) -> None:
    with running_app(db_url, tmp_path) as client:
        assert client.get("/healthz").json() == {"status": "ok", "database": "ok"}
        assert client.get("/docs").status_code == 200
        paths = client.get("/openapi.json").json()["paths"]
        assert "/api/v1/assignments" in paths and "/api/v1/reports" in paths
        _assign(client, "nothing")
        text = client.get("/metrics").text
        assert (
            'pftp_http_requests_total{method="POST",route="/api/v1/assignments",status="404"}'
            in text
        )
        assert 'pftp_assignments_total{mode="unknown_file"}' in text


def test_admin_needs_the_token(sqlite_url: str, tmp_path: Path) -> None:
    with running_app(sqlite_url, tmp_path) as client:
        r = client.get("/api/v1/admin/mirrors")
        assert r.status_code == 401
        assert r.headers["www-authenticate"] == "Bearer"
        r = client.get("/api/v1/admin/mirrors", headers={"Authorization": "Bearer nope"})
        assert r.status_code == 403
        assert client.get("/api/v1/admin/mirrors", headers=AUTH).json() == []


def test_mirror_admin(db_url: str, tmp_path: Path) -> None:
    with running_app(db_url, tmp_path) as client:
        m = _add_mirror(client, "m1", "ftp://a.example/pub", "https://a.example/pub/")
        assert m["urls"] == {"ftp": "ftp://a.example/pub/", "https": "https://a.example/pub/"}
        assert m["enabled"] is True
        _add_mirror(client, "m1", "ftp://b.example/", status=409)
        bad = client.post(
            "/api/v1/admin/mirrors", json={"name": "m2", "urls": ["gopher://x/"]}, headers=AUTH
        )
        assert bad.status_code == 422 and "scheme" in bad.json()["detail"]
        r = client.patch(
            "/api/v1/admin/mirrors/m1",
            json={"region": "eu-west", "asn": 65001, "urls": ["http://c.example/"]},
            headers=AUTH,
        )
        assert r.status_code == 200, r.text
        assert r.json()["urls"] == {"http": "http://c.example/"}
        assert r.json()["region"] == "eu-west" and r.json()["asn"] == 65001
        assert client.patch("/api/v1/admin/mirrors/zz", json={}, headers=AUTH).status_code == 404
        r = client.post("/api/v1/admin/mirrors/m1/disable", headers=AUTH)
        assert r.json()["enabled"] is False

        def listed_with_score():
            listed = client.get("/api/v1/admin/mirrors", headers=AUTH).json()
            score = listed[0]["score"]
            return listed if score is not None and score["suitability"] is None else None

        # the score comes from the ranking snapshot, which sees the change shortly;
        # a disabled mirror shows its inputs but is not ranked
        listed = wait_until(listed_with_score, what="m1 shown as unranked")
        assert [x["name"] for x in listed] == ["m1"]
        assert "demand" in listed[0]["score"]["inputs"]
        # (never probed: how many connections its probes read over is not known)
        assert listed[0]["score"]["inputs"]["probe_connections"] is None
        r = client.post("/api/v1/admin/mirrors/m1/enable", headers=AUTH)
        assert r.json()["enabled"] is True


def test_changed_mirror_keeps_its_replica_count(sqlite_url: str, tmp_path: Path) -> None:
    # PATCH/enable/disable answer with the same count as GET (they once said 0).
    with running_app(sqlite_url, tmp_path) as client:
        _seed(client, mirrors=1)
        url = "/api/v1/admin/mirrors/m0"
        assert client.get(url, headers=AUTH).json()["replicas"] == 1
        r = client.patch(url, json={"notes": "lab"}, headers=AUTH)
        assert r.status_code == 200, r.text
        assert r.json()["replicas"] == 1 and r.json()["notes"] == "lab"
        for action in ("disable", "enable"):
            r = client.post(f"{url}/{action}", headers=AUTH)
            assert r.status_code == 200, r.text
            assert r.json()["replicas"] == 1, f"{action}: {r.json()}"


def test_file_and_replica_admin(db_url: str, tmp_path: Path) -> None:
    with running_app(db_url, tmp_path) as client:
        _add_mirror(client, "m1", "ftp://a.example/")
        pieces = [hashlib.sha256(bytes([i])).hexdigest() for i in range(3)]
        body = {
            "name": "f",
            "size": 2500,
            "sha256": SHA,
            "piece_size": 1000,
            "piece_sha256": pieces,
        }
        r = client.post("/api/v1/admin/files", json=body, headers=AUTH)
        assert r.status_code == 201, r.text
        assert r.json()["pieces"] == 3
        assert client.post("/api/v1/admin/files", json=body, headers=AUTH).status_code == 409
        wrong = {**body, "name": "g", "piece_sha256": pieces[:2]}
        r = client.post("/api/v1/admin/files", json=wrong, headers=AUTH)
        assert r.status_code == 422 and "piece" in r.json()["detail"]
        r = client.post(
            "/api/v1/admin/files", json={"name": "h", "size": 1, "sha256": "abc"}, headers=AUTH
        )
        assert r.status_code == 422
        r = client.post("/api/v1/admin/replicas", json={"mirror": "m9", "file": "f"}, headers=AUTH)
        assert r.status_code == 404 and "m9" in r.json()["detail"]
        r = client.post(
            "/api/v1/admin/replicas",
            json={"mirror": "m1", "file": "f", "path": "/a/f"},
            headers=AUTH,
        )
        assert r.status_code == 201 and r.json()["path"] == "a/f" and r.json()["usable"]
        files = client.get("/api/v1/admin/files", headers=AUTH).json()
        assert [(f["name"], f["replicas"]) for f in files] == [("f", 1)]
        assert len(client.get("/api/v1/admin/replicas?file=f", headers=AUTH).json()) == 1


def test_assignments_contract(db_url: str, tmp_path: Path) -> None:
    with running_app(db_url, tmp_path) as client:
        r = _assign(client, "iso/big.iso")
        assert r.status_code == 404 and "iso/big.iso" in r.json()["detail"]
        assert client.post("/api/v1/assignments", json={"nofile": 1}).status_code == 422
        assert _assign(client, protocols=["gopher"]).status_code == 422
        assert _assign(client, access_bandwidth_bps=-5).status_code == 422

        _seed(client, mirrors=3)
        body = _assigned_mirrors(client, 3)
        assert set(body) == {"request_id", "file", "assignments", "backups", "mode"}
        assert body["mode"] == "ranked"
        assert body["file"] == {
            "name": "iso/big.iso",
            "size": SIZE,
            "sha256": SHA,
            "piece_size": None,
            "piece_sha256": None,
        }
        parts = sorted(body["assignments"], key=lambda a: a["offset"])
        assert parts[0]["offset"] == 0
        for a, b in itertools.pairwise(parts):
            assert a["offset"] + a["length"] == b["offset"]
        assert sum(a["length"] for a in parts) == SIZE
        for a in parts:
            assert a["url"].startswith("ftp://127.0.0.1:") and a["url"].endswith("/pub/iso/big.iso")
            assert set(a) >= {"mirror", "url", "offset", "length", "suitability", "expected_bps"}
            assert a["connections"] == 1  # no probe found a held connection
        for b in body["backups"]:
            assert set(b) >= {"mirror", "url", "suitability", "expected_bps"}
            assert b["connections"] == 1

        # http only: the http base URLs are used
        r = _assign(client, protocols=["http"])
        assert r.status_code == 200
        assert all(a["url"].startswith("http://") for a in r.json()["assignments"])

        # a disabled mirror is never used
        client.post("/api/v1/admin/mirrors/m0/disable", headers=AUTH)
        body = _assigned_mirrors(client, 2)
        used = {a["mirror"] for a in body["assignments"]} | {b["mirror"] for b in body["backups"]}
        assert "m0" not in used

        # a file with no usable replica: 503 with the reason
        client.post(
            "/api/v1/admin/files", json={"name": "lonely", "size": 10, "sha256": SHA}, headers=AUTH
        )

        def lonely_503():
            r = _assign(client, "lonely")
            return r if r.status_code == 503 else None

        r = wait_until(lonely_503, what="503 for a file without replicas")
        assert "lonely" in r.json()["detail"]


def test_balanced_mode_above_threshold(sqlite_url: str, tmp_path: Path) -> None:
    with running_app(sqlite_url, tmp_path, balanced_threshold_rps=0.5) as client:
        _seed(client, mirrors=3)
        _assigned_mirrors(client, 3)
        modes = {_assign(client).json()["mode"] for _ in range(20)}
        assert "balanced" in modes


def test_reports_feed_history_and_penalties(db_url: str, tmp_path: Path) -> None:
    with running_app(db_url, tmp_path) as client:
        _seed(client, mirrors=3)
        request_id = _assigned_mirrors(client, 3)["request_id"]
        report = {
            "request_id": request_id,
            "file": "iso/big.iso",
            "size": SIZE,
            "seconds": 2.0,
            "sha256_ok": True,
            "access_bandwidth_bps": 100_000_000,
            "mirrors": [
                {
                    "mirror": "m0",
                    "bytes": 600_000,
                    "seconds": 2.0,
                    "throughput_bps": 2_400_000,
                    "congested": True,
                    "congested_with": ["m1", "ghost"],
                },
                {
                    "mirror": "m1",
                    "bytes": 400_003,
                    "seconds": 2.0,
                    "throughput_bps": 1_600_012,
                    "congested": True,
                    "congested_with": ["m0"],
                    "connections": 4,  # (its own trials kept 4: a held server)
                },
                {"mirror": "unknown-mirror", "bytes": 0, "seconds": 0.0, "throughput_bps": 0.0},
            ],
        }
        r = client.post("/api/v1/reports", json=report)
        assert r.status_code == 200, r.text
        assert r.json()["accepted"] is True and r.json()["download_id"]
        assert client.post("/api/v1/reports", json=report).status_code == 200
        assert client.post("/api/v1/reports", json={"file": "x"}).status_code == 422
        bad = {**report, "mirrors": [{**report["mirrors"][1], "connections": 0}]}
        assert client.post("/api/v1/reports", json=bad).status_code == 422

        engine = create_db_engine(db_url)
        try:
            with make_session_factory(engine)() as s:
                downloads = s.scalars(select(Download)).all()
                assert len(downloads) == 2 and downloads[0].mode == "ranked"
                rows = s.scalars(select(MirrorReport).order_by(MirrorReport.id)).all()
                assert len(rows) == 6
                assert rows[2].mirror_id is None and rows[2].mirror_name == "unknown-mirror"
                assert [r.connections for r in rows[:3]] == [None, 4, None]
                penalties = s.scalars(select(CongestionPenalty)).all()
                assert len(penalties) == 1  # m0-m1 once; "ghost" is not a mirror
                assert penalties[0].reports == 2
                assert penalties[0].expires_at > penalties[0].detected_at
        finally:
            engine.dispose()

        # the throughput history reaches the ranking inputs shown to the admin
        def scored():
            mirrors = client.get("/api/v1/admin/mirrors", headers=AUTH).json()
            m0 = next(m for m in mirrors if m["name"] == "m0")
            return m0 if m0["score"]["inputs"]["throughput_bps"] else None

        m0 = wait_until(scored, what="throughput history in the scores")
        assert abs(m0["score"]["inputs"]["throughput_bps"] - 2_400_000) < 1.0
        # and the connections m1's client kept: the next client is told them
        told = _assigned_mirrors(client, 3)
        got = {e["mirror"]: e["connections"] for e in [*told["assignments"], *told["backups"]]}
        assert got["m1"] == 4 and got["m0"] == 1


def test_a_write_is_visible_to_the_next_request(sqlite_url: str, tmp_path: Path) -> None:
    # The session commits before the response leaves (Depends scope="function"): an
    # admin script may add a mirror and use it in its very next call.
    with running_app(sqlite_url, tmp_path) as client:
        for i in range(15):
            _add_mirror(client, f"w{i}", f"ftp://127.0.0.1:{3000 + i}/")
            r = client.post("/api/v1/admin/mirrors/" + f"w{i}" + "/disable", headers=AUTH)
            assert r.status_code == 200, r.text


def test_reported_congested_pair_is_not_assigned_together(sqlite_url: str, tmp_path: Path) -> None:
    # Issue 6: a client reports m0 and m1 behind one congested link (what pftp_client
    # puts in MirrorReport.congested / congested_with); the next client gets at most
    # one of them as an active mirror, the other as a backup (paper 001 Shared-Con-Algo).
    with running_app(sqlite_url, tmp_path) as client:
        _seed(client, mirrors=3)
        first = _assigned_mirrors(client, 3)
        assert {a["mirror"] for a in first["assignments"]} >= {"m0", "m1"}
        report = {
            "request_id": first["request_id"],
            "file": "iso/big.iso",
            "size": SIZE,
            "seconds": 2.0,
            "sha256_ok": True,
            "mirrors": [
                {
                    "mirror": "m0",
                    "bytes": 600_000,
                    "seconds": 2.0,
                    "throughput_bps": 2_400_000,
                    "congested_with": ["m1"],
                },
                {
                    "mirror": "m1",
                    "bytes": 400_003,
                    "seconds": 2.0,
                    "throughput_bps": 1_600_012,
                    "congested": True,
                    "congested_with": ["m0"],
                },
            ],
        }
        assert client.post("/api/v1/reports", json=report).status_code == 200

        def pair_split():
            r = _assign(client, access_bandwidth_bps=None, protocols=["ftp"])
            if r.status_code != 200:
                return None
            active = {a["mirror"] for a in r.json()["assignments"]}
            return r.json() if not {"m0", "m1"} <= active else None

        after = wait_until(pair_split, what="an assignment without both m0 and m1")
        active = {a["mirror"] for a in after["assignments"]}
        backups = {b["mirror"] for b in after["backups"]}
        assert len(active & {"m0", "m1"}) == 1 and "m2" in active
        assert {"m0", "m1"} - active <= backups
        # it stays split (not a one-off): the penalty lasts congestion_penalty_s
        for _ in range(5):
            again = {a["mirror"] for a in _assign(client, protocols=["ftp"]).json()["assignments"]}
            assert not {"m0", "m1"} <= again


def test_assignment_fast_path_answers_like_the_route(sqlite_url: str, tmp_path: Path) -> None:
    """The pure ASGI fast path and the documented FastAPI route give the same answers."""
    migrate.upgrade(sqlite_url)
    fast_app = create_app(settings_for(sqlite_url, tmp_path))
    slow_app = create_app(settings_for(sqlite_url, tmp_path), fast_path=False)
    with TestClient(fast_app) as fast, TestClient(slow_app) as slow:
        _seed(fast, mirrors=3)
        for client in (fast, slow):
            _assigned_mirrors(client, 3)
        bodies = [
            {"file": "iso/big.iso"},
            {"file": "iso/big.iso", "access_bandwidth_bps": 1000, "protocols": ["http"]},
            {"file": "nope.iso"},
            {"nofile": 1},
            {"file": "iso/big.iso", "protocols": ["gopher"]},
            {"file": "iso/big.iso", "access_bandwidth_bps": -5},
            {"file": ""},
        ]
        for body in bodies:
            a = fast.post("/api/v1/assignments", json=body, headers={"X-Request-ID": "t-1"})
            b = slow.post("/api/v1/assignments", json=body, headers={"X-Request-ID": "t-1"})
            assert a.status_code == b.status_code, body
            assert a.headers["x-request-id"] == b.headers["x-request-id"] == "t-1"
            assert a.headers["content-type"] == b.headers["content-type"] == "application/json"
            ja, jb = a.json(), b.json()
            if a.status_code == 200:
                for j in (ja, jb):
                    j.pop("request_id")
                assert ja == jb
            elif a.status_code == 422:
                assert [e["loc"] for e in ja["detail"]] == [e["loc"] for e in jb["detail"]]
                assert [e["type"] for e in ja["detail"]] == [e["type"] for e in jb["detail"]]
            else:
                assert ja == jb
        for raw in (b"{not json", b""):
            a = fast.post("/api/v1/assignments", content=raw)
            b = slow.post("/api/v1/assignments", content=raw)
            assert a.status_code == b.status_code == 422
        # No usable mirror: 503 with the reason, on both.
        for i in range(3):
            r = fast.post(f"/api/v1/admin/mirrors/m{i}/disable", headers=AUTH)
            assert r.status_code == 200, r.text
        for client in (fast, slow):
            r = wait_until(
                lambda c=client: (
                    resp if (resp := _assign(c)).status_code == 503 else None
                ),
                what="503 after disabling every mirror",
            )
            assert "no usable mirror" in r.json()["detail"]
        # Counted under the route template, like every other endpoint.
        text = fast.get("/metrics").text
        label = 'pftp_http_requests_total{method="POST",route="/api/v1/assignments",status="%d"}'
        assert label % 200 in text and label % 422 in text
        # Still documented.
        doc = fast.get("/openapi.json").json()["paths"]["/api/v1/assignments"]["post"]
        assert "requestBody" in doc and "200" in doc["responses"]
