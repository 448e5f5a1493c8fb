"""A pyftpdlib data channel paced like vsftpd's anon_max_rate (shared by the
server's probe tests and the client's end-to-end tests; tests/ is on sys.path
through its conftest)."""

from __future__ import annotations

import time

from pyftpdlib.handlers import ThrottledDTPHandler


def paced_dtp(bytes_per_s: int, burst: int = 32 * 1024) -> type[ThrottledDTPHandler]:
    """pyftpdlib's ThrottledDTPHandler holding each data connection to ``bytes_per_s``
    the way vsftpd's anon_max_rate does: a buffer of ``burst`` bytes, then a sleep
    until the connection is back on its schedule. pyftpdlib's own throttle sends two
    seconds' worth at once and then sleeps two seconds: a probe read shorter than
    that would never see the limit."""

    class PacedDTP(ThrottledDTPHandler):
        write_limit = bytes_per_s
        ac_out_buffer_size = burst  # (one send = one burst)
        _started: float | None = None
        # (pyftpdlib may close a channel before ThrottledDTPHandler.__init__ set it)
        _throttler = None

        def _due(self, started: float, sent: int, max_speed: int) -> float:
            """When the connection is back on its schedule having sent ``sent``
            bytes since ``started`` (a subclass may pace differently)."""
            return started + sent / max_speed

        def _throttle_bandwidth(self, len_chunk: int, max_speed: int) -> None:
            now = time.monotonic()
            if self._started is None:
                self._started = now
            self._datacount += len_chunk
            due = self._due(self._started, self._datacount, max_speed)
            if due - now > 0.001:
                self._hold_until(due)

        def _hold_until(self, t: float) -> None:
            """Send nothing until monotonic time ``t`` (``inf``: never again)."""

            def wake() -> None:
                self.add_channel(events=self.ioloop.READ if self.receive else self.ioloop.WRITE)

            self.del_channel()
            self._cancel_throttler()
            if t != float("inf"):
                self._throttler = self.ioloop.call_later(
                    max(0.0, t - time.monotonic()), wake, _errback=self.handle_error)

    return PacedDTP
