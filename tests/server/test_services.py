"""Small pure parts of the services: URL parsing, file digests, congestion pairs, request rate."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from pftp_coordinator.request_rate import RequestRateMeter
from pftp_coordinator.services.errors import InvalidInput
from pftp_coordinator.services.files import digest_local_file, expected_piece_count
from pftp_coordinator.services.mirrors import parse_base_urls
from pftp_coordinator.services.reports import congestion_pairs
from pftp_wire import DownloadReport


def test_parse_base_urls() -> None:
    got = parse_base_urls(["ftp://user:pw@h:2121/pub", "HTTPS://h/x/"])
    assert got == {"ftp": "ftp://user:pw@h:2121/pub/", "https": "HTTPS://h/x/"}
    for bad in (["gopher://h/"], ["ftp:///nohost"], ["http://h/?q=1"], ["ftp://a/", "ftp://b/"]):
        with pytest.raises(InvalidInput):
            parse_base_urls(bad)


@pytest.mark.parametrize("size", [0, 1, 999, 1000, 1001, 5000])
def test_digest_local_file_pieces(tmp_path: Path, size: int) -> None:
    data = bytes(i % 251 for i in range(size))
    path = tmp_path / "f"
    path.write_bytes(data)
    d = digest_local_file(path, piece_size=1000)
    assert d.size == size and d.sha256 == hashlib.sha256(data).hexdigest()
    want = [hashlib.sha256(data[i : i + 1000]).hexdigest() for i in range(0, size, 1000)]
    assert d.piece_sha256 == (want or [hashlib.sha256(b"").hexdigest()])
    assert len(d.piece_sha256) == expected_piece_count(size, 1000)
    assert digest_local_file(path).piece_sha256 is None


def test_digest_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="cannot read"):
        digest_local_file(tmp_path / "nope")


def test_congestion_pairs_are_unordered_known_and_distinct() -> None:
    report = DownloadReport.model_validate(
        {
            "file": "f",
            "size": 1,
            "seconds": 1,
            "sha256_ok": True,
            "mirrors": [
                {
                    "mirror": "a",
                    "bytes": 1,
                    "seconds": 1,
                    "throughput_bps": 8,
                    "congested_with": ["b", "a", "ghost"],
                },
                {
                    "mirror": "b",
                    "bytes": 0,
                    "seconds": 0,
                    "throughput_bps": 0,
                    "congested_with": ["a", "c"],
                },
            ],
        }
    )
    assert congestion_pairs(report, {"a": 5, "b": 2, "c": 9}) == {(2, 5), (2, 9)}


def test_request_rate_meter() -> None:
    now = [1000.0]
    meter = RequestRateMeter(window_s=10, clock=lambda: now[0])
    assert meter.rate() == 0.0
    for _ in range(50):
        meter.hit()
    now[0] += 1.0
    assert meter.rate() == pytest.approx(50.0)  # window not full yet: per elapsed second
    for _second in range(10):
        now[0] += 1.0
        for _ in range(20):
            meter.hit()
    assert meter.rate() == pytest.approx(20.0)  # 10 full seconds of 20 req/s
    now[0] += 60
    assert meter.rate() == 0.0
