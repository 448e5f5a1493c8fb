"""The download engine: one worker thread per flow (one mirror connection).

Each flow streams a *lane*, a byte range [reserved, end) fetched with one
request, and writes every block at its offset into the part file. Lanes change
while they run, always by lowering their ``RangeEnd`` (transports/base.py):

* start: coordinated mode gives each active mirror its portion (paper 001);
  dynamic mode splits the file in equal lanes, one per mirror (paper 000, III),
  except when the access bandwidth is configured: one flow then leads alone and
  the others stand by until it shows it cannot fill the access link (lead.py);
* tail: a flow that runs out of work takes the end of the lane expected to
  finish last (tail.py), so no connection idles while another has far to go;
* slow server: the monitor cuts a flow that lags the mean (slow_server.py) and
  hands the rest to a backup mirror, or to the pool the fastest flows take from;
* failure: an error, a stall or an early end puts the unfetched remainder back
  in the pool (no byte received is fetched again, none is lost); transient
  errors are retried on the same mirror after a backoff, a bounded number of
  times; a mirror that is given up on is replaced by a backup;
* congestion: the detector asks to drop flows (flow_observer.FlowControl); their
  remainders go to the pool and as many backups start (paper 001, Shared-Con-Algo);
* corruption: a piece whose hash fails is fetched again from another mirror,
  and the mirror that served it is blamed and dropped.

Invariant: every byte is written by exactly one lane. A lane reserves a block
(under the lock) before writing it; work is only ever split at or above a
lane's reservation, and a duplicate lane writes nothing until it overtakes its
victim, at which point the victim's end is lowered to the takeover point.
Memory does not depend on the file size: a few range sets whose size depends on
the number of lanes, a bounded ring of arrival times per flow, and at most one
piece buffer per repair in progress.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal

from pftp_wire.tcp_model import slow_start_s

from pftp_client import numpy_preload
from pftp_client.advice import DEFAULT_MAX_CONNECTIONS, advised_count, split_work
from pftp_client.advice import MIN_PART_BYTES as ADVISED_MIN_PART_BYTES
from pftp_client.flow_observer import DetectorFactory, FlowObserver, FlowTimings
from pftp_client.integrity import sha256_of_buffer, sha256_of_range
from pftp_client.lead import (
    LeadSettings,
    budget_s,
    judge_start,
    judge_steady,
    pays_off,
    rate_after_recovery,
)
from pftp_client.part_file import PartFile
from pftp_client.path_check import PathCheck
from pftp_client.pieces import PieceGrid, split_unit
from pftp_client.plan import MirrorSource, Plan
from pftp_client.ranges import MAX_ROUNDS, ROUND_BLOCK_BYTES, RangeOwners, RangeSet, deal_in_rounds
from pftp_client.rate import RateMeter
from pftp_client.slow_server import FlowProgress, find_slow_flows, reduced_portion
from pftp_client.streams import (
    StreamTrial,
    burst_bytes,
    burst_path_rate,
    bursts_outpace,
    connections_for,
    first_pause,
    gained,
    idle_share,
    kept_streams,
    loss_share,
    merge_stream_stats,
    needed_gain,
    others_kept,
    paced_rate,
    paused_share,
    rate_since,
    scales,
    steady,
    streams_to_add,
    trial_cuts,
    without_crumbs,
)
from pftp_client.summary import EventKind, MirrorEvent, MirrorStats
from pftp_client.tail import (
    Duplicate,
    LaneView,
    Steal,
    begun_ahead_latency_s,
    long_ramp,
    measures_a_request,
    overlap_lead_bytes,
    plan_tail_move,
    pool_share,
    ramp_rate,
    switch_latency_s,
    time_left_s,
    victim_rate,
)
from pftp_client.transports.base import (
    Cancelled,
    PermanentError,
    PrematureEnd,
    RangeEnd,
    RangeFetcher,
    RangeNotHonoured,
    TransferError,
    TransientError,
    unreachable,
)

_LOG = logging.getLogger(__name__)

if TYPE_CHECKING:
    import numpy as np

OpenFetcher = Callable[..., RangeFetcher]
Checkpoint = Callable[[RangeSet, list[tuple[int, int, str]]], None]


class NoMirrorCouldServe(Exception):
    """Every mirror failed (and no backup was left) before the file was complete."""


class EngineAborted(Exception):
    """The download was cancelled (Ctrl-C) or hit a local error (disk)."""


# How long a leader is left to make its first request after the engine's start, and
# to show its first arrivals after that request, before it is judged (judge_start's
# budget counts from the download's first connects, and may be spent before the
# engine starts): its thread taking its connection, and a head start's arrivals.
_LEADER_TAKES_S = 0.05
# Round trips a new connection takes before its first request over a switch on an
# open one: the connect, and the greeting with the pipelined login's replies (FTP;
# an HTTP connect is one, a TLS handshake another).
NEW_CONNECTION_ROUND_TRIPS = 2


@dataclass
class EngineConfig:
    timeout: float = 30.0  # connect / reply timeout of a transport
    stall_timeout: float = 15.0  # no byte for this long: the flow failed (issue 3)
    max_consecutive_failures: int = 3  # transient errors retried on one mirror
    max_total_failures: int = 8
    backoff_s: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0)
    # A failure that says the network is unreachable (transports.base.unreachable)
    # while nothing has come from any mirror for outage_quiet_s, after data did
    # come: the client's own link, route or gateway is down, not the mirror. It is
    # retried (backoff_s) without counting against the mirror, for up to
    # outage_wait_s of silence; then as any failure. (Lab r16: the access link's
    # shaper replaced while the flows filled it; every connect failed with "No
    # route to host" and all three mirrors used up their retries within seconds.)
    outage_quiet_s: float = 0.5
    outage_wait_s: float = 60.0
    monitor_interval_s: float = 1.0  # Slow-Server-Algo monitoring interval
    slow_ratio: float = 0.5  # slow_server.SLOW_RATIO
    slow_min_pieces: int = 4  # a flow with less left than this is not cut
    slow_strikes: int = 2  # consecutive slow intervals before a cut (noise guard)
    duplicate_budget: float = 0.01  # share of the file that may be fetched twice
    default_latency_s: float = 0.05  # request latency before one is measured
    # A new lane's rate is held at the flow's rate before for this many request
    # latencies, at least warm_up_min_s (Flow.warm_up).
    warm_up_latencies: float = 5.0
    warm_up_min_s: float = 0.5
    ring_capacity: int = 4096  # arrivals kept per flow for the congestion detector
    # After the last byte: how long to wait for the flow threads. What they still do
    # then is protocol (read EOF and the 226, send QUIT): no write to the part file
    # (run waits for those) and no checkpoint (closed by run). Waiting for the 226
    # cost ~10 ms per download in the lab, so by default nobody waits.
    finish_grace_s: float = 0.0
    # The client's access bandwidth (bits/s, measured or configured; None: unknown).
    # When the flows together fill this share of it, the congested link they share
    # is the client's own access link: every mirror's path crosses it, so dropping a
    # flow for a backup cannot help (see drop_flows).
    access_bps: float | None = None
    # Dynamic mode on a large file: the equal blocks are dealt in rounds (each flow
    # one block per round, rounds in file order) once every block would still hold
    # this many bytes. The completed prefix then grows during the download, so the
    # SHA-256 at the end covers the last round instead of all but the first block
    # (4 GiB on loopback: 2.2 s of hashing after the last byte). A block costs one
    # more request per flow, so only blocks this large are worth it.
    round_block_bytes: int = ROUND_BLOCK_BYTES
    max_rounds: int = MAX_ROUNDS
    access_saturation: float = 0.7  # goodput under loss sits at 75-95 % of a full link
    detector_start_max_s: float = 1.0  # see _attach_detector
    # A cut leaves a flow the bytes its server is already sending (_cut_floor)
    # unless the flow has received nothing for this long (or two request
    # latencies): it is then in loss recovery and those bytes are as good as lost.
    stall_gap_s: float = 0.25
    # A flow silent this long (and twice its longest pause) counts as rate 0 for tail
    # moves (_dark): a loss-recovery timeout backs off from 0.2 s, a link that went
    # down stays silent.
    dark_after_s: float = 1.0
    # A request with no first byte this long (and 8 of its path's round trips, 4 of
    # its flow's request latencies), while other flows carry data, keeps one unit of
    # the split grid and hands the rest of its range over; its flow counts as rate 0
    # for the tail (_unanswered). A server that accepts connections and then says
    # nothing (a hung host completes the handshakes) held its whole portion until
    # the stall timeout: sweep freeze-start, 1.76x the bound where aria2c took 1.28x.
    no_answer_s: float = 3.0
    # A flow whose range ended in a silence takes no one else's work (_stalled_idle),
    # but gets a trial range once its connection answered again (_trial_range): a
    # link back up, a server that froze for a while. Left idle, a 40 Mbit/s mirror
    # back from a 4 s link outage sat out the rest of the download (sweep
    # "freeze-long": 1.39x the bound, 1.05x with trials; notes/SESSION-38.md). The
    # first trial comes trial_wait_s after the stall; each that goes silent too
    # doubles the wait (up to trial_wait_max_s) and is taken back. A trial is
    # trial_s of the flow's rate before the silence, and only with trial_min_left_s
    # of work left at the aggregate's rate, so that one taken back costs no tail.
    trial_wait_s: float = 1.0
    trial_wait_max_s: float = 8.0
    trial_s: float = 1.0
    trial_min_left_s: float = 3.0
    # A flow silent this long (and 4 round trips, and twice its longest pause) has
    # its path checked with new connections to its server (path_check.py). One that
    # got through after one that did not says the path was down and is back, while
    # the transfer's connection waits out TCP's backoff: the transfer is renewed on
    # a new one (_path_answered). Sweep "flap" (a 40 Mbit/s mirror's link down three
    # times for 0.64 s): its connection stayed silent 0.35-1.44 s after each.
    path_check: bool = True
    path_check_after_s: float = 0.5
    # Flows found to share a congested link with no backup to take their place are
    # parked (see drop_flows); if the flows left then carry less than this share of
    # what all carried before, within park_probation_s, the parked ones resume.
    park_hold: float = 0.8
    # Judged on the aggregate of the last 2 s (the window of _aggregate), so at
    # least 0.5 s after the parking: the cut's bytes in flight are thrown away and
    # the flows left need a moment to take the freed bandwidth.
    park_probation_s: float = 2.5
    # A parking the aggregate clearly did not survive is undone from this long on,
    # when three quarters of the aggregate's window come after it (a wrong verdict
    # between two independent 20 Mbit/s mirrors cost 2.9 s of one of them: 1.21x).
    park_early_s: float = 1.5
    # Sooner still, the flows left are judged on their own bytes since the parking
    # (after park_settle_rtts of their path's RTT, at least park_settle_s) over at
    # least park_judge_s, and at least twice the longest gap between two of their
    # blocks lately (a server that sends in bursts). A wrong verdict between four
    # independent 20 Mbit/s mirrors 30 ms away was undone at 2.8 s (the monitor's
    # round and the 2 s window): 1.21x.
    park_settle_s: float = 0.2
    park_settle_rtts: float = 3.0
    park_judge_s: float = 0.5
    # No parking for the access link with less work left than this at the current
    # rate (a probation's worth): it could not be judged, and its cut would be the
    # end's (drop_flows).
    park_min_left_s: float = 2.5
    # Park a flow found sharing a congested link other than the access link when no
    # backup is left to take its place (False: both keep working and share the
    # link). Parked, the flow left must grow into the freed share, and senders are
    # slow to: a CUBIC window grows by wall-clock time, and BBR in the lab (no
    # propagation delay) kept pacing at the rate it measured while sharing. Two
    # groups of two mirrors behind two 15 Mbit/s links, 4 runs each: kept 1.027x
    # (FTP) and 1.045x (HTTP), parked 1.057x and 1.084x (session 35).
    park_shared_without_backup: bool = False
    # Dynamic mode with access_bps known: one flow over the whole file first, the
    # others connected and standing by until it shows it cannot fill the link.
    lead_start: bool = True
    lead: LeadSettings = field(default_factory=LeadSettings)
    # With access_bps known, the flows fill the access link when they carry this
    # share of it: below it over a monitor round (_top_up_rate), for top_up_rounds
    # monitor rounds in a row, a backup joins (_top_up); only at or above it is a
    # flow parked for sharing that link (drop_flows). A full link carries
    # 0.90-0.96 of its rate as payload (headers, loss recovery); the 4 mirrors a
    # coordinator chose in the lab carried 0.8 of a 40 Mbit/s link (paper 004's
    # table 1), and parking the backup that joined then undid the join.
    access_full: float = 0.85
    top_up_rounds: int = 1
    # The first judgement leaves out the start: connections, logins, slow start;
    # it is over a monitor round of at least top_up_window_s that began after it.
    top_up_start_s: float = 0.5
    top_up_window_s: float = 0.9
    # Only when the active mirrors' expected rates covered this share of the link
    # (the coordinator's own bound, ACCESS_COVERED_SHARE: see _meant_to_fill).
    top_up_covered: float = 0.9
    # ...when at least this much work is left at the current rate (a new flow needs
    # a few round trips and its slow start before it carries anything).
    top_up_min_left_s: float = 1.0
    # The access figure was measured by the client (a packet train, past downloads),
    # not configured: flows that fill it and their mirrors' expected rates both get
    # one backup to test which limits them (_figure_untested). A configured figure
    # is the user's word, taken back only by flows that carry well more (the test
    # join cost 1.5 % where one mirror fills a known 4 Mbit/s link, and a single
    # curl there takes the bound).
    test_access_figure: bool = False
    # A flow whose range ends within spare_lead_s, or a monitoring interval plus
    # this many round trips (and 0.5 s), has its transport get a second
    # connection ready (FTP keep_spare: connect, log in, passive port, data
    # connection: about six round trips), so that its next range starts one
    # round trip after the last one ends instead of three or four. (Judged once
    # per monitoring interval, on a rate that may still be in slow start: with
    # less lead, a range that ended 80 ms after its spare was ready was seen in
    # the lab.) Only on paths of at least spare_min_rtt_s: on a LAN the round
    # trips it saves are fractions of a millisecond.
    spare_lead_s: float = 4.0
    spare_lead_rtts: float = 8.0
    spare_min_rtt_s: float = 0.005
    spare_check_s: float = 0.25  # how often that is judged (on long ramps)
    # What begins before a range ends (the spare, the next range's start ahead, a
    # tail steal planned ahead) is timed on the flow's ramp (tail.ramp_rate), its
    # spare judged every spare_check_s and a new range's rate read from its warm-up's
    # end, only where a new connection's round trip and slow start last this long or
    # more: there the meter's window lags the rate by seconds. Elsewhere as on a
    # LAN: the lab's tbf queues lift a LAN path's RTT to ~10 ms, and timing such
    # flows on their bursts moved which look read a limited server first (session 43).
    long_ramp_s: float = 0.25
    # On such paths the next range's transfer begins on a second connection
    # before the running one ends (start_next: FTP on the spare, HTTP a second
    # GET), by overlap_margin x (a round trip and the slow start): its slow start
    # overlaps the end of the range before. Tried at most every overlap_retry_s.
    # 1.0 is the hand-over with the link full throughout: the old range runs
    # alone for the round trip, then carries what the new one leaves of the link
    # while its window doubles (n round trips carrying about one bandwidth-delay
    # product: n - 1 round trips of the rate, tcp_model.slow_start_s). More is
    # worse than it looks: the two transfers then share the mirror's link for
    # round trips after the new one's ramp, its sender settles at half the link
    # (BBR leaves startup after three rounds without growth; CUBIC halves on the
    # shared queue's loss) and regains the rest only over seconds once alone.
    # Wide-area --mirror, 4 runs each: 1.5 gave 1.205 (BBR senders) / 1.152
    # (CUBIC), 1.0 gave 1.146 / 1.142, 0.75 (too late: the link idles) 1.19.
    overlap: bool = True
    overlap_margin: float = 1.0
    overlap_retry_s: float = 0.05
    # Extra connections to a mirror whose one connection cannot fill its path
    # (streams.py): up to max_streams per mirror, tried one at a time while the
    # flows carry less than access_full of a known access link, on a flow whose
    # data connection saw at least stream_loss_share of its segments out of order
    # over a monitor round, stream_warm_s after its range's first byte, with at
    # least stream_min_left_s of its range left at its rate. Kept when the mirror's
    # flows then carry stream_gain times what they did over the monitor round
    # before, measured once the extra connection has run stream_judge_s (and
    # stream_judge_rtts round trips) since its first byte. Lab, 20 Mbit/s 30 ms
    # away: a flow with 1 % loss saw 12-30 % of its segments out of order, the
    # others under 0.5 % (a tail's cuts, a shaper's queue). Only on paths of at
    # least stream_min_rtt_s: one connection's window there must be large to fill
    # the path, and loss keeps it small (Mathis: the rate goes as 1 / RTT), while
    # on a LAN a few segments fill it. Short shaped paths with BBR senders showed
    # 30-50 % out of order (the shaper's queue drops BBR's probes), trials that
    # gained nothing and cost ~1 % (heterogeneous, selection-table1).
    # The other signal: a connection idle (no arrival in a bin of four of its
    # typical gaps) at least stream_idle_share of a monitor round, its sender
    # pausing between bursts (a per-connection rate limit; a window too small
    # for its path), judged stream_idle_warm_s (and stream_warm_rtts round
    # trips: slow start is bursty too) after its range's first byte, on any path
    # and any transport. Several connections at once when it was idle most of
    # the time (streams.streams_to_add). With the access link unknown, the gain
    # must not come from the other mirrors (streams.others_kept).
    max_streams: int = DEFAULT_MAX_CONNECTIONS
    stream_min_rtt_s: float = 0.01
    stream_loss_share: float = 0.01
    stream_idle_share: float = 0.3
    stream_first_idle_share: float = 0.45
    stream_burst_s: float = 0.025
    stream_burst_bytes: int = 40 * 1024
    stream_expected_share: float = 0.8
    stream_idle_warm_s: float = 0.5
    stream_first_skip_s: float = 0.3
    stream_warm_rtts: float = 10.0
    stream_warm_s: float = 1.5
    stream_min_left_s: float = 3.0
    # On a path of stream_wide_rtt_s or more a trial round costs seconds (the new
    # connections' connect, login, request and slow start, then the judgement's
    # stream_warm_rtts): a trial on an idle or lossy connection there tries
    # stream_wide_factor times the connections at once rather than one more, and
    # keeps those that paid (streams.kept_streams). Lab r41: a mirror 250 ms away
    # that holds each connection to 9.6 Mbit/s of its 38.4 got its second
    # connection 4 s in, and no third before its outage at 7 s.
    stream_wide_rtt_s: float = 0.1
    stream_wide_factor: int = 4
    # ...and none for this long after the flows last filled a known access link
    # (access_full of it over the aggregate's window), or the shared-congestion
    # detector found them sharing it: behind a full access link another connection
    # only takes from the other flows, and its queue's drops read as a path's loss
    # (lab r26: 28.5 Mbit/s access, 5.3 + 28.7 Mbit/s mirrors; the 5.3 one got
    # connections at 2 s and 4 s on "19 % of its segments out of order" while the
    # switches' dips held the aggregate under the bar, and the total fell to 25).
    stream_access_hold_s: float = 5.0
    stream_gain: float = 1.25
    stream_judge_s: float = 0.75
    stream_judge_rtts: float = 6.0
    # The early look (streams.paused_share): from stream_early_first_s after a
    # mirror's first connection's first data, every stream_early_every_s until
    # stream_early_s, read from stream_early_skip_s on, a connection paused at
    # least stream_early_share of that time between even bursts gets every
    # connection it may have (a per-connection limit, seen before the first
    # monitor round: lab, vsftpd and pure-ftpd at 1.25 MB/s behind 40 Mbit/s,
    # 92-97 %; link-limited starts at most 71 % with even bursts). Looked at
    # again until the evidence is there: each look's wait costs the mirror its
    # other connections' rate.
    #
    # How soon: the evidence is 3 pauses between bursts alike within 35 % (a
    # server's writes: vsftpd 64 KiB, pure-ftpd 48 KiB; a sender that overran a
    # shaper in slow start leaves bursts of 6-40 KiB), over at least 10 arrivals,
    # read from 50 ms after the first data arrived (the start's own burst), or
    # after the engine's first block when that came later (_early_starts). When whole
    # bursts arrive in a receive or two (the median gap is then a pause), a pause
    # is a gap of stream_early_pause_rtts round trips, at least stream_early_pause_s
    # (pure-ftpd splits a burst with 5-6 ms gaps), between bursts of at least
    # stream_early_min_burst bytes. Lab, session 24: the vsftpd and pure-ftpd
    # limits showed it 0.18-0.32 s after their first data (16 runs; before, with 5
    # pauses, 20 arrivals, 100 ms skipped, 0.25-0.44 s, and pure-ftpd missed it in
    # 2 of 8 runs); no look fired in 18 runs of the other nine scenarios, nor in
    # the arrivals of their 80 flows read offline (at most 84 % paused).
    # Session 25: looked at until 1 s (a mirror whose first bursts came jumbled,
    # while the others' extra connections started, showed it at 0.6-0.9 s instead
    # of the round's 2.2 s); 144 flows of the other nine scenarios read offline
    # stayed at most 78 % paused through 1 s, and a window of only the last
    # 0.3-0.5 s would have fired on 10 of them.
    # Session 33: 3 pauses (was 4) and read from the first data's arrival (a head
    # start's, 0.05-0.15 s before the engine's first block): per-connection-limit
    # --mirror 1.118 -> 1.099 (6 runs each, interleaved); no early look fired in
    # ~100 runs of the other scenarios and topologies (notes/SESSION-33.md).
    stream_early_first_s: float = 0.2
    stream_early_every_s: float = 0.025
    stream_early_s: float = 1.0
    stream_early_skip_s: float = 0.05
    stream_early_pauses: int = 3
    stream_early_arrivals: int = 10
    stream_early_spread: float = 0.35
    stream_early_pause_rtts: float = 10.0
    stream_early_pause_s: float = 0.01
    stream_early_min_burst: int = 16 * 1024
    stream_early_share: float = 0.85
    stream_early_burst_s: float = 0.04
    # A trial whose connections were counted from the path's rate read within
    # bursts (streams.connections_for) and that carries this share of it is not
    # doubled even when it scaled: the path is full.
    stream_path_full: float = 0.85
    # Even bursts with long pauses whose data arrive at less than this many times
    # the rate the connection is paced to are no server's sleeps: a slow link
    # recovering from losses (lab, selection-table1, a 2 Mbit/s mirror: paused
    # 86 % read with 10 ms pauses, 5.5 Mbit/s within its bursts against 3.35 paced;
    # 7 more connections, no gain). A held connection's bursts cross at its path's
    # rate: 3.8-9x (vsftpd, pure-ftpd at 1-1.25 MB/s behind 40-50 Mbit/s).
    stream_burst_pace: float = 2.0
    # The long look (engine._long_look), each monitor round for a mirror's first
    # connection that showed no other signal: over the last stream_long_look_s, at
    # least stream_long_pauses pauses of stream_long_pause_s (or 10 round trips) between even bursts
    # of stream_long_min_burst or more, the connection paused stream_long_share of
    # the time, its bursts crossing stream_long_pace times its paced rate, and no
    # loss where the transport counts it: a server whose limit counts in whole
    # seconds (nginx limit_rate: each second's bytes leave at its start, ~1 MB then
    # 0.8 s of nothing, with 7 ms stops inside and a few hundred bytes alone in the
    # pause) that no 1 s round or early look can see (lab, 40 Mbit/s, 1 MB/s: 16.4 s
    # with one connection). Its period drifts to ~1.3 s, so 4 s hold 3 pauses.
    # Read offline on the arrivals of 20 lab topologies (session 30), it fired on
    # nothing else; on nginx, on every window from 4 s on. Session 31: a younger
    # range is read from its start (three pauses are the evidence, not the
    # window's length), a second's leftover alone between two pauses is part of
    # the pause (streams.without_crumbs), and a mirror whose connections carry
    # stream_path_full of the path's rate gets no more (lab, 4 nginx mirrors held
    # to 1.25 MB/s behind 40 Mbit/s, 83 MB: 2.43x -> 1.55x the bound).
    stream_long_look_s: float = 4.0
    stream_long_pauses: int = 3
    stream_long_pause_s: float = 0.1
    stream_long_min_burst: int = 64 * 1024
    stream_long_share: float = 0.5
    stream_long_pace: float = 2.5
    # Two pauses of stream_two_pause_s (or 10 round trips) around one burst of
    # stream_two_min_burst or more are evidence enough: no ACK clock stops a
    # connection that long twice, a retransmission timeout comes with segments
    # out of order (the look's loss test), and a whole-second limit's third pause
    # ends a second after its second (lab, nginx at 1.25 MB/s behind 40 Mbit/s:
    # pauses of 0.45-0.8 s; the evidence at 1.5-1.9 s instead of 2.4-2.8 s).
    stream_two_pause_s: float = 0.25
    stream_two_min_burst: int = 256 * 1024
    # Sooner still, a young range's first pause of that length, ended within
    # stream_one_within_s of its first data, after stream_one_min_burst at the
    # path's rate and with the next burst crossing at it too: a whole-second
    # limit's first allowance (streams.first_pause; lab, nginx at 1.25 MB/s
    # behind 40 Mbit/s: at 0.8-1.0 s, paced 10-11.5 Mbit/s). Read offline on the
    # first connections of 36 lab runs (the bench's other scenarios and 9 sweep
    # topologies, FTP and HTTP), it fired only on another nginx-limited mirror;
    # without the resumed burst's own pace, also on a mirror whose link slowed to
    # a twentieth (it resumed at the new rate after 1.2 s), and with a 256 KiB
    # first burst on one in slow start into a shared access link.
    stream_one_min_burst: int = 512 * 1024
    stream_one_within_s: float = 2.0
    # Sooner still: a young range silent stream_silence_s (and 4 round trips, as
    # any path check) after such a first burst has its path checked then, not
    # after path_check_after_s, and when its server takes a new connection at once
    # the mirror gets connections at once (_silence_trial). The silence of a
    # whole-second limit lasts until the next second, 0.3-0.8 s after its
    # allowance (lab, nginx at 1.25 MB/s behind 40 Mbit/s: the first pause's end
    # came 0.6 s after it began); each connection opened during it brings its own
    # allowance at the path's rate. The path check keeps a link that went down out
    # of it, and the trial's judgement a server that stalls every connection.
    stream_silence_s: float = 0.25
    # Between monitor rounds the long look reads a mirror's first connection every
    # stream_long_every_s from stream_long_first_s after its first data until
    # stream_long_look_s (engine._long_looks): a whole-second limit's pause ends
    # anywhere within a round, and the round's look came up to 1 s after it (lab,
    # nginx 1.25 MB/s behind 40 Mbit/s: at 2.0 or 3.0 s); its first pause can end
    # before the early look's last second is over.
    stream_long_every_s: float = 0.1
    stream_long_first_s: float = 0.5
    # A mirror the coordinator advised several connections for (Assignment.
    # connections) gets them at start, each with at least this much of its portion.
    advised_min_part_bytes: int = ADVISED_MIN_PART_BYTES
    # A backup the coordinator advised several connections for gets them this long
    # after its first data (its work comes from the pool: known once it runs).
    advised_backup_look_s: float = 0.1


LaneKind = Literal["normal", "duplicate", "repair"]
# A flow's state at the end says why it stopped working; any other becomes "done".
_FINAL_STATES = ("failed", "corrupt", "congested", "dropped", "parked", "standby")
# an extra connection in one of these no longer counts among its mirror's
_LOST_STATES = ("failed", "corrupt", "congested", "dropped")


@dataclass(frozen=True)
class Ramp:
    """A flow's rates for timing what begins before its range ends (Engine._ramp).
    On a long ramp (EngineConfig.long_ramp_s) that is tail.ramp_rate: in slow start
    the meter's window lags the rate by seconds on a long path, and so did the
    spare and the start ahead (a 50 Mbit/s mirror at 250 ms had its spare ready
    0.3 s before its range ended, its next one began after it, and paid a second
    slow start: 2 s). Elsewhere the window's estimate."""

    window: float | None  # Flow.rate_estimate
    recent: float | None  # over its last two round trips (RateMeter.recent)
    long: bool

    @property
    def rate(self) -> float | None:
        return ramp_rate(self.window, self.recent) if self.long else self.window


@dataclass(eq=False)
class Lane:
    id: int
    flow: Flow
    kind: LaneKind
    start: int
    reserved: int  # next byte this lane will write (or receive, for a duplicate)
    owned_end: int  # end of the bytes this lane is responsible for
    end: RangeEnd  # where the transfer stops (may be lower than owned_end)
    shadow_of: Lane | None = None  # duplicate: the lane it races
    shadow: Lane | None = None  # the duplicate racing this lane
    orphan: bool = False  # its flow stopped while a duplicate still races it
    piece: int | None = None  # repair: piece index
    buffer: bytearray | None = None  # repair: the piece being fetched again
    first_byte: float | None = None
    requested_at: float | None = None
    # Queued: its transfer was begun ahead on the flow's spare connection (the
    # flow's next_lane) while the lane before it ran (Engine._queue_next).
    ahead: bool = False
    begun_at: float | None = None  # ... when (the clock)
    overlapped_from: int | None = None  # its fetcher's count of those, before its fetch
    trial: bool = False  # a stalled flow's trial range (Engine._trial_range)


@dataclass(eq=False)
class Flow:
    id: str
    mirror: MirrorSource
    stats: MirrorStats
    cancel: threading.Event = field(default_factory=threading.Event)
    initial: RangeSet = field(default_factory=RangeSet)
    fetcher: RangeFetcher | None = None
    thread: threading.Thread | None = None
    lane: Lane | None = None
    # The lane that follows, its transfer begun ahead (Engine._queue_next), and
    # the bytes left in the running lane at which to begin it (0: never).
    next_lane: Lane | None = None
    overlap_bytes: int = 0
    overlap_tried: float = -1e9  # clock of the last try (nothing to take, no spare)
    rate: RateMeter = field(default_factory=lambda: RateMeter(restart_after_s=1.5))
    latency_s: float | None = None
    # What moving to a new range costs, request latency included: the time from the
    # last byte of a range to the end of its fetch (ABOR, the next passive port),
    # added to the next range's latency. EWMA; None until one was measured.
    switch_s: float | None = None
    wound_down_s: float = 0.0
    consecutive_failures: int = 0
    fruitless_failures: int = 0  # failures that delivered no byte (max_total_failures)
    outage_retries: int = 0  # retries while the client's network was down (in a row)
    alive: bool = True
    last_cut: float = -1e9
    replaced: bool = False  # a backup was started for this flow already
    parked: bool = False  # shares a congested link: takes no work, kept in reserve
    standby: bool = False  # connected, waiting while a leading flow fills the access link
    last_data: float = -1e9  # clock of the last block received
    fetch_started: float | None = None  # clock when the lane in progress was started
    # Clock when the flow began its lane in progress, kept through reconnects and
    # retries until a first byte comes (engine._unanswered); None after one came.
    unanswered_since: float | None = None
    # The rate before the lane in progress, and until when it stands in (see warm_up).
    warm_rate: float | None = None
    warm_until: float = -1e9
    # The lane in progress is on a long ramp (EngineConfig.long_ramp_s): once its
    # warm-up is over, its rate is measured from warm_until.
    warm_lane: bool = False
    # Its rate when a monitor round last found it receiving (a silence wears the
    # meter down to 0); after a range that ended in a silence, when it may have a
    # trial range, and the wait before the one after (Engine._trial_range).
    lit_rate: float | None = None
    trial_after: float = -1e9
    trial_wait: float = 0.0  # 0: the first wait (EngineConfig.trial_wait_s)
    # The silence (its last_data) whose path was checked, and when a check found
    # the path back after it had been down (Engine._path_answered).
    path_checked: float = -1e9
    path_back_at: float = float("-inf")  # (before any last_data)
    # When a silence of this flow ended that a path check had found to be the path's
    # (a try not through): its pauses then were no server's (_long_look).
    outage_seen_at: float = float("-inf")
    # Until then a flow whose path came back is not "stalled idle" (its meter still
    # reads the silence as 0): it takes work, stolen too, at its rate before.
    back_trusted_until: float = float("-inf")
    # Bytes and seconds of the monitoring intervals that one lane spent wholly past
    # its warm-up (MirrorStats.steady_bps).
    steady_bytes: int = 0
    steady_s: float = 0.0
    # The longest gap between two blocks of one lane lately (x 0.8 every monitor
    # round): how bursty its server is (_judge_parkings_soon).
    gap_s: float = 0.0
    # The server refused or ignored a range at an offset (REST, Range): the flow
    # reads each range from byte 0 and skips what comes before it, and takes work
    # only when no flow that can ask for ranges is left (_run_lane, _next_work).
    from_zero: bool = False
    last_error: str = ""
    # An extra connection to another flow's mirror (streams.py): that flow's id.
    # It shares the mirror's name (owners, blame, events, the report) and is hidden
    # from the congestion detector and the slow-server rule.
    stream_of: str | None = None
    no_more_work: bool = False  # finish the lane in progress, then stop
    ooo_mark: tuple[int, int] | None = None  # its data connection's counters lately
    wait_mark: tuple[int, int] | None = None  # its waited receives (count, bytes) lately
    rx_mark: tuple[float, int] | None = None  # (clock, bytes received) a round ago
    round_Bps: float | None = None  # bytes/s over the last monitor round
    first_data: float | None = None  # clock of its first block (any lane)
    first_arrival: float | None = None  # ... when that block arrived (a head start's: sooner)
    round_from: float | None = None  # when its last monitor round began
    round_before: float | None = None  # ... and the one before it
    early_looked: bool = False  # its first second was read (_early_look)
    early_next: float | None = None  # when _early_look reads it again
    long_next: float | None = None  # when _long_looks reads it again
    long_done: bool = False  # _long_looks is over for it (the rounds' look goes on)
    after_parent: bool = False  # an advised connection: opens after its mirror's first

    @property
    def path_back(self) -> bool:
        """Its path check found the path back during this silence (no data since)."""
        return self.path_back_at >= self.last_data

    def rate_estimate(self, now: float) -> float | None:
        r = self.rate.rate(now)
        held = now < self.warm_until
        if self.warm_lane and not held:
            # (the meter counts from the request: for a window after the warm-up it
            # would still average in the first byte's round trips and the slow
            # start. A far flow's new range read at a third of its rate 2.7 s after
            # its request, and a 5 Mbit/s mirror stole its end: lab, 250 ms RTT.
            # So the rate since the warm-up's end; held on until there is one)
            after = self.rate.since(self.warm_until, now)
            if after is not None:
                r = after
            elif self.rate.active:
                held = True
        if self.warm_rate is not None and held:
            r = max(r or 0.0, self.warm_rate)
        if r is None and self.mirror.expected_bps:
            return self.mirror.expected_bps / 8
        return r

    def warm_up(self, now: float, hold_s: float, long_ramp: bool = False) -> None:
        """A new request: for ``hold_s`` its rate is at least the flow's rate before.
        The meter counts from the request, so a fresh lane reads low while its first
        byte travels and its new data connection leaves slow start (several round
        trips: ~1 s at 80-160 ms RTT). Taken at face value, that made the lane look
        like the last to finish and another flow stole it back (ping-pong between
        two far mirrors, each new request costing ~3 RTT of idle flow)."""
        self.warm_rate = self.rate_estimate(now)
        self.warm_until = now + hold_s
        self.warm_lane = long_ramp


@dataclass
class Parking:
    """Flows parked together after one shared-congestion verdict, on probation."""

    flows: list[str]
    at: float
    aggregate_before: float  # bytes/s of all flows over the seconds before
    access_link: bool = False  # parked because the flows filled the access link
    judge_from: float = 0.0  # when the flows left are first counted (_judge_parkings_soon)
    settle: float = 0.0  # how long after a parked transfer stops they are not counted
    mark: tuple[float, dict[str, int]] | None = None  # (clock, each one's bytes) then
    span: float = 0.0  # how long they are counted from the mark
    judged: bool = False  # judged soon: the probation decides the rest
    partners: set[str] = field(default_factory=set)  # flows kept on the same link
    renewed_at: float | None = None  # when the partners' connections were renewed


@dataclass
class RepairJob:
    piece: int
    avoid: set[str]
    suspects: set[str]


@dataclass
class EngineResult:
    done: RangeSet
    owners: list[tuple[int, int, str]]
    mirrors: list[MirrorStats]
    events: list[MirrorEvent]
    duplicate_bytes: int
    refetched_bytes: int
    # mirrors parked for a shared congested link whose flows left then carried
    # clearly less: the verdict did not hold (not to be reported as congested)
    refuted: frozenset[str] = frozenset()


class DownloadEngine:
    def __init__(
        self,
        *,
        plan: Plan,
        part: PartFile,
        grid: PieceGrid,
        done: RangeSet | None = None,
        owners: RangeOwners | None = None,
        open_fetcher: OpenFetcher,
        config: EngineConfig | None = None,
        observers: Iterable[FlowObserver] = (),
        detector_factory: DetectorFactory | None = None,
        checkpoint: Checkpoint | None = None,
        on_prefix: Callable[[int], None] | None = None,
        log: Callable[[str], None] = lambda _m: None,
        clock: Callable[[], float] = time.monotonic,
        began_at: float | None = None,
    ) -> None:
        """``began_at``: when the download's first connections went out, on
        ``clock`` (the entry point's or download()'s size probes; default: now):
        a lead start's wait is counted from then (lead.judge_start's budget)."""
        self.plan = plan
        self.size = plan.file.size
        self.part = part
        self.grid = grid
        self.split_grid = PieceGrid(grid.size, split_unit(grid.piece_size))  # tail splits
        # (a copy: the access figure is raised in place when the flows prove it low)
        self.cfg = replace(config) if config is not None else EngineConfig()
        self._open_fetcher = open_fetcher
        self._opener_takes_at = bool(getattr(open_fetcher, "takes_at", False))
        self._checkpoint = checkpoint
        self._on_prefix = on_prefix
        self._log = log
        self._clock = clock
        self._t0 = clock()
        self._lock = threading.Condition()
        # Released once the run is over (finished or aborted, _settle): what the
        # main thread waits on, as a signal cuts a plain lock's acquire cleanly.
        # A Condition's wait does not: CPython can raise Ctrl-C's exception between
        # releasing the lock and taking it back, and the `with` then fails
        # ("cannot release un-acquired lock": the Ctrl-C sweep, CI).
        self._settled = threading.Lock()
        self._settled.acquire()
        self._settled_once = False
        self._ckpt_lock = threading.Lock()
        self._checkpoints_closed = False  # the file is complete: no more checkpoints
        self.done = done.copy() if done else RangeSet()
        self.committed = self.done.copy()  # complete (and verified) pieces
        self.owners = owners or RangeOwners()
        self.pool = RangeSet()
        self.repairs: deque[RepairJob] = deque()
        self.verifying: set[int] = set()
        self.lanes: dict[int, Lane] = {}
        self.flows: dict[str, Flow] = {}
        self.stats: list[MirrorStats] = []
        self.events: list[MirrorEvent] = []
        self.backups: deque[MirrorSource] = deque(plan.backups)
        self.bad_mirrors: set[str] = set()
        self.timings = FlowTimings(self.cfg.ring_capacity)
        # All flows together, over seconds: flows behind a loss-based bottleneck and
        # rate-limited servers deliver in bursts.
        self._aggregate = RateMeter(window_s=2.0, step_s=0.1, min_span_s=0.5)
        self._spares_at = 0.0  # when the monitor next judges the flows' spares
        self._spares_far = False  # ... and whether a flow was on a far path then
        self._parkings: list[Parking] = []
        self._parking_failed = False  # a parking did not hold: park no more
        self._refuted: set[str] = set()  # (EngineResult.refuted)
        # One flow first (lead.py): "probing" until judged, "full" while it fills the
        # access link by itself, "off" once everyone works (or lead start is not used).
        self._lead_phase: Literal["off", "probing", "full"] = "off"
        self._lead_name: str | None = None
        self._lead_samples: list[tuple[float, int]] = []  # (clock, bytes) of the leader
        self._lead_low_rounds = 0
        self._top_up_low_rounds = 0
        self._top_up_at: float | None = None  # when the last backup joined (_top_up)
        self._top_up_from = 0.0  # the aggregate then (bytes/s)
        self._top_up_over = False  # the last one did not raise the aggregate
        self._top_up_mark: tuple[float, int] | None = None  # (time, aggregate bytes then)
        # The access figure before the flows proved it low (_top_up), None while it holds.
        self.access_raised_from: float | None = None
        self._figure_tested = False  # a backup joined to test it (_figure_untested)
        self._lead_since = self._t0 if began_at is None else min(began_at, self._t0)
        self._lead_lane = -1  # the leader's lane the samples are about
        self._lead_head_at: float | None = None  # its head start's request (FtpFetcher)
        self._lead_todo: RangeSet | None = None  # what was left when lead start began
        self._lead_full_at = 0.0
        self._lead_full_bytes = 0  # all flows' bytes at the "full" verdict
        self._lead_judged_at = -1.0
        self.observers: list[FlowObserver] = [self.timings, *observers]
        self.duplicate_bytes = 0
        self.refetched_bytes = 0
        self._unwritten: set[str] = set()  # mirrors whose bytes went back to the work
        self.duplicate_budget_left = int(self.size * self.cfg.duplicate_budget)
        self._lane_ids = itertools.count(1)
        self._finished = False
        self._abort: BaseException | None = None
        self._initial_for: dict[str, RangeSet] = {}
        self._repair_jobs: dict[int, RepairJob] = {}
        self._prefix_dirty = False
        self._writers = 0  # _sink calls writing outside the lock right now
        # Built once the flows run (see run): creating it loads numpy, which would
        # otherwise delay the first byte by a few hundred milliseconds.
        self._detector_factory = detector_factory
        # mirror -> its extra connections on probation (several mirrors at once
        # only with room on a known access link: otherwise their gains mix)
        self._stream_trials: dict[str, StreamTrial] = {}
        self._access_full_at = -1e9  # (EngineConfig.stream_access_hold_s)
        self._shared_by_all_at = -1e9  # (note_shared_by_all)
        self._path_checks: dict[str, PathCheck] = {}  # flow id -> its check under way
        self._no_streams: set[str] = set()  # mirrors an extra connection did not help
        # mirrors whose kept trial scaled their rate with their connections: the
        # next round doubles them (no signal needed)
        self._stream_more: dict[str, str] = {}
        # mirror -> its path's rate read inside its held connection's bursts, once a
        # trial on that reading was kept: a mirror that carries it takes no more
        self._stream_paths: dict[str, float] = {}
        # mirrors a trial of more connections was judged for (MirrorStats.connections)
        self._stream_judged: set[str] = set()
        # the extra connections' arrivals (kept from the congestion detector's)
        self._stream_timings = FlowTimings(self.cfg.ring_capacity)
        self._stream_ids = itertools.count(2)
        # mirror -> the ranges of the connections the coordinator advised it
        # beyond the first (Assignment.connections), started with the flows
        self._advised: dict[str, list[RangeSet]] = {}

    # --- public -----------------------------------------------------------------------

    def run(self) -> EngineResult:
        todo = self.committed.complement(0, self.size)
        self.done = self.committed.copy()  # partial pieces of an old run are refetched
        with self._lock:
            self._assign_initial(todo)
            if not todo:
                self._finished = True
                self._settle()
            else:
                for src in self.plan.active:
                    self._start_flow(src, "active")
                self._start_advised()
        # (the monitor reads arrivals with numpy under the lock: loaded meanwhile,
        # while the flows wait for their first round trips)
        numpy_preload.start()
        monitor = threading.Thread(target=self._monitor, name="pftp-monitor", daemon=True)
        monitor.start()
        if self._detector_factory is not None:
            threading.Thread(
                target=self._attach_detector,
                args=(self._detector_factory,),
                name="pftp-detector-start",
                daemon=True,
            ).start()
        try:
            while not self._settled.acquire(timeout=0.5):
                if self._finished or self._abort is not None:
                    break  # (read without the lock: only a fallback)
        except BaseException as exc:  # Ctrl-C in the main thread
            self.abort(exc)
            raise
        finally:
            self._stop_all()
            # Once every byte is in, a flow still stuck in the network (e.g. an ABOR
            # to a mirror that stalled, which may take up to the reply timeout) must
            # not hold the download: its lane is stopped (_stop_all), so it writes
            # nothing more, and its thread closes its own connection when it wakes.
            done = self._finished and self._abort is None
            if done:
                # No new write can start (every flow is cancelled): wait only for
                # the ones in progress, so the part file can be closed safely.
                with self._lock:
                    end_wait = self._clock() + 10.0
                    while self._writers and self._clock() < end_wait:
                        self._lock.wait(0.05)
                    self._close_trials()
                # Nor a checkpoint once the caller may have removed the control
                # file (it would come back next to the finished file).
                with self._ckpt_lock:
                    self._checkpoints_closed = True
            deadline = self._clock() + (self.cfg.finish_grace_s if done else self.cfg.timeout + 5)
            for f in list(self.flows.values()):
                if f.thread is not None:
                    f.thread.join(timeout=max(0.0, deadline - self._clock()))
            monitor.join(timeout=max(0.0, deadline - self._clock()) if done else 5)
        if self._abort is not None:
            raise self._abort
        return EngineResult(
            done=self.done.copy(),
            owners=self.owners.runs(),
            mirrors=self.final_stats(),
            events=list(self.events),
            duplicate_bytes=self.duplicate_bytes,
            refetched_bytes=self.refetched_bytes,
            refuted=frozenset(self._refuted),
        )

    def _close_trials(self) -> None:
        """Lock held, every byte in: a trial not judged yet (its connection still
        opening or warming up when the rest was done) ends with the download; its
        event says so, so that every trial started is accounted for."""
        for trial in list(self._stream_trials.values()):
            del self._stream_trials[trial.mirror]
            for fid in trial.streams:
                e = self.flows[fid]
                self._event("stream", e, "not judged: the download ended first "
                            f"({e.stats.received} bytes over it)")

    def final_stats(self) -> list[MirrorStats]:
        """Per-mirror figures as of now (also after a failed run: its report).
        Flow threads may still be finishing their last request (run does not wait
        for them): count its time so far, call a flow that was working "done", and
        hand out copies they will not change."""
        now = self._clock()
        out: list[MirrorStats] = []
        with self._lock:
            by_name = {f.stats.name: f for f in self.flows.values() if f.stream_of is None}
            for st in self.stats:
                copy = self._stats_now(st, by_name.get(st.name), now)
                kept = 1
                for extra in self._streams_of(st.name):
                    merge_stream_stats(copy, self._stats_now(extra.stats, extra, now))
                    kept += bool(extra.stats.received
                                 and extra.stats.state not in _LOST_STATES)
                if st.name in self._stream_judged:
                    copy.connections = kept
                if self._finished and copy.state not in _FINAL_STATES:
                    copy.state = "done"
                out.append(copy)
        return out

    @staticmethod
    def _stats_now(st: MirrorStats, f: Flow | None, now: float) -> MirrorStats:
        """Lock held: a copy of a flow's figures with the fetch in progress counted."""
        copy = st.copy()
        if f is not None and f.fetch_started is not None and f.stats is st:
            copy.seconds += now - f.fetch_started
        if f is not None and f.steady_s > 0:
            # (over whole intervals: a lossy path's stalls are part of its rate)
            copy.steady_bps = 8 * f.steady_bytes / f.steady_s
        return copy

    def _streams_of(self, mirror: str, live: bool = False) -> list[Flow]:
        """Lock held: the extra connections (streams.py) to this mirror; ``live``:
        only those still running (a closed one no longer shares the mirror)."""
        return [f for f in self.flows.values() if f.stream_of == mirror
                and (not live or (f.alive and not f.cancel.is_set()))]

    def abort(self, exc: BaseException) -> None:
        with self._lock:
            if self._abort is None:
                self._abort = exc
            self._settle()
            self._lock.notify_all()
        self._stop_all()

    def _settle(self) -> None:
        """Lock held: the run is over (finished or aborted); wake the main thread."""
        if not self._settled_once:
            self._settled_once = True
            self._settled.release()

    def elapsed(self) -> float:
        return self._clock() - self._t0

    def snapshot(self) -> tuple[int, list[MirrorStats]]:
        """(bytes done, per-mirror stats) for the progress display."""
        with self._lock:
            out = []
            for st in self.stats:
                copy = st.copy()
                for extra in self._streams_of(st.name):
                    merge_stream_stats(copy, extra.stats)
                out.append(copy)
            return self.done.total(), out

    def rates(self) -> dict[str, float | None]:
        now = self._clock()
        out: dict[str, float | None] = {}
        with self._lock:
            for f in self.flows.values():
                r = f.rate.rate(now) if f.lane else None
                name = f.mirror.name  # (an extra connection counts for its mirror)
                have = out.get(name)
                out[name] = r if have is None else have + (r or 0.0)
            return out

    # FlowControl (flow_observer.py): the congestion detector's handle.
    def active_flows(self) -> list[str]:
        with self._lock:
            return [
                f.id for f in self.flows.values()
                if f.alive and f.lane is not None and f.stream_of is None
            ]

    def note_shared_by_all(self) -> None:
        """FlowControl: the detector found every flow of the download behind one
        congested link (a link slower than the access figure says, or unknown):
        no stream trial for stream_access_hold_s, as behind a full access link;
        more connections there only take from the others (lab r30: the access link
        cut from 1 Gbit/s to 21 Mbit/s, seven more connections to the far mirror
        tried a second later, 4 s of losses and no gain)."""
        with self._lock:
            self._shared_by_all_at = self._clock()

    def aggregate_bps(self) -> float | None:
        """All flows together, bits/s over the last two seconds."""
        r = self._aggregate.rate(self._clock())
        return None if r is None else r * 8

    def access_undetermined(self) -> bool:
        """The access bandwidth is known, the flows' aggregate is not measured yet
        (its first 0.5 s): whether a shared link they see is the access link cannot
        be told."""
        return bool(self.cfg.access_bps) and self.aggregate_bps() is None

    def access_saturated(self) -> bool:
        """True when the flows together fill the client's access link (so a shared
        congested link they see is most likely that one)."""
        access = self.cfg.access_bps
        agg = self.aggregate_bps()
        return bool(access) and agg is not None and agg >= self.cfg.access_saturation * access

    def written_runs(self) -> list[tuple[int, int, str]]:
        """Which mirror wrote which bytes so far: (start, end, mirror) runs."""
        with self._lock:
            return self.owners.runs()

    def blame(self, mirror: str, why: str) -> int:
        """A mirror was found serving wrong bytes by a check outside the engine
        (cross_check.py): stop using it, as a failed piece hash does, and hand every
        byte it wrote back to the work, for the other flows to fetch again alongside
        theirs (counted in refetched_bytes). Returns how many. After the run:
        nothing (no flow to stop, no backup may start); bytes it still owns then
        (written in the instant of its blame) are the caller's to repair."""
        with self._lock:
            if self._finished or self._abort is not None:
                return 0
            self._blame(mirror, why)
            return self._unwrite(mirror)

    def _unwrite(self, mirror: str) -> int:
        """Lock held: the bytes ``mirror`` wrote are no longer done; they go to the
        pool (the flows that run out of work take them, as a failed flow's rest).
        The next checkpoint drops them from the control file, so a resume does not
        keep them either. The prefix hasher may have read them already: the caller
        hashes the file again (downloader, after a blame)."""
        self._unwritten.add(mirror)
        runs = [(s, e) for s, e, m in self.owners.runs() if m == mirror]
        for s, e in runs:
            self.done.remove(s, e)
            self.committed.remove(s, e)
            self.pool.add(s, e)
        n = sum(e - s for s, e in runs)
        if n:
            self.refetched_bytes += n
            self._prefix_dirty = True
            self._log(f"{mirror}: its {n} bytes go back to the work, to fetch again")
            self._lock.notify_all()
        return n

    def drop_flows(self, flow_ids: Iterable[str], reason: str = "congested") -> list[str]:
        """Paper 001 Shared-Con-Algo lines 16-21: close these connections and open
        as many to backup (passive) mirrors; remainders move to the pool.

        For congestion, a flow is replaced by a backup when one is left. Otherwise
        it keeps working, sharing the link (with ``park_shared_without_backup`` it is
        parked, ``_park``: its remainder goes to the flows left, its connection
        idles, and it resumes if those then carry clearly less than all did, the
        verdict was wrong, or if a working flow fails). While the flows
        together fill the client's access link, that link is the shared one: every
        path crosses it, a backup's too, so the flow is parked without a backup and
        not reported as congested (its mirror's path is not to blame); one such
        parking at a time, the next only after its probation.
        Why park rather than keep: every cut throws away what a flow had in flight
        (FTP cannot bound a transfer), and behind one congested link each flow more
        means more cuts (tail steals, slow-server moves) for no more bandwidth;
        behind a 4 Mbit/s access link 4 flows lost 7 % of it that way.
        Returns the flows actually dropped or parked."""
        dropped: list[str] = []
        if reason == "congested" and self.access_undetermined():
            # The detector can speak after a few hundred packets, before the
            # aggregate is measured (0.5 s): whether the shared link is the access
            # link cannot be told yet, and replacing a flow by a backup behind the
            # same link only trades a fast mirror for a slower one (table 1: the
            # 16 and 12 Mbit/s mirrors swapped for 8 and 6 at 0.4 s).
            self._log(f"{', '.join(flow_ids)}: shares a congested link; kept (the flows' "
                      "aggregate is not measured yet, so the access link cannot be ruled out)")
            return dropped
        if reason == "congested" and self.access_saturated():
            agg, access = self.aggregate_bps() or 0.0, self.cfg.access_bps or 0.0
            why = (f"shares the client's access link, which the flows together fill "
                   f"({agg / 1e6:.1f} of {access / 1e6:.1f} Mbit/s)")
            with self._lock:
                self._access_full_at = self._clock()  # (no stream trials meanwhile)
                if agg < self.cfg.access_full * access:
                    # (above access_saturation, so the shared link is the access
                    # link and no backup would help; but it has room: _top_up)
                    self._log(f"{', '.join(flow_ids)}: shares the client's access link "
                              f"({agg / 1e6:.1f} of {access / 1e6:.1f} Mbit/s); kept: it has "
                              "room left")
                    return dropped
                left_s = self._work_left_s(agg / 8)
                if left_s < self.cfg.park_min_left_s:
                    # A parking saves the cuts the flow would cost later; this late
                    # its own cut is the last one, and the bytes it keeps in flight
                    # can stall the end (table 1: a parking at 5.2 s, then 2 s
                    # with no event before the last byte).
                    self._log(f"{', '.join(flow_ids)}: {why}; kept: only {left_s:.1f} s of "
                              "work left")
                    return dropped
                if self._parkings:
                    # One at a time: every flow crosses the access link, so the
                    # detector names pair after pair, but whether the flows left
                    # can take a parked flow's share (their own paths may be the
                    # narrower ones) shows only in the aggregate afterwards. Eight
                    # mirrors of 2-24 Mbit/s behind 40 Mbit/s had six parked
                    # within 1.3 s and ran at half rate until the probation.
                    self._log(f"{', '.join(flow_ids)}: {why}; kept while a parking is "
                              "on probation")
                    return dropped
                for fid in flow_ids:
                    flow = self.flows.get(fid)
                    if flow is None or not flow.alive or self._finished:
                        continue
                    short = self._left_short_of_access(flow)
                    if short is not None:
                        self._log(f"{fid}: {why}; kept: the flows left could not fill it "
                                  f"({short})")
                        break
                    if self._park(flow, why, kind="parked"):
                        self._wind_down_streams(fid)
                        dropped.append(fid)
                        break
            return dropped
        with self._lock:
            spare = sum(
                1
                for b in self.backups
                if b.name not in self.flows and b.name not in self.bad_mirrors
            )
            for fid in flow_ids:
                flow = self.flows.get(fid)
                if flow is None or not flow.alive or self._finished:
                    continue
                if reason == "congested":
                    if spare == 0:
                        if not self.cfg.park_shared_without_backup:
                            self._log(f"{fid}: shares a congested link; kept: no backup is "
                                      "left to take its place, and the flows on that link "
                                      "share its rate")
                        elif self._park(flow):
                            self._wind_down_streams(fid)
                            dropped.append(fid)
                        continue
                    spare -= 1
                detail = reason
                if reason == "congested" and self.cfg.access_bps:
                    agg = self.aggregate_bps()
                    if agg is not None:  # why the access link was not blamed
                        detail += (f" (flows together {agg / 1e6:.1f} of "
                                   f"{self.cfg.access_bps / 1e6:.1f} Mbit/s access)")
                self._event("congested" if reason == "congested" else "failed", flow, detail)
                self._retire(flow, "congested" if reason == "congested" else "dropped")
                for extra in self._streams_of(fid):
                    self._retire(extra, "congested" if reason == "congested" else "dropped")
                dropped.append(fid)
                self._start_backup()
            self._lock.notify_all()
        return dropped

    def _left_short_of_access(self, flow: Flow) -> str | None:
        """Lock held: why the working flows but ``flow`` could not fill the access link
        by their own mirrors' rates, when every one of them has a coordinator's
        expected rate to tell by; None when they could, or when it cannot be told.
        Each counts at the larger of its expected and its measured rate (behind a
        full link a flow carries less than its path allows, never more). Parking for
        the access link is worth it only when the others can take the parked flow's
        share: the coordinator picks mirrors until their rates just cover the link,
        so among its picks none is spare (table 1: 24 + 16 Mbit/s for 40, one run in
        five parked the 16 Mbit/s one and the link ran at 23 until its probation,
        1.19x)."""
        access = self.cfg.access_bps
        if not access:
            return None
        now = self._clock()
        others = [
            f for f in self.flows.values()
            if f.alive and not f.cancel.is_set() and not f.parked and not f.standby
            and f is not flow
        ]
        if not others or any(not f.mirror.expected_bps for f in others):
            return None
        capacity = sum(
            max(f.mirror.expected_bps or 0.0, 8 * (f.rate.rate(now) or 0.0)) for f in others
        )
        if capacity >= self.cfg.access_full * access:
            return None
        return (f"{', '.join(f.id for f in others)}: {capacity / 1e6:.1f} of "
                f"{access / 1e6:.1f} Mbit/s expected")

    def _park(
        self, flow: Flow, why: str = "shares a congested link", kind: EventKind = "congested"
    ) -> bool:
        """Lock held: park ``flow`` (see drop_flows) unless that is unsafe."""
        now = self._clock()
        working = [
            f for f in self.flows.values()
            if f.alive and not f.cancel.is_set() and not f.parked and f is not flow
        ]
        before = self._aggregate.rate(now)
        if self._parking_failed or not working or not before or flow.parked:
            self._log(f"{flow.id}: {why}; kept (no backup in its place, and parking it is "
                      "not safe: no other flow, no rate yet, or a parking did not hold)")
            return False
        flow.parked = True
        flow.stats.state = "parked"
        if flow.lane is not None:  # its thread gives the rest back
            flow.lane.end.lower_to(self._cut_floor(flow.lane))
        self._drop_queued(flow)
        for s, e in flow.initial:
            self.pool.add(s, e)
        flow.initial = RangeSet()
        recent = next((p for p in self._parkings if now - p.at < 0.5), None)
        rtt = max((self._path_rtt(f) for f in working), default=0.0)
        settle = max(self.cfg.park_settle_s, self.cfg.park_settle_rtts * rtt)
        if recent is not None:  # one verdict's set arrives as several calls
            # (judged without its bytes once its transfer stopped, _judge_parkings_soon:
            # two groups behind two links, a mark that held the second one's bytes read
            # the rest at 12 of 28 Mbit/s)
            recent.flows.append(flow.id)
            recent.settle = max(recent.settle, settle)
        else:
            self._parkings.append(
                Parking([flow.id], now, before, kind == "parked", judge_from=now + settle,
                        settle=settle)
            )
        self._event(
            kind, flow, f"{why}; parked: its work goes to the flows left, the mirror stays "
            "in reserve",
        )
        self._lock.notify_all()
        return True

    def note_kept(self, kept: str, dropped: Iterable[str]) -> None:
        """The shared-congestion monitor kept ``kept`` on the link ``dropped`` shared
        with it: that flow is the one meant to take up their share (a parking that
        then falls short renews its connection before it is undone, _renew_partners)."""
        with self._lock:
            gone = set(dropped)
            for p in self._parkings:
                if gone & set(p.flows) and kept in self.flows and kept not in p.flows:
                    p.partners.add(kept)

    def _unpark(self, flow: Flow, why: str) -> None:
        """Lock held."""
        if not flow.parked:
            return
        flow.parked = False
        flow.stats.state = "idle"
        self._event("resumed", flow, why)
        self._lock.notify_all()

    def _unpark_one(self, why: str) -> bool:
        """Lock held: put one parked flow back to work (a working one failed)."""
        for f in self.flows.values():
            if f.parked and f.alive and not f.cancel.is_set():
                self._unpark(f, why)
                return True
        return False

    def _judge_parkings_soon(self, now: float) -> float | None:
        """Lock held: judge each parking on the bytes of the flows left since the
        parked transfers stopped and settled (config: park_settle_s, park_judge_s),
        all of them at work, and undo it when they carry
        clearly less than all did before (the verdict was wrong), or, parked for a
        full access link, when that link has room without it. The monitor calls it
        between its rounds; returns when it next has something to judge (None:
        nothing)."""
        due: float | None = None
        for p in list(self._parkings):
            if p.judged:
                continue
            left = [f for f in self.flows.values()
                    if f.alive and not f.parked and f.id not in p.flows]
            if any(f.lane is None or f.lane.first_byte is None
                   or f.lane.reserved >= f.lane.end.value for f in left):
                # one of them is out of work, waiting for its range's first byte or
                # ending its range (the parked flow's remainder not dealt yet, an
                # ABOR under way): what they carry then says nothing of the verdict
                p.mark = None
                continue
            if any(f.lane is not None for f in self.flows.values()
                   if f.id in p.flows and f.alive):
                # a parked flow still fetches up to its cut, on the link it shares
                # with some of them: they take its share only once it has stopped
                p.mark = None
                p.judge_from = max(p.judge_from, now + p.settle)
                continue
            if p.mark is not None and set(p.mark[1]) != {f.id for f in left}:
                p.mark = None  # a flow ended or joined since: count the ones left anew
            if p.mark is None:
                if now < p.judge_from:
                    due = p.judge_from if due is None else min(due, p.judge_from)
                    continue
                gap = max((f.gap_s for f in left), default=0.0)
                p.mark = (now, {f.id: f.stats.received for f in left})
                p.span = max(self.cfg.park_judge_s, 2 * gap)
            t0, at_mark = p.mark
            span = p.span
            if now - t0 < span:
                due = t0 + span if due is None else min(due, t0 + span)
                continue
            cap = (p.at if p.renewed_at is None else p.renewed_at) + self.cfg.park_probation_s
            if now < cap and any(f.last_data <= t0 for f in left):
                # One of them has been silent since the mark: a server that sends in
                # bursts (pyftpdlib's throttle, nginx's limit_rate: one a second or
                # two) in its first pause, before its gap is known. What it can carry
                # shows once it is heard from; a silence past the probation is
                # judged (the parked flow resumes).
                soon = min(cap, now + 0.05)
                due = soon if due is None else min(due, soon)
                continue
            p.judged = True
            rate = sum(f.stats.received - at_mark[f.id] for f in left) / (now - t0)
            why = self._parking_wrong(p, rate)
            if why is not None and self._renew_partners(p, rate, now):
                due = now if due is None else min(due, now)
            elif why is not None:
                self._undo_parking(p, rate, why)
        return due

    def _renew_partners(self, p: Parking, rate: float, now: float) -> bool:
        """Lock held: before parking ``p`` is undone for the flows left carrying too
        little, once, give the flows kept on its link a new connection, and judge it
        again on them. A sender's rate learned while it shared the link can outlast
        the sharing: lab, BBR behind a 15 Mbit/s link with no propagation delay, the
        flow left kept pacing at the 11.7 Mbit/s it had measured for ~1.2 s (its
        probing phases last one minimum RTT, 23 us), while a new connection ran at
        14.4 at once. FTP or HTTP, the cut closes the connection under way (ABOR, or
        the response's), and the flow's next range opens another. Returns whether it
        did."""
        if p.renewed_at is not None or p.access_link:
            return False
        partners = [self.flows[i] for i in sorted(p.partners)
                    if i in self.flows and self.flows[i].alive and not self.flows[i].parked]
        lanes = [f.lane for f in partners if f.lane is not None and f.lane.kind == "normal"
                 and f.next_lane is None and not f.cancel.is_set()]
        if not lanes:
            return False
        p.renewed_at = now
        p.judged = False
        p.mark = None
        p.judge_from = now + p.settle
        for lane in lanes:
            cut = self._cut_floor(lane)
            if cut >= lane.owned_end:
                continue  # (ends with what is in flight: its next range is a new one)
            lane.end.lower_to(cut)
            self._log(
                f"{lane.flow.id}: a new connection: the flows left carried "
                f"{rate * 8 / 1e6:.2f} Mbit/s after {', '.join(p.flows)} was parked, "
                f"{p.aggregate_before * 8 / 1e6:.2f} before; its rest from {cut} goes "
                "back to work"
            )
        self._lock.notify_all()
        return True

    def _parking_wrong(self, p: Parking, rate: float) -> str | None:
        """Why parking ``p`` should be undone, with the flows left carrying ``rate``
        (bytes/s) since, or None: the aggregate fell (the flows did not share the
        congested link), or it was parked for a full access link that now has room
        (the aggregate before, over a window with slow start's bursts in it, read
        full too early: back to work, as a backup would be, _top_up)."""
        link = (self.cfg.access_bps or 0.0) / 8
        if rate < self.cfg.park_hold * p.aggregate_before:
            return "the shared-link verdict did not hold"
        if p.access_link and rate < self.cfg.access_full * link:
            return f"the {link * 8 / 1e6:.2f} Mbit/s access link has room for it"
        return None

    def _undo_parking(self, p: Parking, rate: float, why: str) -> None:
        """Lock held: put the flows of parking ``p`` back to work; no more parkings."""
        if p in self._parkings:
            self._parkings.remove(p)
        self._parking_failed = True
        shared_link_wrong = p.aggregate_before * self.cfg.park_hold > rate
        for fid in p.flows:
            f = self.flows.get(fid)
            if f is not None:
                if shared_link_wrong and not p.access_link:
                    self._refuted.add(f.mirror.name)
                self._unpark(
                    f,
                    f"the flows left carried {rate * 8 / 1e6:.2f} Mbit/s after it was parked, "
                    f"{p.aggregate_before * 8 / 1e6:.2f} before: {why}",
                )

    def _check_parkings(self, now: float) -> None:
        """Lock held: the probation of parked flows (see drop_flows)."""
        for p in list(self._parkings):
            # (renewed partners: judged on their own bytes first, then on an
            # aggregate mostly of their new connections)
            age = now - (p.at if p.renewed_at is None else p.renewed_at)
            if age < self.cfg.park_early_s or (p.renewed_at is not None and not p.judged):
                continue
            agg = self._aggregate.rate(now) or 0.0
            fell = agg < self.cfg.park_hold * p.aggregate_before
            if age < self.cfg.park_probation_s and not fell:
                continue
            self._parkings.remove(p)
            why = self._parking_wrong(p, agg)
            if why is not None:
                self._undo_parking(p, agg, why)

    # --- setup ------------------------------------------------------------------------

    def _assign_initial(self, todo: RangeSet) -> None:
        if self.plan.mode == "coordinated" and self.plan.portions:
            by_mirror = {
                p.mirror.name: todo.intersection(p.start, p.end) for p in self.plan.portions
            }
            for p in self.plan.portions:
                parts = self._advised_split(p.mirror, by_mirror[p.mirror.name])
                self._initial_for[p.mirror.name] = parts[0]
                if len(parts) > 1:
                    self._advised[p.mirror.name] = parts[1:]
        elif self._lead_applies(todo):
            lead = self.plan.active[0]
            self._lead_name = lead.name
            self._lead_phase = "probing"
            self._initial_for[lead.name] = todo.copy()
            self._lead_todo = todo.copy()
            names = ", ".join(m.name for m in self.plan.active[1:])
            self._log(f"{lead.name} leads alone at first; {names} stand by until it shows whether "
                      f"it fills the {self.cfg.access_bps / 1e6:.2f} Mbit/s access link")
        else:
            for src, g in zip(self.plan.active, self._even_groups(todo), strict=True):
                self._initial_for[src.name] = g

    def _advised_split(self, src: MirrorSource, work: RangeSet) -> list[RangeSet]:
        """``work`` in as many parts as the connections the coordinator advised for
        ``src`` (at most max_streams; each part at least advised_min_part_bytes;
        behind an access link slower than the mirror's expected rate, the share of
        them that link takes), cut at piece boundaries: the first for its flow, the
        others for connections opened with it (for a whole portion, at
        advice.part_starts: the entry point's early plan starts them there)."""
        n = advised_count(src.connections, self.cfg.max_streams, work.total(),
                          self.cfg.advised_min_part_bytes, self.cfg.access_bps,
                          src.expected_bps)
        if n <= 1:
            return [work]
        return split_work(work, n, self.grid.piece_size, self.size)

    def _start_advised(self) -> None:
        """Lock held, at start: the advised connections (_advised_split)."""
        for name, parts in self._advised.items():
            parent = self.flows.get(name)
            if parent is None:
                continue
            for part in parts:
                self._start_stream(
                    parent, part,
                    f"the coordinator advised {len(parts) + 1} connections to {name} at "
                    "once (each held below its path's rate, or a long slow start); "
                    f"takes {part.total()} bytes",
                    after_parent=True,
                )

    def _await_parent(self, flow: Flow) -> None:
        """An advised connection opens once its mirror's first has its connection:
        that one takes the transfer started at the portion's start while the
        engine loaded. (The downloader's opener hands out transfers by offset, but
        where none was started at an advised part's offset, a resume, it hands out
        any: taken from the first, that transfer would be aborted and made again.)"""
        parent = self.flows.get(flow.stream_of or "")
        deadline = self._clock() + self.cfg.timeout
        with self._lock:
            while (parent is not None and parent.alive and parent.fetcher is None
                   and not parent.consecutive_failures and not flow.cancel.is_set()
                   and not self._finished and self._abort is None
                   and self._clock() < deadline):
                self._lock.wait(0.02)

    def _even_groups(self, todo: RangeSet) -> list[RangeSet]:
        """An even start's work for each active mirror, in plan order (also what
        ranges.first_offsets, and so the entry point's early transfers, expect)."""
        return deal_in_rounds(
            todo, max(1, len(self.plan.active)), self.cfg.round_block_bytes,
            self.cfg.max_rounds,
        )

    def _lead_applies(self, todo: RangeSet) -> bool:
        return bool(
            self.cfg.lead_start
            and self.cfg.access_bps
            and self.plan.mode == "dynamic"
            and todo
            and pays_off(len(self.plan.active), self.cfg.access_bps / 8, self.cfg.lead)
        )

    def _stands_by(self, flow: Flow) -> bool:
        return self._lead_phase != "off" and flow.id != self._lead_name

    @property
    def _leader(self) -> Flow | None:
        return self.flows.get(self._lead_name) if self._lead_name is not None else None

    def _judge_lead(self, now: float) -> None:
        """Lock held: while probing, has the leading flow shown whether it fills the
        access link? In any phase: the standbys join at once if it stopped."""
        if self._lead_phase == "off":
            return
        leader = self._leader
        if leader is None:
            return  # its thread is about to start
        if not leader.alive or leader.cancel.is_set() or leader.consecutive_failures:
            self._release_standbys(
                f"{leader.id} stopped leading ({leader.stats.state})", leader_shares=False
            )
            return
        if self._lead_phase == "full":
            silent = now - leader.last_data
            if leader.lane is not None and silent > self.cfg.lead.stall_s:
                self._release_standbys(
                    f"{leader.id} received nothing for {silent:.1f} s", leader_shares=False
                )
            return
        # Called on every arrival and every 10 ms by each standby: once per 5 ms is
        # plenty for verdicts of 10 ms and more, and spares a syscall per block.
        if now - self._lead_judged_at < 0.005:
            return
        self._lead_judged_at = now
        lane = leader.lane
        if (lane is None or lane.requested_at is None) and now - self._t0 < _LEADER_TAKES_S:
            return  # (its thread is taking its connection, and a head start's history)
        self._sample_lead(leader, lane, now)
        if (not self._lead_samples and lane is not None and lane.requested_at is not None
                and now - lane.requested_at < _LEADER_TAKES_S):
            return  # (the same: its request has just gone out, or taken a head start over)
        started = lane.requested_at if lane is not None else None
        if started is not None and self._lead_head_at is not None:
            started = min(started, self._lead_head_at)
        rtt = leader.latency_s if leader.latency_s is not None else self.cfg.default_latency_s
        assert self.cfg.access_bps
        access_Bps = self.cfg.access_bps / 8
        verdict, why = judge_start(
            self._lead_samples,
            started=self._lead_since if started is None else min(started, self._lead_since),
            now=now, rtt_s=rtt, access_Bps=access_Bps, s=self.cfg.lead,
            budget=budget_s(len(self.plan.active), access_Bps, self.cfg.lead),
        )
        if verdict == "full":
            self._lead_phase = "full"
            self._lead_full_at = now
            self._lead_full_bytes = self._aggregate.total
            self._lead_samples = []
            self._log(f"{leader.id}: {why}: the others stay in reserve")
        elif verdict == "release":
            self._release_standbys(why)

    def _sample_lead(self, leader: Flow, lane: Lane | None, now: float) -> None:
        """Lock held: note how far the leader's transfer has come, when it moved.
        The kernel's count where the transport gives it: it does not lag when the
        leader's thread waits for the CPU, which a verdict on a few arrivals
        cannot tell from a stall."""
        if lane is None or lane.requested_at is None:
            return
        if lane.id != self._lead_lane:  # a new request (resume: the next gap)
            self._lead_lane = lane.id
            self._lead_samples = []
            self._lead_head_at = None
        if lane.start == 0 and self._lead_head_at is None:
            self._seed_lead(leader)
        arrived = getattr(leader.fetcher, "arrived_end", None)
        pos = arrived() if arrived is not None else None
        got = (pos - lane.start) if pos is not None else lane.reserved - lane.start
        if got > (self._lead_samples[-1][1] if self._lead_samples else 0):
            self._lead_samples.append((now, got))

    def _seed_lead(self, leader: Flow) -> None:
        """Lock held: a leader whose transfer started before the engine (the entry
        point's head start) brings its arrivals so far: judged on them, it needs
        no fresh window of its own (a fast link: the others join at once)."""
        history = getattr(leader.fetcher, "head_history", None)
        if history is None or self._clock is not time.monotonic:  # (another time scale)
            return
        requested, arrivals = history  # (thinned like live samples: one per 5 ms)
        self._lead_head_at = requested
        first = self._lead_samples[0][0] if self._lead_samples else float("inf")
        self._lead_samples[:0] = [a for a in arrivals if a[0] < first]

    def _release_standbys(self, why: str, *, leader_shares: bool = True) -> None:
        """Lock held: everyone works from now on. What the leader has not reached
        yet is dealt evenly. With ``leader_shares``, the leader is one of the flows
        it is dealt to and keeps its first block on its running request. Without
        (it failed, stalled or fell behind), its request is cut as soon as that
        wastes nothing and the standbys share the rest; it takes work again like
        any flow once its request ends."""
        self._lead_phase = "off"
        self._lead_samples = []
        leader = self._leader
        standbys = [
            f for f in self.flows.values() if f.standby and f.alive and not f.cancel.is_set()
        ]
        for f in self.flows.values():
            f.standby = False
        for f in standbys:
            self._event("resumed", f, f"joins: {why}")
        if not standbys:  # (still getting ready: no event, but say why they may start)
            self._log(f"lead start over: {why}")
        rest = RangeSet()
        lane = leader.lane if leader is not None and leader.alive else None
        if lane is not None and lane.kind != "normal":
            lane = None
        cut = 0
        if lane is not None:
            cut = max(lane.reserved, self._cut_floor(lane, self.access_saturated()))
            cut = min(self.split_grid.align_up(cut), lane.owned_end)
            if leader_shares and leader is not None and self._deal_as_even_start(
                leader, lane, cut
            ):
                self._lock.notify_all()
                return
            rest.add(cut, lane.owned_end)
        for f in self.flows.values():
            for s, e in f.initial:
                rest.add(s, e)
            f.initial = RangeSet()
        for s, e in self.pool:
            rest.add(s, e)
        self.pool = RangeSet()
        shares = (
            leader_shares and leader is not None and lane is not None
            and not leader.cancel.is_set() and not leader.consecutive_failures
        )
        workers = ([leader] if shares and leader is not None else []) + standbys
        if workers:
            groups = deal_in_rounds(
                rest, len(workers), self.cfg.round_block_bytes, self.cfg.max_rounds
            )
            for f, g in zip(workers, groups, strict=True):
                f.initial = g
        else:  # nobody left to deal to: the pool serves whoever comes
            self.pool = rest
        if lane is not None and leader is not None:
            first = leader.initial.first() if shares else None
            if first is not None and first[0] == cut:
                leader.initial.remove(*first)  # keeps streaming: no new request
                cut = first[1]
            lane.end.lower_to(cut)
            lane.owned_end = cut
        self._lock.notify_all()

    def _deal_as_even_start(self, leader: Flow, lane: Lane, cut: int) -> bool:
        """Lock held, on a release while the leader has not got past the first block
        an even start would have given it (a fast link, found out at once): deal
        as that start would have, each flow its blocks in file order, the leader's
        request ending with its first block. The mirrors' transfers that the entry
        point started at those blocks (early.py) are then used as they are.
        False (nothing changed) when the download is not in that state."""
        if (
            lane.start != 0
            or self._lead_todo != RangeSet([(0, lane.owned_end)])
            or self.pool
            or leader.initial
            or leader.cancel.is_set()
            or leader.consecutive_failures
        ):
            return False
        others = [self.flows.get(m.name) for m in self.plan.active[1:]]
        if not all(
            f is not None and f.alive and not f.cancel.is_set() and not f.initial
            and f.lane is None
            for f in others
        ):
            return False
        groups = self._even_groups(self._lead_todo)
        first = groups[0].first()
        if first is None or first[0] != 0 or cut > first[1]:
            return False
        groups[0].remove(*first)
        leader.initial = groups[0]
        for f, g in zip(others, groups[1:], strict=True):
            f.initial = g  # type: ignore[union-attr]
        lane.end.lower_to(first[1])
        lane.owned_end = first[1]
        return True

    def _start_flow(
        self, src: MirrorSource, role: Literal["active", "backup"], why: str = ""
    ) -> Flow:
        stats = MirrorStats(name=src.name, url=src.url, role=role, state="connecting")
        flow = Flow(id=src.name, mirror=src, stats=stats)
        flow.initial = self._initial_for.pop(src.name, RangeSet())
        self.flows[flow.id] = flow
        self.stats.append(stats)
        if role == "backup":
            self._event("backup", flow, "started as a backup" + (f": {why}" if why else ""))
        flow.thread = threading.Thread(
            target=self._flow_main, args=(flow,), name=f"pftp-flow-{src.name}", daemon=True
        )
        flow.thread.start()
        return flow

    def join(self, url: str, why: str) -> bool:
        """Start a flow for a mirror that was not in the plan (one whose size probe
        answered late, downloader._LateMirrors): it takes work like a backup that
        joined. False when the download is over or already has that mirror."""
        from pftp_client.plan import MirrorSource, mirror_name

        with self._lock:
            if self._finished or self._abort is not None:
                return False
            if any(f.mirror.url == url for f in self.flows.values()):
                return False
            taken = {*self.flows, *(b.name for b in self.backups)}
            self._start_flow(MirrorSource(mirror_name(url, taken), url), "backup", why)
            self._lock.notify_all()
            return True

    def _top_up(self, now: float) -> None:
        """Lock held, every monitor round: when the flows together stay well below
        the client's access link and a backup is waiting, the next backup joins. It
        takes work like any idle flow, from the lane that will finish last.

        The coordinator picks mirrors until their expected rates cover the access
        bandwidth (paper 004, 3.2.2). Those rates are estimates: when what the
        mirrors deliver falls short, the client adds the next one itself, but only
        when they were meant to cover it (_meant_to_fill). Judged over the
        aggregate's whole window, after the start and after each join. A join that
        did not raise the aggregate by a tenth of the link ends it: the limit is
        elsewhere (the figure is wrong, or a link upstream is shared). Not while a
        lead start holds the others in reserve, nor while a flow is parked (the
        shared-congestion verdict: the flows fill a shared link).

        The access figure is an estimate too. Flows that carry more prove it low
        (_raise_access): it then holds only as a floor, and so does the choice the
        coordinator sized for it, so a backup joins while the flows fill what is
        known of the link, as long as each join raises the aggregate. Flows that
        fill both the figure and their mirrors' expected rates cannot tell which
        of the two limits them: one backup joins to find out (_figure_untested)."""
        access = self.cfg.access_bps
        if not access or self._lead_phase != "off":
            self._top_up_low_rounds = 0
            return
        since = self._t0 + self.cfg.top_up_start_s if self._top_up_at is None else self._top_up_at
        reads = self._top_up_rate(now, since)
        if reads is None:
            return
        agg, low = reads
        before = self.access_raised_from or access
        # (past a join, any excess over the figure is the join's: it was low)
        raised = self._raise_access(low, strict=self._top_up_at is None)
        if (
            self._top_up_over
            or not self.backups
            # (a mirror-only download has no expected rates: its backups only stand in)
            or not (self._meant_to_fill(access) or (raised and self._expected_Bps()))
            or any(f.parked for f in self.flows.values())  # (a full shared link)
        ):
            self._top_up_low_rounds = 0
            return
        link = access / 8
        if self._top_up_at is not None and agg < self._top_up_from + 0.1 * link:
            self._top_up_over = True
            self._log(f"no more backups join: the last one left the flows at "
                      f"{agg * 8 / 1e6:.2f} Mbit/s (from {self._top_up_from * 8 / 1e6:.2f})")
            return
        if raised:
            link = low  # (what is known of the link: they fill it, so the next one joins)
        if agg < self.cfg.access_full * link:
            after = self._rate_after_recovery(since, link)
            if after >= self.cfg.access_full * link:
                self._log(f"the flows carry {agg * 8 / 1e6:.2f} Mbit/s of the link, "
                          f"{after * 8 / 1e6:.2f} since a loss-recovery pause: no backup")
            agg = max(agg, after)
        test = False
        if agg >= self.cfg.access_full * link and not raised:
            test = self._figure_untested(agg)
            if not test:
                self._top_up_low_rounds = 0
                return
        self._top_up_low_rounds += 1
        if (self._top_up_low_rounds < self.cfg.top_up_rounds
                or self._work_left_s(agg) < self.cfg.top_up_min_left_s * (2 if test else 1)):
            return
        carry = f"the flows carry {(low if raised else agg) * 8 / 1e6:.2f} Mbit/s"
        if raised:
            why = f"{carry}, above the {before / 1e6:.2f} Mbit/s access figure: the link is faster"
        elif test:
            self._figure_tested = True
            why = (f"{carry}, both the {access / 1e6:.2f} Mbit/s access figure and what their "
                   "mirrors are expected to give: a backup tests which one limits them")
        else:
            why = f"{carry} of the {access / 1e6:.2f} Mbit/s access link"
        if self._start_backup(why):
            self._top_up_at, self._top_up_from = now, agg
            self._top_up_low_rounds = 0
            self._lock.notify_all()

    def _figure_untested(self, agg_Bps: float) -> bool:
        """Lock held: the flows fill the access figure (``agg_Bps``), but they also
        carry about what their mirrors are expected to give, so either may be what
        limits them (one 20 Mbit/s mirror on a link taken for 20 that grew to 200,
        a figure measured during cross traffic). Not tested yet this download, and
        a figure the client measured (test_access_figure)? Where the mirrors are
        expected to give well more than the flows carry, the access link is what
        limits them (a 30 Mbit/s mirror behind 4): no test."""
        if self._figure_tested or not self.cfg.test_access_figure:
            return False
        expected = self._expected_Bps()
        return expected is not None and agg_Bps >= self.cfg.access_full * expected

    def _expected_Bps(self) -> float | None:
        """The coordinator's expected rates of the mirrors now fetching, summed
        (bytes/s); None when one has none (a mirror-only download)."""
        live = [f for f in self.flows.values()
                if f.alive and not f.cancel.is_set() and f.stream_of is None]
        rates = [f.mirror.expected_bps for f in live]
        if not live or not all(rates):
            return None
        return sum(r or 0.0 for r in rates) / 8

    def _raise_access(self, agg_Bps: float, *, strict: bool) -> bool:
        """Lock held: the flows carry ``agg_Bps``, above the access figure (measured
        before the download or configured: a probe run during cross traffic, a link
        upgraded since)? Then it was wrong, and what they carry is the new figure, a
        floor, raised again whenever they carry more. True when it was raised now.
        ``strict``: by no join's doing, only well above it counts, by the lead
        start's own test of the figure (LeadSettings.above): a full link carries at
        most ~0.96 of its rate, a measured figure is off by a few percent."""
        access = self.cfg.access_bps
        margin = self.cfg.lead.above if strict and not self.access_raised_from else 1.0
        if not access or agg_Bps * 8 <= access * margin:
            return False
        if self.access_raised_from is None:
            self.access_raised_from = access
            self._log(f"the flows carry {agg_Bps * 8 / 1e6:.2f} Mbit/s, above the "
                      f"{access / 1e6:.2f} Mbit/s access figure: it is raised to that")
        self.cfg.access_bps = agg_Bps * 8
        return True

    def _rate_after_recovery(self, since: float, link_Bps: float) -> float:
        """The aggregate since the one loss-recovery pause in it, 0.0 without one
        (lead.rate_after_recovery). Behind a slow link one flow overshoots it in slow
        start and waits out a retransmission timeout: averaged in, the pause read
        3.31 Mbit/s for a full 4 Mbit/s link (slow access, 3 of 38 coordinated
        runs), and the backup that joined split the lane and cost 0.4-0.6 s in bytes
        sent past lane ends. Several flows seldom all pause."""
        rtts = [f.latency_s for f in self.flows.values() if f.alive and f.latency_s is not None]
        return rate_after_recovery(
            self._aggregate.samples(since), rtt_s=max(rtts, default=self.cfg.default_latency_s),
            access_Bps=link_Bps, s=self.cfg.lead, step_s=self._aggregate.step_s,
        )

    def _top_up_rate(self, now: float, since: float) -> tuple[float, float] | None:
        """The flows' aggregate over the last monitor round (at least
        top_up_window_s), counted only from the first round after ``since`` (the
        start, or the last join: connections and slow start left out), and over the
        aggregate's window: (the higher, the lower). None until there is such a
        round. (Judged over the aggregate's 2 s window, a coordinator
        whose probes had overrated a mirror left the link a quarter short until 3 s:
        table 1, 1.14x.)"""
        mark = self._top_up_mark
        total = self._aggregate.total
        if now < since:
            return None
        if mark is None or mark[0] < since:
            self._top_up_mark = (now, total)
            return None
        if now - mark[0] < self.cfg.top_up_window_s:
            return None
        self._top_up_mark = (now, total)
        # Short only when short over the round and over the aggregate's window both
        # (a server that sends in bursts, pyftpdlib's throttle, left whole rounds
        # empty); above only when above over both (reads that lagged the kernel's
        # and caught up in a round, as the engine starts: 5.3 Mbit/s over a round
        # of a full 4 Mbit/s link, 3.8 over the window).
        round_Bps = (total - mark[1]) / (now - mark[0])
        window_Bps = self._aggregate.rate(now) or 0.0
        return max(round_Bps, window_Bps), min(round_Bps, window_Bps)

    def _work_left_s(self, rate_Bps: float) -> float:
        """Seconds of work left at ``rate_Bps`` (the bytes not yet in place)."""
        left = self.size - self.committed.total()
        return left / rate_Bps if rate_Bps > 0 else (0.0 if left <= 0 else float("inf"))

    def _meant_to_fill(self, access_bps: float) -> bool:
        """Did the plan's mirrors, by the coordinator's expected rates, cover the
        access link? Only then is a shortfall theirs to make up with a backup. A
        coordinator stops short of the link only for a reason: it ran out of
        mirrors, hit its maximum, or kept two mirrors it knows to share a congested
        link apart, one of them a backup (shared bottleneck, 1 Gbit/s: such a backup
        joined, shared its link, and was parked along with a wrong second verdict).
        A mirror-only download has no expected rates: its backups only stand in."""
        rates = [m.expected_bps or 0.0 for m in self.plan.active]
        if not rates or min(rates) <= 0:
            return False
        return sum(rates) >= self.cfg.top_up_covered * access_bps

    # --- extra connections to a mirror (streams.py) -----------------------------------

    def _try_stream(self, now: float) -> None:
        """Lock held, every monitor round: read each flow's signals (segments out
        of order on its data connection: loss; time idle between bursts: a sender
        that pauses) and, while no other trial is on probation and the flows leave
        room on the access link (when it is known), give the flow that shows the
        strongest signal and qualifies more connections to its mirror."""
        if not numpy_preload.ready():
            return  # (a machine this slow: no trial this round rather than a stall)
        since = {f.id: f.rx_mark[0] for f in self.flows.values() if f.rx_mark is not None}
        losses: dict[str, float] = {}
        idles: dict[str, float] = {}
        clumps: dict[str, float] = {}
        longs: dict[str, tuple[float, float, str]] = {}  # (path, paced B/s, why)
        first_round: set[str] = set()
        for f in self.flows.values():
            snap = None  # (its arrivals, read once a round)
            if f.rx_mark is not None and now > f.rx_mark[0]:
                f.round_Bps = (f.stats.received - f.rx_mark[1]) / (now - f.rx_mark[0])
            elif (f.rx_mark is None and f.lane is not None and f.lane.first_byte is not None
                  and f.stats.ranges <= 1):
                # Its first round, read from stream_first_skip_s after its first byte
                # (a shaper's bucket and slow start before that look like pauses): a
                # limited server's connection is tried a round sooner.
                begin = f.lane.first_byte + self.cfg.stream_first_skip_s
                snap = self._arrivals(f)
                times, sizes = snap
                if now - begin >= 0.3 and times.size and times[0] <= int(begin * 1e9):
                    since[f.id] = begin
                    first_round.add(f.id)
                    f.round_Bps = rate_since(times, sizes, begin, now)
            f.round_before = f.round_from
            f.round_from = f.rx_mark[0] if f.rx_mark is not None else since.get(f.id)
            f.rx_mark = (now, f.stats.received)
            lane = f.lane
            if not f.alive or lane is None or lane.first_byte is None or f.id not in since:
                f.ooo_mark = None
                f.wait_mark = None
                continue
            ask = getattr(f.fetcher, "out_of_order", None)
            counts = ask() if ask is not None else None
            share = loss_share(f.ooo_mark, counts) if counts is not None else None
            f.ooo_mark = counts
            if share is not None:
                losses[f.id] = share
                if share >= self.cfg.stream_loss_share:
                    self._log(f"{f.id}: {share:.1%} of its segments out of order")
            times, sizes = snap if snap is not None else self._arrivals(f)
            start = max(since[f.id], lane.first_byte)
            waits = self._waited_reads(f)
            burst = burst_bytes(f.wait_mark, waits) if waits is not None else None
            f.wait_mark = waits
            idle = idle_share(times, sizes, int(start * 1e9))
            if idle is None and f.stream_of is None:
                found = self._long_look(f, times, sizes, now, share)
                if found is not None:
                    longs[f.id] = found
                    self._log(f"{f.id}: {found[2]}")
            if not self._steady(f, times, sizes, start):
                continue  # (a rate that changed leaves bursts and gaps too: no signal)
            if burst is not None and f.round_Bps:
                clumps[f.id] = burst / f.round_Bps
                if burst >= self.cfg.stream_burst_bytes and clumps[f.id] >= self.cfg.stream_burst_s:
                    self._log(f"{f.id}: bursts of {burst / 1024:.0f} KiB "
                              f"({clumps[f.id] * 1e3:.0f} ms of its rate) at once")
                else:
                    del clumps[f.id]
            if idle is not None:
                idles[f.id] = idle
                if idle >= self.cfg.stream_idle_share:
                    self._log(f"{f.id}: idle {idle:.0%} of the round between bursts")
        access = self.cfg.access_bps
        agg = self._aggregate.rate(now)
        # (one round only: a mirror that does not qualify in it waits for a signal)
        more, self._stream_more = self._stream_more, {}
        if agg is None or self._trials_barred(agg):
            return
        chosen: dict[str, tuple[float, str, Flow]] = {}
        for f in self.flows.values():
            mirror = f.stream_of or f.id
            loss = losses.get(f.id)
            idle = idles.get(f.id)
            # (not while the flows mostly fill a known access link: its queue's
            # drops put segments out of order on every flow behind it, r26)
            by_loss = (loss is not None and loss >= self.cfg.stream_loss_share
                       and self._path_rtt(f) >= self.cfg.stream_min_rtt_s
                       and not self.access_saturated())
            clump = clumps.get(f.id)
            burst = clump is not None and clump >= self.cfg.stream_burst_s
            scaled = mirror in more
            # (a first round is read right after start-up, when a link-limited
            # connection still pauses: 28-44 % idle in the lab; a clear limit was
            # seen by the early look already)
            need_idle = (self.cfg.stream_first_idle_share if f.id in first_round
                         else self.cfg.stream_idle_share)
            # (a mirror whose connections together carry its path's rate has what
            # it takes: each of them stays held and idle all the same; lab, nginx
            # at 1.25 MB/s behind 40 Mbit/s: 4 connections at 38 Mbit/s, then one
            # of them idle 52 % and a fifth for no gain)
            path = longs[f.id][0] if f.id in longs else self._stream_paths.get(mirror)
            if not scaled and path is not None and self._fills_path(mirror, path):
                continue
            paused = f.id in longs
            by_idle = scaled or burst or paused or (idle is not None and idle >= need_idle)
            if not (by_loss or by_idle):
                continue
            if not scaled and mirror in self._advised and self._mirror_carries_expected(mirror):
                continue  # (its advised connections carry what the coordinator measured)
            lane = f.lane
            rtt = self._path_rtt(f)
            warm = (self.cfg.stream_warm_s if not by_idle
                    else max(self.cfg.stream_idle_warm_s, self.cfg.stream_warm_rtts * rtt))
            if (
                lane is None or not self._may_add_streams(f)
                or lane.first_byte is None or now - lane.first_byte < warm
                or (not by_idle and self._carries_expected(f))
            ):
                continue
            # a sender's pauses first (they say the path takes more), then loss; a
            # mirror that scaled: from its flow with the most left
            kind = ("scaled" if scaled else "burst" if burst else "pauses" if paused
                    else "idle" if by_idle else "loss")
            if scaled:
                key = 3.0 + (lane.owned_end - lane.reserved) / max(self.size, 1)
            else:
                key = ((2.0 if burst or paused else idle or 0.0) if by_idle
                       else (loss or 0.0) - 1.0)
            if mirror not in chosen or key > chosen[mirror][0]:
                chosen[mirror] = (key, kind, f)
        for key, kind, f in sorted(chosen.values(), key=lambda c: -c[0]):
            path, why = None, more.get(f.stream_of or f.id, "")
            if kind == "pauses":
                path, f.round_Bps, why = longs[f.id]  # (judged against its paced rate)
            self._start_trial(f, key, kind, now, losses, idles, clumps, bool(access),
                              reason=why, path_Bps=path)
            if not access:
                break  # (one at a time: the others' rates tell whether it paid)

    def _fills_path(self, mirror: str, path_Bps: float) -> bool:
        """Lock held: do ``mirror``'s connections together carry stream_path_full of
        ``path_Bps`` (the path's rate read inside a held connection's bursts) over
        the round?"""
        return self._mirror_round_Bps(mirror) >= self.cfg.stream_path_full * path_Bps

    def _mirror_round_Bps(self, mirror: str) -> float:
        """Lock held: what all of ``mirror``'s live connections carried over the round."""
        return sum(g.round_Bps or 0.0 for g in self.flows.values()
                   if g.mirror.name == mirror and g.alive)

    def _long_look(
        self, f: Flow, times: np.ndarray, sizes: np.ndarray, now: float,
        loss: float | None,
    ) -> tuple[float, float, str] | None:
        """Lock held: (the path's rate, the paced rate, why) when ``f``'s arrivals
        over the last stream_long_look_s show a server's pauses of whole fractions
        of a second (EngineConfig.stream_long_look_s); None otherwise."""
        cfg = self.cfg
        lane = f.lane
        if lane is None or lane.first_byte is None:
            return None
        # (a younger range from its start: three pauses are the evidence, not the
        # window's length, and they can come within 2 s)
        begin = max(now - cfg.stream_long_look_s, lane.first_byte + cfg.stream_early_skip_s)
        if now <= begin or not times.size or times[0] > int(begin * 1e9):
            return None  # (the ring no longer holds the window's start)
        if loss is not None and loss >= cfg.stream_loss_share:
            return None  # (pauses after losses are the sender's recovery, as below)
        if f.outage_seen_at >= begin:
            # A silence in the window was the path's (its check found it down):
            # sweep http-flap read a 40 Mbit/s mirror's 1.5 s outage as a
            # whole-second limit's first pause and tried 2 more connections.
            return None
        pause_s = max(cfg.stream_long_pause_s, cfg.stream_early_pause_rtts * self._path_rtt(f))
        since = int(begin * 1e9)
        # (less than a segment on its own: nginx sends each second's remainder, a
        # few hundred bytes, between two pauses; it would read as an uneven burst)
        whole = sizes >= 1024
        times, sizes = without_crumbs(times[whole], sizes[whole], pause_s,
                                      cfg.stream_long_min_burst)
        share = paused_share(times, sizes, since, min_pauses=cfg.stream_long_pauses,
                             max_spread=cfg.stream_early_spread, min_arrivals=20,
                             pause_s=pause_s, min_burst=cfg.stream_long_min_burst)
        if share is None and cfg.stream_two_pause_s > 0:
            # (two pauses as long as a whole-second limit leaves, around one burst
            # of a second's allowance: the evidence a second sooner)
            two_s = max(cfg.stream_two_pause_s, pause_s)
            share = paused_share(times, sizes, since, min_pauses=2,
                                 max_spread=cfg.stream_early_spread, min_arrivals=20,
                                 pause_s=two_s, min_burst=cfg.stream_two_min_burst)
            if share is not None:
                pause_s = two_s
        if share is None and begin > now - cfg.stream_long_look_s:
            one = self._first_pause(f, times, sizes, since, max(cfg.stream_two_pause_s, pause_s))
            if one is not None:
                return one
        paced, path = self._burst_rates(times, sizes, since, pause_s) if share else (None, None)
        _LOG.debug("%s: long look: paused %s (%g s pauses), within a burst %s B/s, "
                   "paced %s B/s", f.id, share, pause_s, path, paced)
        if share is None or share < cfg.stream_long_share:
            return None
        if not path or not paced or not bursts_outpace(path, paced, cfg.stream_long_pace):
            return None
        return path, paced, (
            f"its data arrive in bursts with pauses of {pause_s:g} s or more, paused "
            f"{share:.0%} of the last {now - begin:.1f} s, "
            f"{path * 8 / 1e6:.1f} Mbit/s within a burst"
        )

    def _first_pause(
        self, f: Flow, times: np.ndarray, sizes: np.ndarray, since: int, pause_s: float,
    ) -> tuple[float, float, str] | None:
        """Lock held: _long_look's reading of a young range's first burst and first
        pause (streams.first_pause) within stream_one_within_s of its first data,
        both bursts around it crossing at stream_long_pace times the rate held."""
        cfg = self.cfg
        if cfg.stream_one_min_burst <= 0:
            return None
        found = first_pause(times, sizes, since, pause_s, cfg.stream_one_min_burst,
                            cfg.stream_long_min_burst)
        if found is None:
            return None
        share, paced, resumed = found
        if share < cfg.stream_long_share or resumed - since > cfg.stream_one_within_s * 1e9:
            return None
        path = burst_path_rate(times, sizes, since, pause_s)
        after = burst_path_rate(times, sizes, resumed, pause_s, min_reads=3, min_bursts=1)
        if not (path and after and bursts_outpace(path, paced, cfg.stream_long_pace)
                and bursts_outpace(after, paced, cfg.stream_long_pace)):
            return None
        span = (resumed - since) / 1e9
        return path, paced, (
            f"its first {paced * span / 1e6:.1f} MB came at {path * 8 / 1e6:.1f} Mbit/s, "
            f"then nothing for {share * span:.2f} s, then again at "
            f"{after * 8 / 1e6:.1f} Mbit/s"
        )

    def _held_burst(self, f: Flow) -> bool:
        """Lock held: is ``f`` a mirror's only connection, on its first range, whose
        first stream_one_min_burst came within stream_one_within_s of its first data
        and whose silence since could be a whole-second limit's first pause
        (EngineConfig.stream_silence_s)? Cheap: asked on every path-check round."""
        cfg = self.cfg
        return bool(
            cfg.stream_silence_s > 0 and cfg.max_streams > 1
            and f.stream_of is None and f.first_data is not None
            and f.stats.ranges <= 1 and f.stats.received >= cfg.stream_one_min_burst
            and f.last_data - f.first_data <= cfg.stream_one_within_s
            and f.outage_seen_at < f.first_data
            and f.id not in self._no_streams and f.id not in self._advised
            and f.id not in self._stream_trials
            and not self._streams_of(f.id, live=True)
        )

    def _silence_trial(self, f: Flow, since: float, now: float) -> None:
        """Lock held: ``f`` (_held_burst) has been silent since ``since`` while its
        server took a new connection at once: trial connections, as many as fill its
        path at the rate it would carry were the pause to last as long again,
        judged as any trial."""
        if not numpy_preload.ready() or self._trials_barred(self._aggregate.rate(now)):
            return
        cfg = self.cfg
        loss = self._loss_so_far(f)
        if loss is not None and loss >= cfg.stream_loss_share:
            return  # (a sender's recovery from losses, not its pause)
        first = f.first_arrival if f.first_arrival is not None else f.first_data
        times, sizes = self._arrivals(f)
        begin = int((first + cfg.stream_early_skip_s) * 1e9)
        if not times.size or times[0] > begin or now <= first:
            return  # (the ring no longer holds its start)
        path = burst_path_rate(times, sizes, begin, None, min_reads=3, min_bursts=1)
        # (the rate it is held to, were the pause to last as long again: what it
        # carried from its first data over that time. Read over the pause so far,
        # 1.3 MB in 0.8 s opened 3 connections where nginx's 10 Mbit/s limit
        # needed 4, and the kept trial's first allowances read as a path filled)
        got = float(sizes[times >= int(first * 1e9)].sum())
        held = got / (since - first + 2 * (now - since))
        # (as the other looks: the bursts cross at stream_long_pace times the rate
        # held. A server frozen after 8.7 MB at the path's 38 Mbit/s in 1.8 s reads
        # 1.3 times; nginx's first allowance, 1.3 MB in 0.5 s, 3.8 times)
        if not path or not held or not bursts_outpace(path, held, cfg.stream_long_pace):
            return
        why = (f"its first {f.stats.received / 1e6:.1f} MB came at {path * 8 / 1e6:.1f} "
               f"Mbit/s, then nothing for {now - since:.2f} s while its server took a "
               "new connection at once")
        self._log(f"{f.id}: {why}")
        self._start_looked([(f, 2.0, "pauses", why)], {f.id: held}, {f.id: path}, now)

    @staticmethod
    def _loss_so_far(f: Flow) -> float | None:
        """Share of ``f``'s data connection's segments out of order since it began
        (streams.loss_share), where its transport counts them."""
        ask = getattr(f.fetcher, "out_of_order", None)
        counts = ask() if ask is not None else None
        return loss_share(None, counts) if counts is not None else None

    @staticmethod
    def _burst_rates(
        times: np.ndarray, sizes: np.ndarray, since_ns: int, pause_s: float | None
    ) -> tuple[float | None, float | None]:
        """(the rate a paused connection is held to, the path's rate inside its
        bursts) since ``since_ns``: what the early and the long look both judge."""
        return (paced_rate(times, sizes, since_ns, pause_s),
                burst_path_rate(times, sizes, since_ns, pause_s))

    def _arrivals(self, f: Flow) -> tuple[np.ndarray, np.ndarray]:
        """``f``'s recent (arrival ns, bytes); an extra connection's are kept apart
        from the congestion detector's."""
        ring = self.timings if f.stream_of is None else self._stream_timings
        return ring.snapshot(f.id)

    @staticmethod
    def _waited_reads(f: Flow) -> tuple[int, int] | None:
        """``f``'s fetcher's (receives that waited for data, their bytes), if it
        counts them."""
        ask = getattr(f.fetcher, "waited_reads", None)
        return ask() if ask is not None else None

    def _steady(self, f: Flow, times: np.ndarray, sizes: np.ndarray, start: float) -> bool:
        """Lock held: did ``f`` carry alike in both halves of its last monitor round,
        or, failing that, of its last two? nginx's limit_rate counts in whole
        seconds: each second's bytes leave at its start, so one round's halves
        can carry 7 to 1 while every round carries the same."""
        if steady(times, sizes, int(start * 1e9)):
            return True
        two = f.round_before
        lane = f.lane
        return (two is not None and lane is not None and lane.first_byte is not None
                and two >= lane.first_byte and times.size > 0 and times[0] <= int(two * 1e9)
                and steady(times, sizes, int(two * 1e9)))

    def _trials_barred(self, agg_Bps: float | None) -> bool:
        """Lock held: no trial now (one at a time with the access link unknown; none
        while the flows fill a known one, a lead start runs or flows are parked)."""
        access = self.cfg.access_bps
        now = self._clock()
        # (the window's 2 s average or its last half second: a flow's switch dips
        # it for a moment, and a ramp holds it low for the window's length)
        peak = max(agg_Bps or 0.0, self._aggregate.recent(now, 0.5) or 0.0)
        if access and peak * 8 >= self.cfg.access_full * access:
            self._access_full_at = now
        return bool(
            self.cfg.max_streams <= 1
            or (self._stream_trials and not access)
            or (access and now - self._access_full_at < self.cfg.stream_access_hold_s)
            or now - self._shared_by_all_at < self.cfg.stream_access_hold_s
            or self._lead_phase != "off"
            or self._parkings
            or self._finished
        )

    def _may_add_streams(self, f: Flow) -> bool:
        """Lock held: may ``f``'s mirror get more connections, cut from ``f``'s range?"""
        mirror = f.stream_of or f.id
        lane = f.lane
        return not (
            mirror in self._no_streams
            or mirror in self._stream_trials
            or mirror in self.bad_mirrors
            or 1 + len(self._streams_of(mirror, live=True)) >= self.cfg.max_streams
            or f.parked or f.standby or f.no_more_work or f.cancel.is_set()
            or lane is None or lane.kind != "normal" or lane.shadow is not None
            or f.next_lane is not None
        )

    def _early_look_due(self) -> float | None:
        """Lock held: when the next mirror's first connection is due its early look."""
        if self.cfg.max_streams <= 1 or self.cfg.stream_early_share >= 1.0:
            return None
        due = [f.early_next if f.early_next is not None
               else f.first_arrival + self._early_look_after(f) for f in self.flows.values()
               if f.first_arrival is not None and not f.early_looked and f.stream_of is None]
        return min(due, default=None)

    def _early_look_after(self, f: Flow) -> float:
        """Seconds after ``f``'s first data its early look is due."""
        return (self.cfg.advised_backup_look_s if self._advised_backup(f)
                else min(self.cfg.stream_early_first_s, self.cfg.stream_early_s))

    def _advised_backup(self, f: Flow) -> bool:
        """Is ``f`` a backup's first connection the coordinator advised several for?
        (An active mirror's advised connections start with it: _start_advised.)"""
        return (f.stats.role == "backup" and f.stream_of is None
                and f.mirror.connections > 1 and f.id not in self._no_streams)

    def _early_look(self, now: float) -> None:
        """Lock held: the early look at connections past stream_early_first_s of
        data (streams.paused_share): even bursts with the connection paused most of
        the time are a server's per-connection limit; the mirror gets its
        connections now instead of after its first monitor round. Without that
        evidence yet, it is looked at again until stream_early_s."""
        if not numpy_preload.ready():
            return  # (looked at once it is loaded: the monitor polls meanwhile)
        looked = []
        held: dict[str, float | None] = {}
        paths: dict[str, float | None] = {}
        for f in self.flows.values():
            if (f.first_arrival is None or f.early_looked or f.stream_of is not None
                    or now < f.first_arrival + self._early_look_after(f)
                    or (f.early_next is not None and now < f.early_next)):
                continue
            if f.id in self._advised:  # (has its connections already)
                f.early_looked = True
                continue
            # (until the last look, no evidence yet means look again)
            f.early_looked = now >= f.first_data + self.cfg.stream_early_s
            f.early_next = now + self.cfg.stream_early_every_s
            if not f.alive:
                f.early_looked = True
                continue
            if self._advised_backup(f):
                f.early_looked = True
                # (its rate so far: what the trial's gain is judged against)
                f.round_Bps = f.stats.received / max(now - f.first_data, 1e-3)
                looked.append((f, 2.0, "advised",
                               f"the coordinator advised {f.mirror.connections} "
                               "connections to it"))
                continue
            times, sizes = self._arrivals(f)
            starts = [since for since in self._early_starts(f)
                      if times.size and times[0] <= int(since * 1e9)]
            if not starts:
                f.early_looked = True
                continue  # (the ring no longer holds its start: a fast flow)
            # (behind a fast link a whole burst arrives in one receive: too few
            # arrivals for paused_share, but what those receives return says it;
            # the same for every start read)
            waits = self._waited_reads(f)
            burst = burst_bytes(None, waits, min_waits=5) if waits is not None else None
            for since in starts:
                found = self._early_evidence(f, times, sizes, since, now, burst)
                if found is not None:
                    break
            else:
                continue
            share, why, paced, path = found
            first_s = now - since
            f.early_looked = True
            # (the rate it is held to is what the trial's gain is judged against;
            # the path's says how many such connections fill it)
            held[f.id] = paced
            paths[f.id] = path
            self._log(f"{f.id}: {why} (first {first_s:.2f} s)")
            looked.append((f, share or 1.0, "pauses", why))
        self._start_looked(looked, held, paths, now)

    def _early_starts(self, f: Flow) -> list[float]:
        """Where the early look reads ``f``'s arrivals from: 50 ms after its first
        data arrived (a head start's came 0.05-0.15 s before the engine's first
        block, which waited for the CLI to load) and, when that was sooner, after
        the engine's first block too: a far path's start (slow start, the server's
        own first allowance) stays uneven for several round trips, and a reading
        from the arrival holds it for good (lab, mixed-limit: 213 KiB in the first
        0.14 s at 30 ms RTT, then 64 KiB every 65 ms)."""
        skip = self.cfg.stream_early_skip_s
        assert f.first_arrival is not None and f.first_data is not None
        starts = [f.first_arrival + skip]
        if f.first_data - f.first_arrival > 0.01:
            starts.append(f.first_data + skip)
        return starts

    def _early_evidence(
        self, f: Flow, times: np.ndarray, sizes: np.ndarray, since: float, now: float,
        burst: float | None,
    ) -> tuple[float | None, str, float | None, float | None] | None:
        """Lock held: the early look's evidence in ``f``'s arrivals from ``since``
        (``burst``: what its receives that waited returned, streams.burst_bytes):
        (paused share or None, why, the rate it is held to, the path's within its
        bursts), or None when they do not show a per-connection limit."""
        share, pause_s = self._early_paused(f, times, sizes, since)
        mean = rate_since(times, sizes, since, now)
        clump = burst / mean if burst and mean else 0.0
        paused = share is not None and share >= self.cfg.stream_early_share
        bursts = (burst is not None and burst >= self.cfg.stream_burst_bytes
                  and clump >= self.cfg.stream_early_burst_s)
        even = steady(times, sizes, int(since * 1e9))
        # (the rate it is held to, and the path's read inside its bursts)
        paced, path = (self._burst_rates(times, sizes, int(since * 1e9), pause_s)
                       if paused or bursts else (None, None))
        if paused and not bursts_outpace(path, paced, self.cfg.stream_burst_pace):
            # (bursts at about its mean's pace: the gaps are stalls, such as a
            # slow link's loss recovery, not a server's sleeps)
            paused = False
        lost = self._loss_so_far(f) if paused or bursts else None
        if lost is not None and lost >= self.cfg.stream_loss_share:
            # (a path that drops its segments: the pauses are loss recovery. Lab,
            # selection-table1: 8 mirrors in slow start into a 40 Mbit/s link,
            # 78 of 153 segments out of order, read as paused 90 %; the limited
            # servers' first connections: 0-1 in 325-460)
            _LOG.debug("%s: early look: %.0f%% of its segments out of order",
                       f.id, 100 * lost)
            paused = bursts = False
        if not (paused or bursts) or not even:
            _LOG.debug("%s: early look at %.3f s from %.3f s: paused %s, waited reads of "
                       "%s bytes (%.3f s of its rate), %d arrivals, steady %s, within a "
                       "burst %s B/s, paced %s B/s", f.id, now - f.first_arrival,
                       since - f.first_arrival, share, burst, clump, times.size, even,
                       path, paced)
            return None
        if paused:
            why = f"its data arrive in even bursts, paused {share:.0%} of the time"
        else:
            why = f"its data arrive in bursts of {clump * 1e3:.0f} ms of its rate at once"
        if path:
            why += f", {path * 8 / 1e6:.1f} Mbit/s within a burst"
        return share, why, paced, path

    def _start_looked(
        self, looked: list[tuple[Flow, float, str, str]], held: dict[str, float | None],
        paths: dict[str, float | None], now: float,
    ) -> None:
        """Lock held: trials for the connections a look between rounds found held
        (``held``: the rate each is held to, ``paths``: its path's, when read),
        strongest first; one at a time unless the access link is known."""
        if not looked:
            return
        # the rates the trial compares with: every flow's over the same time (from
        # its first data's arrival: a look can now fire before 0.15 s of the
        # engine's own, and a flow with no rate would count as carrying nothing)
        for g in self.flows.values():
            if g.first_arrival is None or not g.alive:
                continue
            t, b = self._arrivals(g)
            begin = max(g.first_arrival + self.cfg.stream_early_skip_s,
                        now - self.cfg.stream_early_s)
            if now - begin > 0.1 and t.size and t[0] <= int(begin * 1e9):
                g.round_Bps = rate_since(t, b, begin, now)
            g.round_Bps = held.get(g.id) or g.round_Bps
        agg = self._aggregate.rate(now)
        access = self.cfg.access_bps
        for f, _, kind, why in sorted(looked, key=lambda x: -x[1]):
            if self._trials_barred(agg) or not self._may_add_streams(f):
                continue
            self._start_trial(f, 2.0, kind, now, {}, {}, {}, bool(access), reason=why,
                              path_Bps=paths.get(f.id))
            if not access:
                break

    def _long_look_due(self) -> float | None:
        """Lock held: when the next first connection is due its long look between
        monitor rounds (_long_looks)."""
        if self.cfg.max_streams <= 1 or self.cfg.stream_long_every_s <= 0:
            return None
        due = [f.long_next if f.long_next is not None
               else f.first_data + self.cfg.stream_long_first_s for f in self.flows.values()
               if f.first_data is not None and f.stream_of is None and not f.long_done]
        return min(due, default=None)

    def _long_looks(self, now: float) -> None:
        """Lock held: the long look (_long_look) at mirrors' first connections
        between monitor rounds, every stream_long_every_s from stream_long_first_s
        after their first data until stream_long_look_s (after that the rounds' look goes
        on alone). A mirror with connections of its own or a trial is not read."""
        if not numpy_preload.ready():
            return
        cfg = self.cfg
        looked: list[tuple[Flow, float, str, str]] = []
        held: dict[str, float | None] = {}
        paths: dict[str, float | None] = {}
        for f in self.flows.values():
            if f.first_data is None or f.stream_of is not None or f.long_done:
                continue
            if now < (f.long_next if f.long_next is not None
                      else f.first_data + cfg.stream_long_first_s):
                continue
            f.long_next = now + cfg.stream_long_every_s
            if (not f.alive or now > f.first_data + cfg.stream_long_look_s
                    or f.id in self._no_streams or f.id in self._advised):
                f.long_done = True
                continue
            if f.id in self._stream_trials or self._streams_of(f.id, live=True):
                continue
            times, sizes = self._arrivals(f)
            found = self._long_look(f, times, sizes, now, self._loss_so_far(f))
            if found is None:
                continue
            f.long_done = True
            paths[f.id], held[f.id], why = found
            self._log(f"{f.id}: {why} (between rounds)")
            looked.append((f, 2.0, "pauses", why))
        self._start_looked(looked, held, paths, now)

    def _early_paused(
        self, f: Flow, times: np.ndarray, sizes: np.ndarray, since: float
    ) -> tuple[float | None, float | None]:
        """Share of ``f``'s time since ``since`` paused between even bursts (the
        early look's evidence; see EngineConfig.stream_early_pauses), and the
        pause it was read with (None: ten median gaps)."""
        cfg = self.cfg

        def read(pause_s: float | None = None, min_burst: int = 0) -> float | None:
            return paused_share(times, sizes, int(since * 1e9),
                                min_pauses=cfg.stream_early_pauses,
                                max_spread=cfg.stream_early_spread,
                                min_arrivals=cfg.stream_early_arrivals,
                                pause_s=pause_s, min_burst=min_burst)

        share = read()
        rtt = self._path_rtt(f)
        if share is not None or rtt <= 0:
            return share, None
        # (whole bursts per receive: a pause is what no ACK clock on this path makes)
        pause_s = max(cfg.stream_early_pause_s, cfg.stream_early_pause_rtts * rtt)
        return read(pause_s, cfg.stream_early_min_burst), pause_s

    def _start_trial(
        self, f: Flow, key: float, kind: str, now: float, losses: dict[str, float],
        idles: dict[str, float], clumps: dict[str, float], access_known: bool,
        reason: str = "", path_Bps: float | None = None,
    ) -> None:
        """Lock held: more connections to ``f``'s mirror, on probation (``reason``:
        why a "scaled" mirror gets them; ``path_Bps``: the path's rate read within
        a paused sender's bursts, streams.burst_path_rate)."""
        assert f.lane is not None
        lane = f.lane
        rate = f.round_Bps
        if not rate:
            return
        mirror = f.stream_of or f.id
        have = 1 + len(self._streams_of(mirror, live=True))
        # (a steady connection idle half the time or more: its sender pauses, as a
        # burst says; bins coarser than its bursts understate how much)
        add = streams_to_add(idles.get(f.id) if kind == "idle" else None, have,
                             self.cfg.max_streams,
                             burst=kind in ("burst", "scaled", "pauses", "advised") or key >= 0.5)
        if kind in ("idle", "loss") and self._path_rtt(f) >= self.cfg.stream_wide_rtt_s:
            add = max(add, min(self.cfg.max_streams - have,
                               (self.cfg.stream_wide_factor - 1) * have))
        if kind == "advised":
            # (as many as the coordinator's probe needed, within what the access
            # link takes: advice.advised_count)
            want = advised_count(f.mirror.connections, self.cfg.max_streams, self.size,
                                 1, self.cfg.access_bps, f.mirror.expected_bps)
            add = min(add, want - have)
        fill = connections_for(path_Bps, rate, have, self.cfg.max_streams)
        if fill is not None:
            # (the path's rate over the one each connection is held to: those that
            # fill it, not the most; a trial that reaches the path is not doubled)
            add = min(add, fill)
        if kind == "scaled":
            # (doubling, not all at once: its path's rate is still unknown, and each
            # step that scales asks for the next)
            add = min(add, have)
        floor = self._cut_floor(lane)
        left = lane.owned_end - max(lane.reserved, floor)
        if left < rate * self.cfg.stream_min_left_s:
            return
        base = max(floor, lane.reserved)
        lead = int(rate * self._new_connection_s(f, rate))
        cuts = [self.grid.align_up(c) for c in trial_cuts(base, left, add, lead)]
        cuts = sorted({c for c in cuts if base < c < lane.owned_end})
        if not cuts:
            return
        name = f.mirror.name
        before = self._mirror_round_Bps(name)
        others = sum(g.round_Bps or 0.0 for g in self.flows.values()
                     if g.mirror.name != name and g.alive and not g.parked and not g.standby)
        end = lane.owned_end
        lane.end.lower_to(cuts[0])
        lane.owned_end = cuts[0]
        if kind in ("scaled", "pauses", "advised"):
            why = reason or "its rate grew with its connections"
        elif kind == "loss":
            why = f"{losses.get(f.id, 0.0):.1%} of its segments out of order"
        elif kind == "burst":
            why = f"its data arrive in bursts of {clumps[f.id] * 1e3:.0f} ms of its rate at once"
        else:
            why = f"its connection idle {idles.get(f.id, 0.0):.0%} of the time"
        started = []
        for lo, hi in zip(cuts, [*cuts[1:], end], strict=True):
            extra = self._start_stream(
                self.flows[mirror], RangeSet([(lo, hi)]),
                f"{why} at {rate * 8 / 1e6:.2f} Mbit/s; takes [{lo}, {hi})",
            )
            started.append(extra.id)
        self._stream_trials[mirror] = StreamTrial(
            mirror, started, now, before,
            {g.id: g.stats.received for g in self.flows.values()},
            connections=have, others_Bps=others, check_others=not access_known,
            path_Bps=path_Bps,
        )
        self._lock.notify_all()

    def _carries_expected(self, flow: Flow) -> bool:
        """Lock held: does the mirror's one connection carry what the coordinator
        expected of its path (stream_expected_share of it)? Then the path is full:
        a lossy path's out-of-order segments are no reason for more connections
        (lossy-path, BBR senders: 18.9 of 20 Mbit/s, trials that gained nothing and
        cost ~1 %). (Not asked of a sender that pauses: the coordinator's probe is
        one connection too, held to the same per-connection limit.)"""
        expected = flow.mirror.expected_bps
        if not expected or flow.stream_of is not None or self._streams_of(flow.id, live=True):
            return False
        return (flow.round_Bps or 0.0) * 8 >= self.cfg.stream_expected_share * expected

    def _mirror_carries_expected(self, mirror: str) -> bool:
        """Lock held: do all of ``mirror``'s connections together carry what the
        coordinator expected of it (stream_expected_share of it) over the round?"""
        flow = self.flows.get(mirror)
        expected = flow.mirror.expected_bps if flow is not None else None
        if not expected:
            return False
        return self._mirror_round_Bps(mirror) * 8 >= self.cfg.stream_expected_share * expected

    def _start_stream(
        self, parent: Flow, work: RangeSet, why: str, after_parent: bool = False
    ) -> Flow:
        """Lock held: another connection to ``parent``'s mirror, its first work
        (cut from one of that mirror's flows)."""
        fid = f"{parent.id}#{next(self._stream_ids)}"
        stats = MirrorStats(name=parent.mirror.name, url=parent.mirror.url,
                            role=parent.stats.role, state="connecting")
        flow = Flow(id=fid, mirror=parent.mirror, stats=stats, stream_of=parent.id)
        flow.initial = work
        flow.after_parent = after_parent
        self.flows[fid] = flow
        self._event("stream", flow, f"another connection: {why}")
        flow.thread = threading.Thread(
            target=self._flow_main, args=(flow,), name=f"pftp-flow-{fid}", daemon=True
        )
        flow.thread.start()
        return flow

    def _judge_stream(self, now: float) -> None:
        """Lock held, every monitor round: once the extra connections on probation
        have run a while, the mirror's flows must carry needed_gain times what they
        did before them (and, with the access link unknown, not by taking it from
        the other mirrors). Each older flow's rate counts from the trial's start,
        a new connection's from its first byte (its slow start is counted: a
        margin)."""
        for trial in list(self._stream_trials.values()):
            self._judge_trial(trial, now)

    def _trial_ready_at(self, trial: StreamTrial) -> float | None:
        """Lock held: when ``trial``'s live extra connections will all have run long
        enough past their first data to be judged (None: not all have data yet)."""
        live = [self.flows[i] for i in trial.streams
                if self.flows[i].alive and not self.flows[i].cancel.is_set()]
        firsts = [e.first_data for e in live]
        if not live or None in firsts:
            return None
        rtt = max(self._path_rtt(e) for e in live)
        return (max(t for t in firsts if t is not None)
                + max(self.cfg.stream_judge_s, self.cfg.stream_judge_rtts * rtt))

    def _trial_rates(self, trial: StreamTrial, now: float) -> tuple[float, dict[str, float]]:
        """Lock held: (the other mirrors' rate, each of the trial's mirror's flows'
        own) since the trial began; a new connection's from its first data (its
        slow start is counted: a margin)."""
        others = 0.0
        own: dict[str, float] = {}
        name = self.flows[trial.streams[0]].mirror.name
        for g in self.flows.values():
            if g.id in trial.streams:
                if g.first_data is not None and now > g.first_data:
                    own[g.id] = g.stats.received / (now - g.first_data)
            elif g.mirror.name == name:
                own[g.id] = (g.stats.received - trial.received.get(g.id, 0)) / (now - trial.at)
            elif g.id in trial.received and g.alive and not g.parked and not g.standby:
                others += (g.stats.received - trial.received[g.id]) / (now - trial.at)
        return others, own

    def _trials_due(self, now: float) -> float | None:
        """Lock held, between monitor rounds: judge the trials that can be and
        clearly paid (_judge_trial's ``clear_only``); when the next can be."""
        due = None
        for trial in list(self._stream_trials.values()):
            at = self._trial_ready_at(trial)
            if at is not None and at <= now:
                self._judge_trial(trial, now, clear_only=True)
            elif at is not None:
                due = at if due is None else min(due, at)
        return due

    def _double_now(self, mirror: str, rates: dict[str, float], now: float) -> None:
        """Lock held: the trial of ``mirror`` just kept scaled: the next one,
        doubling its connections, starts now instead of at the next round (a
        missed limit grew 1 -> 2 -> 4 a round at a time: lab, session 25, 2 s
        more), judged against the rates the last was kept on."""
        reason = self._stream_more.get(mirror)
        if reason is None or self._trials_barred(self._aggregate.rate(now)):
            return  # (the round tries)
        flows = [g for g in self.flows.values() if g.id in rates and g.alive]
        ready = [g for g in flows if self._may_add_streams(g) and g.lane is not None]
        if not ready:
            return
        del self._stream_more[mirror]
        for g in flows:
            g.round_Bps = rates[g.id]
        f = max(ready, key=lambda g: g.lane.owned_end - g.lane.reserved)  # type: ignore[union-attr]
        self._start_trial(f, 3.0, "scaled", now, {}, {}, {}, bool(self.cfg.access_bps),
                          reason=reason)

    def _judge_trial(self, trial: StreamTrial, now: float, clear_only: bool = False) -> None:
        """Lock held: one mirror's trial (_judge_stream). ``clear_only`` (between
        rounds): only a trial whose rate grew with its connections is judged, kept,
        and doubled at once (_double_now); any other waits for the round."""
        extras = [self.flows[i] for i in trial.streams]
        live = [e for e in extras if e.alive and not e.cancel.is_set()]
        # (its first data on any range: one between ranges has no lane for a moment)
        firsts = [e.first_data for e in live]
        waiting = None in firsts
        if not live or (waiting and now - trial.at > self.cfg.timeout):
            del self._stream_trials[trial.mirror]
            self._no_streams.add(trial.mirror)
            self._stream_judged.add(trial.mirror)
            for e in extras:
                e.no_more_work = True
                if e in live and e.first_data is None:
                    self._event("stream", e, f"no data within {self.cfg.timeout:.0f} s: "
                                "it takes no more work")
            return
        ready = self._trial_ready_at(trial)
        if ready is None or now < ready:
            return
        others, own = self._trial_rates(trial, now)
        after = sum(own.values())
        # (those the mirror refused are gone: it is judged on those it took)
        need = needed_gain(trial.connections, len(live), self.cfg.stream_gain)
        if clear_only and not (
            gained(trial.before_Bps, after, need)
            and scales(trial.connections, len(live), trial.before_Bps, after)
            and (not trial.check_others
                 or others_kept(trial.others_Bps, others, after - trial.before_Bps))
        ):
            return
        del self._stream_trials[trial.mirror]
        self._stream_judged.add(trial.mirror)
        figures = (f"{trial.before_Bps * 8 / 1e6:.2f} -> {after * 8 / 1e6:.2f} Mbit/s "
                   f"with {len(live)} more (needed x{need:.2f})")
        ok = gained(trial.before_Bps, after, need)
        if ok and trial.check_others and not others_kept(
            trial.others_Bps, others, after - trial.before_Bps
        ):
            ok = False
            figures += (f"; the other mirrors {trial.others_Bps * 8 / 1e6:.2f} -> "
                        f"{others * 8 / 1e6:.2f} Mbit/s")
        keep = None  # (how many of them to keep, when not all)
        if not ok and len(live) > 1:
            # (more than it took: keep as many as the rate they brought needs, at
            # the rate each connection carried before, if those pay)
            k = kept_streams(trial.connections, len(live), trial.before_Bps, after)
            if k and gained(
                trial.before_Bps, after,
                needed_gain(trial.connections, k, self.cfg.stream_gain),
            ) and (not trial.check_others
                   or others_kept(trial.others_Bps, others, after - trial.before_Bps)):
                ok, keep = True, k
        elif ok and len(live) > 2 and not scales(
            trial.connections, len(live), trial.before_Bps, after
        ):
            # (it paid, but the path took fewer than were opened: those the new rate
            # needs and one to spare; each one more is another ragged end at the tail)
            k = kept_streams(trial.connections, len(live), trial.before_Bps, after) + 1
            keep = k if k < len(live) else None
        trimmed = keep is not None
        if keep is not None:
            figures += f"; {keep} of them kept"
            for e in sorted(live, key=lambda e: e.stats.received)[: len(live) - keep]:
                self._event("stream", e, f"not needed ({figures}): closed, "
                            "its range goes back")
                self._retire(e, "dropped")
            live = [e for e in live if e.alive and not e.cancel.is_set()]
            self._lock.notify_all()
        if ok:
            self._log(f"{', '.join(trial.streams)}: kept ({figures})")
            if trial.path_Bps:
                self._stream_paths[trial.mirror] = trial.path_Bps
            have = trial.connections + len(live)
            if (
                not trimmed
                and have < self.cfg.max_streams
                and scales(trial.connections, len(live), trial.before_Bps, after)
                and not (trial.path_Bps and after >= self.cfg.stream_path_full
                         * trial.path_Bps)
            ):
                # (each new connection carried what an old one did: the mirror's
                # path is not full yet; the next round doubles them)
                self._stream_more[trial.mirror] = (
                    f"its rate grew x{after / max(trial.before_Bps, 1.0):.2f} with "
                    f"{len(live)} more connections"
                )
                if clear_only:
                    self._double_now(trial.mirror, own, now)
            return
        # (cut, not left to finish: a path that did not grow is now split among
        # them; what they leave goes back to the pool, for any flow)
        self._no_streams.add(trial.mirror)
        for e in extras:
            self._event("stream", e, f"no gain ({figures}): closed, its range goes back")
            if e.alive and not e.cancel.is_set():
                self._retire(e, "dropped")
        self._lock.notify_all()

    def _wind_down_streams(self, mirror: str) -> None:
        """Lock held: the mirror's flow was parked; its extra connections finish
        the range they have and take no more."""
        for extra in self._streams_of(mirror):
            extra.no_more_work = True

    def _start_backup(self, why: str = "") -> bool:
        """Start the next unused backup mirror (caller holds the lock); ``why`` for
        its event when it is not standing in for a flow that failed or was slow."""
        while self.backups:
            src = self.backups.popleft()
            if src.name in self.flows or src.name in self.bad_mirrors:
                continue
            self._start_flow(src, "backup", why)
            return True
        return False

    def _attach_detector(self, factory: DetectorFactory) -> None:
        """Create the shared-congestion observer and catch it up with the flows that
        started meanwhile; it reads their arrival history from ``self.timings``.

        Building it imports numpy (~0.1 s of CPU, mostly under the GIL): done while
        the flows log in, it delays their first bytes. So it waits until every
        flow receives data (or ``detector_start_max_s``); detection needs a
        second or more of arrivals anyway, and a packet capture buffers meanwhile."""
        with self._lock:
            deadline = self._clock() + self.cfg.detector_start_max_s
            while not (self._finished or self._abort is not None):
                waiting = [
                    f for f in self.flows.values()
                    if f.alive and (f.lane is None or f.lane.first_byte is None)
                ]
                left = deadline - self._clock()
                if not waiting or left <= 0:
                    break
                self._lock.wait(min(left, 0.05))
            if self._finished or self._abort is not None:
                return
        try:
            obs = factory(self, self.timings)
        except Exception as exc:
            self._log(f"shared-congestion detection not started: {exc}")
            return
        if obs is None:
            return
        with self._lock:
            if self._finished or self._abort is not None:
                return
            # (not an extra connection: its arrivals are its mirror's path again,
            # which the detector would find shared with that mirror's first)
            live = [(f.id, f.mirror.name) for f in self.flows.values()
                    if f.alive and f.stream_of is None]
            self.observers.append(obs)
        # A flow whose thread starts just now may announce itself as well: observers
        # treat a repeated flow_started as the same flow.
        for fid, name in live:
            self._notify(obs, "flow_started", fid, name)

    # --- flows ------------------------------------------------------------------------

    def _flow_main(self, flow: Flow) -> None:
        # (an extra connection's arrivals are its mirror's path again: the
        # congestion detector would find the two sharing it)
        observers = list(self.observers) if flow.stream_of is None else []
        for obs in observers:
            self._notify(obs, "flow_started", flow.id, flow.mirror.name)
        try:
            if self._stands_by(flow):
                self._prepare_standby(flow)
            if flow.after_parent:
                self._await_parent(flow)
            while True:
                if flow.fetcher is None and flow.consecutive_failures:
                    if not self._reconnect(flow):
                        break
                    continue  # connected, or failed again after its backoff: look again
                lane = self._next_work(flow)
                if lane is None:
                    break
                if not self._run_lane(flow, lane):
                    break
        except BaseException as exc:  # a bug or a local error: stop everything, say why
            # (the traceback for a bug report: --verbose shows debug lines)
            _LOG.debug("%s stopped the download", flow.id, exc_info=True)
            self.abort(exc)
        finally:
            self._drop_fetcher(flow)
            for obs in observers:
                if obs in self.observers:
                    self._notify(obs, "flow_ended", flow.id)
            with self._lock:
                flow.alive = False
                if flow.stats.state not in _FINAL_STATES:
                    flow.stats.state = "done"
                self._check_stuck()
                self._lock.notify_all()

    def _prepare_standby(self, flow: Flow) -> None:
        """While a flow stands by: connect and do the one-time checks of its
        transport (FTP: the REST probe), so that joining costs one request, not
        three round trips more. A failure here is left to the first real request,
        which retries and reports it as usual."""
        try:
            self._get_ready(flow)
        except (TransferError, OSError) as exc:
            self._log(f"{flow.id}: getting ready while standing by failed: {exc}")
            self._drop_fetcher(flow)

    def _get_ready(self, flow: Flow) -> None:
        """Open the flow's fetcher and let its transport do its one-time checks
        (FTP: connect, log in, the REST probe). Raises like a fetch."""
        flow.fetcher = self._open_fetcher(
            flow.mirror.url, timeout=self.cfg.timeout, stall_timeout=self.cfg.stall_timeout
        )
        self._share_checks(flow)
        prepare = getattr(flow.fetcher, "prepare", None)
        if prepare is not None:
            prepare(flow.cancel)

    def _reconnect(self, flow: Flow) -> bool:
        """After a failure, connect (and, for FTP, check REST) before taking work:
        a mirror that is still down must not cut another flow's lane for a range
        it cannot fetch. False: the flow gives up."""
        if self._finished or self._abort is not None or flow.cancel.is_set():
            return False
        try:
            self._get_ready(flow)
        except Cancelled:
            return False
        except (TransferError, OSError) as exc:
            self._drop_fetcher(flow)
            error = exc if isinstance(exc, TransferError) else TransientError(
                f"{flow.mirror.url}: reconnecting failed: {exc}"
            )
            with self._lock:
                return self._on_failure(flow, error)
        return True

    def _share_checks(self, flow: Flow) -> None:
        """An extra connection takes its mirror's first connection's one-time
        checks (FTP: REST honoured, when it reaches the same server)."""
        main = self.flows.get(flow.stream_of) if flow.stream_of is not None else None
        proof = getattr(main.fetcher, "rest_proof", None) if main is not None else None
        trust = getattr(flow.fetcher, "trust_rest", None)
        if proof is not None and trust is not None:
            trust(proof)

    def _drop_fetcher(self, flow: Flow) -> None:
        """Close the flow's connections (best effort: it is being given up)."""
        if flow.fetcher is not None:
            try:
                flow.fetcher.close()
            except Exception as exc:
                self._log(f"{flow.id}: closing the connection failed: {exc}")
            flow.fetcher = None

    def _notify(self, obs: FlowObserver, method: str, *args: object) -> None:
        try:
            getattr(obs, method)(*args)
        except Exception as exc:
            self._log(f"flow observer {obs!r} failed in {method}: {exc}; removed")
            if obs in self.observers:
                self.observers.remove(obs)

    def _new_lane(self, flow: Flow, kind: LaneKind, start: int, end: int) -> Lane:
        lane = Lane(next(self._lane_ids), flow, kind, start, start, end, RangeEnd(end))
        self.lanes[lane.id] = lane
        flow.lane = lane
        return lane

    def _next_work(self, flow: Flow) -> Lane | None:
        with self._lock:
            while True:
                if self._finished or self._abort is not None or flow.cancel.is_set():
                    return None
                if flow.parked:
                    flow.stats.state = "parked"
                    if self._check_stuck():
                        return None
                    self._lock.wait(0.25)
                    continue
                queued, flow.next_lane = flow.next_lane, None
                if queued is not None:
                    flow.lane = queued
                    return queued
                if flow.no_more_work:
                    for s, e in list(flow.initial):
                        self.pool.add(s, e)  # (not begun: someone else's now)
                    flow.initial = RangeSet()
                    self._lock.notify_all()
                    return None
                if flow.from_zero and self._range_flows_left(flow):
                    flow.stats.state = "standby"
                    if self._check_stuck():
                        return None
                    self._lock.wait(0.25)
                    continue
                for job in list(self.repairs):
                    if flow.mirror.name not in job.avoid:
                        self.repairs.remove(job)
                        s, e = self.grid.bounds(job.piece)
                        lane = self._new_lane(flow, "repair", s, e)
                        lane.piece = job.piece
                        lane.buffer = bytearray(e - s)
                        lane.shadow = None
                        self._repair_jobs[lane.id] = job
                        return lane
                if self._stands_by(flow):
                    if not flow.standby:
                        flow.standby = True
                        flow.stats.state = "standby"
                    self._judge_lead(self._clock())
                    if self._lead_phase != "off":
                        if self._check_stuck():
                            return None
                        self._lock.wait(0.01 if self._lead_phase == "probing" else 0.25)
                        continue
                stalled = self._stalled_idle(flow)
                rng = self._untaken_range(flow, stalled)
                if rng is not None:
                    return self._new_lane(flow, "normal", *rng)
                if stalled:
                    trial = self._trial_range(flow)
                    if trial is not None:
                        return trial
                move = None if flow.from_zero or stalled else self._plan_tail(flow)
                if isinstance(move, Steal):
                    return self._new_lane(flow, "normal", *self._steal(flow, move))
                if isinstance(move, Duplicate):
                    victim = self.lanes[move.lane_id]
                    lane = self._new_lane(flow, "duplicate", move.start, move.end)
                    lane.shadow_of = victim
                    victim.shadow = lane
                    self.duplicate_budget_left -= move.end - move.start
                    self._event(
                        "duplicate", flow, f"races {victim.flow.id} over [{move.start}, {move.end})"
                    )
                    return lane
                flow.stats.state = "idle"
                if self._check_stuck():
                    return None
                self._lock.wait(0.25)

    def _range_flows_left(self, flow: Flow) -> bool:
        """Lock held: whether a flow other than ``flow`` that can ask for ranges at
        any offset is alive (a from_zero flow leaves the work to it)."""
        if any(
            f is not flow and f.alive and not f.cancel.is_set() and not f.from_zero
            for f in self.flows.values()
        ):
            return True
        return self._start_backup()  # (one that has not been asked yet)

    def _untaken_range(self, flow: Flow, stalled: bool = False) -> tuple[int, int] | None:
        """Lock held: work nobody fetches, in the order a flow takes it: its own
        queue, its share of the pool, then a range queued for another flow. A
        ``stalled`` flow (_stalled_idle) takes nothing from others: the pool may be
        its own remainder, just handed over (rate 0 would take it whole,
        tail.pool_share)."""
        own = flow.initial.pop_first()
        if own is not None or stalled:
            return own
        return self._pool_share(flow) or self._take_unstarted()

    def _stalled_idle(self, flow: Flow) -> bool:
        """Lock held: the flow's last range ended in a stall (its rate froze at 0,
        rate.RateMeter.stop) and another working flow moves data (a rate above 0,
        or none yet): it takes no one else's work, by pool, steal or race, at the
        rate it had before the stall (warm_up would lend it that rate)."""
        now = self._clock()
        if flow.rate.rate(now) != 0 or flow.path_back or now < flow.back_trusted_until:
            # (its path came back: _path_answered lent it its rate. Sweep http-flap:
            # the 40 Mbit/s mirror's range had been stolen during the outage, the
            # 310 bytes handed back to it ended its meter at 0, and it sat out the
            # last 3 s as stalled)
            return False
        for f in self.flows.values():
            if f is flow or not f.alive or f.cancel.is_set() or f.parked or f.standby:
                continue
            r = f.rate.rate(now)
            if r is None or r > 0:
                return True
        return False

    def _note_stall(self, flow: Flow, lane: Lane, now: float) -> bool:
        """Lock held, a lane's fetch just returned: did it end in a silence (its
        rate froze at 0, RateMeter.stop), or was it a trial that never had a byte?
        Then the flow's next trial range waits its turn (_trial_range), twice as
        long as the last; a lane that ended with data flowing resets the wait.
        True when it ended in a silence."""
        if lane.kind != "normal" or (lane.first_byte is None and not lane.trial):
            return False
        if flow.path_back:
            # (the path answered a new connection during this silence: the next
            # range at once, and the wait before a trial stays as it was)
            flow.trial_after = now
            return True
        if lane.first_byte is not None and flow.rate.rate(now) != 0:
            flow.trial_wait = 0.0
            return False
        wait = flow.trial_wait or self.cfg.trial_wait_s
        flow.trial_after = now + wait
        flow.trial_wait = min(2 * wait, self.cfg.trial_wait_max_s)
        return True

    def _trial_range(self, flow: Flow) -> Lane | None:
        """Lock held: a stalled flow (_stalled_idle) whose connection answered again
        (its fetch returned: the transfer was stopped and the control connection
        resynchronised) gets a small range after its wait: the pool's first bytes,
        or a steal from the lane that finishes last, of trial_s at its rate before
        the silence. Data again, and its meter takes it from there; silent again,
        and the monitor takes the range back (_take_back_trials)."""
        now = self._clock()
        rate = flow.lit_rate or (flow.mirror.expected_bps or 0.0) / 8
        agg = self._aggregate.rate(now)
        check = self._path_checks.get(flow.id)
        if check is not None and check.failures:
            # (its path is down as far as new connections tell: a trial would go
            # silent too, and the check calls it once the path is back)
            return None
        if (
            now < flow.trial_after or rate <= 0 or flow.from_zero or not agg
            or self._work_left_s(agg) < self.cfg.trial_min_left_s
        ):
            return None
        size = max(self.split_grid.piece_size, int(rate * self.cfg.trial_s))
        # (its rate before, lent while the range warms up (warm_up), and to plan a
        # steal at: the meter's 0 would be both a thief that fetches nothing and a
        # victim that other flows steal the trial from)
        flow.warm_rate, flow.warm_until = rate, now + 0.5
        first = self.pool.first()
        if first is not None:
            rng = (first[0], min(first[1], self.split_grid.align_up(first[0] + size)))
            self.pool.remove(*rng)
        else:
            move = self._plan_tail(flow)
            if not isinstance(move, Steal):
                return None
            split = self.split_grid.align_up(move.end - size)
            if move.split < split < move.end:
                move = replace(move, split=split)
            rng = self._steal(flow, move)
        flow.trial_after = float("inf")  # (until this one ends: _note_stall)
        self._event("retry", flow, f"its last range ended in a silence; a trial range "
                    f"[{rng[0]}, {rng[1]}) at its rate before, {rate * 8 / 1e6:.2f} Mbit/s")
        lane = self._new_lane(flow, "normal", *rng)
        lane.trial = True
        return lane

    def _path_checks_due(self, now: float) -> float | None:
        """Lock held, from the monitor's wait: start a path check (path_check.py)
        for each flow whose transfer has been silent long enough; when the next
        one is due."""
        due: float | None = None
        for flow in self.flows.values():
            lane = flow.lane
            if (
                flow.id in self._path_checks
                or flow.path_checked == flow.last_data
                or lane is None
                or lane.kind != "normal"
                or lane.first_byte is None
                or flow.fetch_started is None
                or not flow.alive
                or flow.cancel.is_set()
            ):
                continue
            # (a held burst's silence: once it is longer than any gap before it,
            # the head start's hand-over to the engine among them)
            at = flow.last_data + (max(self.cfg.stream_silence_s, flow.gap_s)
                                   if self._held_burst(flow)
                                   else max(self.cfg.path_check_after_s, 2 * flow.gap_s))
            if at > now:  # (most calls: the round trip is read only past this)
                due = at if due is None else min(due, at)
                continue
            address = getattr(flow.fetcher, "peer_address", lambda: None)()
            if address is None:
                continue
            rtt = self._path_rtt(flow)
            at = max(at, flow.last_data + 4 * rtt)
            if at > now:
                due = at if due is None else min(due, at)
                continue
            since = flow.path_checked = flow.last_data
            self._path_checks[flow.id] = PathCheck(
                address,
                rtt_s=rtt,
                name=f"pftp-path-{flow.id}",
                quiet=lambda f=flow, t=since: self._still_silent(f, t),
                answered=lambda n, _began, f=flow, t=since, g=flow.gap_s: self._path_answered(
                    f, t, n, g
                ),
            ).start()
        return due

    def _still_silent(self, flow: Flow, since: float) -> bool:
        """Whether ``flow`` has had no data since ``since`` and may still use it
        (a path check goes on). Thread-safe."""
        with self._lock:
            on = (
                flow.last_data == since
                and flow.alive
                and not flow.cancel.is_set()
                and not self._finished
                and self._abort is None
            )
            if not on:
                check = self._path_checks.pop(flow.id, None)
                if check is not None and check.failures:
                    # (heard from again before a try got through: the data came
                    # back first, and the silence was still the path's)
                    flow.outage_seen_at = self._clock()
            return on

    def _path_answered(self, flow: Flow, since: float, failures: int, gap_s: float) -> None:
        """A path check of ``flow``, silent since ``since``, got a connection through
        after ``failures`` that did not. None failed: the path was up all along and
        the silence is the server's; the rules for those go on. Else the path was
        down and is back, and the transfer's connection waits out TCP's backoff:
        the range it was fetching is cut where it is and handed over (its flow
        takes the pool's work first), its transport drops what waits on that
        connection (interrupt: a blocked read, an ABOR), and a flow waiting for a
        trial range (_note_stall) gets one at once. ``gap_s``: its longest pause
        before the silence."""
        with self._lock:
            self._path_checks.pop(flow.id, None)
            now = self._clock()
            if failures:
                # (an outage, not a server that sends in bursts: had the data come
                # back first, its silence would hold off the next check: _dark)
                flow.gap_s = min(flow.gap_s, gap_s)
                flow.outage_seen_at = now  # (even when the data came back first)
            if flow.last_data != since or self._finished or not flow.alive:
                return
            if not failures:
                _LOG.debug(
                    "%s: silent %.2f s, its server took a new connection at once",
                    flow.id,
                    now - since,
                )
                if self._held_burst(flow):
                    self._silence_trial(flow, since, now)
                return
            flow.path_back_at = now
            flow.back_trusted_until = now + max(self.cfg.trial_s, self._warm_up_s(flow))
            # (its next range is planned at its rate before the silence, which the
            # meter may have forgotten: as a new lane's, warm_up)
            flow.warm_rate = flow.lit_rate or flow.warm_rate
            flow.warm_until = now + self._warm_up_s(flow)
            lane, cut = flow.lane, ""
            if (
                lane is not None
                and flow.fetch_started is not None
                and lane.kind == "normal"
                and lane.reserved < lane.owned_end
            ):
                old_end = self._hand_over(lane, lane.reserved)
                cut = f"; [{lane.reserved}, {old_end}) handed over"
            self._event(
                "retry",
                flow,
                f"silent {now - since:.2f} s; its path is back (a new "
                f"connection got through after {failures} that did not): a new "
                f"transfer{cut}",
            )
            flow.trial_after = min(flow.trial_after, now)
            self._lock.notify_all()
        interrupt = getattr(flow.fetcher, "interrupt", None)
        if interrupt is not None and flow.fetch_started is not None:
            interrupt()

    def _take_back_trials(self, now: float) -> None:
        """Lock held, every monitor round: a trial range whose flow is silent again
        (_dark, or no first byte within as long) goes back to the pool at once: the
        slow rule would wait for two rounds, and a small range is never cut."""
        for lane in list(self.lanes.values()):
            flow = lane.flow
            if not lane.trial or lane is not flow.lane or lane.reserved >= lane.owned_end:
                continue
            if not self._dark(flow, now, since=max(flow.last_data, lane.requested_at or now)):
                continue
            old_end = self._hand_over(lane, lane.reserved)
            self._event("slow", flow, f"silent again: [{lane.reserved}, {old_end}) of its "
                        "trial range handed over")
            self._lock.notify_all()

    def _steal(self, flow: Flow, move: Steal) -> tuple[int, int]:
        """Lock held: carry out a planned steal; the range taken."""
        victim = self.lanes[move.lane_id]
        victim.end.lower_to(move.split)
        victim.owned_end = move.split
        self._keep_spare(victim.flow, self._clock())
        self._event("stolen", flow, f"took [{move.split}, {move.end}) from {victim.flow.id}")
        return move.split, move.end

    def _queue_next(self, flow: Flow, lane: Lane, now: float) -> str:
        """Lock held, from the sink: the running lane is about to end; pick the
        flow's next range now and have its transport begin that transfer on its
        spare connection (start_next). Only work nobody else is fetching: a
        range never started, the pool's share, or a tail steal planned as if
        this flow were free once its lane ends (no duplicates, no repairs).
        "begun", "not now" (no second connection ready yet) or "nothing" (no
        work worth taking: the caller waits before it plans again)."""
        fetcher = flow.fetcher
        can = getattr(fetcher, "can_start_next", None)
        if can is None or not can() or flow.parked or flow.standby or self.repairs:
            return "not now"
        rng = self._untaken_range(flow)
        if rng is None:
            left = lane.end.value - lane.reserved
            rtt = self._path_rtt(flow)
            rate = self._ramp(flow, now, rtt).rate
            # (begun now, the new transfer's first byte is a round trip away and
            # its connection then leaves slow start: it cannot be up to speed
            # sooner than that, however soon the running range ends; a far flow
            # whose range was cut short by steals took the file's last bytes
            # from a near one and finished last)
            free_in = begun_ahead_latency_s(left, rate, rtt)
            move = self._plan_tail(flow, free_in_s=free_in, thief_rate=rate)
            if not isinstance(move, Steal):
                return "nothing"
            rng = self._steal(flow, move)
        start, end = rng
        queued = Lane(next(self._lane_ids), flow, "normal", start, start, end, RangeEnd(end))
        queued.ahead = True
        queued.begun_at = now
        self.lanes[queued.id] = queued
        if not fetcher.start_next(start, end):  # type: ignore[union-attr]
            self._give_back(queued)
            return "not now"
        flow.next_lane = queued
        self._log(f"{flow.id}: next range [{start}, {end}) begun ahead")
        return "begun"

    def _pool_share(self, flow: Flow) -> tuple[int, int] | None:
        """The pool's first range, or its start when a share of it is this flow's
        (tail.pool_share); the rest stays for the next flow that runs out of work."""
        first = self.pool.first()
        if first is None:
            return None
        now = self._clock()
        others: list[tuple[int, float | None]] = []
        for f in self.flows.values():
            if f is flow or not f.alive or f.cancel.is_set() or f.parked or f.standby:
                continue
            lane = f.lane
            left = f.initial.total() + (
                lane.owned_end - lane.reserved if lane is not None and lane.kind == "normal"
                else 0
            )
            if left > 0:
                others.append((left, f.rate_estimate(now)))
        # (its own rate measured, not the coordinator's guess: a backup that just
        # started takes the range whole, as before)
        split = pool_share(first, self.pool.total(), flow.rate.rate(now), others,
                           self.split_grid)
        if split is None:
            return self.pool.pop_first()
        self.pool.remove(first[0], split)
        return first[0], split

    def _take_unstarted(self) -> tuple[int, int] | None:
        """The largest range still queued for another flow that has not reached it."""
        best: tuple[int, int, RangeSet] | None = None
        for f in self.flows.values():
            for s, e in f.initial:
                if best is None or e - s > best[1] - best[0]:
                    best = (s, e, f.initial)
        if best is None:
            return None
        best[2].remove(best[0], best[1])
        return best[0], best[1]

    def _plan_tail(
        self, flow: Flow, free_in_s: float | None = None, thief_rate: float | None = None
    ) -> Steal | Duplicate | None:
        """The tail move for a flow out of work; ``free_in_s``: the flow's lane
        ends in this long and the move's transfer begins ahead (no switch to pay,
        but it starts no sooner than that), at ``thief_rate`` (default: its
        estimate; planned ahead, its ramp rate: a far flow still in slow start
        left a 5 Mbit/s one 1.5 s of work past its own end)."""
        now = self._clock()
        shared = self.access_saturated()
        # (a trial's connection is left to its trial, tail.plan_tail_move, unless
        # it went dark or was never answered: rate 0)
        on_trial = {fid for trial in self._stream_trials.values() for fid in trial.streams}
        views = [
            LaneView(
                ln.id, ln.reserved, ln.owned_end, rate,
                ln.shadow is not None, floor=self._cut_floor(ln, shared),
                owner=ln.flow.id, on_trial=ln.flow.id in on_trial and rate != 0,
                switch_s=self._switch_cost(ln.flow, rate),
            )
            for ln in self.lanes.values()
            if ln.kind == "normal"
            and not ln.orphan
            and ln.flow is not flow
            and ln.flow.alive
            and not ln.flow.cancel.is_set()
            for rate in (self._lane_rate(ln, now),)
        ]
        if thief_rate is None:
            thief_rate = flow.rate_estimate(now)
        switch_s = self._switch_cost(flow, thief_rate)
        return plan_tail_move(
            views,
            thief_rate=thief_rate,
            thief_latency_s=switch_s if free_in_s is None else free_in_s,
            grid=self.split_grid,
            duplicate_budget_left=self.duplicate_budget_left,
            thief_switch_s=switch_s,
        )

    def _lane_rate(self, lane: Lane, now: float) -> float | None:
        """The lane's flow's rate for tail planning; 0 when the lane is left
        unanswered (_unanswered: a mirror that accepts the connection and then
        says nothing, its login or request still waiting for a reply timeout) or
        its flow went dark. Rate 0 lets an idle flow steal or race its last
        piece instead of waiting for that flow to fail (twice the reply timeout)."""
        if self._unanswered(lane, now):
            return 0.0
        flow = lane.flow
        if lane is flow.lane and lane.first_byte is not None and self._dark(flow, now):
            return 0.0
        if lane is not flow.lane:
            return flow.rate_estimate(now)
        ramp = self._ramp(flow, now)
        return victim_rate(ramp.window, ramp.recent, ramp.long)

    def _unanswered(self, lane: Lane, now: float) -> bool:
        """Lock held: ``lane``, its flow's current one, has had no first byte for
        no_answer_s, 8 of its path's round trips and 4 of its flow's request
        latencies (or the stall timeout, if shorter) since its flow began it
        (Flow.unanswered_since: a reconnect or a retry in between does not start
        the count again)."""
        flow = lane.flow
        started = flow.unanswered_since
        if lane is not flow.lane or lane.first_byte is not None or started is None:
            return False
        wait = max(self.cfg.no_answer_s, 8 * self._path_rtt(flow), 4 * (flow.latency_s or 0.0))
        # (a stall timeout set shorter is the user's word for how long is too long)
        return now - started > min(wait, self.cfg.stall_timeout, self.cfg.timeout)

    def _give_up_unanswered(self, now: float) -> None:
        """Lock held, every monitor round: a normal lane left unanswered
        (_unanswered) while another flow carries data keeps one unit of the split
        grid and hands the rest over, once. What it keeps is what its server
        serves if it was only slow to answer (a reverse DNS lookup before the
        greeting, a cold disk), and then the flow takes work as any other; if it
        never answers, the tail races it (_lane_rate 0). Keeping a whole piece
        (512 KB), the idle flows took it in slices at the end: 0.4 s of tail."""
        moving = [f for f in self.flows.values()
                  if f.alive and now - f.last_data < max(1.0, self._stall_gap(f))]
        for flow in self.flows.values():
            lane = flow.lane
            if (lane is None or lane.kind != "normal" or lane.trial or not flow.alive
                    or flow.cancel.is_set() or not any(f is not flow for f in moving)
                    or not self._unanswered(lane, now)):
                continue
            split = self.split_grid.align_up(lane.reserved + 1)
            if split >= lane.owned_end:
                continue
            old_end = self._hand_over(lane, split)
            waited = now - (flow.unanswered_since or now)
            self._event("slow", flow, f"no answer in {waited:.1f} s: [{split}, {old_end}) "
                        "handed over")
            self._start_backup()
            self._lock.notify_all()

    def _dark(self, flow: Flow, now: float, since: float | None = None) -> bool:
        """Silent for dark_after_s and twice the longest pause it has shown (a
        server that sends in bursts): its link is down or its server froze. Its
        meter still reads the seconds before (3 s window), and a thief left it the
        share that rate would fetch: 1.85 MB that sat until the end (blackhole
        sweep, a 40 Mbit/s mirror at 60 ms). ``since``: silent from then (a
        request not answered yet), not from its last byte."""
        quiet = now - (flow.last_data if since is None else since)
        return quiet > max(self.cfg.dark_after_s, 2 * flow.gap_s)

    def _hand_over(self, lane: Lane, at: int) -> int:
        """Lock held: cut ``lane`` at ``at`` and put the rest in the pool; its old end."""
        old_end = lane.owned_end
        lane.end.lower_to(at)
        lane.owned_end = at
        self.pool.add(at, old_end)
        return old_end

    def _keep_spare(self, flow: Flow, now: float) -> None:
        """Lock held: ask the flow's transport for a spare connection when its
        range is about to end on a far path and other work is left to switch to
        (see EngineConfig.spare_lead_rtts)."""
        lane, fetcher = flow.lane, flow.fetcher
        keep = getattr(fetcher, "keep_spare", None)
        if keep is None or lane is None or lane.kind != "normal" or not flow.alive:
            return
        if flow.cancel.is_set() or flow.parked or lane.first_byte is None:
            return
        path_rtt = getattr(fetcher, "path_rtt", None)
        rtt = path_rtt() if path_rtt is not None else None
        ramp = self._ramp(flow, now, rtt or 0.0)
        rate = ramp.rate
        # (while the flows fill the access link, the others take up what one flow
        # leaves idle in a switch: a second transfer would only queue there)
        if rtt is None or rtt < self.cfg.spare_min_rtt_s or not rate or self.access_saturated():
            flow.overlap_bytes = 0
            return
        # (the next transfer's first byte comes a round trip after its request,
        # then it leaves slow start: begun this long ahead, it is up to speed
        # when the running one ends; sharing the mirror's link meanwhile)
        round_trips = getattr(fetcher, "ahead_round_trips", None)
        flow.overlap_bytes = (
            overlap_lead_bytes(
                rate, rtt, self.cfg.overlap_margin, round_trips() if round_trips else 1
            )
            if self.cfg.overlap
            else 0
        )
        # (the spare must be ready by the time the next range is to begin on it,
        # overlap_bytes before this one ends: on a long fat path that is seconds)
        lead_s = max(
            self.cfg.spare_lead_s,
            self.cfg.monitor_interval_s + 0.5 + self.cfg.spare_lead_rtts * rtt
            + (flow.overlap_bytes / rate if ramp.long else 0.0),
        )
        mine = max(0, lane.end.value - lane.reserved)
        left_s = time_left_s(mine, ramp.window, ramp.recent, rtt) if ramp.long else mine / rate
        if left_s is None or left_s > lead_s:
            return
        # (a switch saves this flow about three round trips: only worth a
        # connection when there is more than that to take from the others)
        if self.size - self.committed.total() - mine <= rate * 3 * rtt:
            return
        keep()

    def _ramp(self, flow: Flow, now: float, rtt: float | None = None) -> Ramp:
        """The flow's rates for timing what begins before its range ends, over a
        path of ``rtt`` (default: _path_rtt): its estimate, what it carried over its
        last two round trips, and whether a new connection there takes
        long_ramp_s or more for its first round trip and slow start."""
        if rtt is None:
            rtt = self._path_rtt(flow)
        window = flow.rate_estimate(now)
        if not rtt or rtt <= 0:
            return Ramp(window, None, False)
        recent = flow.rate.recent(now, max(0.3, 2 * rtt))
        return Ramp(window, recent,
                    long_ramp(ramp_rate(window, recent), rtt, self.cfg.long_ramp_s))

    def _switch_cost(self, flow: Flow, rate: float | None) -> float:
        """Seconds of this flow's rate a new range costs it: the switch (wind-down
        and request latency) and the new data connection's slow start. (Also over
        HTTP, where the connection stays: the sender's window restarts after an idle
        spell longer than its RTO, and leaving the term out there measured worse:
        7.12-7.27 s against 6.82-6.91 s on the wide-area paths.)"""
        # (none measured, e.g. every range so far came from a head start or was
        # begun ahead: the transport's round trips for a request at the path's RTT)
        rtt = self._path_rtt(flow)
        rounds = getattr(flow.fetcher, "ahead_round_trips", None)
        switch = switch_latency_s(
            flow.switch_s if flow.switch_s is not None else flow.latency_s,
            rtt, rounds() if rounds is not None else 2, self.cfg.default_latency_s,
        )
        return switch + slow_start_s(rate, rtt)

    def _new_connection_s(self, flow: Flow, rate: float | None) -> float:
        """Seconds of ``rate`` a new connection to ``flow``'s mirror takes to carry
        it: a switch's (_switch_cost) and the connect and login before the request,
        NEW_CONNECTION_ROUND_TRIPS more of its path's round trips."""
        return self._switch_cost(flow, rate) + NEW_CONNECTION_ROUND_TRIPS * self._path_rtt(flow)

    @staticmethod
    def _path_rtt(flow: Flow) -> float:
        """The flow's path round trip: the transport's measure, else half its
        request latency (an FTP request's first byte: about two round trips),
        else 0."""
        path_rtt = getattr(flow.fetcher, "path_rtt", None)
        rtt = path_rtt() if path_rtt is not None else None
        if rtt is None and flow.latency_s is not None:
            rtt = flow.latency_s / 2
        return rtt or 0.0

    def _run_lane(self, flow: Flow, lane: Lane) -> bool:
        """Fetch one lane; False when the flow must stop."""
        t_start = flow.fetch_started = self._clock()
        if flow.unanswered_since is None:
            flow.unanswered_since = t_start
        begun_at = lane.reserved  # (a failure after progress is not a mirror that cannot serve)
        error: TransferError | None = None
        try:
            if flow.fetcher is None:
                flow.stats.state = "connecting"
                # (an opener that can tell transfers started early apart by offset
                # hands this flow the one begun where it asks: downloader)
                at = {"at": lane.reserved} if self._opener_takes_at else {}
                flow.fetcher = self._open_fetcher(
                    flow.mirror.url, timeout=self.cfg.timeout,
                    stall_timeout=self.cfg.stall_timeout, **at,
                )
                self._share_checks(flow)
                if flow.id in self._advised:
                    with self._lock:
                        self._lock.notify_all()  # (its advised connections wait for it)
            flow.stats.state = {"normal": "fetching", "duplicate": "racing", "repair": "repairing"}[
                lane.kind
            ]
            lane.requested_at = self._clock()
            flow.stats.ranges += 1
            lane.overlapped_from = getattr(flow.fetcher, "overlapped", 0)
            flow.warm_up(
                lane.requested_at, self._warm_up_s(flow), self._ramp(flow, lane.requested_at).long
            )
            flow.rate.start(lane.requested_at)
            if flow.from_zero and lane.reserved > 0:
                self._fetch_from_zero(flow, lane)
            else:
                flow.fetcher.fetch(
                    lane.reserved, lane.end, lambda o, d, t: self._sink(lane, o, d, t), flow.cancel
                )
            with self._lock:
                if (
                    lane.reserved < lane.end.value
                    and not flow.cancel.is_set()
                    and not self._finished
                ):
                    error = PrematureEnd(
                        f"transfer ended at byte {lane.reserved}, expected {lane.end.value}"
                    )
        except Cancelled:
            pass
        except TransferError as exc:
            error = exc
        finally:
            flow.rate.stop(self._clock())
            with self._lock:
                now = self._clock()
                stalled = self._note_stall(flow, lane, now)
                flow.stats.seconds += now - t_start
                flow.fetch_started = None
                if error is None:
                    flow.unanswered_since = None  # (its server answered, or nothing was asked)
                # (a failed fetch's time is its failure's, not a switch's; nor is a
                # silence's: 6 s of a link outage, counted in, made the next ranges'
                # switch cost seconds, and the mirror stole nothing at the end)
                flow.wound_down_s = (
                    max(0.0, now - flow.last_data)
                    if error is None and lane.first_byte is not None and not stalled else 0.0
                )
        with self._lock:
            if lane.kind == "repair":
                self._finish_repair(lane, ok=error is None)
            self._release(lane)
            progressed = lane.reserved > begun_at
            if (error is None and lane.reserved > lane.start) or progressed:
                flow.consecutive_failures = 0
                flow.outage_retries = 0
            self._lock.notify_all()
        self._after_commit()
        if error is None:
            return not flow.cancel.is_set()
        with self._lock:
            return self._on_failure(flow, error, fruitless=not progressed)

    def _fetch_from_zero(self, flow: Flow, lane: Lane) -> None:
        """A from_zero flow's lane: the transfer from byte 0 up to the lane's end,
        every byte before the lane's start read and dropped (counted as duplicate
        bytes: fetched and not used)."""
        assert flow.fetcher is not None
        skip = lane.reserved
        self._event("from-zero", flow, f"reads [0, {skip}) again to reach [{skip}, "
                    f"{lane.end.value})")

        def sink(offset: int, data: memoryview, arrival_ns: int) -> None:
            end = offset + len(data)
            if end <= skip:
                with self._lock:
                    self.duplicate_bytes += len(data)
                return
            if offset < skip:
                with self._lock:
                    self.duplicate_bytes += skip - offset
                data, offset = data[skip - offset :], skip
            self._sink(lane, offset, data, arrival_ns)

        flow.fetcher.fetch(0, lane.end, sink, flow.cancel)

    def _outage_s(self, error: TransferError, now: float) -> float | None:
        """Lock held: how long nothing has come from any mirror, when ``error`` says
        the network is unreachable and that looks like the client's own network
        (EngineConfig.outage_wait_s); else None."""
        if not unreachable(error):
            return None
        last = max((f.last_data for f in self.flows.values()), default=-1e9)
        if last < self._t0:
            return None  # (never reached: a clear error now, not a minute's wait)
        quiet = now - last
        if quiet < self.cfg.outage_quiet_s or quiet > self.cfg.outage_wait_s:
            return None
        return quiet

    def _wait_out_outage(self, flow: Flow, error: TransferError, quiet: float) -> bool:
        """Lock held: the client's network looks down (_outage_s): retry after a
        backoff, the mirror not blamed (no failure counted, no backup started:
        one would be behind the same link)."""
        flow.outage_retries += 1
        delay = self.cfg.backoff_s[min(flow.outage_retries, len(self.cfg.backoff_s)) - 1]
        self._event(
            "retry", flow,
            f"{type(error).__name__}: {error}; nothing from any mirror for {quiet:.1f} s: "
            f"the client's own network looks down; retry in {delay:.1f}s (for up to "
            f"{self.cfg.outage_wait_s:.0f} s of silence)",
        )
        return self._back_off(flow, delay)

    def _back_off(self, flow: Flow, delay: float) -> bool:
        """Lock held: the flow waits ``delay`` before its retry (woken early when the
        download ends or the flow is cancelled); True: retry."""
        flow.stats.state = "retrying"
        self._lock.notify_all()
        deadline = self._clock() + delay
        while not (self._finished or self._abort or flow.cancel.is_set()):
            left = deadline - self._clock()
            if left <= 0:
                break
            self._lock.wait(min(left, 0.25))
        return not flow.cancel.is_set()

    def _on_failure(self, flow: Flow, error: TransferError, *, fruitless: bool = False) -> bool:
        """Caller holds the lock. True: retry on this mirror after a backoff.
        ``fruitless``: the failed fetch delivered no byte (max_total_failures)."""
        flow.last_error = f"{type(error).__name__}: {error}"
        self._drop_fetcher(flow)
        self._drop_queued(flow)
        quiet = self._outage_s(error, self._clock())
        if quiet is not None and not isinstance(error, RangeNotHonoured):
            return self._wait_out_outage(flow, error, quiet)
        if fruitless:
            flow.fruitless_failures += 1
        if isinstance(error, RangeNotHonoured) and not flow.from_zero:
            # From byte 0 it still serves: kept for when no other mirror can.
            flow.from_zero = True
            flow.replaced = flow.replaced or self._start_backup()
            self._event("no-ranges", flow, f"{error}; it reads from byte 0 from now on, "
                        "and only when no other mirror can serve ranges")
            self._lock.notify_all()
            return True
        if flow.stream_of is not None and not flow.stats.received:
            # An extra connection the mirror would not take ("421 too many
            # connections from your address", a refused connect): no retry, no
            # backup; its range goes back at once, the mirror gets no other.
            self._no_streams.add(flow.stream_of)
            self._event("stream", flow, f"not taken: {error}; its range goes back")
            self._retire(flow, "dropped")
            self._lock.notify_all()
            return False
        flow.consecutive_failures += 1
        if self._lead_phase != "off" and flow.id == self._lead_name:
            self._release_standbys(f"{flow.id} failed: {error}")
        flow.stats.failures += 1
        give_up = (
            isinstance(error, PermanentError)
            or not error.transient
            or flow.consecutive_failures > self.cfg.max_consecutive_failures
            or flow.fruitless_failures >= self.cfg.max_total_failures
        )
        # Issue 3: the unfinished remainder goes to a backup at the first failure;
        # the mirror itself may come back after its backoff and help at the tail.
        if not flow.replaced and flow.stream_of is None:  # (its mirror's first flow does)
            flow.replaced = self._start_backup() or self._unpark_one(
                f"{flow.id} failed and no backup is left"
            )
        if give_up:
            self._event("failed", flow, f"{type(error).__name__}: {error}")
            self._retire(flow, "failed")
            self._lock.notify_all()
            return False
        delay = self.cfg.backoff_s[min(flow.consecutive_failures, len(self.cfg.backoff_s)) - 1]
        self._event("retry", flow, f"{type(error).__name__}: {error}; retry in {delay:.1f}s")
        return self._back_off(flow, delay)

    def _retire(self, flow: Flow, state: str) -> None:
        """Stop a flow for good (caller holds the lock); its lane is released by its
        thread, and what the lane had left goes to the pool at once (the sink takes
        nothing more from a cancelled flow): its thread may wait out a reply timeout
        first (an ABOR its server does not answer, or one through a path gone dark),
        and the tail sees no lane of a cancelled flow. A mirror mute to ABOR: 11 s
        against 2 s (e2e); lab r41, once in 7 runs, an extra connection's last 80 KB
        sat 28 s after a path outage, probably this."""
        flow.stats.state = state
        flow.cancel.set()
        lane = flow.lane
        if lane is not None:
            if (lane.kind == "normal" and lane.shadow is None and not lane.orphan
                    and lane.owned_end > lane.reserved):
                self._hand_over(lane, lane.reserved)  # (lowers its end too)
                self._lock.notify_all()
            else:
                lane.end.lower_to(lane.reserved)
        self._drop_queued(flow)

    def _drop_queued(self, flow: Flow) -> None:
        """Lock held: a lane queued for the flow goes back to the pool (its
        transfer begun ahead is closed with the fetcher or left for the next
        fetch to abort)."""
        queued, flow.next_lane = flow.next_lane, None
        if queued is not None:
            self._give_back(queued)

    def _release(self, lane: Lane) -> None:
        """A lane's fetch returned: give back what it did not fetch (lock held)."""
        lane.flow.lane = None
        if lane.kind == "repair":
            self.lanes.pop(lane.id, None)
            return
        if lane.kind == "duplicate" and lane.shadow_of is not None:
            victim = lane.shadow_of  # never overtook its victim: owns nothing
            victim.shadow = None
            lane.shadow_of = None
            if victim.orphan:
                self._give_back(victim)
            self.lanes.pop(lane.id, None)
            return
        if lane.shadow is not None:
            dup = lane.shadow
            if lane.reserved >= lane.owned_end:
                dup.end.lower_to(dup.reserved)  # the victim won the race
                dup.owned_end = dup.reserved
                dup.shadow_of = None
                lane.shadow = None
            else:
                lane.orphan = True  # the duplicate will take over the rest
                return
        self._give_back(lane)

    def _cut_floor(self, lane: Lane, shared: bool = True) -> int:
        """Lock held: the lowest end a cut of ``lane`` should set. Below it, bytes
        the server is already sending would be thrown away (FTP: the kernel's
        queue plus what is in flight, transports/window.py; HTTP says nothing).
        That waste costs the others only on a link they share (``shared``: a
        parked flow's, or any flow's while the flows fill the access link);
        elsewhere it only delays the cut flow's own next request by about a
        round trip, while keeping those bytes would hold back the balance of a
        tail steal, so the cut stays where it was planned."""
        flow = lane.flow
        now = self._clock()
        if not shared or lane.kind != "normal" or lane is not flow.lane:
            return lane.reserved  # (a queued lane: the fetcher's transfer is another's)
        if now - flow.last_data > self._stall_gap(flow):
            return lane.reserved  # in loss recovery: what it had in flight is lost anyway
        committed = getattr(flow.fetcher, "committed_end", None)
        edge = committed(flow.rate.rate(now)) if committed is not None else None
        if edge is None:
            return lane.reserved
        return max(lane.reserved, min(self.split_grid.align_up(edge), lane.owned_end))

    def _warm_up_s(self, flow: Flow) -> float:
        """How long a new lane's rate is not taken below the flow's rate before: its
        first byte's latency and slow start's round trips (Flow.warm_up)."""
        latency = flow.latency_s if flow.latency_s is not None else self.cfg.default_latency_s
        return max(self.cfg.warm_up_min_s, self.cfg.warm_up_latencies * latency)

    def _stall_gap(self, flow: Flow) -> float:
        """A flow silent for longer than this is stalled (retransmission timeout),
        not just between two bursts of a window-limited path."""
        rtt = flow.latency_s if flow.latency_s is not None else self.cfg.default_latency_s
        return max(self.cfg.stall_gap_s, 2 * rtt)

    def _give_back(self, lane: Lane) -> None:
        self.lanes.pop(lane.id, None)
        if lane.reserved < lane.owned_end:
            self.pool.add(lane.reserved, lane.owned_end)
            self._lock.notify_all()

    # --- data path --------------------------------------------------------------------

    def _sink(self, lane: Lane, offset: int, data: memoryview, arrival_ns: int) -> None:
        flow = lane.flow
        n = len(data)
        now = self._clock()
        with self._lock:
            if flow.cancel.is_set() or self._abort is not None:
                raise Cancelled("flow cancelled")
            if offset != lane.reserved:
                raise TransferError(f"fetcher delivered offset {offset}, expected {lane.reserved}")
            if lane.first_byte is None:
                lane.first_byte = now
                flow.unanswered_since = None
                if (
                    lane.ahead and lane.overlapped_from is not None
                    and getattr(flow.fetcher, "overlapped", 0) > lane.overlapped_from
                ):
                    # (its transfer begun ahead was taken over, not started anew
                    # after that start failed; counted here, not when the fetch
                    # returns: the summary may be taken before, at the last byte)
                    flow.stats.ranges_ahead += 1
                    if lane.begun_at is not None and lane.requested_at is not None:
                        flow.stats.ahead_s += max(0.0, lane.requested_at - lane.begun_at)
                lat = now - lane.requested_at if lane.requested_at is not None else None
                path_rtt = getattr(flow.fetcher, "path_rtt", None)
                if (lat is not None and not lane.ahead
                        and measures_a_request(lat, path_rtt() if path_rtt else None)):
                    flow.latency_s = (
                        lat if flow.latency_s is None else 0.7 * flow.latency_s + 0.3 * lat
                    )
                    switch = lat + flow.wound_down_s
                    flow.switch_s = (
                        switch if flow.switch_s is None else 0.7 * flow.switch_s + 0.3 * switch
                    )
            flow.stats.received += n
            if lane.first_byte != now and now - flow.last_data > flow.gap_s:
                flow.gap_s = now - flow.last_data  # (within a lane: not a switch)
            flow.last_data = now
            if flow.first_data is None:
                # (the engine's clock, for rates; the early look also reads from the
                # arrival: a head start's first bytes reach the engine 0.05-0.15 s
                # after they came. Session 25 read only from there, and link-limited
                # slow starts then passed for limits; since, bursts_outpace and the
                # loss share keep those out: none in ~100 runs, session 33)
                flow.first_data = now
                arrived = arrival_ns / 1e9
                flow.first_arrival = (arrived if self._clock is time.monotonic
                                      and now - 1.0 <= arrived <= now else now)
            if self._lead_phase == "probing" and flow.id == self._lead_name:
                self._judge_lead(now)
            if lane.kind == "duplicate" and lane.shadow_of is not None:
                victim = lane.shadow_of
                if offset + n <= victim.reserved:
                    lane.reserved = offset + n
                    self.duplicate_bytes += n
                    return
                # Overtake: the victim stops at p, this lane owns [p, end).
                p = max(offset, victim.reserved)
                victim.end.lower_to(p)
                victim.owned_end = p
                victim.shadow = None
                lane.shadow_of = None
                lane.kind = "normal"
                lane.start = p
                self.duplicate_bytes += p - offset
                if victim.orphan:
                    self.lanes.pop(victim.id, None)
                data = data[p - offset :]
                offset = p
                lane.reserved = p
                n = len(data)
            limit = min(lane.end.value, lane.owned_end)
            m = min(n, limit - offset)
            if m <= 0:
                return
            lane.reserved = offset + m
            self._writers += 1  # run() waits for writes in progress before returning
        try:
            if lane.kind == "repair":
                assert lane.buffer is not None
                lane.buffer[offset - lane.start : offset - lane.start + m] = data[:m]
            else:
                self.part.pwrite(data[:m], offset)
        except OSError as exc:
            with self._lock:
                lane.reserved = offset
            raise EngineAborted(f"cannot write {self.part.path}: {exc}") from exc
        finally:
            with self._lock:
                self._writers -= 1
                if not self._writers:
                    self._lock.notify_all()
        flow.rate.add(m, now)
        # (all flows together by when their bytes came: a head start's reach the engine
        # at once when it starts, 0.05-0.15 s of every flow's data in one step, and a
        # parking's rate before then read 32-35 Mbit/s behind two 15 Mbit/s links)
        arrived = arrival_ns / 1e9
        self._aggregate.add(
            m, arrived if self._clock is time.monotonic
            and now - self._aggregate.window_s <= arrived <= now else now,
        )
        for obs in self.observers if flow.stream_of is None else (self._stream_timings,):
            try:
                obs.on_receive(flow.id, arrival_ns, len(data))
            except Exception as exc:
                self._notify_failed(obs, exc)
        if lane.kind == "repair":
            return
        complete: list[int] = []
        with self._lock:
            if (
                flow.overlap_bytes
                and flow.next_lane is None
                and lane.kind == "normal"
                and lane is flow.lane
                and 0 < lane.end.value - lane.reserved <= flow.overlap_bytes
                and now - flow.overlap_tried >= self.cfg.overlap_retry_s
                # (found nothing to take: the tail planning is not redone per block)
                and self._queue_next(flow, lane, now) == "nothing"
            ):
                flow.overlap_tried = now
            if flow.mirror.name in self._unwritten:
                # (blamed while these bytes were on their way to the disk: they go
                # back to the work with the rest of its bytes, counted as those)
                self.pool.add(offset, offset + m)
                self.refetched_bytes += m
                flow.stats.bytes += m
                self._lock.notify_all()
                return
            self.done.add(offset, offset + m)
            self.owners.set(offset, offset + m, flow.mirror.name)
            flow.stats.bytes += m
            for i in self.grid.touching(offset, offset + m):
                s, e = self.grid.bounds(i)
                if (
                    i not in self.verifying
                    and self.done.covers(s, e)
                    and not self.committed.covers(s, e)
                ):
                    self.verifying.add(i)
                    complete.append(i)
        for i in complete:
            self._complete_piece(i, flow)

    def _notify_failed(self, obs: FlowObserver, exc: Exception) -> None:
        self._log(f"flow observer {obs!r} failed: {exc}; removed")
        with self._lock:
            if obs in self.observers:
                self.observers.remove(obs)

    def _complete_piece(self, index: int, flow: Flow) -> None:
        s, e = self.grid.bounds(index)
        hashes = self.plan.file.piece_sha256
        ok = hashes is None or sha256_of_range(self.part, s, e) == hashes[index]
        with self._lock:
            self.verifying.discard(index)
            if not ok:
                self._piece_failed(index, s, e)
            elif self.done.covers(s, e):
                self._commit(s, e)
            # (else its writer was blamed meanwhile, _unwrite: it completes again
            # once those bytes are fetched again)
        self._after_commit()

    def _piece_failed(self, index: int, s: int, e: int) -> None:
        """Lock held: refetch the piece elsewhere; blame its only writer at once."""
        suspects = {o for _, _, o in self.owners.query(s, e)}
        self.done.remove(s, e)
        self._log(f"piece {index} failed its SHA-256 (written by {', '.join(sorted(suspects))})")
        if len(suspects) == 1:
            self._blame(next(iter(suspects)), f"piece {index} failed its SHA-256")
        self.repairs.append(RepairJob(index, set(suspects) | self.bad_mirrors, suspects))
        self._lock.notify_all()

    def _commit(self, s: int, e: int) -> None:
        """Lock held: a piece is complete and verified."""
        self.committed.add(s, e)
        if self.committed.covers(0, self.size) and not self.repairs:
            self._finished = True
            self._settle()
            self._stop_lanes()
        self._prefix_dirty = True
        self._lock.notify_all()

    def _after_commit(self) -> None:
        """Outside the lock: record committed pieces, feed the prefix hasher."""
        with self._ckpt_lock:
            if self._checkpoints_closed:
                return  # run() returned with the file complete; the caller hashes the rest
            with self._lock:
                if not self._prefix_dirty:
                    return
                self._prefix_dirty = False
                committed = self.committed.copy()
                runs = self.owners.runs()
            if self._checkpoint is not None:
                self._checkpoint(committed, runs)
            if self._on_prefix is not None:
                self._on_prefix(committed.contiguous_end(0))

    def _blame(self, mirror: str, why: str) -> None:
        """Lock held: a mirror served wrong bytes; stop using it."""
        if mirror in self.bad_mirrors:
            return
        self.bad_mirrors.add(mirror)
        flow = self.flows.get(mirror)
        if flow is not None:
            self._event("corrupt", flow, why)
        for f in [flow, *self._streams_of(mirror)]:
            if f is not None and f.alive:
                self._retire(f, "corrupt")
        for job in self.repairs:
            job.avoid.add(mirror)
        self._start_backup()

    def _finish_repair(self, lane: Lane, ok: bool) -> None:
        """Lock held: a repair lane ended; verify its buffer, blame, write."""
        job = self._repair_jobs.pop(lane.id)
        index = lane.piece
        assert index is not None and lane.buffer is not None
        s, e = self.grid.bounds(index)
        flow = lane.flow
        if not ok or lane.reserved < e:
            self.repairs.append(job)  # try again (maybe elsewhere)
            return
        self.refetched_bytes += e - s
        hashes = self.plan.file.piece_sha256
        assert hashes is not None
        if sha256_of_buffer(lane.buffer) != hashes[index]:
            job.avoid.add(flow.mirror.name)
            self.repairs.append(job)
            self._blame(flow.mirror.name, f"repair of piece {index} failed its SHA-256 too")
            return
        # Who was wrong: compare each suspect's run with the good copy.
        for rs, re_, owner in self.owners.query(s, e):
            if (
                owner in job.suspects
                and self.part.pread(re_ - rs, rs) != lane.buffer[rs - s : re_ - s]
            ):
                self._blame(owner, f"served wrong bytes in piece {index}")
        self.part.pwrite(memoryview(lane.buffer), s)
        lane.buffer = None
        self.done.add(s, e)
        self.owners.set(s, e, flow.mirror.name)
        flow.stats.bytes += e - s
        self._commit(s, e)

    # --- supervision --------------------------------------------------------------------

    def _check_stuck(self) -> bool:
        """Lock held. Abort when nobody is left who could finish the file."""
        if self._finished or self._abort is not None:
            return True
        alive = [f for f in self.flows.values() if f.alive and not f.cancel.is_set()]
        if alive and all(f.parked for f in alive):
            for f in alive:
                self._unpark(f, "no other flow is left to do the work")
        if (
            self.repairs
            and all(all(f.id in job.avoid for f in alive) for job in self.repairs)
            and not self.pool
            and not any(ln.kind != "repair" for ln in self.lanes.values())
        ):
            if self._start_backup():
                return False
            self._abort = NoMirrorCouldServe(
                f"no mirror left that could serve a correct copy of piece {self.repairs[0].piece}"
            )
            self._settle()
            self._lock.notify_all()
            return True
        if not alive and not self.backups:
            left = self.size - self.committed.total()
            self._abort = NoMirrorCouldServe(
                f"every mirror failed with {left} bytes still missing: "
                + "; ".join(
                    f"{f.id}: {f.stats.state}" + (f" ({f.last_error})" if f.last_error else "")
                    for f in self.flows.values()
                )
            )
            self._settle()
            self._lock.notify_all()
            return True
        if not alive and self.backups:
            return not self._start_backup()
        return False

    def _stop_lanes(self) -> None:
        for lane in self.lanes.values():
            lane.end.lower_to(lane.reserved)

    def _stop_all(self) -> None:
        with self._lock:
            self._stop_lanes()
            for f in self.flows.values():
                f.cancel.set()
            for check in self._path_checks.values():
                check.stop()
            self._lock.notify_all()

    def _event(self, kind: EventKind, flow: Flow, detail: str) -> None:
        ev = MirrorEvent(kind, flow.mirror.name, self._clock() - self._t0, detail)
        self.events.append(ev)
        if kind not in flow.stats.events:
            flow.stats.events.append(kind)
        self._log(f"{flow.id}: {kind}: {detail}")

    def _monitor(self) -> None:
        """Slow-Server-Algo every monitoring interval (paper 001, lines 25-38)."""
        prev: dict[str, tuple[int, int, int]] = {}  # flow -> (lane id, bytes, remaining)
        ticks: dict[str, tuple[int, int, float]] = {}  # flow -> (lane id, received, clock)
        strikes: dict[str, int] = {}
        while True:
            with self._lock:
                # Notifications are frequent (every piece): wait out the full interval.
                deadline = self._clock() + self.cfg.monitor_interval_s
                while not (self._finished or self._abort is not None):
                    now = self._clock()
                    left = deadline - now
                    if left <= 0:
                        break
                    due = self._judge_parkings_soon(now) if self._parkings else None
                    early = self._early_look_due()
                    if early is not None and early <= now:
                        self._early_look(now)
                        early = self._early_look_due()
                    if early is not None:
                        due = early if due is None else min(due, early)
                    long = self._long_look_due()
                    if long is not None and long <= now:
                        self._long_looks(now)
                        long = self._long_look_due()
                    if long is not None:
                        due = long if due is None else min(due, long)
                    if self._stream_trials:
                        judge = self._trials_due(now)
                        if judge is not None:
                            due = judge if due is None else min(due, judge)
                    if self.cfg.path_check:
                        check = self._path_checks_due(now)
                        if check is not None:
                            due = check if due is None else min(due, check)
                    # (a far flow's slow start passes in a few round trips: judged
                    # once a second, its spare came a second late)
                    # (only flows on far paths: on a LAN the round trips a spare
                    # saves are nothing, and the extra wake-ups moved which look
                    # read a limited server first)
                    if now >= self._spares_at:
                        self._spares_at = now + self.cfg.spare_check_s
                        far = [f for f in self.flows.values() if self._ramp(f, now).long]
                        for f in far:
                            self._keep_spare(f, now)
                        self._spares_far = bool(far)
                    if self._spares_far:
                        due = self._spares_at if due is None else min(due, self._spares_at)
                    self._lock.wait(left if due is None else min(left, max(0.01, due - now)))
                if self._finished or self._abort is not None:
                    return
                now = self._clock()
                self._check_parkings(now)
                for f in self.flows.values():
                    f.gap_s *= 0.8
                    if now - f.last_data < self._stall_gap(f):
                        f.lit_rate = f.rate.rate(now) or f.lit_rate
                self._judge_lead(now)
                # (judged on an aggregate window that starts after the verdict: the
                # slow start before it is no reason to let the others in)
                if (
                    self._lead_phase == "full"
                    and self.cfg.access_bps
                    and now - self._lead_full_at >= self._aggregate.window_s
                ):
                    verdict, self._lead_low_rounds, why = judge_steady(
                        self._aggregate.rate(now), self.cfg.access_bps / 8,
                        self._lead_low_rounds, self.cfg.lead,
                        since_full=(now - self._lead_full_at,
                                    self._aggregate.total - self._lead_full_bytes),
                    )
                    if verdict != "wait":
                        # "above": the leader is fine, the figure was wrong
                        self._release_standbys(why, leader_shares=verdict == "above")
                for f in self.flows.values():
                    ln = f.lane
                    if (f.parked and ln is not None and ln.reserved < ln.end.value
                            and now - max(f.last_data, ln.requested_at or 0.0)
                            > 4 * self._stall_gap(f)):
                        # a parked flow stalled on the bytes it was left: give them up
                        ln.end.lower_to(ln.reserved)
                progress: list[FlowProgress] = []
                current: dict[str, tuple[int, int, int]] = {}
                for f in self.flows.values():
                    lane = f.lane
                    if lane is None or lane.kind != "normal" or not f.alive or f.cancel.is_set():
                        continue
                    if lane.first_byte is None:
                        continue  # still connecting: not slow, just not started
                    # (a trial that did not pay leaves the flow to the rule again)
                    streamed = f.stream_of is not None or bool(self._streams_of(f.id, live=True))
                    last = ticks.get(f.id)
                    ticks[f.id] = (lane.id, f.stats.received, now)
                    if last is not None and last[0] == lane.id and last[2] >= f.warm_until:
                        # (one lane over the whole interval, its request and slow start
                        # behind it: the meter's window would still hold them)
                        f.steady_bytes += f.stats.received - last[1]
                        f.steady_s += now - last[2]
                    left = lane.owned_end - lane.reserved
                    current[f.id] = (lane.id, f.stats.bytes, left)
                    before = prev.get(f.id)
                    # (a mirror's connections each carry a share of its path: the
                    # rule would read them as slow mirrors; the tail moves balance them)
                    # (nor while its new lane's request and slow start weigh on it:
                    # a far flow's second range, ramping, read as slow and was cut)
                    if (
                        before is not None and before[0] == lane.id and not streamed
                        and (not f.warm_lane or (last is not None and last[2] >= f.warm_until))
                    ):
                        got = f.stats.bytes - before[1]
                        # (a steal in the interval shortened the portion it had then)
                        progress.append(FlowProgress(f.id, got, min(before[2], got + left)))
                prev = current
                verdicts = find_slow_flows(progress, self.cfg.slow_ratio)
                slow_now = {v.flow_id for v in verdicts}
                strikes = {f: strikes.get(f, 0) + 1 for f in slow_now}
                for verdict in verdicts:
                    if strikes[verdict.flow_id] < self.cfg.slow_strikes:
                        continue
                    flow = self.flows[verdict.flow_id]
                    lane = flow.lane
                    if lane is None or lane.kind != "normal" or lane.shadow is not None:
                        continue
                    remaining = lane.owned_end - lane.reserved
                    if remaining < self.cfg.slow_min_pieces * self.grid.piece_size:
                        continue
                    if now - flow.last_cut < 3 * self.cfg.monitor_interval_s:
                        continue
                    split = max(
                        lane.reserved + reduced_portion(remaining, verdict),
                        self._cut_floor(lane, self.access_saturated()),
                    )
                    # (a flow gone silent, its link down, keeps nothing past what it
                    # received. Up to the piece's end, those bytes sat there until
                    # the very end and were raced then, a switch for a few KB: 0.5 MB
                    # up to the piece, 16 KB up to the split grid, on a far path)
                    if now - flow.last_data <= self._stall_gap(flow):
                        split = self.grid.align_up(split)
                    if split >= lane.owned_end:
                        continue
                    old_end = self._hand_over(lane, split)
                    flow.last_cut = now
                    self._event(
                        "slow",
                        flow,
                        f"T_m={verdict.t_m:.3g} < {self.cfg.slow_ratio} x "
                        f"T_mean={verdict.t_mean:.3g}; "
                        f"[{split}, {old_end}) handed over",
                    )
                    self._start_backup()
                    self._lock.notify_all()
                self._take_back_trials(now)
                self._give_up_unanswered(now)
                self._top_up(now)
                self._judge_stream(now)
                self._try_stream(now)
                for f in self.flows.values():
                    self._keep_spare(f, now)
