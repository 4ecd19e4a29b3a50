"""The ``handoff`` command line."""

from __future__ import annotations

import bisect
import json
import logging
import sys
from typing import TextIO

import click
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError as RedisResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from bot.blockkit.replies import TASK_NAMES
from bot.config import Settings
from store.exceptions import ConfigurationError, HandoffError
from store.lost_attempts import retry_warning
from store.models import Handoff, RequestType, Status, TaskKind
from store.repository import HandoffStore
from worker.client import pending_index
from worker.notifier import LoggingNotifier, Notifier
from worker.runner import LOG_FORMAT


def _settings() -> Settings:
    # A bad or missing setting is a ConfigurationError with a one-line message.
    return Settings.from_env()


class _ConfigurationProblem(click.ClickException):
    """A setting to fix: one line, and exit status 2 like a usage error (without the usage
    text, which says nothing about the environment)."""

    exit_code = 2


class _HandoffGroup(click.Group):
    """Shows the store's errors, bad settings and an unreachable Redis as one-line messages
    instead of tracebacks."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except ConfigurationError as exc:
            raise _ConfigurationProblem(str(exc)) from exc
        except HandoffError as exc:
            raise click.ClickException(str(exc)) from exc
        except RedisResponseError as exc:
            # Redis itself refused (a database number it does not have, a bad client name).
            raise click.ClickException(f"Redis refused: {exc}; check REDIS_URL") from exc
        except (RedisConnectionError, RedisTimeoutError) as exc:
            # Not the URL: it may carry a password.
            raise click.ClickException(
                f"cannot reach Redis ({exc}); check that it is running and that REDIS_URL "
                "points at it"
            ) from exc


@click.group(cls=_HandoffGroup)
@click.option("-v", "--verbose", is_flag=True, help="Log at debug level.")
def main(verbose: bool) -> None:
    """slack-handoff: AI agents hand work to people in Slack and get it back."""
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format=LOG_FORMAT,
    )
    _redact_secrets()


def _redact_secrets() -> None:
    """Keep the tokens and the signing secret out of every log line of this process and of
    the processes it forks (gunicorn workers, RQ work horses)."""
    from pydantic import ValidationError

    from bot.log_redaction import install

    try:
        settings = Settings()
    except ValidationError:  # the command itself reports what is wrong with the settings
        install([])
        return
    install([settings.slack_bot_token, settings.slack_signing_secret, settings.slack_app_token])


@main.command()
@click.option("--burst", is_flag=True, help="Stop when the queue is empty.")
@click.option("--no-dispatcher", is_flag=True, help="Run only the RQ worker.")
@click.option("--name", default=None, help="Worker name shown by `rq info`.")
@click.option(
    "--fork/--no-fork",
    default=False,
    show_default=True,
    help="Run each job in a forked work horse (isolates resume targets that leak or crash) "
    "instead of in the worker process.",
)
@click.option(
    "--work",
    type=click.Choice(["all", "resumes", "slack"]),
    default="all",
    show_default=True,
    help="Which queue to work: both (an RQ worker on each, so resumes never wait for "
    "Slack), or only resumes or only Slack work (posts, updates, reminders), to scale them "
    "apart.",
)
def worker(burst: bool, no_dispatcher: bool, name: str | None, fork: bool, work: str) -> None:
    """Run RQ workers (and a dispatcher) for resumes and for Slack work."""
    from worker.runner import run_worker

    settings = _settings()
    run_worker(
        settings.require_redis_url(),
        store_config=settings.store_config(),
        queue_name=settings.queue,
        notifier=build_notifier(settings),
        with_dispatcher=not no_dispatcher,
        dispatch_interval=settings.sweep_interval_seconds,
        dispatch_timeout=settings.dispatch_timeout_seconds,
        burst=burst,
        name=name,
        fork=fork,
        redis_wait_seconds=settings.redis_wait_seconds,
        work=work,  # type: ignore[arg-type]  # one of click's choices
    )


def build_notifier(settings: Settings) -> Notifier:
    """The notifier the worker hands handoffs to, from settings: Slack (posts, updates and
    App Home refreshes) with a bot token, the log without one."""
    if not settings.slack_bot_token:
        logging.getLogger(__name__).warning("SLACK_BOT_TOKEN is not set: handoffs go to the log")
        return LoggingNotifier()
    # Imported here: a worker without a token needs none of the Slack side.
    from bot.access.reviewers import ReviewerPolicy
    from bot.delivery.conversations import Conversations
    from bot.delivery.home_publisher import refresh_homes
    from bot.delivery.posting import LookUps, Poster
    from bot.delivery.slack_notifier import SlackNotifier
    from bot.slack_client import make_web_client

    # A 429 puts the task off (the worker never sleeps it out): see bot.delivery.posting.
    client = make_web_client(settings, retry_rate_limits=False)
    store = settings.open_store()
    policy = ReviewerPolicy.from_settings(settings, client, store.redis, store.keys)
    look_ups = LookUps.shared(
        store.redis,
        store.keys,
        calls_per_minute=settings.slack_history_calls_per_minute,
        page_size=settings.slack_history_page_size,
        clock_skew_seconds=settings.slack_clock_skew_seconds,
    )

    def refresh(handoff: Handoff) -> None:
        refresh_homes(client, store, policy, handoff, command=settings.slash_command)

    return SlackNotifier(
        client,
        Conversations(client, store.redis, store.keys),
        default_channel=settings.channel,
        on_change=refresh,
        poster=Poster(client, look_ups=look_ups),
    )


@main.command()
@click.option("--host", default="0.0.0.0", show_default=True)
@click.option("--port", default=3000, show_default=True)
@click.option("--workers", default=2, show_default=True, help="gunicorn worker processes.")
@click.option("--threads", default=8, show_default=True, help="Threads per worker process.")
@click.option(
    "--socket-mode", is_flag=True, help="Use Socket Mode (default when SLACK_APP_TOKEN is set)."
)
def serve(host: str, port: int, workers: int, threads: int, socket_mode: bool) -> None:
    """Serve the Slack bot: HTTP on /slack/events (and GET /healthz), or Socket Mode."""
    from bot.serve import serve_http, serve_socket_mode

    settings = _settings()
    settings.require_redis_url()
    # A ConfigurationError (a Slack setting missing) is shown by _HandoffGroup, in one line.
    if socket_mode or settings.slack_app_token:
        if not settings.slack_app_token:
            raise click.UsageError("--socket-mode needs SLACK_APP_TOKEN (xapp-...)")
        serve_socket_mode(settings)
    else:
        serve_http(settings, host=host, port=port, workers=workers, threads=threads)


@main.command()
def dispatcher() -> None:
    """Run only the dispatcher (expiry, retries, outbox to RQ)."""
    from worker.runner import run_dispatcher

    settings = _settings()
    run_dispatcher(
        settings.require_redis_url(),
        store_config=settings.store_config(),
        queue_name=settings.queue,
        interval=settings.sweep_interval_seconds,
        dispatch_timeout=settings.dispatch_timeout_seconds,
        redis_wait_seconds=settings.redis_wait_seconds,
    )


@main.command()
@click.argument("handoff_id")
def show(handoff_id: str) -> None:
    """Print a handoff and its audit trail as JSON."""
    store = _settings().open_store()
    handoff = store.get(handoff_id)
    record = handoff.model_dump(mode="json")
    record["audit"] = [event.model_dump(mode="json") for event in store.audit_trail(handoff_id)]
    click.echo(json.dumps(record, indent=2))


@main.command(name="list")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(min=1))
@click.option("--cursor", default=None, help="next_cursor of the previous page.")
@click.option("--channel", default=None, help="Only the handoffs posted in this channel id.")
@click.option("--run", "run_id", default=None, help="Only the handoffs of this run.")
@click.option("--reviewer", default=None, help="Only the handoffs this user or group may decide.")
@click.option(
    "--type",
    "request_type",
    type=click.Choice([t.value for t in RequestType]),
    default=None,
    help="Only the handoffs of this type.",
)
@click.option(
    "--failed",
    is_flag=True,
    help="Instead: handoffs whose delivery, resume or message update gave up (any status).",
)
def list_pending(
    limit: int,
    cursor: str | None,
    channel: str | None,
    run_id: str | None,
    reviewer: str | None,
    request_type: str | None,
    failed: bool,
) -> None:
    """List pending handoffs, oldest first (filtered by at most one of the filters)."""
    filters = {
        "--channel": channel,
        "--run": run_id,
        "--reviewer": reviewer,
        "--type": request_type,
        "--failed": "yes" if failed else None,
    }
    given = {option: value for option, value in filters.items() if value}
    if len(given) > 1:
        raise click.UsageError(f"filter by one of {', '.join(filters)} at a time")
    store = _settings().open_store()
    if failed:
        _list_failed(store, cursor=cursor, limit=limit)
        return
    index = pending_index(
        store.keys, channel=channel, run_id=run_id, reviewer=reviewer, request_type=request_type
    )
    page = store.list_pending(index, cursor=cursor, limit=limit)
    for handoff in page.items:
        click.echo(
            f"{handoff.id}  {handoff.request_type.value:<10}  run={handoff.run_id}  "
            f"created={handoff.created_at:%Y-%m-%d %H:%M:%S}"
        )
    if page.next_cursor:
        click.echo(f"more: --cursor {page.next_cursor}")
    if not page.items:
        # Say so: an empty output reads as a command that did nothing.
        which = "".join(f" with {option} {value}" for option, value in given.items())
        if cursor:
            click.echo(f"no more pending handoffs{which} after this cursor")
        else:
            click.echo(f"no pending handoffs{which}")


def _list_failed(store: HandoffStore, *, cursor: str | None, limit: int) -> None:
    ids = store.failed_handoff_ids()
    start = bisect.bisect_right(ids, cursor) if cursor else 0
    shown = ids[start : start + limit]
    for handoff in store.get_many(shown):
        failures = [
            f"{TASK_NAMES[kind]} failed ({task.last_error or 'no error recorded'})"
            for kind, task in handoff.failed_tasks()
        ]
        click.echo(
            f"{handoff.id}  {handoff.status.value:<13}  run={handoff.run_id}  "
            + "; ".join(failures)
        )
    if start + limit < len(ids):
        click.echo(f"more: --failed --cursor {shown[-1]}")
    if not shown:
        click.echo("no more failed handoffs after this cursor" if cursor else "nothing has failed")


@main.command()
@click.argument("handoff_id")
@click.argument("outcome", type=click.Choice([s.value for s in Status if s.value != "pending"]))
@click.option("--by", required=True, help="Who decides (e.g. a Slack user id).")
@click.option("--comment", default=None, help="Reason or note.")
@click.option("--answer", default=None, help="Answer text (questions, escalations).")
def decide(handoff_id: str, outcome: str, by: str, comment: str | None, answer: str | None) -> None:
    """Decide a pending handoff from the command line."""
    store = _settings().open_store()
    handoff = store.decide(
        handoff_id, outcome, decided_by=by, via="cli", comment=comment, answer=answer
    )
    click.echo(f"{handoff.id} is {handoff.status.value}")


@main.command()
@click.argument("handoff_id")
@click.option("--by", default="cli", help="Who asks for the retry.")
def retry(handoff_id: str, by: str) -> None:
    """Retry what failed after all its attempts: the delivery, the resume, the update."""
    store = _settings().open_store()
    warning = retry_warning(store.get(handoff_id).resume)
    retried = store.retry_failed(handoff_id, requested_by=by)
    click.echo(f"{', '.join(kind.value for kind in retried)} of {handoff_id} queued again")
    if warning and TaskKind.RESUME in retried:
        click.echo(f"warning: {warning}", err=True)


@main.group()
def audit() -> None:
    """Read the audit trail."""


@audit.command(name="export")
@click.option("--since", default=None, help="ISO date/time (UTC unless given) or an age: 7d, 12h.")
@click.option("--run", "run_id", default=None, help="Only the events of this run's handoffs.")
@click.option(
    "--output", type=click.File("w"), default="-", show_default=True, help="File to write."
)
def audit_export(since: str | None, run_id: str | None, output: TextIO) -> None:
    """Write every audit event as JSON Lines (time, event, actor, handoff_id, detail, id)."""
    from bot.queries.audit_export import export_audit
    from store.durations import parse_since

    try:
        start = parse_since(since) if since else None
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--since") from exc
    written = export_audit(_settings().open_store(), output, since=start, run_id=run_id)
    click.echo(f"{written} events exported", err=True)


@main.command()
@click.option("--data-dir", default=".handoff-dev", show_default=True, help="Data and logs.")
@click.option("--auto", is_flag=True, help="Decide the demo handoffs without asking.")
@click.option("--port", default=3000, show_default=True, help="Port of the bot.")
@click.option("--standin-port", default=3001, show_default=True, help="Port of the Slack stand-in.")
@click.option("--keep-running", is_flag=True, help="Keep everything up after the demo.")
def dev(data_dir: str, auto: bool, port: int, standin_port: int, keep_running: bool) -> None:
    """Run everything locally: Redis, a Slack stand-in, the bot, a worker and a demo agent."""
    from bot.dev.run import run_dev

    sys.exit(
        run_dev(
            _settings(),
            data_dir=data_dir,
            auto=auto or not sys.stdin.isatty(),
            port=port,
            standin_port=standin_port,
            keep_running=keep_running,
        )
    )


if __name__ == "__main__":
    main()
