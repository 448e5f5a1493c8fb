"""Download-time predictor of paper 004, eq. 3, refitted on client reports.

Paper 004 (5.1) fits, for one 8 MB file, DownloadTime = a / BottleneckBandwidth
+ b * RTT (a = 247.44 with Mbit/s, b = 344) by linear regression, and says the
relation must be readjusted as the database changes. Our reports are for
portions of any size, so the bandwidth term is scaled by the portion size:

    time = a * (size * 8 / bandwidth_bps) + b * rtt_s

With a constant size this is exactly eq. 3 (a_paper = a * size in Mbit). ``a``
is ~1 / (fraction of the path bandwidth a transfer gets); ``b`` counts the RTTs
spent in connection set-up, FTP commands and slow start. No intercept, as in the
paper. Fitted with numpy least squares; R^2 = 1 - SS_res / SS_tot.

A fit is used by the ranking only when ``fit_is_usable``: at least
MIN_FIT_SAMPLES reports (and a > 0, b >= 0, R^2 >= MIN_FIT_R2). Below that the
predicted-time variable is left out and the other variables rank alone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from pftp_coordinator.config import Settings
from pftp_coordinator.db import session_scope
from pftp_coordinator.models import MirrorReport, PathProbe, PredictorFit, utcnow
from pftp_coordinator.probes.aggregate import summarize_probes

log = logging.getLogger(__name__)

MIN_FIT_SAMPLES = 20  # reports joined to probe data; 2 unknowns need far more than 2
MIN_FIT_R2 = 0.3  # below this the line explains too little to rank by
REPORT_WINDOW = timedelta(days=7)  # reports older than this no longer describe the paths
MAX_REPORTS = 5000
PROBE_LOOKBACK = timedelta(hours=6)  # probes before a report that describe its path


@dataclass(frozen=True)
class Sample:
    size_bytes: int
    bandwidth_bps: float
    rtt_s: float
    seconds: float


@dataclass(frozen=True)
class Fit:
    a: float
    b: float
    r2: float
    n: int


def fit_eq3(samples: Sequence[Sample]) -> Fit:
    """Pure: least-squares a, b of time = a*size*8/bandwidth + b*rtt (paper 004, eq. 3)."""
    if len(samples) < 2:
        raise ValueError(f"need at least 2 samples to fit 2 coefficients, got {len(samples)}")
    x = np.array([[s.size_bytes * 8 / s.bandwidth_bps, s.rtt_s] for s in samples], dtype=float)
    y = np.array([s.seconds for s in samples], dtype=float)
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    pred = x @ coef
    ss_res = float(np.sum((y - pred) ** 2))
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else (1.0 if ss_res == 0 else 0.0)
    return Fit(a=float(coef[0]), b=float(coef[1]), r2=r2, n=len(samples))


def predict_seconds(fit: PredictorFit | Fit, size: int, bandwidth: float, rtt: float) -> float:
    """Predicted download time (s) of ``size`` bytes over a path of ``bandwidth``
    bit/s and ``rtt`` seconds: the inverse optimization variable (paper 004, 5.1)."""
    if bandwidth <= 0:
        raise ValueError(f"bandwidth must be > 0 bit/s, got {bandwidth}")
    if size < 0 or rtt < 0:
        raise ValueError("size and rtt must be >= 0")
    return fit.a * size * 8 / bandwidth + fit.b * rtt


def fit_is_usable(fit: PredictorFit | Fit | None) -> bool:
    if fit is None:
        return False
    n = fit.n if isinstance(fit, Fit) else fit.n_samples
    return n >= MIN_FIT_SAMPLES and fit.a > 0 and fit.b >= 0 and fit.r2 >= MIN_FIT_R2


def latest_fit(session: Session) -> PredictorFit | None:
    return session.scalar(
        select(PredictorFit)
        .order_by(PredictorFit.fitted_at.desc(), PredictorFit.id.desc())
        .limit(1)
    )


def collect_samples(session: Session, *, now: datetime, half_life_s: float) -> list[Sample]:
    """Client reports joined to the probes of the same mirror in the hours before
    each report (decayed toward the report time)."""
    reports = session.scalars(
        select(MirrorReport)
        .where(
            MirrorReport.reported_at > now - REPORT_WINDOW,
            MirrorReport.mirror_id.is_not(None),
            MirrorReport.bytes > 0,
            MirrorReport.seconds > 0,
            MirrorReport.bad_data.is_(False),
            # (a full access link set that time, not the path the fit is about)
            MirrorReport.access_limited.is_(False),
        )
        .order_by(MirrorReport.reported_at.desc())
        .limit(MAX_REPORTS)
    ).all()
    if not reports:
        return []
    by_mirror: dict[int, list[PathProbe]] = {}
    start = min(r.reported_at for r in reports) - PROBE_LOOKBACK
    for p in session.scalars(
        select(PathProbe).where(
            PathProbe.ts > start,
            PathProbe.ok.is_(True),
            PathProbe.mirror_id.in_({r.mirror_id for r in reports}),
        )
    ):
        by_mirror.setdefault(p.mirror_id, []).append(p)
    out: list[Sample] = []
    for r in reports:
        probes = [
            p
            for p in by_mirror.get(r.mirror_id, [])  # type: ignore[arg-type]
            if r.reported_at - PROBE_LOOKBACK < p.ts <= r.reported_at
        ]
        summary = summarize_probes(probes, r.reported_at, half_life_s)
        if summary.bandwidth_bps and summary.rtt_s is not None:
            out.append(Sample(r.bytes, summary.bandwidth_bps, summary.rtt_s, r.seconds))
    return out


def refit(
    factory: sessionmaker[Session], settings: Settings, *, clock: Callable[[], datetime] = utcnow
) -> Fit | None:
    """Refit on recent reports and store the fit; None when there is too little data
    (fewer than 2 samples; fits below MIN_FIT_SAMPLES are stored but not used)."""
    now = clock()
    with session_scope(factory) as s:
        samples = collect_samples(s, now=now, half_life_s=settings.probe_half_life_s)
        if len(samples) < 2:
            log.info("predictor: %d usable reports, not refitting", len(samples))
            return None
        fit = fit_eq3(samples)
        s.add(PredictorFit(fitted_at=now, a=fit.a, b=fit.b, r2=fit.r2, n_samples=fit.n))
    log.info(
        "predictor refit: a=%.4g b=%.4g R^2=%.3f n=%d%s",
        fit.a,
        fit.b,
        fit.r2,
        fit.n,
        "" if fit_is_usable(fit) else " (not used yet)",
    )
    return fit
