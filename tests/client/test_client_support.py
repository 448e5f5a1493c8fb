"""Control file, settings, flow timings and the public API."""

from __future__ import annotations

from pathlib import Path

import pftp_client
import pytest
from pftp_client.control_file import (
    ControlState,
    ResumeMismatch,
    check_same_file,
    ctl_path,
    load,
    save,
)
from pftp_client.flow_observer import FlowTimings
from pftp_client.ranges import RangeSet
from pftp_client.settings import SettingsError, load_settings


def test_public_api_is_deliberate():
    assert set(pftp_client.__all__) == {
        "CoordinatorAnswerError",
        "CoordinatorError",
        "CoordinatorRefused",
        "CoordinatorUnavailable",
        "DownloadSummary",
        "EngineConfig",
        "FlowControl",
        "FlowObserver",
        "FlowTimings",
        "MirrorEvent",
        "MirrorStats",
        "NoMirrorCouldServe",
        "ResumeMismatch",
        "UsageError",
        "VerificationFailed",
        "download",
    }
    for name in pftp_client.__all__:
        assert getattr(pftp_client, name) is not None


def test_control_file_roundtrip_and_identity(tmp_path):
    target = tmp_path / "f.iso"
    st = ControlState(
        "f.iso",
        100,
        "a" * 64,
        10,
        ["ftp://h/f"],
        RangeSet([(0, 30), (50, 60)]),
        [(0, 30, "m1"), (50, 60, "m2")],
    )
    save(ctl_path(target), st)
    back = load(ctl_path(target))
    assert back is not None and back.done == st.done and back.written_by == st.written_by
    check_same_file(back, size=100, sha256="a" * 64, urls=["http://other/f"])
    with pytest.raises(ResumeMismatch, match="101 bytes"):
        check_same_file(back, size=101, sha256="a" * 64, urls=[])
    with pytest.raises(ResumeMismatch, match="SHA-256"):
        check_same_file(back, size=100, sha256="b" * 64, urls=[])
    no_hash = ControlState("f", 100, None, 10, ["ftp://h/f"])
    with pytest.raises(ResumeMismatch, match="no mirror in common"):
        check_same_file(no_hash, size=100, sha256=None, urls=["ftp://x/f"])
    ctl_path(target).write_text("{broken")
    with pytest.raises(ValueError, match="unreadable"):
        load(ctl_path(target))
    assert load(tmp_path / "absent.pftp-ctl") is None


# Access bandwidth (parsing, sources, cache, history): tests/client/test_access_bandwidth.py


def test_settings_from_file_and_env(tmp_path):
    cfg = tmp_path / "client.toml"
    cfg.write_text('coordinator = "http://c:8000"\naccess_bandwidth = "50M"\nstall_timeout = 7\n'
                   "max_connections = 2\n")
    s = load_settings({"PFTP_CLIENT_CONFIG": str(cfg)})
    assert (
        s.coordinators == ["http://c:8000"] and s.access_bandwidth == "50M" and s.stall_timeout == 7
    )
    assert s.max_connections == 2 and not s.unknown and s.cross_check
    cfg.write_text("cross_check = false\n")
    assert not load_settings({"PFTP_CLIENT_CONFIG": str(cfg)}).cross_check
    cfg.write_text('coordinator = "http://c:8000"\naccess_bandwidth = "50M"\nstall_timeout = 7\n'
                   "max_connections = 2\n")
    s = load_settings({"PFTP_CLIENT_CONFIG": str(cfg), "PFTP_COORDINATOR": "http://env:1"})
    assert s.coordinators[0] == "http://env:1"
    cfg.write_text("timeout = -1\n")
    with pytest.raises(SettingsError, match="timeout"):
        load_settings({"PFTP_CLIENT_CONFIG": str(cfg)})
    assert load_settings({"XDG_CONFIG_HOME": str(tmp_path / "none")}).coordinators == []


def test_flow_timings_ring_is_bounded_and_ordered():
    t = FlowTimings(capacity=4)
    for i in range(10):
        t.on_receive("f", 1000 + i, i)
    times, sizes = t.snapshot("f")
    assert times.tolist() == [1006, 1007, 1008, 1009] and sizes.tolist() == [6, 7, 8, 9]
    assert t.total_arrivals("f") == 10
    assert t.snapshot("unknown")[0].size == 0


def test_part_and_ctl_names():
    assert ctl_path(Path("/d/x.iso")).name == "x.iso.pftp-ctl"


def test_control_file_write_failure_names_the_file_and_keeps_the_old_one(
    tmp_path, monkeypatch
):
    """A write that fails (the disk full when the new state is put in place) leaves
    the old control file as it was, no temporary file behind, and says which file
    could not be written."""
    import errno

    from pftp_client import control_file

    ctl = tmp_path / "f.bin.pftp-ctl"
    save(ctl, ControlState("f.bin", 10, None, 4, ["ftp://h/f.bin"], RangeSet([(0, 4)])))

    def full(src, dst):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(control_file.os, "replace", full)
    with pytest.raises(OSError, match=r"cannot write .*f\.bin\.pftp-ctl: No space left"):
        save(ctl, ControlState("f.bin", 10, None, 4, ["ftp://h/f.bin"], RangeSet([(0, 8)])))
    monkeypatch.undo()
    assert load(ctl).done == RangeSet([(0, 4)])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.bin.pftp-ctl"]


def test_a_local_error_mid_download_has_an_exit_code() -> None:
    """The engine aborts on a local error (disk full mid-download): exit 5 with its
    message, not a traceback and exit 1."""
    from pftp_client.cli import EXIT_OTHER, _exit_code
    from pftp_client.engine import EngineAborted

    assert _exit_code(EngineAborted("writing f.pftp-part: No space left on device")) == EXIT_OTHER
