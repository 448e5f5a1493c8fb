"""Record arrival timestamps of parallel TCP range downloads (diagnostic tool).

``python -m pftp_client.congestion.record --flow IP:PORT:BYTES ... --out t.npz``
opens one connection per flow (thread per flow, like the engine), sends
"0 BYTES\\n" (the lab's range senders speak this), and records for every
receive call the application clock (app-recv) and the kernel SO_TIMESTAMPNS
time (app-kernel); with ``--capture`` (root) it also records every data
packet's kernel arrival time from an AF_PACKET socket (packet-afpacket).
The .npz holds, per flow i: app_recv_<i>, app_kernel_<i>, app_bytes_<i>,
packet_<i>, packet_bytes_<i>, plus meta (JSON). Used by the benchmark and the
lab test to feed the detectors with real timestamps.
"""

from __future__ import annotations

import argparse
import json
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from pftp_client.congestion.capture import PacketCapture
from pftp_client.congestion.timestamps import enable_kernel_timestamps, recv_into_timestamped


@dataclass
class FlowRecord:
    remote: tuple[str, int]
    nbytes: int
    local_port: int = 0
    app_recv: list[int] = field(default_factory=list)
    app_kernel: list[int] = field(default_factory=list)
    app_bytes: list[int] = field(default_factory=list)
    received: int = 0
    error: str = ""


def _download(rec: FlowRecord, deadline: float, start: threading.Event) -> None:
    buf = bytearray(65536)
    view = memoryview(buf)
    try:
        with socket.create_connection(rec.remote, timeout=10) as sock:
            rec.local_port = sock.getsockname()[1]
            kernel = enable_kernel_timestamps(sock)
            start.wait()
            sock.sendall(f"0 {rec.nbytes}\n".encode())
            sock.settimeout(max(deadline - time.monotonic(), 0.1))
            while rec.received < rec.nbytes and time.monotonic() < deadline:
                if kernel:
                    n, kts, _src = recv_into_timestamped(sock, view, 0)
                else:
                    n, kts = sock.recv_into(view), 0
                now = time.monotonic_ns()
                if n == 0:
                    break
                rec.app_recv.append(now)
                rec.app_kernel.append(kts)
                rec.app_bytes.append(n)
                rec.received += n
    except OSError as exc:
        rec.error = str(exc)


def record(
    flows: Sequence[tuple[str, int, int]], *, seconds: float, capture: bool
) -> tuple[list[FlowRecord], PacketCapture | None]:
    recs = [FlowRecord((h, p), n) for h, p, n in flows]
    cap = PacketCapture({p for _h, p, _n in flows}).start() if capture else None
    try:
        start = threading.Event()
        deadline = time.monotonic() + seconds
        threads = [threading.Thread(target=_download, args=(r, deadline, start)) for r in recs]
        for t in threads:
            t.start()
        time.sleep(0.2)  # all connected before any data flows
        deadline = time.monotonic() + seconds
        start.set()
        for t in threads:
            t.join(seconds + 15)
        time.sleep(0.05)
    finally:
        if cap is not None:
            cap.stop()
    return recs, cap


def save(path: str, recs: Sequence[FlowRecord], cap: PacketCapture | None, meta: dict) -> None:
    arrays: dict[str, np.ndarray] = {}
    for i, r in enumerate(recs):
        arrays[f"app_recv_{i}"] = np.asarray(r.app_recv, dtype=np.int64)
        arrays[f"app_kernel_{i}"] = np.asarray(r.app_kernel, dtype=np.int64)
        arrays[f"app_bytes_{i}"] = np.asarray(r.app_bytes, dtype=np.int64)
        key = (r.remote[0], r.remote[1], r.local_port)
        times, sizes = cap.packets(key) if cap else (np.zeros(0, np.int64),) * 2
        arrays[f"packet_{i}"], arrays[f"packet_bytes_{i}"] = times, sizes  # same order
    meta = dict(meta, flows=[{"remote": list(r.remote), "local_port": r.local_port,
                              "received": r.received, "error": r.error} for r in recs])
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    np.savez_compressed(path, **arrays)


def load(path: str) -> dict:
    """{'meta': dict, 'flows': [{'app-recv': arr, 'app-kernel': arr, 'packet-afpacket': arr,
    'app_bytes': arr, 'packet_bytes': arr}, ...]}"""
    with np.load(path) as z:
        meta = json.loads(bytes(z["meta"]).decode())
        flows = []
        for i in range(len(meta["flows"])):
            flows.append({
                # TCP reports the time of the newest segment consumed; after a loss the
                # segments queued out of order are older, so keep the running maximum.
                "app-recv": z[f"app_recv_{i}"],
                "app-kernel": np.maximum.accumulate(z[f"app_kernel_{i}"]),
                "app_bytes": z[f"app_bytes_{i}"], "packet-afpacket": z[f"packet_{i}"],
                "packet_bytes": z[f"packet_bytes_{i}"],
            })
    return {"meta": meta, "flows": flows}


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--flow", action="append", required=True, help="IP:PORT:BYTES")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--capture", action="store_true")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    flows = []
    for f in args.flow:
        host, port, nbytes = f.rsplit(":", 2)
        flows.append((host, int(port), int(nbytes)))
    recs, cap = record(flows, seconds=args.seconds, capture=args.capture)
    save(args.out, recs, cap, {"seconds": args.seconds, "capture": bool(cap)})
    print(json.dumps({"flows": [(r.received, r.error) for r in recs],
                      "packets": cap.packets_seen if cap else 0}))


if __name__ == "__main__":
    main()
