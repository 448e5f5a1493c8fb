import pftp_wire
import pydantic
import pytest
from pftp_wire import AssignmentRequest, AssignmentResponse, FileInfo


def test_public_api_is_deliberate():
    assert set(pftp_wire.__all__) == {
        "API_PREFIX",
        "ANNOUNCE_PORT",
        "Announcement",
        "Assignment",
        "AssignmentRequest",
        "AssignmentResponse",
        "Backup",
        "DownloadReport",
        "FileInfo",
        "MirrorReport",
        "Protocol",
        "ReportAck",
        "SamplesAck",
        "UtilizationBatch",
        "UtilizationSample",
    }


def test_request_defaults_and_validation():
    req = AssignmentRequest(file="a.iso")
    assert req.protocols == ["ftp", "http"]
    assert req.access_bandwidth_bps is None
    with pytest.raises(pydantic.ValidationError):
        AssignmentRequest(file="a.iso", access_bandwidth_bps=0)
    with pytest.raises(pydantic.ValidationError):
        AssignmentRequest(file="a.iso", protocols=["gopher"])
    with pytest.raises(pydantic.ValidationError):
        AssignmentRequest(file="")


def test_file_info_rejects_bad_hashes():
    with pytest.raises(pydantic.ValidationError):
        FileInfo(name="x", size=1, sha256="ABC")
    with pytest.raises(pydantic.ValidationError):
        FileInfo(name="x", size=1, sha256="a" * 64, piece_size=4, piece_sha256=["zz"])


def test_response_round_trip_keeps_contract_keys():
    body = {
        "request_id": "r1",
        "file": {
            "name": "x",
            "size": 10,
            "sha256": "a" * 64,
            "piece_size": None,
            "piece_sha256": None,
        },
        "assignments": [
            {
                "mirror": "m1",
                "url": "ftp://h/x",
                "offset": 0,
                "length": 10,
                "suitability": 1.0,
                "expected_bps": 1e6,
            }
        ],
        "backups": [],
        "mode": "ranked",
    }
    resp = AssignmentResponse.model_validate(body)
    dumped = resp.model_dump()
    assert set(dumped) == {"request_id", "file", "assignments", "backups", "mode"}
    assert {"mirror", "url", "offset", "length", "suitability", "expected_bps"} <= set(
        dumped["assignments"][0]
    )
