"""A coordinator's scheduler alone, as a separate process (for the two-process test).

usage: python scheduler_proc.py DATABASE_URL INTERVAL_S
"""

from __future__ import annotations

import logging
import signal
import sys
import threading

from pftp_coordinator.config import Settings
from pftp_coordinator.db import create_db_engine, make_session_factory
from pftp_coordinator.scheduler import start_scheduler


def main() -> None:
    url, interval = sys.argv[1], float(sys.argv[2])
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(created)f %(name)s %(message)s"
    )
    logging.getLogger("apscheduler").setLevel(logging.WARNING)
    settings = Settings(
        database_url=url,
        predictor_refit_interval_s=interval,
        retention_interval_s=interval,
        probe_interval_s=interval,
        probe_jitter_s=0,
        scan_interval_s=interval * 2,
        probe_timeout_s=5,
        down_after_failures=1,
    )
    factory = make_session_factory(create_db_engine(url, pool_size=4))
    sched = start_scheduler(settings, factory)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print("started", flush=True)
    stop.wait()
    sched.shutdown()


if __name__ == "__main__":
    main()
