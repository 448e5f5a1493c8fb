"""Paper 004 eq. 3 predictor: pure fit and the refit on client reports + probes."""

from __future__ import annotations

import math
import random
from datetime import timedelta

import pytest
from pftp_coordinator.config import Settings
from pftp_coordinator.db import session_scope
from pftp_coordinator.models import Download, MirrorReport, PathProbe, PredictorFit, utcnow
from pftp_coordinator.predictor import (
    MIN_FIT_SAMPLES,
    Fit,
    Sample,
    fit_eq3,
    fit_is_usable,
    latest_fit,
    predict_seconds,
    refit,
)
from probe_db import add_mirror, migrated_factory


def _samples(n: int, a: float, b: float, noise: float, rng: random.Random) -> list[Sample]:
    out = []
    for _ in range(n):
        size = rng.choice([1, 8, 64]) * 1024 * 1024
        bw = rng.uniform(2e6, 100e6)
        rtt = rng.uniform(0.005, 0.3)
        t = a * size * 8 / bw + b * rtt
        out.append(Sample(size, bw, rtt, t * (1 + rng.gauss(0, noise))))
    return out


def test_fit_recovers_coefficients():
    fit = fit_eq3(_samples(200, 1.25, 12.0, 0.02, random.Random(4)))
    assert math.isclose(fit.a, 1.25, rel_tol=0.05) and math.isclose(fit.b, 12.0, rel_tol=0.2)
    assert fit.r2 > 0.95 and fit.n == 200 and fit_is_usable(fit)


def test_paper_form_for_fixed_size():
    # For the paper's 8 MB file, a_paper (Mbit/s units) = a * 64 Mbit.
    paper = Fit(a=247.44 / 64, b=344.0, r2=0.9, n=100)
    t = predict_seconds(paper, 8 * 1024 * 1024 // 1, 10e6 * 1.048576, 0.1)
    assert math.isclose(t, 247.44 / 10 + 34.4, rel_tol=1e-6)
    with pytest.raises(ValueError):
        predict_seconds(paper, 10, 0, 0.1)


def test_usability_threshold():
    assert not fit_is_usable(None)
    assert not fit_is_usable(Fit(1.0, 1.0, 0.9, MIN_FIT_SAMPLES - 1))
    assert not fit_is_usable(Fit(1.0, 1.0, 0.1, 100))  # explains too little
    assert not fit_is_usable(Fit(-1.0, 1.0, 0.9, 100))
    with pytest.raises(ValueError):
        fit_eq3([Sample(1, 1.0, 0.1, 1.0)])


def test_refit_from_reports_joined_to_probes(db_url):
    factory = migrated_factory(db_url)
    rng = random.Random(7)
    now = utcnow()
    st = Settings(database_url=None, probe_half_life_s=1800)
    assert refit(factory, st, clock=lambda: now) is None  # no data yet
    paths = {}
    for i in range(6):
        mid = add_mirror(factory, f"m{i}", f"ftp://10.0.0.{i}/")
        paths[mid] = (rng.uniform(2e6, 50e6), rng.uniform(0.01, 0.2))
    with session_scope(factory) as s:
        for mid, (bw, rtt) in paths.items():
            s.add(
                PathProbe(
                    mirror_id=mid,
                    ts=now - timedelta(minutes=30),
                    method="ftp-range",
                    ok=True,
                    throughput_bps=bw,
                )
            )
            s.add(
                PathProbe(
                    mirror_id=mid,
                    ts=now - timedelta(minutes=30),
                    method="tcp-connect",
                    ok=True,
                    rtt_s=rtt,
                )
            )
        for k in range(40):
            mid = rng.choice(list(paths))
            bw, rtt = paths[mid]
            size = rng.choice([1, 4, 16]) * 1024 * 1024
            secs = 1.3 * size * 8 / bw + 8 * rtt
            d = Download(
                file_name="f",
                size=size,
                seconds=secs,
                sha256_ok=True,
                reported_at=now - timedelta(minutes=10 - k * 0.1),
            )
            d.mirror_reports.append(
                MirrorReport(
                    mirror_id=mid,
                    mirror_name=f"m{mid}",
                    bytes=size,
                    seconds=secs,
                    throughput_bps=size * 8 / secs,
                    reported_at=d.reported_at,
                )
            )
            s.add(d)
        for k in range(10):
            # Clients behind a 1 Mbit/s access link: their times are the link's,
            # not the paths' the fit is about.
            mid = rng.choice(list(paths))
            size = 4 * 1024 * 1024
            secs = size * 8 / 1e6
            d = Download(file_name="f", size=size, seconds=secs, sha256_ok=True,
                         access_bandwidth_bps=1_000_000,
                         reported_at=now - timedelta(minutes=5 - k * 0.1))
            d.mirror_reports.append(
                MirrorReport(mirror_id=mid, mirror_name=f"m{mid}", bytes=size, seconds=secs,
                             throughput_bps=1e6, access_limited=True,
                             reported_at=d.reported_at)
            )
            s.add(d)
    fit = refit(factory, st, clock=lambda: now)
    assert fit is not None and fit.n == 40
    assert math.isclose(fit.a, 1.3, rel_tol=0.01) and math.isclose(fit.b, 8, rel_tol=0.05)
    with session_scope(factory) as s:
        stored = latest_fit(s)
        assert isinstance(stored, PredictorFit) and stored.n_samples == 40 and stored.r2 > 0.99
        assert fit_is_usable(stored)
