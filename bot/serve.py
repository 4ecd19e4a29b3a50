"""Running ``handoff serve``: the WSGI app behind gunicorn, or Socket Mode.

The composition root of the HTTP process: it builds the store, the request gate and the Bolt
app from settings, and hands them to ``bot.http.wsgi``.
"""

from __future__ import annotations

import logging
from typing import Any

from gunicorn import glogging
from gunicorn.app.base import BaseApplication

from bot.app import create_app
from bot.config import Settings
from bot.http.checks import RequestGate
from bot.http.prefetch import clicked_handoff_read
from bot.http.replay import ReplayGuard
from bot.http.wsgi import WSGIApp, make_wsgi_app
from bot.keys import BotKeys
from bot.log_format import JsonFormatter
from store.exceptions import ConfigurationError
from store.metrics import FigureReader
from worker import metrics

logger = logging.getLogger(__name__)

SERVE_REDIS_CONNECT_TIMEOUT_SECONDS = 2.0
SERVE_REDIS_TIMEOUT_SECONDS = 5.0


def build_wsgi_app(settings: Settings) -> WSGIApp:
    """The whole WSGI app from settings (one per server process)."""
    if not settings.slack_signing_secret:
        raise ConfigurationError(
            "SLACK_SIGNING_SECRET is not set; HTTP mode needs it to verify requests from "
            "Slack: set it (the app's Basic Information page), or set SLACK_APP_TOKEN to use "
            "Socket Mode"
        )
    # Timeouts so that a Redis that stops answering (rather than refusing) frees the
    # request threads instead of holding them: well past any normal command, and Slack
    # gives up on an answer after 3 s anyway.
    redis = settings.open_redis(
        health_check_interval=30,
        socket_connect_timeout=SERVE_REDIS_CONNECT_TIMEOUT_SECONDS,
        socket_timeout=SERVE_REDIS_TIMEOUT_SECONDS,
    )
    store = settings.open_store(redis=redis)
    replay = ReplayGuard(redis, BotKeys(store.keys))
    gate = RequestGate(settings.slack_signing_secret, replay, read_for=clicked_handoff_read(store))
    registry = None
    if settings.metrics:
        registry = metrics.exposition_registry(FigureReader(redis, store.keys), process="serve")
    else:
        metrics.disable()
    return make_wsgi_app(create_app(settings, redis=redis), redis, gate=gate, metrics=registry)


class _Gunicorn(BaseApplication):  # type: ignore[misc]
    """gunicorn run from Python: each worker process builds its own app after the fork."""

    def __init__(self, settings: Settings, options: dict[str, Any]) -> None:
        self.settings = settings
        self.options = options
        super().__init__()

    def load_config(self) -> None:
        for key, value in self.options.items():
            self.cfg.set(key, value)

    def load(self) -> WSGIApp:
        from worker.tracing import configure_from_env

        configure_from_env("handoff-serve")  # in each worker process, after the fork
        return build_wsgi_app(self.settings)


class _JsonLogs(glogging.Logger):  # type: ignore[misc]
    """gunicorn's own log lines (a worker booted, timed out...) as JSON, as ours are
    (``HANDOFF_LOG_FORMAT=json``)."""

    def setup(self, cfg: Any) -> None:
        super().setup(cfg)
        for log in (self.error_log, self.access_log):
            for handler in log.handlers:
                handler.setFormatter(JsonFormatter())


def serve_http(settings: Settings, *, host: str, port: int, workers: int, threads: int) -> None:
    """Serve ``/slack/events`` with gunicorn (threaded workers), and ``GET /metrics``: the
    counts of every worker process (added up in a multiprocess directory made here, before
    they are forked; ``worker.metrics.MultiprocessDirectory``) and the store's figures."""
    directory = metrics.MultiprocessDirectory() if settings.metrics else None
    try:
        _serve_http(settings, host=host, port=port, workers=workers, threads=threads)
    finally:
        if directory is not None:
            directory.close()


def _serve_http(settings: Settings, *, host: str, port: int, workers: int, threads: int) -> None:
    # Fail fast on bad settings, here, rather than in each worker process after the fork.
    create_app(settings, redis=settings.open_redis())
    options = {
        "bind": f"{host}:{port}",
        "workers": workers,
        "threads": threads,
        "worker_class": "gthread",
        "timeout": 30,
        "graceful_timeout": 10,
        "keepalive": 5,
        "accesslog": None,
        "loglevel": "info",
    }
    if settings.log_format == "json":
        options["logger_class"] = _JsonLogs
    _Gunicorn(settings, options).run()


def serve_socket_mode(settings: Settings) -> None:
    """Connect to Slack over Socket Mode (no public URL needed)."""
    from slack_bolt.adapter.socket_mode import SocketModeHandler

    from worker.tracing import configure_from_env

    configure_from_env("handoff-serve")
    app = create_app(settings, redis=settings.open_redis())
    SocketModeHandler(app, settings.slack_app_token).start()
