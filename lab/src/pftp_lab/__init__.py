"""P-FTP network lab: namespaces, shaped links and real FTP/HTTP mirrors on one machine.

    from pftp_lab import Lab, MirrorSpec
    with Lab([MirrorSpec(rate_bps=10_000_000)], files={"f.bin": path}) as lab:
        lab.run_in("client", ["curl", "-s", lab.mirrors[0].ftp_url("f.bin")])

Needs root. For tests and benchmarks only (see DESIGN.md, 'The lab').
"""

from .netns import LabError
from .topology import (
    PG_SOCKET_DIR,
    Bottleneck,
    BottleneckSpec,
    Lab,
    LabEvent,
    Mirror,
    MirrorSpec,
    close_all_labs,
    make_file,
    pg_unix_url,
    sha256_file,
)

__all__ = [
    "PG_SOCKET_DIR",
    "Bottleneck",
    "BottleneckSpec",
    "Lab",
    "LabError",
    "LabEvent",
    "Mirror",
    "MirrorSpec",
    "close_all_labs",
    "make_file",
    "pg_unix_url",
    "sha256_file",
]
