"""Serving the Bolt app: a WSGI app behind gunicorn, or Socket Mode."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from typing import Any

from gunicorn.app.base import BaseApplication
from redis import Redis
from redis.exceptions import RedisError
from slack_bolt import App
from slack_bolt.adapter.wsgi import SlackRequestHandler

from bot.app import create_app
from bot.config import Settings

logger = logging.getLogger(__name__)

EVENTS_PATH = "/slack/events"
HEALTH_PATH = "/healthz"

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def make_wsgi_app(bolt_app: App, redis: Redis) -> WSGIApp:
    """``/slack/events`` for events, interactivity and commands; ``GET /healthz`` checks Redis."""
    slack = SlackRequestHandler(bolt_app, path=EVENTS_PATH)

    def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") == HEALTH_PATH and environ.get("REQUEST_METHOD") == "GET":
            return _health(redis, start_response)
        return slack(environ, start_response)

    return application


def _health(redis: Redis, start_response: Callable[..., Any]) -> Iterable[bytes]:
    try:
        redis.ping()
        status, body = "200 OK", {"ok": True, "redis": "ok"}
    except RedisError as exc:
        status, body = "503 Service Unavailable", {"ok": False, "redis": str(exc)}
    payload = json.dumps(body).encode()
    start_response(
        status, [("Content-Type", "application/json"), ("Content-Length", str(len(payload)))]
    )
    return [payload]


def build_wsgi_app(settings: Settings) -> WSGIApp:
    """The whole WSGI app from settings (one per server process)."""
    if not settings.redis_url:
        raise ValueError("REDIS_URL is not set")
    redis = Redis.from_url(settings.redis_url, health_check_interval=30)
    return make_wsgi_app(create_app(settings, redis=redis), redis)


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
        return build_wsgi_app(self.settings)


def serve_http(settings: Settings, *, host: str, port: int, workers: int, threads: int) -> None:
    """Serve ``/slack/events`` with gunicorn (threaded workers)."""
    create_app(
        settings, redis=Redis.from_url(settings.redis_url or "")
    )  # fail fast on bad settings
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
    _Gunicorn(settings, options).run()


def serve_socket_mode(settings: Settings) -> None:
    """Connect to Slack over Socket Mode (no public URL needed)."""
    from slack_bolt.adapter.socket_mode import SocketModeHandler

    if not settings.redis_url:
        raise ValueError("REDIS_URL is not set")
    app = create_app(settings, redis=Redis.from_url(settings.redis_url))
    SocketModeHandler(app, settings.slack_app_token).start()
