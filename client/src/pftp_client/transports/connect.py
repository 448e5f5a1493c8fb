"""TCP connections to a host name with several addresses: Happy Eyeballs
(RFC 8305, section 5).

``socket.create_connection`` tries a name's addresses one after the other, each
for the whole timeout. A mirror with an AAAA record on a network whose IPv6 does
not get through (or an A record for a dead address) then costs every new
connection the full timeout (30 s) before the address that works is tried, and a
download opens many: one per range on FTP, its head start, spares, extra
streams. Here the next address is tried once the first has not connected
within ``STAGGER_S`` (or at once when it fails), families alternating from the
resolver's first; the first connection up wins and the others are closed.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import socket
import time
from collections.abc import Callable, Sequence

# RFC 8305's recommended "Connection Attempt Delay"; curl uses 200 ms, Chrome 300.
STAGGER_S = 0.25

AddrInfo = tuple[int, int, int, str, tuple]  # socket.getaddrinfo's entries

_IN_PROGRESS = {errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EALREADY}


def interleave(infos: Sequence[AddrInfo]) -> list[AddrInfo]:
    """The resolver's order, families alternating from the first one's (RFC 8305,
    section 4): an unreachable family costs one stagger, not one per address."""
    if not infos:
        return []
    first = infos[0][0]
    same = [i for i in infos if i[0] == first]
    other = [i for i in infos if i[0] != first]
    out: list[AddrInfo] = []
    for k in range(max(len(same), len(other))):
        out.extend(x[k] for x in (same, other) if k < len(x))
    return out


def connect(
    host: str | bytes, port: int, timeout: float, *, stagger_s: float = STAGGER_S,
    started: Callable[[], None] | None = None,
) -> socket.socket:
    """A connected TCP socket to ``host``:``port`` (blocking, with ``timeout`` set),
    trying its addresses as ``connect_addresses`` does. Raises TimeoutError when
    none connected within ``timeout``, or the last attempt's OSError when all
    failed (socket.gaierror when the name does not resolve)."""
    shown = host.decode() if isinstance(host, bytes) else host
    key = (shown, port)
    infos = resolve(host, port)
    sock = connect_addresses(worked_first(interleave(infos), _WORKED.get(key)), timeout,
                             stagger_s=stagger_s, started=started, name=f"{shown}:{port}")
    with contextlib.suppress(OSError):  # (a peer gone at once: nothing to remember)
        _WORKED[key] = sock.getpeername()
    return sock


# How long a name's addresses are reused without asking the resolver again: a
# download's later connections to a mirror (spares, extra streams, reconnects)
# skip the lookup, as browsers keep a name for a minute.
RESOLVED_FOR_S = 60.0
_RESOLVED: dict[tuple[str | bytes, int], tuple[float, list[AddrInfo]]] = {}


def resolve(host: str | bytes, port: int) -> list[AddrInfo]:
    """socket.getaddrinfo's TCP addresses for ``host``:``port``, kept for
    RESOLVED_FOR_S (a failed lookup is not kept)."""
    now = time.monotonic()
    kept = _RESOLVED.get((host, port))
    if kept is not None and now - kept[0] < RESOLVED_FOR_S:
        return kept[1]
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    _RESOLVED[(host, port)] = (now, infos)
    return infos


# (name, port) -> the address a connection to it last got through to: tried first
# next time (RFC 8305, section 4: a download opens many connections to a mirror,
# and each would pay the stagger again on the dead one)
_WORKED: dict[tuple[str, int], tuple] = {}


def worked_first(infos: list[AddrInfo], worked: tuple | None) -> list[AddrInfo]:
    """``infos`` with the address that ``worked`` last time first, the rest in
    their order."""
    if worked is None:
        return infos
    return sorted(infos, key=lambda i: i[4] != worked)


def connect_addresses(
    infos: Sequence[AddrInfo], timeout: float, *, stagger_s: float = STAGGER_S,
    started: Callable[[], None] | None = None, name: str = "",
) -> socket.socket:
    """Connect to the first of ``infos`` that answers: the next attempt starts
    ``stagger_s`` after the one before, or as soon as it failed; the attempts
    still pending when one succeeds are closed. ``started`` is called once the
    first SYN is on its way (work to overlap with the handshake)."""
    if not infos:
        raise OSError(f"no address for {name or 'the host'}")
    deadline = time.monotonic() + timeout
    pending: dict[int, tuple[socket.socket, tuple]] = {}  # fd -> (socket, address)
    failed: list[tuple[tuple, OSError]] = []
    # (poll, not selectors: its import costs ~2.5 ms on the way to the first SYN)
    poller = select.poll()
    winner: socket.socket | None = None
    todo = list(infos)
    next_at = 0.0
    try:
        while winner is None:
            now = time.monotonic()
            if todo and (not pending or now >= next_at):
                family, kind, proto, _canon, addr = todo.pop(0)
                try:
                    sock = socket.socket(family, kind, proto)
                except OSError as exc:  # (a family this host cannot use: IPv6 off)
                    failed.append((addr, exc))
                    continue
                sock.setblocking(False)
                err = sock.connect_ex(addr)
                if err == 0:  # (at once: still the caller's work is done, as promised)
                    winner = sock
                    if started is not None:
                        started()
                    break
                if err not in _IN_PROGRESS:
                    sock.close()
                    failed.append((addr, OSError(err, errno.errorcode.get(err, str(err)))))
                    continue  # (refused at once: the next one now)
                pending[sock.fileno()] = (sock, addr)
                poller.register(sock, select.POLLOUT)
                next_at = now + stagger_s
                if started is not None:
                    started, call = None, started
                    call()
                continue
            if not pending:
                raise _all_failed(failed, name)
            if now >= deadline:
                raise TimeoutError(
                    f"connect to {name or _shown(next(iter(pending.values()))[1])} timed out"
                    + (f" ({len(pending) + len(failed)} addresses tried)"
                       if len(pending) + len(failed) > 1 else "")
                )
            wait = deadline - now
            if todo:
                wait = min(wait, max(0.0, next_at - now))
            for fd, _ in poller.poll(wait * 1000):
                sock, addr = pending.pop(fd)
                poller.unregister(fd)
                err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err == 0:
                    winner = sock
                    break
                sock.close()
                failed.append((addr, OSError(err, errno.errorcode.get(err, str(err)))))
                next_at = time.monotonic()  # (one failed: the next one at once)
    finally:
        for sock, _ in pending.values():
            if sock is not winner:
                sock.close()
    winner.setblocking(True)
    winner.settimeout(timeout)
    return winner


def _shown(addr: tuple) -> str:
    host, port = addr[0], addr[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _all_failed(failed: list[tuple[tuple, OSError]], name: str) -> OSError:
    """The last attempt's error (its type kept: ConnectionRefusedError...), naming
    every address tried when there were several."""
    addr, last = failed[-1]
    code = last.errno or 0
    text = os.strerror(code) if code else str(last)
    if len(failed) > 1:
        text += " (" + "; ".join(
            f"{_shown(a)}: {os.strerror(e.errno or 0)}" for a, e in failed
        ) + ")"
    else:
        text += f" ({_shown(addr)})"
    # (OSError(errno, ...) is built as its subclass: ConnectionRefusedError...)
    return type(OSError(code, ""))(code, text) if code else OSError(text)
