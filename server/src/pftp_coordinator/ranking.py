"""Mirror ranking: the optimization variables of paper 004, 3.2.2 and paper 001, 2.2.2.

For every variable v and every candidate mirror k (the m mirrors that hold the
requested file) a suitability S_vk is computed:

* direct variables (bigger is better), paper 004 eq. 1:   S_k = OV_k / sum_i OV_i
* inverse variables (smaller is better), paper 004 eq. 2 / paper 001 eq. 2-3:
  S_k = (1/OV_k) / sum_i (1/OV_i)   (equal to s_k = OV_z/OV_k normalised, OV_z = min)

The mirror's suitability is the weighted average of its S_vk with the configured
weights, renormalised over the variables that are used for this request.

Robustness rules (the papers are silent on these; chosen here and tested):

* **Variable nobody has** (or weight 0): skipped; the weights of the others are
  renormalised. No variable at all: every mirror gets 1/m.
* **Variable some mirrors lack**: a lacking mirror gets the *neutral* value 1/m,
  i.e. it is taken to be an average mirror for that variable, neither rewarded nor
  punished. The mirrors that have the value share the remaining mass
  (n_have/m) by eq. 1 or 2 among themselves, so S_v still sums to 1. This is how a
  mirror with no utilization agent is ranked on its path data alone.
* **Stale data**: a value whose newest sample is older than ``stale_after_s`` is
  missing. Younger data is trusted with confidence c = 0.5 ** (age / half_life):
  S'_vk = c * S_vk + (1 - c) / m, then S'_v is renormalised to sum 1. So old
  measurements fade toward the neutral value instead of ranking forever.
* **Zero or tiny values** of inverse variables never divide by zero: each has a
  floor (`INVERSE_FLOORS`). Loss uses ``loss + 0.01``: a probe of a few dozen
  packets that lost none only says "loss below about 1 %", so 0 % and 1 % should
  not differ by orders of magnitude; with the floor, 0 % vs 10 % is still 11:1.
  Negative, NaN or infinite inputs are treated as missing.
* **Demand** (paper 001, 2.2.2): mirrors that few others can stand in for should be
  used "only in unavoidable circumstances". The value passed in is the mirror's
  scarcity load, sum over the files it holds of 1 / replica_count(file)
  (computed in ranking_inputs); it is an inverse variable.
* **Predicted time** (paper 004 eq. 3): time = a / bandwidth_Mbps + b * RTT_s with
  (a, b) from the latest fit on client reports; inverse. Skipped when no valid fit.

Pure: no clock, no database. ``now`` and all timestamps are epoch seconds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

# Order matters only for the explanation dict and tests.
VARIABLES: tuple[str, ...] = (
    "bandwidth",
    "rtt",
    "loss",
    "cpu",
    "memory",
    "demand",
    "throughput",
    "predicted_time",
)
DIRECT: frozenset[str] = frozenset({"bandwidth", "throughput"})
INVERSE: frozenset[str] = frozenset(v for v in VARIABLES if v not in DIRECT)

# Added to inverse variables before taking 1/x (see module docstring).
INVERSE_FLOORS: Mapping[str, float] = {
    "rtt": 1e-4,  # seconds: 0.1 ms, below anything but loopback
    "loss": 0.01,  # fraction: resolution of a short probe train
    "cpu": 5.0,  # percentage points
    "memory": 5.0,  # percentage points
    "demand": 0.01,  # a mirror holding no scarce file
    "predicted_time": 1e-3,  # seconds
}


@dataclass(frozen=True, slots=True)
class PredictorCoefficients:
    """Paper 004 eq. 3: DownloadTime = a / BottleneckBandwidth(Mbps) + b * RTT(s)."""

    a: float
    b: float

    def usable(self) -> bool:
        return (
            math.isfinite(self.a)
            and math.isfinite(self.b)
            and self.a >= 0
            and self.b >= 0
            and (self.a > 0 or self.b > 0)
        )

    def predict_s(self, bandwidth_bps: float, rtt_s: float) -> float:
        mbps = max(bandwidth_bps / 1e6, 1e-6)
        return self.a / mbps + self.b * max(rtt_s, 0.0)


@dataclass(frozen=True, slots=True)
class MirrorMetrics:
    """What is known about one candidate mirror; None = no data.

    ``*_ts`` are epoch seconds of the newest sample behind a value (None = no age
    known, taken as fresh). Path values are half-life-weighted aggregates made by
    ranking_inputs; this module only applies staleness and confidence.
    """

    key: int  # mirror id; also the tie breaker (lower first)
    capacity_bps: float | None = None  # bottleneck capacity (packet pair/train)
    rtt_s: float | None = None
    loss: float | None = None  # fraction 0..1
    probe_throughput_bps: float | None = None  # short ranged read by the prober
    probe_ts: float | None = None
    # connections that carried probe throughput together (newest probe that knew;
    # > 1 for a mirror that holds each connection below its path's rate)
    probe_connections: int | None = None
    # connections a client's own trials kept to it (newest report that says: a
    # limit the probe's short read cannot see, nginx's whole seconds)
    report_connections: int | None = None
    cpu_percent: float | None = None
    memory_percent: float | None = None
    utilization_ts: float | None = None
    throughput_bps: float | None = None  # client-reported history
    throughput_ts: float | None = None
    # rates reported by clients whose access link was full: floors (ranking_inputs)
    throughput_floor_bps: float | None = None
    throughput_floor_ts: float | None = None
    demand: float | None = None  # scarcity load, see module docstring


@dataclass(slots=True)  # not frozen: frozen __init__ is slow on the hot path
class MirrorRank:
    key: int
    suitability: float  # weighted average, sums to 1 over the candidates
    explain: dict[str, float] = field(default_factory=dict)  # S_vk per variable used
    expected_bps: float | None = None


@dataclass(frozen=True, slots=True)
class RankingParams:
    weights: Mapping[str, float]
    half_life_s: float
    stale_after_s: float
    predictor: PredictorCoefficients | None = None


def direct_suitability(values: Sequence[float]) -> list[float]:
    """Paper 004 eq. 1. All-zero input gives equal shares."""
    total = math.fsum(values)
    if total <= 0 or not math.isfinite(total):
        return [1.0 / len(values)] * len(values) if values else []
    return [v / total for v in values]


def inverse_suitability(values: Sequence[float], floor: float = 0.0) -> list[float]:
    """Paper 004 eq. 2 (= paper 001 eq. 2-3). ``floor`` is added before 1/x."""
    inv = [1.0 / (v + floor) if v + floor > 0 else math.inf for v in values]
    if any(math.isinf(x) for x in inv):
        # Only reachable with floor 0 and a zero value: those mirrors share all.
        n_inf = sum(1 for x in inv if math.isinf(x))
        return [1.0 / n_inf if math.isinf(x) else 0.0 for x in inv]
    return direct_suitability(inv)


def _clean(v: float | None) -> float | None:
    if v is None or not math.isfinite(v) or v < 0:
        return None
    return float(v)


def _confidence(ts: float | None, now: float, params: RankingParams) -> float:
    """1 for fresh data, halving every half-life; 0 once stale (= missing)."""
    if ts is None:
        return 1.0
    age = max(0.0, now - ts)
    if age > params.stale_after_s:
        return 0.0
    return 0.5 ** (age / params.half_life_s)


_VAR_INDEX = {v: j for j, v in enumerate(VARIABLES)}


def _variable_values(
    m: MirrorMetrics, now: float, params: RankingParams
) -> dict[str, tuple[float, float]]:
    """variable -> (value, confidence) for the variables this mirror has data for."""
    out: dict[str, tuple[float, float]] = {}
    c_probe = _confidence(m.probe_ts, now, params)
    c_util = _confidence(m.utilization_ts, now, params)
    # Path bandwidth as in probes.aggregate.PathSummary (and so the eq. 3 fit):
    # the ranged-read throughput when known, else the packet-train capacity.
    bw = _clean(m.probe_throughput_bps) or _clean(m.capacity_bps)
    rtt = _clean(m.rtt_s)
    if c_probe > 0:
        if bw is not None:
            out["bandwidth"] = (bw, c_probe)
        if rtt is not None:
            out["rtt"] = (rtt, c_probe)
        loss = _clean(m.loss)
        if loss is not None:
            out["loss"] = (min(loss, 1.0), c_probe)
        pred = params.predictor
        if pred is not None and bw is not None and rtt is not None and bw > 0:
            out["predicted_time"] = (pred.predict_s(bw, rtt), c_probe)
    if c_util > 0:
        cpu = _clean(m.cpu_percent)
        if cpu is not None:
            out["cpu"] = (min(cpu, 100.0), c_util)
        mem = _clean(m.memory_percent)
        if mem is not None:
            out["memory"] = (min(mem, 100.0), c_util)
    reported = _reported_rate(m, now, params)
    if reported is not None:
        out["throughput"] = reported
    demand = _clean(m.demand)
    if demand is not None:
        out["demand"] = (demand, 1.0)
    return out


def _probed_rate(m: MirrorMetrics, now: float, params: RankingParams) -> float | None:
    """The prober's throughput read, else path capacity; None when stale."""
    if _confidence(m.probe_ts, now, params) > 0:
        for v in (m.probe_throughput_bps, m.capacity_bps):
            c = _clean(v)
            if c:
                return c
    return None


def _newer(a: float | None, b: float | None) -> bool:
    """Is time ``a`` at least as new as ``b``? (None: age unknown, taken as fresh.)"""
    return (math.inf if a is None else a) >= (math.inf if b is None else b)


def _reported_rate(
    m: MirrorMetrics, now: float, params: RankingParams
) -> tuple[float, float] | None:
    """(rate, confidence) clients got from this mirror: the history of rates the
    mirror set, raised by a newer floor (a client's full link carried more from it
    since). With floors only, the floor or the probed rate, whichever is higher: a
    client on a slow link says only that the mirror gives at least its share."""
    c_hist = _confidence(m.throughput_ts, now, params)
    c_floor = _confidence(m.throughput_floor_ts, now, params)
    hist = _clean(m.throughput_bps) if c_hist > 0 else None
    floor = _clean(m.throughput_floor_bps) if c_floor > 0 else None
    if hist is not None:
        if floor is not None and floor > hist and _newer(m.throughput_floor_ts, m.throughput_ts):
            return floor, c_floor
        return hist, c_hist
    if floor is None:
        return None
    return max(floor, _probed_rate(m, now, params) or 0.0), c_floor


def expected_rate_bps(m: MirrorMetrics, now: float, params: RankingParams) -> float | None:
    """Best guess of the rate a client gets from this mirror: client-reported
    history (with floors from clients on full links, _reported_rate), else the
    prober's throughput read, else path capacity; stale data does not count."""
    reported = _reported_rate(m, now, params)
    if reported is not None and reported[0] > 0:
        return reported[0]
    return _probed_rate(m, now, params)


def weight_vector(params: RankingParams) -> np.ndarray:
    """Weights by VARIABLES position; non-positive or non-finite weights are 0."""
    w = np.zeros(len(VARIABLES))
    for j, var in enumerate(VARIABLES):
        v = params.weights.get(var, 0.0)
        if v > 0 and math.isfinite(v):
            w[j] = v
    return w


@dataclass(frozen=True, eq=False)
class RankingTable:
    """Every mirror's variables ready for eq. 1, one row per mirror.

    ``x[k, j]`` is mirror k's value of VARIABLES[j] (direct: OV; inverse:
    1 / (OV + floor), which turns eq. 2 into eq. 1 over x), NaN where it has no
    usable data; ``c[k, j]`` the confidence of that value. Built once per ranking
    snapshot (numpy, so ranking the ~15 holders of a file costs tens of
    microseconds); confidence is evaluated at ``now`` of the build.
    """

    keys: np.ndarray  # int64 mirror keys
    x: np.ndarray  # (n, len(VARIABLES)) float64
    c: np.ndarray  # (n, len(VARIABLES)) float64
    expected: list[float | None]
    w: np.ndarray  # weight per variable position
    rtt_s: list[float | None]  # fresh probed round-trip time per row (planner.py)
    row_of: dict[int, int]
    w_list: list[float] = field(init=False)
    # For the hot path: q[k] stacks x with 0 where missing, "has a value" (0/1),
    # c, and c * x, so one gather and one sum serve a whole request.
    q: np.ndarray = field(init=False)  # (n, 4, len(VARIABLES))
    key_list: list[int] = field(init=False)

    def __post_init__(self) -> None:
        have = ~np.isnan(self.x)
        x0 = np.where(have, self.x, 0.0)
        c = np.where(have, self.c, 0.0)
        q = np.ascontiguousarray(np.stack([x0, have.astype(float), c, c * x0], axis=1))
        object.__setattr__(self, "q", q)
        object.__setattr__(self, "key_list", self.keys.tolist())
        object.__setattr__(self, "w_list", self.w.tolist())


def build_table(
    metrics: Sequence[MirrorMetrics], *, params: RankingParams, now: float
) -> RankingTable:
    n, nv = len(metrics), len(VARIABLES)
    x = np.full((n, nv), np.nan)
    c = np.zeros((n, nv))
    for k, m in enumerate(metrics):
        for var, (v, conf) in _variable_values(m, now, params).items():
            j = _VAR_INDEX[var]
            x[k, j] = v if var in DIRECT else 1.0 / (v + INVERSE_FLOORS[var])
            c[k, j] = conf
    keys = np.array([m.key for m in metrics], dtype=np.int64)
    return RankingTable(
        keys=keys,
        x=x,
        c=c,
        expected=[expected_rate_bps(m, now, params) for m in metrics],
        w=weight_vector(params),
        rtt_s=[_clean(m.rtt_s) if _confidence(m.probe_ts, now, params) > 0 else None
               for m in metrics],
        row_of={m.key: k for k, m in enumerate(metrics)},
    )


@dataclass(slots=True)
class RankedRows:
    """A ranking whose per-variable explanation is built only when asked for.

    ``ranks`` are best first with an empty ``explain`` (shared, never mutated: the
    planner caches these); ``explain(key)`` gives the S_vk dict of one mirror.
    Building the dict for every candidate cost more than the ranking itself,
    while an answer shows at most max_mirrors + backup_count of them."""

    ranks: list[MirrorRank]
    names: tuple[str, ...]  # variables used, in VARIABLES order
    per_var: dict[int, list[float]]  # mirror key -> S_vk for ``names``

    def explain(self, key: int) -> dict[str, float]:
        return dict(zip(self.names, self.per_var[key]))  # noqa: B905 (same length)


_NO_EXPLAIN: dict[str, float] = {}


def rank_rows_lazy(table: RankingTable, rows: Sequence[int]) -> RankedRows:
    """Rank the mirrors at ``rows`` of ``table`` among themselves, best first
    (ties: lower key first). The candidate set defines m in eq. 1 and 2.

    Per variable j, with f_j = (n_have / m) / sum of x over the mirrors that have
    it (eq. 1 over them, scaled to their share of the mass) and the neutral 1/m:
    S_kj = c_kj * x_kj * f_j + (1 - c_kj) / m for a mirror with a value (confidence
    c blends toward neutral), 1/m without one; then S_j is normalised to sum 1.
    The column sums follow from the per-variable totals, so the whole ranking is
    a handful of array operations on the (m x variables) rows."""
    m = len(rows)
    if m == 0:
        return RankedRows([], (), {})
    idx = np.asarray(rows, dtype=np.intp)
    q = table.q[idx]  # (m, 4, V): x0, have, c, c*x0
    total, n_have, sum_c, sum_cx = q.sum(axis=0).tolist()
    neutral = 1.0 / m
    w_all = table.w_list
    f = [0.0] * len(VARIABLES)
    g = [0.0] * len(VARIABLES)  # neutral where f > 0: S = 1/m + f*c*x - g*c
    colsum = [1.0] * len(VARIABLES)
    used: list[int] = []
    for j in range(len(VARIABLES)):
        if total[j] > 0:
            f[j] = (n_have[j] / m) / total[j]
            g[j] = neutral
            colsum[j] = m * neutral + f[j] * sum_cx[j] - neutral * sum_c[j]
        # Variables nobody here has, or with weight 0, are skipped; weights renormalised.
        if n_have[j] > 0 and w_all[j] > 0:
            used.append(j)
    s = neutral + q[:, 3, :] * np.array(f) - q[:, 2, :] * np.array(g)
    w_sum = math.fsum(w_all[j] for j in used)
    if w_sum > 0:
        wn = [0.0] * len(VARIABLES)
        for j in used:
            wn[j] = w_all[j] / (colsum[j] * w_sum)
        score = (s @ np.array(wn)).tolist()
    else:
        score = [neutral] * m
    names = tuple(VARIABLES[j] for j in used)
    per_var = (s[:, used] * np.array([1.0 / colsum[j] for j in used])).tolist()
    key_list = table.key_list
    keys = [key_list[r] for r in rows]
    expected = table.expected
    ranks = [MirrorRank(keys[k], score[k], _NO_EXPLAIN, expected[rows[k]]) for k in range(m)]
    ranks.sort(key=lambda r: (-r.suitability, r.key))
    # zip without strict=: same length by construction, and this is the hot path.
    return RankedRows(ranks, names, dict(zip(keys, per_var)))  # noqa: B905


def rank_rows(table: RankingTable, rows: Sequence[int]) -> list[MirrorRank]:
    """``rank_rows_lazy`` with every mirror's ``explain`` filled in."""
    ranked = rank_rows_lazy(table, rows)
    return [
        MirrorRank(r.key, r.suitability, ranked.explain(r.key), r.expected_bps)
        for r in ranked.ranks
    ]


def rank_mirrors(
    metrics: Sequence[MirrorMetrics], *, params: RankingParams, now: float
) -> list[MirrorRank]:
    """Rank candidate mirrors, best first (ties: lower key first)."""
    table = build_table(metrics, params=params, now=now)
    return rank_rows(table, range(len(metrics)))


def params_from_settings(settings, predictor: PredictorCoefficients | None) -> RankingParams:  # type: ignore[no-untyped-def]
    """RankingParams from the coordinator's Settings (kept loose to stay pure)."""
    return RankingParams(
        weights=settings.weights.model_dump(),
        half_life_s=settings.probe_half_life_s,
        stale_after_s=settings.stale_after_s,
        predictor=predictor if predictor is not None and predictor.usable() else None,
    )
