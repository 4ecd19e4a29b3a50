"""The commands that run the processes: ``serve`` (the Slack bot), ``worker`` (resumes and
Slack work, with a dispatcher), ``dispatcher`` alone, and ``dev`` (everything on one
machine, against the Slack stand-in)."""

from __future__ import annotations

import logging
import sys

import click

from bot.cli.app import main
from bot.cli.app import settings as _settings
from bot.config import Settings
from store.models import Handoff
from worker.notifier import LoggingNotifier, Notifier


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
@click.option(
    "--metrics-port",
    type=click.IntRange(1, 65535),
    default=None,
    help="Serve /metrics on this port: the counts of all this worker's processes and the "
    "store's figures (docs/monitoring.md).",
)
@click.option(
    "--metrics-host",
    default="127.0.0.1",
    show_default=True,
    help="The address /metrics listens on (0.0.0.0: every interface).",
)
def worker(
    burst: bool,
    no_dispatcher: bool,
    name: str | None,
    fork: bool,
    work: str,
    metrics_port: int | None,
    metrics_host: str,
) -> None:
    """Run RQ workers (and a dispatcher) for resumes and for Slack work."""
    from worker.outbound import parse_allowed_hosts
    from worker.runner import run_worker
    from worker.tracing import configure_from_env
    from worker.webhooks import WebhookConfig

    settings = _settings()
    configure_from_env("handoff-worker")
    if not settings.metrics:
        if metrics_port is not None:
            raise click.UsageError("--metrics-port needs HANDOFF_METRICS on (it is false)")
        from worker.metrics import disable

        disable()
    run_worker(
        settings.require_redis_url(),
        queue_redis_url=_queue_url(settings),
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
        webhooks=WebhookConfig(
            allowed_hosts=parse_allowed_hosts(settings.webhook_allowed_hosts),
            timeout_seconds=settings.webhook_timeout_seconds,
        ),
        metrics_address=(metrics_host, metrics_port) if metrics_port is not None else None,
    )


def _queue_url(settings: Settings) -> str | None:
    """HANDOFF_QUEUE_REDIS_URL when the queues are not beside the store (None: they are);
    a ``ConfigurationError`` when the store is a cluster and no such URL is set."""
    queue_url = settings.require_queue_redis_url()
    return None if queue_url == settings.require_redis_url() else queue_url


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
        queue_redis_url=_queue_url(settings),
        store_config=settings.store_config(),
        queue_name=settings.queue,
        interval=settings.sweep_interval_seconds,
        dispatch_timeout=settings.dispatch_timeout_seconds,
        redis_wait_seconds=settings.redis_wait_seconds,
    )


@main.command()
@click.option("--data-dir", default=".handoff-dev", show_default=True, help="Data and logs.")
@click.option("--auto", is_flag=True, help="Decide the demo handoffs without asking.")
@click.option("--port", default=3000, show_default=True, help="Port of the bot.")
@click.option("--standin-port", default=3001, show_default=True, help="Port of the Slack stand-in.")
@click.option("--api-port", default=3002, show_default=True, help="Port of the HTTP API.")
@click.option("--keep-running", is_flag=True, help="Keep everything up after the demo.")
@click.option(
    "--use-redis-url",
    is_flag=True,
    help="Run on the Redis of REDIS_URL instead of an embedded one: only a Redis with no "
    "real deployment on it (the dev worker would take its handoffs).",
)
def dev(
    data_dir: str,
    auto: bool,
    port: int,
    standin_port: int,
    api_port: int,
    keep_running: bool,
    use_redis_url: bool,
) -> None:
    """Run everything locally: Redis, a Slack stand-in, the bot, a worker, the HTTP API and a
    demo agent."""
    from bot.dev.run import run_dev

    sys.exit(
        run_dev(
            _settings(),
            data_dir=data_dir,
            auto=auto or not sys.stdin.isatty(),
            port=port,
            standin_port=standin_port,
            api_port=api_port,
            keep_running=keep_running,
            use_redis_url=use_redis_url,
        )
    )
