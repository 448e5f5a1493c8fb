"""Real namespaces: two mirrors behind one tbf-shaped link, one behind its own."""

from __future__ import annotations

import socket
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from pftp_client.congestion import TimestampSource, group_flows
from pftp_client.congestion.capture import PacketCapture, parse_tcp_segment, source_port_filter
from pftp_client.congestion.detectors import pair_test_for
from pftp_client.congestion.record import load
from pftp_client.congestion.timestamps import clean_app_timestamps

pytestmark = pytest.mark.lab


def test_af_packet_capture_sees_only_data_from_the_filtered_port():
    srv = socket.create_server(("127.0.0.1", 0))
    other = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]

    def serve(s):
        c, _ = s.accept()
        with c:
            c.sendall(b"x" * 300_000)

    threads = [threading.Thread(target=serve, args=(s,), daemon=True) for s in (srv, other)]
    for t in threads:
        t.start()
    try:
        with PacketCapture([port]) as cap:
            time.sleep(0.2)
            for s in (srv, other):
                with socket.create_connection(s.getsockname()) as c:
                    got = 0
                    while chunk := c.recv(65536):
                        got += len(chunk)
                    assert got == 300_000
            time.sleep(0.3)
        keys = cap.keys()
        assert len(keys) == 1 and keys[0][1] == port
        assert int(cap.sizes(keys[0]).sum()) == 300_000
        ts = cap.timestamps(keys[0])
        assert ts.size >= 5 and np.all(np.diff(ts) >= 0)
        assert cap.source is TimestampSource.PACKET_AF_PACKET
    finally:
        srv.close()
        other.close()


def test_af_packet_capture_reads_in_batches_and_keeps_every_segment(monkeypatch):
    """The capture thread wakes every _PAUSE_S and reads what queued meanwhile in
    batches (here of 8 frames, so that each wake-up reads several): 2000 segments
    of 1000 bytes, sent a little apart (loopback merges back-to-back sends into
    one 64 KiB frame), are all kept, each with its own kernel time."""
    from pftp_client.congestion import capture as cap_mod

    monkeypatch.setattr(cap_mod, "_BATCH", 8)
    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]

    def serve():
        c, _ = srv.accept()
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with c:
            for _ in range(2000):
                c.sendall(b"y" * 1000)
                time.sleep(0.0002)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        with PacketCapture([port]) as cap:
            time.sleep(0.1)
            with socket.create_connection(("127.0.0.1", port)) as c:
                got = 0
                while chunk := c.recv(65536):
                    got += len(chunk)
            assert got == 2_000_000
            time.sleep(0.2)
        (key,) = cap.keys()
        sizes = cap.sizes(key)
        assert int(sizes.sum()) == 2_000_000
        assert sizes.size == cap.packets_seen >= 1000  # (frames, not batches)
        ts = cap.timestamps(key)
        assert np.all(np.diff(ts) >= 0) and np.unique(ts).size > ts.size * 0.9
    finally:
        srv.close()


def test_bpf_program_shape_and_segment_parser():
    prog = source_port_filter([21, 80])
    assert prog[-2] == (0x06, 0, 0, 128) and prog[-1] == (0x06, 0, 0, 0)
    with pytest.raises(ValueError):
        source_port_filter([])
    ip = bytes.fromhex("4500003c00004000400600000a0000010a000002")
    ports = (5001).to_bytes(2, "big") + (40000).to_bytes(2, "big")
    tcp = ports + bytes(8) + bytes([0x50]) + bytes(7)
    frame = bytes(12) + b"\x08\x00" + ip + tcp + bytes(20)
    assert parse_tcp_segment(frame, len(frame)) == ("10.0.0.1", 5001, 40000, 20)


def _expected(groups: list[list[int]]) -> list[list[int]]:
    return sorted(sorted(g) for g in groups)


def test_detector_groups_two_shared_and_one_independent(tmp_path):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root holds bench/
    from bench.congestion_topology import SERVE_PORT, Link, Topology

    attempts = []
    with Topology([Link(8_000_000, 2), Link(6_000_000, 1)]) as topo:
        for attempt in range(3):
            out = tmp_path / f"trace{attempt}.npz"
            argv = [sys.executable, "-m", "pftp_client.congestion.record", "--capture",
                    "--seconds", "2.5", "--out", str(out)]
            for addr in topo.mirror_addrs:
                argv += ["--flow", f"{addr}:{SERVE_PORT}:1000000000"]
            res = topo.run_in_client(argv, timeout=60)
            assert res.returncode == 0, res.stderr[-2000:]
            trace = load(str(out))
            verdicts = {}
            for source in ("packet-afpacket", "app-recv"):
                flows = {
                    i: (f[source] if source.startswith("packet")
                        else clean_app_timestamps(f[source], f["app_bytes"]))[:400]
                    for i, f in enumerate(trace["flows"])
                }
                g = group_flows(flows, pair_test_for("entropy", source))
                verdicts[source] = _expected(g.shared_sets)
            attempts.append(verdicts)
            if all(v == [[0, 1]] for v in verdicts.values()):
                return
    pytest.fail(f"expected [[0, 1]] from both sources in one of 3 attempts, got {attempts}")
