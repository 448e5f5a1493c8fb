"""Bearer tokens of mirror utilization agents: one per mirror, only a SHA-256 hash stored.

Tokens are 256-bit random strings, so a plain (unsalted) SHA-256 is enough: no
dictionary attack applies. The row is found by its hash (indexed, unique) and the
stored hash is compared again in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from sqlalchemy import select
from sqlalchemy.orm import Session

from pftp_coordinator.models import Agent, Mirror
from pftp_coordinator.services.errors import NotFound

TOKEN_PREFIX = "pftpa_"


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _mirror(session: Session, name: str) -> Mirror:
    mirror = session.scalar(select(Mirror).where(Mirror.name == name))
    if mirror is None:
        raise NotFound(f"no mirror named {name!r}")
    return mirror


def issue_token(session: Session, mirror_name: str) -> str:
    """A new token for the mirror's agent; replaces (revokes) any previous one.
    The caller shows it once: it cannot be recovered from the database."""
    mirror = _mirror(session, mirror_name)
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    agent = session.scalar(select(Agent).where(Agent.mirror_id == mirror.id))
    if agent is None:
        session.add(Agent(mirror_id=mirror.id, token_hash=hash_token(token)))
    else:
        agent.token_hash = hash_token(token)
        agent.last_seen_at = None
    session.flush()
    return token


def revoke_token(session: Session, mirror_name: str) -> bool:
    """Remove the mirror's agent token; False when it had none."""
    mirror = _mirror(session, mirror_name)
    agent = session.scalar(select(Agent).where(Agent.mirror_id == mirror.id))
    if agent is None:
        return False
    session.delete(agent)
    return True


def authenticate(session: Session, token: str | None) -> Agent | None:
    """The agent owning ``token``, or None."""
    if not token:
        return None
    digest = hash_token(token)
    agent = session.scalar(select(Agent).where(Agent.token_hash == digest))
    if agent is None or not hmac.compare_digest(agent.token_hash, digest):
        return None
    return agent
