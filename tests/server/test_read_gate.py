"""probes/read_gate.py: throughput reads share; the parallel read and its baseline
go alone."""

from __future__ import annotations

import threading

from pftp_coordinator.probes.read_gate import ReadGate

WAIT = 5.0


def _hold(gate: ReadGate, how: str, inside: threading.Event, leave: threading.Event,
          log: list[str], name: str) -> threading.Thread:
    def run() -> None:
        with getattr(gate, how)():
            log.append(f"{name} in")
            inside.set()
            leave.wait(WAIT)
            log.append(f"{name} out")

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_shared_reads_run_together() -> None:
    gate, log = ReadGate(), []
    ins = [threading.Event(), threading.Event()]
    leave = threading.Event()
    ts = [_hold(gate, "shared", ins[i], leave, log, f"r{i}") for i in range(2)]
    assert all(e.wait(WAIT) for e in ins)  # both inside at once
    leave.set()
    for t in ts:
        t.join(WAIT)
    assert sorted(log[:2]) == ["r0 in", "r1 in"]


def test_a_read_alone_waits_for_the_shared_ones_and_keeps_new_ones_out() -> None:
    gate, log = ReadGate(), []
    r_in, r_leave = threading.Event(), threading.Event()
    reader = _hold(gate, "shared", r_in, r_leave, log, "r")
    assert r_in.wait(WAIT)
    a_in, a_leave = threading.Event(), threading.Event()
    alone = _hold(gate, "alone", a_in, a_leave, log, "a")
    assert not a_in.wait(0.2)  # the shared read is still in
    # a new shared read now waits behind the one waiting to go alone
    late_in, late_leave = threading.Event(), threading.Event()
    late = _hold(gate, "shared", late_in, late_leave, log, "late")
    assert not late_in.wait(0.2)
    r_leave.set()
    assert a_in.wait(WAIT)
    assert not late_in.wait(0.2)  # still alone
    a_leave.set()
    assert late_in.wait(WAIT)
    late_leave.set()
    for t in (reader, alone, late):
        t.join(WAIT)
    assert log == ["r in", "r out", "a in", "a out", "late in", "late out"]


def test_shared_reads_keep_to_their_limit() -> None:
    # (probe_read_concurrency: reads side by side share the coordinator's link)
    gate, log = ReadGate(), []
    ins = [threading.Event(), threading.Event()]
    leaves = [threading.Event(), threading.Event()]

    def hold(i: int) -> threading.Thread:
        def run() -> None:
            with gate.shared(1):
                log.append(f"r{i} in")
                ins[i].set()
                leaves[i].wait(WAIT)
                log.append(f"r{i} out")

        t = threading.Thread(target=run, daemon=True)
        t.start()
        return t

    first = hold(0)
    assert ins[0].wait(WAIT)
    second = hold(1)
    assert not ins[1].wait(0.2)  # one at a time
    leaves[0].set()
    assert ins[1].wait(WAIT)
    leaves[1].set()
    for t in (first, second):
        t.join(WAIT)
    assert log == ["r0 in", "r0 out", "r1 in", "r1 out"]
    # a limit of 2 lets two in together
    gate2 = ReadGate()
    both = [threading.Event(), threading.Event()]
    go = threading.Event()

    def two(i: int) -> threading.Thread:
        def run() -> None:
            with gate2.shared(2):
                both[i].set()
                go.wait(WAIT)

        t = threading.Thread(target=run, daemon=True)
        t.start()
        return t

    ts = [two(0), two(1)]
    assert all(e.wait(WAIT) for e in both)
    go.set()
    for t in ts:
        t.join(WAIT)
