"""Serving the Bolt app: a WSGI app behind gunicorn, or Socket Mode."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Sequence
from http import HTTPStatus
from typing import Any

from gunicorn.app.base import BaseApplication
from redis import Redis
from redis.exceptions import RedisError
from slack_bolt import App, BoltRequest

from bot.app import ConfigurationError, create_app
from bot.config import Settings
from bot.gate import Admitted, Rejection, RequestGate
from bot.keys import BotKeys
from bot.replay import ReplayGuard
from handlers.prefetch import PREFETCHED_KEY, clicked_handoff_read
from store.repository import HandoffStore

logger = logging.getLogger(__name__)

EVENTS_PATH = "/slack/events"
HEALTH_PATH = "/healthz"

SERVE_REDIS_CONNECT_TIMEOUT_SECONDS = 2.0
SERVE_REDIS_TIMEOUT_SECONDS = 5.0

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def make_wsgi_app(bolt_app: App, redis: Redis, *, gate: RequestGate) -> WSGIApp:
    """``/slack/events`` for events, interactivity and commands; ``GET /healthz`` checks Redis.

    Every POST to ``/slack/events`` passes ``gate`` (size, signature, shape, replay) first,
    and Bolt gets the body the gate parsed: parsing a large URL-encoded payload twice, and
    checking its signature twice, was a good part of a click's cost.
    """

    def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path, method = environ.get("PATH_INFO"), environ.get("REQUEST_METHOD")
        if path == HEALTH_PATH and method == "GET":
            return _health(redis, start_response)
        if path != EVENTS_PATH or method != "POST":
            return _answer(start_response, "404 Not Found", b"Not Found", "text/plain")
        admitted = gate.admit(environ)
        if isinstance(admitted, Rejection):
            return _json(start_response, admitted.status, {"error": admitted.reason})
        response = bolt_app.dispatch(_bolt_request(environ, admitted))
        status = HTTPStatus(response.status)
        headers = [
            (name, value)
            for name, values in response.headers.items()
            if name.lower() != "content-length"
            for value in values
        ]
        body = response.body.encode("utf-8")
        start_response(
            f"{status.value} {status.phrase}", [*headers, ("Content-Length", str(len(body)))]
        )
        return [body]

    return application


def _bolt_request(environ: dict[str, Any], admitted: Admitted) -> BoltRequest:
    """The Bolt request of a verified, parsed HTTP request, with what the gate read for it
    in its context (``handlers.prefetch``).

    Bolt takes an already parsed body only with ``mode="socket_mode"``; the one other thing
    that mode changes is that Bolt skips its own signature check, which the gate has done.
    """
    headers: dict[str, str | Sequence[str]] = {}
    for key, value in environ.items():
        if key.startswith("HTTP_"):
            headers[key[5:].lower().replace("_", "-")] = value
        elif key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
            headers[key.lower().replace("_", "-")] = value
    context = {PREFETCHED_KEY: admitted.prefetched} if admitted.prefetched else None
    return BoltRequest(
        body=admitted.body,
        query=environ.get("QUERY_STRING", ""),
        headers=headers,
        context=context,
        mode="socket_mode",
    )


def _answer(
    start_response: Callable[..., Any], status: str, body: bytes, content_type: str
) -> list[bytes]:
    start_response(status, [("Content-Type", content_type), ("Content-Length", str(len(body)))])
    return [body]


def _health(redis: Redis, start_response: Callable[..., Any]) -> Iterable[bytes]:
    try:
        redis.ping()
        status, body = "200 OK", {"ok": True, "redis": "ok"}
    except RedisError:
        # The error names hosts and ports: it goes to the log, not to whoever asks.
        logger.warning("health check: Redis unavailable", exc_info=True)
        status, body = "503 Service Unavailable", {"ok": False, "redis": "unavailable"}
    return _json(start_response, status, body)


def _json(start_response: Callable[..., Any], status: str, body: dict[str, Any]) -> list[bytes]:
    return _answer(start_response, status, json.dumps(body).encode(), "application/json")


def build_wsgi_app(settings: Settings) -> WSGIApp:
    """The whole WSGI app from settings (one per server process)."""
    if not settings.redis_url:
        raise ValueError("REDIS_URL is not set")
    if not settings.slack_signing_secret:
        raise ConfigurationError("SLACK_SIGNING_SECRET is not set; HTTP mode needs it")
    # Timeouts so that a Redis that stops answering (rather than refusing) frees the
    # request threads instead of holding them: well past any normal command, and Slack
    # gives up on an answer after 3 s anyway.
    redis = Redis.from_url(
        settings.redis_url,
        health_check_interval=30,
        socket_connect_timeout=SERVE_REDIS_CONNECT_TIMEOUT_SECONDS,
        socket_timeout=SERVE_REDIS_TIMEOUT_SECONDS,
    )
    store = HandoffStore(redis, settings.store_config())
    replay = ReplayGuard(redis, BotKeys(store.keys))
    gate = RequestGate(settings.slack_signing_secret, replay, read_for=clicked_handoff_read(store))
    return make_wsgi_app(create_app(settings, redis=redis), redis, gate=gate)


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
