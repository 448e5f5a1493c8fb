"""`pftp-coordinator`: migrate, serve, and the admin actions from a shell.

Commands call the same services as the admin HTTP API. The database comes from
--database-url, else PFTP_DATABASE_URL / the config file, else SQLite in the
data directory.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from sqlalchemy.orm import Session

from pftp_coordinator import migrate as migrations
from pftp_coordinator.config import Settings, get_settings
from pftp_coordinator.db import create_db_engine, make_session_factory, session_scope
from pftp_coordinator.services import files as file_service
from pftp_coordinator.services import mirrors as mirror_service
from pftp_coordinator.services import replicas as replica_service
from pftp_coordinator.services.errors import ServiceError

app = typer.Typer(
    help="P-FTP coordinator: database migrations, the HTTP API, mirrors, files and replicas.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
mirror_app = typer.Typer(help="Mirrors: add, list, change, enable, disable.", no_args_is_help=True)
file_app = typer.Typer(help="Files clients can ask for.", no_args_is_help=True)
replica_app = typer.Typer(help="Which mirror holds which file.", no_args_is_help=True)
app.add_typer(mirror_app, name="mirror")
app.add_typer(file_app, name="file")
app.add_typer(replica_app, name="replica")


def _add_ops_apps() -> None:
    # Agent tokens, manual scans and probes live with the scheduler code (issue 4).
    from pftp_coordinator import cli_ops

    app.add_typer(cli_ops.agent_app, name="agent")
    app.add_typer(cli_ops.ops_app)  # no name: its commands (scan, ...) join the top level


_add_ops_apps()


def fail(message: str, code: int = 1) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


@app.callback()
def main_options(
    ctx: typer.Context,
    database_url: Annotated[
        str | None,
        typer.Option(
            "--database-url",
            envvar="PFTP_DATABASE_URL",
            help="SQLAlchemy URL (postgresql://... or sqlite:///...). "
            "Default: SQLite in the data directory.",
            show_default=False,
        ),
    ] = None,
) -> None:
    if database_url:
        # Through the environment, so every Settings() in this process (including
        # the ops commands and uvicorn workers) sees the same database.
        os.environ["PFTP_DATABASE_URL"] = database_url
    get_settings.cache_clear()
    try:
        ctx.obj = get_settings()
    except ValidationError as exc:
        raise fail(f"invalid configuration: {exc}") from exc


def _settings(ctx: typer.Context) -> Settings:
    return ctx.obj if isinstance(ctx.obj, Settings) else get_settings()


@contextmanager
def _session(ctx: typer.Context) -> Iterator[Session]:
    """A committed-on-success session on a migrated database; errors become messages."""
    settings = _settings(ctx)
    engine = create_db_engine(settings.effective_database_url, pool_size=1)
    try:
        migrations.require_up_to_date(engine)
        with session_scope(make_session_factory(engine)) as session:
            yield session
    except (ServiceError, migrations.SchemaOutOfDate) as exc:
        raise fail(str(exc)) from exc
    finally:
        engine.dispose()


def _echo_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2, default=str))


# --- database ---------------------------------------------------------------------


@app.command()
def migrate(
    ctx: typer.Context,
    revision: Annotated[str, typer.Option(help="target revision")] = "head",
) -> None:
    """Create or upgrade the database schema (safe to run again)."""
    url = _settings(ctx).effective_database_url
    migrations.upgrade(url, revision)
    typer.echo(f"database at revision {migrations.current(url)}")


@app.command()
def downgrade(
    ctx: typer.Context,
    revision: Annotated[str, typer.Argument(help="target revision, e.g. base or -1")],
) -> None:
    """Revert the schema to an older revision ("base" drops every table)."""
    url = _settings(ctx).effective_database_url
    migrations.downgrade(url, revision)
    typer.echo(f"database at revision {migrations.current(url) or 'base'}")


# --- HTTP API -----------------------------------------------------------------------


@app.command()
def serve(
    ctx: typer.Context,
    host: Annotated[str | None, typer.Option(help="listen address [settings: host]")] = None,
    port: Annotated[int | None, typer.Option(help="listen port [settings: port]")] = None,
    workers: Annotated[int, typer.Option(min=1, help="uvicorn worker processes")] = 1,
) -> None:
    """Run the HTTP API (and, when enabled, the scheduler and announcer)."""
    import uvicorn

    from pftp_coordinator.logging_setup import configure_logging

    settings = _settings(ctx)
    engine = create_db_engine(settings.effective_database_url, pool_size=1)
    try:
        migrations.require_up_to_date(engine)
    except migrations.SchemaOutOfDate as exc:
        raise fail(f"refusing to start: {exc}") from exc
    finally:
        engine.dispose()
    configure_logging(settings.log_level, settings.log_json)
    common: dict[str, Any] = {
        "host": host or settings.host,
        "port": port or settings.port,
        "log_config": None,
        "access_log": False,  # our middleware logs each request (with its id)
        "lifespan": "on",
        "http": _http_protocol(),
    }
    if workers == 1:
        from pftp_coordinator.api.app import create_app

        uvicorn.run(create_app(settings), **common)
    else:
        # Each worker builds its own app from the environment (see main_options).
        uvicorn.run("pftp_coordinator.api.app:create_app", factory=True, workers=workers, **common)


def _http_protocol() -> str:
    """uvicorn's httptools protocol with one write per response (see http_protocol.py)."""
    try:
        import httptools  # noqa: F401
    except ImportError:
        return "auto"
    from pftp_coordinator.http_protocol import PROTOCOL_PATH

    return PROTOCOL_PATH


# --- mirrors ------------------------------------------------------------------------


def _mirror_dict(m: Any, replicas: int) -> dict[str, Any]:
    # ``replicas`` has no default: a changed mirror must show its real count.
    return {
        "name": m.name,
        "enabled": m.enabled,
        "state": m.state,
        "urls": {u.protocol: u.base_url for u in m.urls},
        "region": m.region,
        "asn": m.asn,
        "notes": m.notes,
        "replicas": replicas,
    }


@mirror_app.command("add")
def mirror_add(
    ctx: typer.Context,
    name: str,
    url: Annotated[list[str], typer.Option("--url", help="base URL; repeat per protocol")],
    region: Annotated[str | None, typer.Option()] = None,
    asn: Annotated[int | None, typer.Option(help="autonomous system number")] = None,
    notes: Annotated[str | None, typer.Option()] = None,
    disabled: Annotated[bool, typer.Option("--disabled", help="add it disabled")] = False,
) -> None:
    """Register a mirror, e.g. `mirror add m1 --url ftp://host/pub/ --url http://host/pub/`."""
    with _session(ctx) as session:
        m = mirror_service.add_mirror(
            session, name=name, urls=url, region=region, asn=asn, notes=notes, enabled=not disabled
        )
        typer.echo(f"added mirror {m.name}: " + ", ".join(u.base_url for u in m.urls))


@mirror_app.command("list")
def mirror_list(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable output")] = False,
    scores: Annotated[bool, typer.Option(help="include the current ranking scores")] = True,
) -> None:
    """List mirrors with their state, replica count and current score."""
    with _session(ctx) as session:
        mirrors = mirror_service.list_mirrors(session)
        counts = mirror_service.replica_counts(session)
        rows = [_mirror_dict(m, counts.get(m.id, 0)) for m in mirrors]
    if scores and rows:
        by_name = _current_scores(_settings(ctx))
        for row in rows:
            score = by_name.get(row["name"])
            row["score"] = score.model_dump() if score is not None else None
    if as_json:
        _echo_json(rows)
        return
    if not rows:
        typer.echo("no mirrors; add one with `pftp-coordinator mirror add NAME --url URL`")
        return
    for row in rows:
        score = row.get("score") or {}
        suitability = score.get("suitability")
        typer.echo(
            f"{row['name']:<20} {'enabled' if row['enabled'] else 'DISABLED':<8} "
            f"{row['state']:<7} replicas={row['replicas']:<6} "
            f"score={'-' if suitability is None else f'{suitability:.3f}'}  "
            + " ".join(row["urls"].values())
        )


def _current_scores(settings: Settings) -> dict[str, Any]:
    from pftp_coordinator.ranking_inputs import SnapshotCache
    from pftp_coordinator.services.mirror_scores import current_scores

    engine = create_db_engine(settings.effective_database_url, pool_size=1)
    try:
        cache = SnapshotCache(make_session_factory(engine), settings)
        return current_scores(cache.refresh(), settings=settings)
    finally:
        engine.dispose()


def _set_enabled(ctx: typer.Context, name: str, enabled: bool) -> None:
    with _session(ctx) as session:
        m = mirror_service.set_enabled(session, name=name, enabled=enabled)
        typer.echo(f"mirror {m.name} {'enabled' if m.enabled else 'disabled'}")


@mirror_app.command("enable")
def mirror_enable(ctx: typer.Context, name: str) -> None:
    """Use the mirror in assignments again."""
    _set_enabled(ctx, name, True)


@mirror_app.command("disable")
def mirror_disable(ctx: typer.Context, name: str) -> None:
    """Stop assigning the mirror (its data is kept)."""
    _set_enabled(ctx, name, False)


@mirror_app.command("set")
def mirror_set(
    ctx: typer.Context,
    name: str,
    url: Annotated[
        list[str] | None, typer.Option("--url", help="replace all base URLs; repeatable")
    ] = None,
    region: Annotated[str | None, typer.Option()] = None,
    asn: Annotated[int | None, typer.Option()] = None,
    notes: Annotated[str | None, typer.Option()] = None,
) -> None:
    """Change a mirror's base URLs, region, AS number or notes."""
    changes: dict[str, Any] = {}
    if url:
        changes["urls"] = url
    if region is not None:
        changes["region"] = region or None
    if asn is not None:
        changes["asn"] = asn
    if notes is not None:
        changes["notes"] = notes or None
    if not changes:
        raise fail("nothing to change: give --url, --region, --asn or --notes")
    with _session(ctx) as session:
        m = mirror_service.update_mirror(session, name=name, **changes)
        _echo_json(_mirror_dict(m, mirror_service.replica_count(session, mirror_id=m.id)))


# --- files --------------------------------------------------------------------------


@file_app.command("add")
def file_add(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="logical name clients ask for")],
    size: Annotated[int | None, typer.Option(min=0)] = None,
    sha256: Annotated[str | None, typer.Option()] = None,
    piece_size: Annotated[int | None, typer.Option(min=1, help="bytes per hashed piece")] = None,
    piece_hash: Annotated[
        list[str] | None, typer.Option("--piece-hash", help="SHA-256 of each piece, in order")
    ] = None,
    from_path: Annotated[
        Path | None,
        typer.Option("--from-path", help="compute size and hashes from a local copy"),
    ] = None,
) -> None:
    """Register a file: give --size and --sha256, or --from-path to compute them."""
    if from_path is not None:
        if size is not None or sha256 is not None or piece_hash:
            raise fail("--from-path computes size and hashes; do not also give them")
        try:
            digest = file_service.digest_local_file(from_path, piece_size=piece_size)
        except ServiceError as exc:
            raise fail(str(exc)) from exc
        size, sha256, pieces = digest.size, digest.sha256, digest.piece_sha256
    else:
        if size is None or sha256 is None:
            raise fail("give --size and --sha256, or --from-path PATH")
        pieces = piece_hash or None
    with _session(ctx) as session:
        row = file_service.add_file(
            session,
            name=name,
            size=size,
            sha256=sha256,
            piece_size=piece_size,
            piece_sha256=pieces,
        )
        typer.echo(
            f"added file {row.name}: {row.size} bytes, sha256 {row.sha256}"
            + (f", {len(row.piece_sha256)} pieces" if row.piece_sha256 else "")
        )


@file_app.command("list")
def file_list(
    ctx: typer.Context,
    prefix: Annotated[str | None, typer.Option(help="only names starting with this")] = None,
    limit: Annotated[int, typer.Option(min=1)] = 1000,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """List files with the number of mirrors holding each."""
    with _session(ctx) as session:
        rows = [
            {
                "name": f.name,
                "size": f.size,
                "sha256": f.sha256,
                "piece_size": f.piece_size,
                "replicas": n,
            }
            for f, n in file_service.list_files(session, prefix=prefix, limit=limit)
        ]
    if as_json:
        _echo_json(rows)
        return
    for r in rows:
        typer.echo(f"{r['name']:<40} {r['size']:>14} {r['sha256'][:16]}  replicas={r['replicas']}")


# --- replicas -----------------------------------------------------------------------


@replica_app.command("add")
def replica_add(
    ctx: typer.Context,
    mirror: str,
    file: str,
    path: Annotated[
        str | None, typer.Option(help="path below the mirror's base URLs [default: file name]")
    ] = None,
) -> None:
    """Record that MIRROR holds FILE (used at once; replica scans check it later)."""
    with _session(ctx) as session:
        r = replica_service.add_replica(session, mirror=mirror, file=file, path=path)
        typer.echo(f"replica of {file} on {mirror} at {r.path}")


@replica_app.command("list")
def replica_list(
    ctx: typer.Context,
    file: Annotated[str | None, typer.Option()] = None,
    mirror: Annotated[str | None, typer.Option()] = None,
) -> None:
    """List replicas, optionally of one file or on one mirror."""
    with _session(ctx) as session:
        for r, m, f in replica_service.list_replicas(session, file=file, mirror=mirror):
            usable = "usable" if replica_service.is_usable(r, f) else "not-usable"
            typer.echo(f"{f.name:<40} {m.name:<20} {usable:<10} {r.path}")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
