"""Fixtures of the transport tests (helpers.py holds the plain functions)."""

from __future__ import annotations

import pytest

from .helpers import FTP_SERVERS


@pytest.fixture(params=FTP_SERVERS)
def ftp_server(request):
    """Each test runs against pyftpdlib, vsftpd and pure-ftpd."""
    return request.getfixturevalue(request.param)
