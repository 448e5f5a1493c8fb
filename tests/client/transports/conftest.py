"""Fixtures of the transport tests (helpers.py holds the plain functions)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from pftp_lab.ftp_proxy import FtpDelayProxy

from .helpers import FTP_SERVERS


@pytest.fixture(params=FTP_SERVERS)
def ftp_server(request):
    """Each test runs against pyftpdlib, vsftpd, pure-ftpd and proftpd."""
    return request.getfixturevalue(request.param)


@pytest.fixture
def relay() -> Iterator[Callable[..., tuple[FtpDelayProxy, str]]]:
    """``relay(server, **proxy_options) -> (proxy, base URL through the proxy)``."""
    proxies: list[FtpDelayProxy] = []

    def start(server, **kw) -> tuple[FtpDelayProxy, str]:
        proxy = FtpDelayProxy(server.host, server.port, **kw).start()
        proxies.append(proxy)
        return proxy, f"ftp://{server.userinfo}{server.host}:{proxy.port}/"

    try:
        yield start
    finally:
        for proxy in proxies:
            proxy.close()
