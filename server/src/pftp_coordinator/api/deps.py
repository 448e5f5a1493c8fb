"""Dependencies of the routes: settings, a database session, the admin token."""

from __future__ import annotations

import hmac
from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from pftp_coordinator.config import Settings
from pftp_coordinator.db import session_scope


def get_settings(request: Request) -> Settings:
    return request.app.state.settings


def get_session(request: Request) -> Iterator[Session]:
    """One session per request: committed when the route returns, rolled back on error."""
    with session_scope(request.app.state.session_factory) as session:
        yield session


SettingsDep = Annotated[Settings, Depends(get_settings)]
# scope="function": commit before the response is sent, so a client that got 201
# can rely on the row being there on its next request (and a failed commit is a 500,
# not a lost write after a success answer).
SessionDep = Annotated[Session, Depends(get_session, scope="function")]

_bearer = HTTPBearer(auto_error=False, description="the coordinator's admin token")


def require_admin(
    settings: SettingsDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> None:
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "admin token required: Authorization: Bearer <PFTP_ADMIN_TOKEN>",
            headers={"WWW-Authenticate": "Bearer"},
        )
    if not hmac.compare_digest(credentials.credentials.encode(), settings.admin_token.encode()):
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            "wrong admin token",
            headers={"WWW-Authenticate": "Bearer"},
        )


AdminDep = Depends(require_admin)
