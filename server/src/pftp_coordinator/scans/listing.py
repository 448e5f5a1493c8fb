"""Pure parsers for directory listings (FTP LIST, HTTP index pages)."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from urllib.parse import unquote, urlsplit

# "-rw-r--r--   1 ftp  ftp   1048576 Jan 01 12:00 name with spaces"
_UNIX_LIST = re.compile(
    r"^(?P<mode>[\-dlbcps][\w\-]{9})\S*\s+\d+\s+\S+\s+\S+\s+(?P<size>\d+)\s+"
    r"\w{3}\s+\d{1,2}\s+[\d:]{4,5}\s(?P<name>.+)$"
)
# "01-01-24  12:00PM       1048576 name" (IIS DOS style)
_DOS_LIST = re.compile(r"^\d\d-\d\d-\d\d\s+\d\d:\d\d[AP]M\s+(?P<size><DIR>|\d+)\s+(?P<name>.+)$")


def parse_list_line(line: str) -> tuple[str, int | None, bool] | None:
    """(name, size, is_file) from one LIST line; None for lines it cannot read
    (e.g. "total 12")."""
    m = _UNIX_LIST.match(line.rstrip("\r\n"))
    if m:
        mode = m.group("mode")
        name = m.group("name")
        if mode.startswith("l") and " -> " in name:
            name = name.split(" -> ", 1)[0]
        return name, int(m.group("size")), mode.startswith("-")
    m = _DOS_LIST.match(line.rstrip("\r\n"))
    if m:
        size = m.group("size")
        is_dir = size == "<DIR>"
        return m.group("name"), None if is_dir else int(size), not is_dir
    return None


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            for k, v in attrs:
                if k == "href" and v:
                    self.hrefs.append(v)


def index_names(html: str) -> set[str]:
    """File names linked from an autoindex page (nginx/Apache/python http.server)."""
    p = _Links()
    p.feed(html)
    names = set()
    for href in p.hrefs:
        path = unquote(urlsplit(href).path)
        if path and not path.endswith("/") and "?" not in href:
            names.add(path.rsplit("/", 1)[-1])
    return names
