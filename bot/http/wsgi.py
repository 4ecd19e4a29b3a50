"""The WSGI app of ``handoff serve``: ``POST /slack/events`` through the request checks to
Bolt, ``GET /healthz`` and ``GET /metrics``.

The app is built around an already built Bolt app and request gate (``bot.serve`` builds
both from settings), so this module knows nothing of settings or of the listeners.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from http import HTTPStatus
from typing import Any

from prometheus_client import CollectorRegistry
from redis import Redis
from redis.exceptions import RedisError
from slack_bolt import App, BoltRequest

from bot.http.checks import Admitted, AlreadyRun, NotAdmitted, Rejection, RequestGate
from bot.http.prefetch import PREFETCHED_KEY
from bot.http.unavailable import tell, try_again
from bot.metrics import count_request, surface_of
from worker.metrics import CONTENT_TYPE, count_redis_error, exposition

logger = logging.getLogger(__name__)

EVENTS_PATH = "/slack/events"
HEALTH_PATH = "/healthz"
METRICS_PATH = "/metrics"

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def make_wsgi_app(
    bolt_app: App, redis: Redis, *, gate: RequestGate, metrics: CollectorRegistry | None = None
) -> WSGIApp:
    """``/slack/events`` for events, interactivity and commands; ``GET /healthz`` checks Redis;
    ``GET /metrics`` shows ``metrics`` (not served without).

    Every POST to ``/slack/events`` passes ``gate`` (size, signature, shape, replay) first,
    and Bolt gets the body the gate parsed: parsing a large URL-encoded payload twice, and
    checking its signature twice, was a good part of a click's cost. Each is counted by
    surface and outcome, with the time it took to answer (``bot.metrics``).
    """

    def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path, method = environ.get("PATH_INFO"), environ.get("REQUEST_METHOD")
        if path == HEALTH_PATH and method == "GET":
            return _health(redis, start_response)
        if path == METRICS_PATH and method == "GET" and metrics is not None:
            return _answer(start_response, "200 OK", exposition(metrics), CONTENT_TYPE)
        if path != EVENTS_PATH or method != "POST":
            return _answer(start_response, "404 Not Found", b"Not Found", "text/plain")
        started = time.perf_counter()
        admitted = gate.admit(environ)
        if not isinstance(admitted, Admitted):
            answer = _not_admitted(start_response, admitted)
            _count_not_admitted(admitted, time.perf_counter() - started)
            return answer
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
        outcome = "ok" if status < 400 else "error" if status >= 500 else "refused"
        count_request(surface_of(admitted.body), outcome, time.perf_counter() - started)
        return [body]

    return application


def _count_not_admitted(outcome: NotAdmitted, seconds: float) -> None:
    """Count a request that did not go on to Bolt: refused by a check, an event run
    before, or one the replay check could not check (Redis unavailable)."""
    if isinstance(outcome, Rejection):
        count_request("unknown", "rejected", seconds)
    elif isinstance(outcome, AlreadyRun):
        count_request("event", "duplicate", seconds)
    else:
        count_redis_error("serve")
        count_request(surface_of(outcome.body), "unavailable", seconds)


def _not_admitted(start_response: Callable[..., Any], outcome: NotAdmitted) -> list[bytes]:
    """The answer to a request that does not go on to Bolt."""
    if isinstance(outcome, Rejection):
        return _json(start_response, outcome.status, {"error": outcome.reason})
    if isinstance(outcome, AlreadyRun):
        # As Bolt acknowledges an event: Slack stops sending it again.
        return _answer(start_response, "200 OK", b"", "text/plain")
    answer = try_again(outcome.body)
    if answer.response_url:
        tell(answer.response_url)
    if answer.body is None:
        return _answer(start_response, answer.status, b"", "text/plain")
    return _json(start_response, answer.status, answer.body)


def _bolt_request(environ: dict[str, Any], admitted: Admitted) -> BoltRequest:
    """The Bolt request of a verified, parsed HTTP request, with what the gate read for it
    in its context (``bot.http.prefetch``).

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
        count_redis_error("serve")
        status, body = "503 Service Unavailable", {"ok": False, "redis": "unavailable"}
    return _json(start_response, status, body)


def _json(start_response: Callable[..., Any], status: str, body: dict[str, Any]) -> list[bytes]:
    return _answer(start_response, status, json.dumps(body).encode(), "application/json")
