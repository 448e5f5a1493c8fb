"""Run one probe round of the given mirrors (by id) against a database; prints JSON.
Started with `ip netns exec` by test_probes_lab.py so the probes leave from the lab's
client namespace.  usage: python lab_probe_run.py DATABASE_URL MIRROR_ID..."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict

from pftp_coordinator.config import Settings
from pftp_coordinator.db import create_db_engine, make_session_factory
from pftp_coordinator.probes.service import probe_mirror


def main() -> None:
    url, ids = sys.argv[1], [int(a) for a in sys.argv[2:]]
    settings = Settings(
        database_url=url,
        throughput_probe_bytes=1024 * 1024,
        probe_timeout_s=8,
        down_after_failures=3,
        probe_interval_s=60,
    )
    factory = make_session_factory(create_db_engine(url, pool_size=2))
    out = {}
    for mid in ids:
        res = probe_mirror(factory, mid, settings, retry_pause_s=0.2)
        out[mid] = asdict(res) if res else None
    print(json.dumps(out, default=str))


if __name__ == "__main__":
    main()
