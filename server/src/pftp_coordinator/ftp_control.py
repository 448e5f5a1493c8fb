"""Small FTP helpers shared by the ranged-read probe and the replica scanner.

Both use ftplib for the login and the listing; what ftplib does not do for us is
(1) map an ``ftp://`` URL path to the path the server expects (RFC 1738 3.2:
relative to the login directory), and (2) end a RETR that we stopped early in a
way every server accepts, including pure-ftpd, which sends extra 150 lines
(``150-Accepted data connection`` / ``150 4096.0 kbytes to download`` and, after a
hang-up, ``150 0.520 seconds (measured here), ...``) that ftplib's ``voidresp``
reads as an error.
"""

from __future__ import annotations

import contextlib
import ftplib
import socket
import struct
import time
from urllib.parse import unquote


def url_path(path: str) -> str:
    """Path of an ``ftp://`` URL as sent to the server (RFC 1738 3.2).

    Relative to the login directory (``/pub/f`` -> ``pub/f``), decoded segment by
    segment; a leading ``%2F`` makes it absolute (``/%2Fsrv/f`` -> ``/srv/f``).
    A ``;type=`` suffix is dropped. Servers that chroot (pure-ftpd, vsftpd as
    root) accept both forms; a non-chrooted login (vsftpd's
    ``run_as_launching_user``, many real accounts) only the relative one.
    """
    raw = path.split(";type=")[0]
    return "/".join(unquote(s) for s in raw.lstrip("/").split("/"))


def reset_close(sock: socket.socket) -> None:
    """Close with RST instead of FIN, so the server's next write on the data
    connection fails at once instead of filling buffers nobody reads."""
    with contextlib.suppress(OSError):  # an already dead socket refuses the option
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def read_reply(ftp: ftplib.FTP, deadline: float) -> str:
    """One (possibly multi-line) reply, whatever its code; '' when the server
    closed the control connection. Raises TimeoutError past ``deadline``."""
    remaining = deadline - time.monotonic()
    if remaining <= 0 or ftp.sock is None:
        raise TimeoutError("no reply in time")
    ftp.sock.settimeout(remaining)
    try:
        return ftp.getmultiline()
    except EOFError:
        return ""


def finish_transfer(
    ftp: ftplib.FTP, *, deadline: float, transfer_open: bool, max_replies: int = 20
) -> list[str]:
    """End the session cleanly after a RETR whose data connection is closed (by
    the server at EOF, or by us with ``reset_close`` once we had enough bytes).

    ``transfer_open``: the transfer's own completion reply has not been read yet
    (we hung up early). It is awaited first, whatever its code, before QUIT is
    sent: pure-ftpd reads the control connection inside its transfer loop (to
    catch ABOR) and throws away whatever else that read returned, so a QUIT sent
    too early is lost and both sides wait. Its end-of-transfer reply after a
    hang-up is a 1xx (``150 0.520 seconds (measured here), 2.64 Mbytes per
    second``), vsftpd's a ``426 Failure writing network stream`` or ``226``,
    pyftpdlib's ``426 Transfer aborted`` or ``226``.

    Then QUIT, and every reply up to its 221 (or the server's hang-up) is read:
    221 answers nothing else, so stray extra replies cannot be mistaken for it.
    Returns the replies seen (for logging); raises OSError/TimeoutError when the
    server stays silent past ``deadline``.
    """
    seen: list[str] = []
    if transfer_open:
        reply = read_reply(ftp, deadline)
        if not reply:
            return seen  # hung up: also the end of the session
        seen.append(reply)
    ftp.putcmd("QUIT")
    for _ in range(max_replies):
        reply = read_reply(ftp, deadline)
        if not reply:
            return seen
        seen.append(reply)
        if reply.startswith("221"):
            return seen
    raise ftplib.error_proto(f"no reply to QUIT after {max_replies} replies: {seen[-3:]}")
