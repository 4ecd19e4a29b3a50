"""The Slack side's metrics: requests from Slack (``bot.http.wsgi``) and calls to Slack's Web
API (``bot.slack_client``), per process, next to ``worker.metrics`` (which also exposes
them, with the store's figures; docs/monitoring.md lists every metric).

Labels are Slack's own small sets: a request's surface (its payload type), a Web API method
name; never an id. Counting never raises (``worker.metrics.guarded``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from prometheus_client import Counter, Histogram
from slack_sdk.errors import SlackApiError

from worker.metrics import count_retry_wait, guarded

SURFACES = frozenset(
    {
        "block_actions",
        "block_suggestion",
        "view_submission",
        "view_closed",
        "shortcut",
        "message_action",
        "command",
        "event",
        "url_verification",
        "ssl_check",
    }
)
"""The surfaces requests are counted by; any other payload type is ``other``, and a request
refused before its body was read is ``unknown``."""

REQUEST_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0)
"""Bounds of the request time histogram (s): Slack gives up on an answer after 3 s."""

SLACK_REQUESTS = Counter(
    "handoff_slack_requests",
    "Requests from Slack to /slack/events, by surface (block_actions, view_submission, "
    "command, event...) and outcome (ok, error, rejected, duplicate, unavailable).",
    ["surface", "outcome"],
)
SLACK_REQUEST_SECONDS = Histogram(
    "handoff_slack_request_seconds",
    "Time to answer a request from Slack (checks, listeners, answer), by surface.",
    ["surface"],
    buckets=REQUEST_BUCKETS,
)
SLACK_API_CALLS = Counter(
    "handoff_slack_api_calls",
    "Slack Web API calls, by method and how the call ended after its retries (ok, "
    "rate_limited, server_error, refused, network).",
    ["method", "outcome"],
)
SLACK_RATE_LIMITED = Counter(
    "handoff_slack_rate_limited",
    "HTTP 429 answers from Slack's Web API, by method: retried after Retry-After or not.",
    ["method"],
)
SLACK_RETRIES = Counter(
    "handoff_slack_retries",
    "Web API calls made again inside a call, by method and reason (rate_limited, "
    "server_error, network).",
    ["method", "reason"],
)


def surface_of(body: Mapping[str, Any]) -> str:
    """The surface of a parsed request body: its payload type, ``command``, or ``event``.

    Example: ``surface_of({"type": "event_callback", ...}) == "event"``.
    """
    kind = body.get("type")
    if kind == "event_callback":
        return "event"
    if kind is None:
        if "command" in body:
            return "command"
        return "ssl_check" if "ssl_check" in body else "other"
    return kind if kind in SURFACES else "other"


@guarded
def count_request(surface: str, outcome: str, seconds: float) -> None:
    """A request from Slack was answered."""
    SLACK_REQUESTS.labels(surface, outcome).inc()
    SLACK_REQUEST_SECONDS.labels(surface).observe(seconds)


def outcome_of(error: BaseException | None) -> str:
    """How a Web API call ended: ``ok`` (no error), ``rate_limited`` (429),
    ``server_error`` (5xx), ``refused`` (Slack answered ``ok: false``) or ``network``
    (no answer: a timeout, a reset...)."""
    if error is None:
        return "ok"
    if isinstance(error, SlackApiError):
        status = getattr(error.response, "status_code", 200)
        if status == 429:
            return "rate_limited"
        return "server_error" if status >= 500 else "refused"
    return "network"


@guarded
def count_api_call(method: str, error: BaseException | None) -> None:
    """A Web API call of ``method`` ended (``error`` None when it went through)."""
    outcome = outcome_of(error)
    SLACK_API_CALLS.labels(method, outcome).inc()
    if outcome == "rate_limited":
        SLACK_RATE_LIMITED.labels(method).inc()


@guarded
def count_retry(url: str, status: int | None, waited: float) -> None:
    """A call to ``url`` is made again after ``waited`` seconds; ``status`` is the HTTP
    status of the answer that asked for it (None: no answer)."""
    method = urlsplit(url).path.rsplit("/", 1)[-1] or "unknown"
    if status == 429:
        reason = "rate_limited"
        SLACK_RATE_LIMITED.labels(method).inc()
    else:
        reason = "server_error" if status is not None else "network"
    SLACK_RETRIES.labels(method, reason).inc()
    count_retry_wait("slept", waited)
