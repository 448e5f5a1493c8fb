"""Operator commands of issue 4, added to `pftp-coordinator` by cli.py:

pftp-coordinator agent token MIRROR    # new agent token, printed once
pftp-coordinator agent revoke MIRROR
pftp-coordinator scan MIRROR           # replica scan now
pftp-coordinator probe MIRROR...|--all # path probes now (concurrently)
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from typing import Annotated, Any

import typer
from sqlalchemy.orm import Session, sessionmaker

agent_app = typer.Typer(help="Utilization agents of mirrors: tokens.", no_args_is_help=True)
ops_app = typer.Typer(help="Manual replica scans and path probes.")

MirrorArg = Annotated[str, typer.Argument(help="mirror name")]


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(1)


@contextmanager
def _factory(ctx: typer.Context) -> Iterator[tuple[Any, sessionmaker[Session]]]:
    from pftp_coordinator import migrate
    from pftp_coordinator.config import Settings, get_settings
    from pftp_coordinator.db import create_db_engine, make_session_factory

    settings = ctx.obj if isinstance(ctx.obj, Settings) else get_settings()
    engine = create_db_engine(settings.effective_database_url, pool_size=2)
    try:
        migrate.require_up_to_date(engine)
        yield settings, make_session_factory(engine)
    except migrate.SchemaOutOfDate as exc:
        raise _fail(str(exc)) from exc
    finally:
        engine.dispose()


def _mirror_id(factory: sessionmaker[Session], name: str) -> int:
    from pftp_coordinator.db import session_scope
    from pftp_coordinator.probes.service import mirror_by_name

    with session_scope(factory) as s:
        try:
            return mirror_by_name(s, name).id
        except LookupError as exc:
            raise _fail(str(exc)) from exc


@agent_app.command("token")
def agent_token(ctx: typer.Context, mirror: MirrorArg) -> None:
    """Create the mirror agent's token (replacing any previous one) and print it once."""
    from pftp_coordinator.agent_tokens import issue_token
    from pftp_coordinator.db import session_scope
    from pftp_coordinator.services.errors import ServiceError

    with _factory(ctx) as (_settings, factory), session_scope(factory) as s:
        try:
            token = issue_token(s, mirror)
        except ServiceError as exc:
            raise _fail(str(exc)) from exc
    typer.echo(token)
    typer.echo(
        f"# token for mirror {mirror}: shown once, only its hash is stored. Put it in "
        "/etc/pftp/agent.conf (token = ...) or PFTP_AGENT_TOKEN.",
        err=True,
    )


@agent_app.command("revoke")
def agent_revoke(ctx: typer.Context, mirror: MirrorArg) -> None:
    """Remove the mirror agent's token: its samples are refused from now on."""
    from pftp_coordinator.agent_tokens import revoke_token
    from pftp_coordinator.db import session_scope
    from pftp_coordinator.services.errors import ServiceError

    with _factory(ctx) as (_settings, factory), session_scope(factory) as s:
        try:
            had = revoke_token(s, mirror)
        except ServiceError as exc:
            raise _fail(str(exc)) from exc
    typer.echo(f"agent token of {mirror} revoked" if had else f"{mirror} had no agent token")


@ops_app.command("scan")
def scan(ctx: typer.Context, mirror: MirrorArg) -> None:
    """Scan a mirror's tree for its registered replicas now (presence and size)."""
    from pftp_coordinator.scans.service import scan_mirror

    with _factory(ctx) as (settings, factory):
        try:
            outcome = scan_mirror(
                factory, _mirror_id(factory, mirror), timeout_s=max(30.0, settings.probe_timeout_s)
            )
        except (OSError, EOFError, ValueError) as exc:
            raise _fail(f"scan of {mirror} failed: {exc}") from exc
        except Exception as exc:  # ftplib/httpx errors: show them, not a traceback
            raise _fail(f"scan of {mirror} failed: {type(exc).__name__}: {exc}") from exc
    if outcome is None:
        raise _fail(f"mirror {mirror} is disabled or has no URL")
    typer.echo(json.dumps(asdict(outcome), indent=2))


@ops_app.command("probe")
def probe(
    ctx: typer.Context,
    mirrors: Annotated[
        list[str] | None, typer.Argument(help="mirror names (several are probed at once)")
    ] = None,
    all_mirrors: Annotated[
        bool, typer.Option("--all", help="probe every enabled mirror, all at once")
    ] = False,
) -> None:
    """Probe mirrors now: RTT/loss, capacity (root), ranged-read throughput.

    Several mirrors are probed concurrently (up to ``probe_concurrency`` at a time,
    like the scheduler), so probing N mirrors takes about as long as the slowest one.
    Prints one JSON object for one mirror, a list for several; exit 2 when any
    mirror's probe failed.
    """
    from concurrent.futures import ThreadPoolExecutor

    from sqlalchemy import select

    from pftp_coordinator.db import session_scope
    from pftp_coordinator.models import Mirror
    from pftp_coordinator.probes.service import probe_mirror

    names = list(mirrors or [])
    if all_mirrors == bool(names):
        raise _fail("name the mirrors to probe, or give --all (not both)")
    with _factory(ctx) as (settings, factory):
        if all_mirrors:
            with session_scope(factory) as s:
                names = list(
                    s.scalars(select(Mirror.name).where(Mirror.enabled).order_by(Mirror.name))
                )
            if not names:
                raise _fail("no enabled mirror to probe")
        ids = [_mirror_id(factory, name) for name in dict.fromkeys(names)]
        workers = max(1, min(len(ids), settings.probe_concurrency))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="probe") as pool:
            outcomes = list(pool.map(lambda mid: probe_mirror(factory, mid, settings), ids))
    missing = [n for n, o in zip(dict.fromkeys(names), outcomes, strict=True) if o is None]
    if missing:
        raise _fail(f"mirror(s) {', '.join(missing)} disabled or without a URL")
    found = [asdict(o) for o in outcomes if o is not None]
    typer.echo(
        json.dumps(
            found[0] if len(found) == 1 and not all_mirrors else found, indent=2, default=str
        )
    )
    if not all(o.ok for o in outcomes if o is not None):
        raise typer.Exit(2)
