"""Agent parts without a coordinator: config precedence, buffer order, backoff, readings."""

from __future__ import annotations

import random
from collections import namedtuple
from datetime import UTC, datetime, timedelta

import psutil
import pytest
from pftp_agent.buffer import SampleBuffer
from pftp_agent.collect import Collector, count_connections, tx_rate_bps
from pftp_agent.config import ConfigError, load
from pftp_agent.sender import backoff_delay
from pftp_wire.models import UtilizationSample


def _sample(i: int) -> UtilizationSample:
    return UtilizationSample(
        ts=datetime(2024, 1, 1, tzinfo=UTC) + timedelta(seconds=i),
        cpu_percent=i % 100,
        memory_percent=1,
    )


def test_config_file_env_cli_precedence(tmp_path):
    conf = tmp_path / "agent.conf"
    conf.write_text(
        "[agent]\ncoordinator_url = http://file:1\ntoken = filetok\n"
        "interval_s = 30\nports = 21, 8080\n"
    )
    cfg = load(conf, env={})
    assert (cfg.coordinator_url, cfg.token, cfg.interval_s, cfg.ports) == (
        "http://file:1",
        "filetok",
        30.0,
        (21, 8080),
    )
    cfg = load(conf, env={"PFTP_AGENT_TOKEN": "envtok", "PFTP_AGENT_INTERVAL_S": "5"})
    assert cfg.token == "envtok" and cfg.interval_s == 5
    cfg = load(conf, env={"PFTP_AGENT_TOKEN": "envtok"}, overrides={"token": "clitok"})
    assert cfg.token == "clitok"
    with pytest.raises(ConfigError, match="token is required"):
        load(
            None,
            env={
                "PFTP_AGENT_CONFIG": str(tmp_path / "absent"),
                "PFTP_AGENT_COORDINATOR_URL": "http://x",
            },
        )
    bad = tmp_path / "bad.conf"
    bad.write_text("[agent]\ninterval_s = soon\n")
    with pytest.raises(ConfigError, match="interval_s"):
        load(bad, env={})
    bad.write_text("[agent]\ncolour = blue\n")
    with pytest.raises(ConfigError, match="unknown setting"):
        load(bad, env={})
    with pytest.raises(ConfigError, match="does not exist"):
        load(tmp_path / "missing.conf", env={})


def test_buffer_bounded_newest_first():
    buf = SampleBuffer(5)
    for i in range(8):
        buf.add(_sample(i))
    assert len(buf) == 5 and buf.dropped == 3  # oldest dropped
    first = buf.take_newest(2)
    assert [s.cpu_percent for s in first] == [6, 7]  # newest batch, oldest first inside
    buf.put_back(first)
    assert [s.cpu_percent for s in buf.take_newest(10)] == [3, 4, 5, 6, 7]


def test_backoff_grows_with_full_jitter():
    rng = random.Random(1)
    assert backoff_delay(0, base_s=5, cap_s=300, rng=rng) == 0
    for n in range(1, 12):
        d = backoff_delay(n, base_s=5, cap_s=300, rng=rng)
        assert 0 <= d <= min(300, 5 * 2 ** (n - 1))
    assert max(backoff_delay(30, base_s=5, cap_s=300, rng=rng) for _ in range(200)) > 200


def test_readings_and_pure_helpers():
    assert tx_rate_bps(1000, 0.0, 2000, 2.0) == 4000
    assert tx_rate_bps(2000, 0.0, 10, 1.0) is None  # counter reset
    Addr = namedtuple("Addr", "ip port")
    Conn = namedtuple("Conn", "laddr status")
    conns = [
        Conn(Addr("1", 21), psutil.CONN_ESTABLISHED),
        Conn(Addr("1", 22), psutil.CONN_ESTABLISHED),
        Conn(Addr("1", 80), psutil.CONN_LISTEN),
    ]
    assert count_connections(conns, {21, 80}) == 1
    c = Collector([21, 80])
    s = c.sample()
    assert 0 <= s.cpu_percent <= 100 and 0 < s.memory_percent <= 100 and s.load1 is not None
    s2 = c.sample()
    assert s2.nic_tx_bps is not None and s2.nic_tx_bps >= 0
    with pytest.raises(ValueError, match="no network interface"):
        Collector([21], nic="pbnope0")
