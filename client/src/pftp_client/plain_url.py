"""What urllib.parse.urlsplit makes of a URL, for the URLs where that is plain
string work. urllib.parse loads re and ipaddress (~5 ms), and the entry point's
head start (early.py: the mirrors' FTP URLs, the coordinator's http:// URL) runs
before anything else has loaded them; those URLs are nearly always this plain."""

from __future__ import annotations

_PLAIN_URL_CHARS = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~:/@!$&'()*+,;="
)
_SCHEME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+-.")


def plain_url_parts(
    url: str,
) -> tuple[str, str | None, int | None, str, str | None, str | None] | None:
    """(scheme, hostname, port, path, username, password) exactly as
    urllib.parse.urlsplit gives them, for a URL of unreserved characters with no
    percent-escape, IPv6 bracket, query or fragment; None for any other URL (the
    caller asks urlsplit). urllib.parse loads re and ipaddress (~5 ms) on the way
    to the first connect, and a mirror's URL is nearly always this plain.
    ValueError for a port urlsplit would refuse."""
    scheme, sep, rest = url.partition("://")
    if (not sep or not scheme or not scheme[0].isalpha() or not set(scheme) <= _SCHEME_CHARS
            or not set(rest) <= _PLAIN_URL_CHARS):
        return None
    netloc, slash, path = rest.partition("/")
    userinfo, at, hostport = netloc.rpartition("@")
    username = password = None
    if at:
        username, colon, password = userinfo.partition(":")
        if not colon:
            password = None
    hostname, _, port_text = hostport.partition(":")
    port = None
    if port_text:
        if not port_text.isdigit():
            raise ValueError(f"URL has an invalid port: {url!r}")
        port = int(port_text)
        if port > 65535:
            raise ValueError(f"URL has an invalid port: {url!r}")
    return scheme.lower(), hostname.lower() or None, port, slash + path, username, password
