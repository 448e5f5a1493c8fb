"""Start-up and end-of-download costs (notes/client-perf.md, round 3): numpy stays
off the path to the first byte; the final hash is done by the caller."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pftp_client.congestion_wiring import CongestionSession
from pftp_client.integrity import PrefixHasher
from pftp_client.part_file import PartFile


def test_session_set_up_does_not_import_numpy() -> None:
    # What download() runs before the flows start: the CLI, the congestion session
    # (capture probe, lazy factory). numpy and the detectors load later, in the
    # engine's detector-start thread.
    code = (
        "import sys\n"
        "import pftp_client.cli, pftp_client.downloader, pftp_client.congestion.capture\n"
        "from pftp_client.congestion_wiring import CongestionSession\n"
        "s = CongestionSession('app', active=[('a', 'ftp://127.0.0.1/f', None),"
        " ('b', 'ftp://127.0.0.2/f', None)], backups=[], rank_by_rate=True, say=print)\n"
        "assert s.lazy_factory() is not None\n"
        "print('numpy' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip().splitlines()[-1] == "False"


def test_lazy_factory_is_none_when_detection_is_off() -> None:
    s = CongestionSession(
        "off",
        active=[("a", "ftp://127.0.0.1/f", None), ("b", "ftp://127.0.0.2/f", None)],
        backups=[],
        rank_by_rate=True,
        say=print,
    )
    assert s.lazy_factory() is None


def test_congestion_package_names_still_importable() -> None:
    from pftp_client.congestion import DETECTORS, SharedCongestionMonitor, TimestampSource

    assert DETECTORS and SharedCongestionMonitor and TimestampSource
    with pytest.raises(AttributeError):
        import pftp_client.congestion as c

        _ = c.no_such_name


@pytest.mark.parametrize("hashed_before", [0, 3 << 20, 10 << 20])
def test_prefix_hasher_finish_hashes_the_rest(tmp_path: Path, hashed_before: int) -> None:
    size = 10 << 20 | 12345  # not a chunk multiple
    data = os.urandom(size)
    part = PartFile(tmp_path / "f.part", size, reuse=False)
    try:
        part.pwrite(data, 0)
        hasher = PrefixHasher(part)
        hasher.advance(hashed_before)
        assert hasher.finish(size) == hashlib.sha256(data).hexdigest()
        hasher.close()
    finally:
        part.close()
