"""Real vsftpd / pure-ftpd / proftpd / pyftpdlib fixtures for the server tests.

The fixtures live in ``tests/client/conftest.py`` (one definition of how each real
server is started and killed). That file is a conftest, not an importable module, so
it is loaded here under its own module name and only the fixtures the server tests
use are re-exported; its hooks (none today) are deliberately not picked up.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_CLIENT_CONFTEST = Path(__file__).resolve().parents[1] / "client" / "conftest.py"
_NAME = "pftp_tests_mirror_servers"


def _load_mirror_servers():
    if _NAME in sys.modules:
        return sys.modules[_NAME]
    spec = importlib.util.spec_from_file_location(_NAME, _CLIENT_CONFTEST)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the server fixtures from {_CLIENT_CONFTEST}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[_NAME] = module
    spec.loader.exec_module(module)
    return module


_servers = _load_mirror_servers()
MirrorServer = _servers.MirrorServer
_spawner = _servers._spawner
start_pyftpd = _servers.start_pyftpd
start_vsftpd = _servers.start_vsftpd
start_pureftpd = _servers.start_pureftpd
start_proftpd = _servers.start_proftpd
