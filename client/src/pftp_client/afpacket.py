"""May this process capture packets? (AF_PACKET raw socket: root or CAP_NET_RAW.)

Its own module, stdlib ``socket`` only: download.py asks it in a thread started
before the first connect, where capture.py's imports would compete with the
mirrors' logins."""

from __future__ import annotations

import socket
from collections.abc import Callable

ETH_P_ALL = 0x0003


def afpacket_capture_available(on_known: Callable[[bool], None] | None = None) -> bool:
    """Open and close an AF_PACKET socket. ``on_known`` gets the answer before
    the close, which alone takes ~10 ms (the kernel waits for an RCU grace period)."""
    try:
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    except (PermissionError, OSError, AttributeError):
        if on_known is not None:
            on_known(False)
        return False
    if on_known is not None:
        on_known(True)
    s.close()
    return True
