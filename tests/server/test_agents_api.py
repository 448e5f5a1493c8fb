"""POST /api/v1/agents/samples with per-mirror agent tokens (real app, real DB)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

from coordinator_testkit import run_cli, running_app
from pftp_coordinator.agent_tokens import hash_token
from pftp_coordinator.db import session_scope
from pftp_coordinator.models import Agent, UtilizationSample
from probe_db import add_mirror, migrated_factory
from sqlalchemy import select


def _batch(n: int = 2, cpu: float = 12.5) -> dict:
    now = datetime.now(UTC)
    return {
        "samples": [
            {
                "ts": (now - timedelta(seconds=10 * i)).isoformat(),
                "cpu_percent": cpu,
                "memory_percent": 40.0,
                "load1": 0.5,
                "nic_tx_bps": 1e6,
                "connections": 3,
            }
            for i in range(n)
        ]
    }


def test_token_cli_and_samples(db_url, tmp_path, caplog):
    factory = migrated_factory(db_url)
    a = add_mirror(factory, "mirror-a", "ftp://10.1.0.1/")
    add_mirror(factory, "mirror-b", "ftp://10.1.0.2/")
    token = run_cli("agent", "token", "mirror-a", url=db_url).stdout.strip()
    assert token.startswith("pftpa_") and len(token) > 40
    token_b = run_cli("agent", "token", "mirror-b", url=db_url).stdout.strip()
    with session_scope(factory) as s:
        hashes = {ag.token_hash for ag in s.scalars(select(Agent))}
        assert hash_token(token) in hashes and token not in hashes  # only the hash is stored
    assert run_cli("agent", "token", "nope", url=db_url, check=False).returncode == 1

    with running_app(db_url, tmp_path) as client:
        url = "/api/v1/agents/samples"
        r = client.post(url, json=_batch(3), headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 200 and r.json() == {"accepted": 3, "mirror": "mirror-a"}
        r = client.post(url, json=_batch(1, cpu=90), headers={"Authorization": f"Bearer {token_b}"})
        assert r.json()["mirror"] == "mirror-b"  # the token decides the mirror
        with caplog.at_level(logging.WARNING, logger="pftp_coordinator.api.agents"):
            assert client.post(url, json=_batch()).status_code == 401
            r = client.post(url, json=_batch(), headers={"Authorization": "Bearer pftpa_wrong"})
            assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        msgs = [rec.getMessage() for rec in caplog.records]
        assert any("missing token" in m for m in msgs) and any("wrong token" in m for m in msgs)
        bad = {
            "samples": [
                {"ts": datetime.now(UTC).isoformat(), "cpu_percent": 150, "memory_percent": 1}
            ]
        }
        assert (
            client.post(url, json=bad, headers={"Authorization": f"Bearer {token}"}).status_code
            == 422
        )

        # A new token replaces the old one; revoke removes it.
        token2 = run_cli("agent", "token", "mirror-a", url=db_url).stdout.strip()
        assert (
            client.post(
                url, json=_batch(), headers={"Authorization": f"Bearer {token}"}
            ).status_code
            == 401
        )
        assert (
            client.post(
                url, json=_batch(1), headers={"Authorization": f"Bearer {token2}"}
            ).status_code
            == 200
        )
        assert "revoked" in run_cli("agent", "revoke", "mirror-a", url=db_url).stdout
        assert (
            client.post(
                url, json=_batch(), headers={"Authorization": f"Bearer {token2}"}
            ).status_code
            == 401
        )

    with session_scope(factory) as s:
        rows = s.scalars(select(UtilizationSample).where(UtilizationSample.mirror_id == a)).all()
        assert len(rows) == 4 and all(r.cpu_percent == 12.5 and r.connections == 3 for r in rows)
        assert s.scalar(select(Agent).where(Agent.mirror_id == a)) is None
