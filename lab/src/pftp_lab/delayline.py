"""Propagation delay and random loss on a lab link (this kernel has no netem).

`delayline.c` bridges two interfaces at layer 2 and holds every frame for a fixed time in
each direction. It is built with the machine's C compiler on first use, once per source
version, into a cache directory. `insert()` cuts a link and puts the wire in the middle:

    A ──veth── [ namespace D: delayline ] ──veth── B
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from pathlib import Path

from . import netns
from .netns import LabError

SOURCE = Path(__file__).with_name("delayline.c")
# Offloads that would hand the wire frames bigger than a packet, or checksums left for
# hardware to fill in: off on every veth end that feeds a delay line.
OFFLOADS = ("tx", "tso", "gso", "gro")


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pftp-lab"


def binary() -> Path:
    """Path of the compiled delay line, building it if this source version has no build."""
    source = SOURCE.read_bytes()
    digest = hashlib.sha256(source).hexdigest()[:12]
    target = cache_dir() / f"delayline-{digest}"
    if os.access(target, os.X_OK):
        return target
    cc = netns.find_tool("cc") or netns.find_tool("gcc")
    if cc is None:
        raise LabError("links with delay or loss need a C compiler to build delayline.c "
                       "(Debian package gcc); none on PATH")
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".delayline-", dir=target.parent)
    os.close(fd)
    try:
        proc = subprocess.run([cc, "-O2", "-Wall", "-Werror", "-o", tmp, str(SOURCE)],
                              capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            raise LabError(f"building {SOURCE.name} failed:\n{proc.stderr[-3000:]}")
        os.replace(tmp, target)  # atomic: concurrent labs may build at the same time
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def offloads_off(ns: str, dev: str) -> None:
    tool = netns.find_tool("ethtool")
    if tool is None:
        raise LabError("links with delay or loss need ethtool (Debian package ethtool) to turn "
                       "off the veth offloads")
    netns.sh(["ip", "netns", "exec", ns, tool, "-K", dev,
              *[word for feature in OFFLOADS for word in (feature, "off")]])


def argv(dev_a: str, dev_b: str, one_way_s: float, loss: float, seed: int) -> list[str]:
    if one_way_s < 0 or not 0 <= loss < 1:
        raise LabError(f"delay must be >= 0 and loss in [0, 1): got {one_way_s}, {loss}")
    return [str(binary()), dev_a, dev_b, str(round(one_way_s * 1e6)),
            str(round(loss * 1e6)), str(seed)]
