"""`pftp-agent`: sample every interval, post in batches, buffer and back off while
the coordinator is away.

    pftp-agent [--config /etc/pftp/agent.conf] [--url URL] [--token T] [--once]
"""

from __future__ import annotations

import argparse
import logging
import random
import signal
import sys
import threading
import time
from pathlib import Path

from pftp_agent import __version__
from pftp_agent.buffer import SampleBuffer
from pftp_agent.collect import Collector
from pftp_agent.config import AgentConfig, ConfigError, load
from pftp_agent.sender import SendError, backoff_delay, post_batch

log = logging.getLogger("pftp_agent")


def flush(buf: SampleBuffer, cfg: AgentConfig) -> int:
    """Send the buffer newest batch first; returns samples sent. Raises SendError
    (the failed batch is back in the buffer)."""
    sent = 0
    while len(buf):
        batch = buf.take_newest(cfg.batch_size)
        try:
            post_batch(cfg.coordinator_url, cfg.token, batch, cfg.timeout_s)
        except SendError:
            buf.put_back(batch)
            raise
        sent += len(batch)
    return sent


def run(cfg: AgentConfig, stop: threading.Event, *, rng: random.Random | None = None) -> None:
    rng = rng or random.Random()
    collector = Collector(cfg.ports, cfg.nic)
    buf = SampleBuffer(cfg.buffer_size)
    failures = 0
    next_send = 0.0
    next_tick = time.monotonic()
    while not stop.is_set():
        buf.add(collector.sample())
        now = time.monotonic()
        if now >= next_send:
            try:
                n = flush(buf, cfg)
                if failures:
                    log.info(
                        "coordinator back after %d failed attempts: sent %d samples "
                        "(%d dropped while away)",
                        failures,
                        n,
                        buf.dropped,
                    )
                    buf.dropped = 0
                failures = 0
            except SendError as exc:
                failures += 1
                delay = backoff_delay(
                    failures, base_s=cfg.interval_s, cap_s=cfg.backoff_max_s, rng=rng
                )
                next_send = now + delay
                log.warning("%s; %d samples buffered, retrying in %.0f s", exc, len(buf), delay)
        next_tick += cfg.interval_s
        stop.wait(max(0.0, next_tick - time.monotonic()))


def once(cfg: AgentConfig) -> int:
    collector = Collector(cfg.ports, cfg.nic)
    time.sleep(0.5)  # a CPU percentage needs an interval
    sample = collector.sample()
    try:
        post_batch(cfg.coordinator_url, cfg.token, [sample], cfg.timeout_s)
    except SendError as exc:
        log.error("%s", exc)
        return 1
    print(sample.model_dump_json())
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="pftp-agent", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--config",
        type=Path,
        help="INI file with an [agent] section (default /etc/pftp/agent.conf or PFTP_AGENT_CONFIG)",
    )
    p.add_argument("--url", dest="coordinator_url", help="coordinator base URL")
    p.add_argument("--token", help="agent token (prefer the config file or PFTP_AGENT_TOKEN)")
    p.add_argument("--interval", dest="interval_s", type=float, help="seconds between samples")
    p.add_argument("--once", action="store_true", help="send one sample and exit (0 = accepted)")
    p.add_argument("-v", "--verbose", action="store_true")
    p.add_argument("--version", action="version", version=f"pftp-agent {__version__}")
    args = p.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        cfg = load(
            args.config,
            overrides={
                "coordinator_url": args.coordinator_url,
                "token": args.token,
                "interval_s": args.interval_s,
            },
        )
    except ConfigError as exc:
        print(f"pftp-agent: {exc}", file=sys.stderr)
        return 2
    if args.once:
        return once(cfg)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    log.info("reporting to %s every %.0f s", cfg.coordinator_url, cfg.interval_s)
    run(cfg, stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
