"""``handoff api`` (the HTTP API process) and ``handoff keys`` (its bearer keys)."""

from __future__ import annotations

from typing import Any

import click

from bot.cli.app import main, settings
from bot.cli.output import echo_json, json_option
from store.api_keys import ApiKeys, describe
from store.connection import is_cluster_url
from store.durations import parse_age
from store.exceptions import ConfigurationError


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=3002, show_default=True, type=click.IntRange(1, 65535))
def api(host: str, port: int) -> None:
    """Serve the HTTP API (/v1/handoffs, /v1/openapi.json, /v1/docs, /healthz)."""
    import uvicorn

    from bot.api.app import ApiConfig, build_app
    from worker import metrics
    from worker.outbound import parse_allowed_hosts
    from worker.tracing import configure_from_env

    current = settings()
    configure_from_env("handoff-api")
    url = current.require_redis_url()
    # One process: its /metrics shows its own counts, never those of the other commands
    # that a PROMETHEUS_MULTIPROC_DIR set on this host would add up.
    metrics.use_single_process_mode()
    if is_cluster_url(url):
        raise ConfigurationError(
            "`handoff api` does not run on Redis Cluster (its waits use pub/sub on one "
            "server): give it a plain or Sentinel REDIS_URL"
        )
    # Reads give up after a few seconds (a 503 with Retry-After) rather than hang on a
    # Redis that stopped answering.
    redis = current.open_redis(socket_connect_timeout=2, socket_timeout=5)
    app = build_app(
        current.open_store(redis=redis),
        ApiConfig(
            redis_url=url,
            creates_per_minute=current.api_creates_per_minute,
            webhook_allowed_hosts=parse_allowed_hosts(current.webhook_allowed_hosts),
            metrics=current.metrics,
        ),
    )
    if not current.metrics:
        metrics.disable()
    # JSON logs: uvicorn's loggers then go to ours (HANDOFF_LOG_FORMAT) instead of its own.
    logs: dict[str, Any] = {} if current.log_format == "text" else {"log_config": None}
    uvicorn.run(app, host=host, port=port, log_level="info", server_header=False, **logs)


@main.group()
def keys() -> None:
    """Create, list and revoke the HTTP API's bearer keys."""


def _keys() -> ApiKeys:
    store = settings().open_store()
    return ApiKeys(store.redis, store.keys, acks=store.config.replica_acks)


@keys.command(name="create")
@click.argument("name")
@click.option("--admin", is_flag=True, help="May also decide, and see every handoff.")
@click.option(
    "--channel",
    "channels",
    multiple=True,
    help="A channel id the key may create handoffs in; repeat for several (default: any).",
)
@click.option("--expires", default=None, help="Lifetime such as 90d or 12h (default: none).")
@click.option(
    "--creates-per-minute", type=click.IntRange(min=1), default=None, help="Its own limit."
)
@json_option
def keys_create(
    name: str,
    admin: bool,
    channels: tuple[str, ...],
    expires: str | None,
    creates_per_minute: int | None,
    as_json: bool,
) -> None:
    """Create a key; it is printed once (Redis keeps only its hash)."""
    try:
        lifetime = parse_age(expires) if expires else None
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--expires") from exc
    created = _keys().create(
        name,
        admin=admin,
        channels=list(channels),
        expires_in=lifetime,
        creates_per_minute=creates_per_minute,
    )
    record = created.record
    if as_json:
        echo_json({**describe(record), "key": created.key, "webhook_secret": record.webhook_secret})
        return
    click.echo(f"key {record.name} ({'admin' if record.admin else 'agent'}) created")
    click.echo(f"  key:            {created.key}")
    click.echo(f"  webhook secret: {record.webhook_secret}")
    click.echo("Store both now: they are not shown again.", err=True)


@keys.command(name="list")
@json_option
def keys_list(as_json: bool) -> None:
    """List the keys (names, rights, expiry; never the keys)."""
    records = _keys().list()
    if as_json:
        echo_json({"keys": [describe(r) for r in records]})
        return
    for record in records:
        rights = "admin" if record.admin else "agent"
        where = ",".join(record.channels) or "any channel"
        until = f"expires {record.expires_at:%Y-%m-%d %H:%M}" if record.expires_at else "no expiry"
        click.echo(f"{record.name:<24} {rights:<6} {where:<24} {until}")
    if not records:
        click.echo("no keys; `handoff keys create NAME` makes one")


@keys.command(name="revoke")
@click.argument("name")
def keys_revoke(name: str) -> None:
    """Revoke a key at once (its next request is refused)."""
    _keys().revoke(name)
    click.echo(f"key {name} revoked")
