"""Make tests/server's helpers (coordinator_testkit) importable from this sub-folder."""

from __future__ import annotations

import sys
from pathlib import Path

_SERVER_TESTS = str(Path(__file__).resolve().parents[1])
if _SERVER_TESTS not in sys.path:
    sys.path.insert(0, _SERVER_TESTS)
