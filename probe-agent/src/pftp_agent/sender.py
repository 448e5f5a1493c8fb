"""POST a batch to the coordinator with the agent's bearer token (stdlib urllib)."""

from __future__ import annotations

import json
import random
import urllib.error
import urllib.request

from pftp_wire.models import API_PREFIX, UtilizationBatch, UtilizationSample

from pftp_agent import __version__


class SendError(Exception):
    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def samples_url(coordinator_url: str) -> str:
    return coordinator_url.rstrip("/") + f"{API_PREFIX}/agents/samples"


def post_batch(
    coordinator_url: str, token: str, samples: list[UtilizationSample], timeout_s: float
) -> int:
    """Returns the number of samples the coordinator accepted."""
    body = UtilizationBatch(samples=samples).model_dump_json().encode()
    req = urllib.request.Request(
        samples_url(coordinator_url),
        data=body,
        method="POST",
        headers={
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/json",
            "User-Agent": f"pftp-agent/{__version__}",
        },
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            return int(json.loads(resp.read() or b"{}").get("accepted", len(samples)))
    except urllib.error.HTTPError as exc:
        hint = (
            " (wrong token? create one with: pftp-coordinator agent token MIRROR)"
            if exc.code == 401
            else ""
        )
        raise SendError(f"coordinator answered HTTP {exc.code}{hint}", exc.code) from exc
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise SendError(f"coordinator unreachable: {exc}") from exc


def backoff_delay(failures: int, *, base_s: float, cap_s: float, rng: random.Random) -> float:
    """Pure given ``rng``: exponential backoff with full jitter (0 .. min(cap, base*2^n))."""
    if failures <= 0:
        return 0.0
    return rng.uniform(0, min(cap_s, base_s * 2 ** min(failures - 1, 30)))
