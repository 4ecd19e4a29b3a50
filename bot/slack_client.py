"""The Slack Web API clients: one with retries for rate limits, server errors and resets
(for jobs' calls that are safe to repeat), twins of it (one for posts, which retries only
rate limits; one without a token, for Bolt), and a fast one that repeats nothing for the
calls made while Slack waits for our answer. Every one of them counts its calls, its
retries and their waits (``bot.metrics``)."""

from __future__ import annotations

import copy
import http.client
import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from typing import Any

from slack_bolt.context.respond import Respond
from slack_sdk import WebClient
from slack_sdk.http_retry.builtin_handlers import (
    ConnectionErrorRetryHandler,
    RateLimitErrorRetryHandler,
    ServerErrorRetryHandler,
)
from slack_sdk.http_retry.handler import RetryHandler
from slack_sdk.http_retry.request import HttpRequest
from slack_sdk.http_retry.response import HttpResponse
from slack_sdk.http_retry.state import RetryState
from slack_sdk.webhook import WebhookClient, WebhookResponse

from bot import defaults, metrics
from bot.config import Settings

logger = logging.getLogger(__name__)

AMBIGUOUS_ERRORS: tuple[type[Exception], ...] = (
    OSError,  # TimeoutError, ConnectionResetError, urllib's URLError
    http.client.HTTPException,  # RemoteDisconnected, IncompleteRead
    json.JSONDecodeError,  # a truncated or non-JSON answer, where a caller parses one
)
"""Failures after which a call may have reached Slack though no answer came back (a post
may have been made; a read may be repeated). slack_sdk raises ``SlackApiError`` for an answer
that was no JSON (a truncated ``ok: true``, a proxy's page): see
``bot.delivery.slack_errors.maybe_carried_out``."""


class MeteredWebClient(WebClient):
    """A ``WebClient`` that counts each call by method and how it ended (``bot.metrics``):
    every client built here is one."""

    def api_call(self, api_method: str, **kwargs: Any) -> Any:  # type: ignore[override]
        try:
            response = super().api_call(api_method, **kwargs)
        except Exception as exc:
            metrics.count_api_call(api_method, exc)
            raise
        metrics.count_api_call(api_method, None)
        return response


class _CountedRetries(RetryHandler):
    """Counts each retry a handler makes, with the time it slept first (mixed into
    slack_sdk's handlers, so that ``isinstance`` still tells them apart)."""

    def prepare_for_next_attempt(
        self,
        *,
        state: RetryState,
        request: HttpRequest,
        response: HttpResponse | None = None,
        error: Exception | None = None,
    ) -> None:
        started = time.monotonic()
        try:
            super().prepare_for_next_attempt(
                state=state, request=request, response=response, error=error
            )
        finally:
            status = response.status_code if response is not None else None
            metrics.count_retry(request.url, status, time.monotonic() - started)


class RateLimitRetries(_CountedRetries, RateLimitErrorRetryHandler):
    """Retries after a 429, once its ``Retry-After`` is slept out (counted)."""


class ServerErrorRetries(_CountedRetries, ServerErrorRetryHandler):
    """Retries after a 5xx (counted)."""


class ConnectionErrorRetries(_CountedRetries, ConnectionErrorRetryHandler):
    """Retries after a reset connection (counted)."""


def make_web_client(
    settings: Settings, *, timeout: float | None = None, retry_rate_limits: bool = True
) -> WebClient:
    """A ``WebClient`` for the bot token, pointed at ``SLACK_API_URL``.

    slack_sdk retries only one connection error by default; we add retries that back off on
    5xx, so a short Slack hiccup never fails a job, and (with ``retry_rate_limits``) retries
    that sleep out a 429's ``Retry-After``. Workers pass ``retry_rate_limits=False``: a
    worker asleep inside a job holds up every task behind it, so a 429 ends the attempt and
    the task is put off for ``Retry-After`` instead. ``timeout`` defaults to
    ``HANDOFF_SLACK_TIMEOUT_SECONDS``.
    """
    handlers: list[RetryHandler] = [
        ConnectionErrorRetries(max_retry_count=2),
        ServerErrorRetries(max_retry_count=2),
    ]
    if retry_rate_limits:
        handlers.append(RateLimitRetries(max_retry_count=3))
    return MeteredWebClient(
        token=settings.slack_bot_token,
        base_url=settings.slack_api_url,
        # slack_sdk annotates an int, and hands it to urllib, which takes float seconds.
        timeout=timeout or settings.slack_timeout_seconds,  # type: ignore[arg-type]
        retry_handlers=handlers,
    )


_ANSWER_DEADLINE: ContextVar[float | None] = ContextVar("slack_answer_deadline", default=None)
"""When (``time.monotonic()``) the request being handled must be answered by, if any."""
_LEAST_CALL_SECONDS = 0.2
"""A call with less time left than this is not made: it could not be answered in time."""


def start_answer_clock(seconds: float) -> None:
    """Every call through a ``RequestClient`` or a ``TimelyRespond`` made from now on in
    this thread (or context) shares one budget of ``seconds`` (each call also keeps its own
    timeout), so that several calls in a row (a user-group look-up, then ``views.open``)
    still let the request be answered within Slack's 3 seconds.

    Started at the beginning of every request by ``handlers.deps.AnswerInTime``: Bolt runs
    the listeners after its middleware returns, in the same thread, and the next request
    handled by the thread starts a clock of its own. Threads started meanwhile (lazy
    listeners, background replies) do not inherit it: their calls have their own timeouts
    only."""
    _ANSWER_DEADLINE.set(time.monotonic() + seconds)


def stop_answer_clock() -> None:
    """Calls from now on in this thread (or context) keep their own timeouts only: for a
    thread done with its request that goes on with other work (tests between requests)."""
    _ANSWER_DEADLINE.set(None)


def _time_left(per_call: float, what: str) -> float:
    """The timeout of the next call: its own, or less when the request's budget is nearly
    spent. Raises ``TimeoutError`` (one of ``AMBIGUOUS_ERRORS``, so callers treat it as Slack
    not answering in time) when too little is left to make it at all."""
    deadline = _ANSWER_DEADLINE.get()
    if deadline is None:
        return per_call
    left = deadline - time.monotonic()
    if left < _LEAST_CALL_SECONDS:
        raise TimeoutError(f"no time left to call {what} before Slack's deadline")
    return min(per_call, left)


class RequestClient(MeteredWebClient):
    """A ``WebClient`` whose calls share the request's budget (``start_answer_clock``)."""

    def api_call(self, api_method: str, **kwargs: Any) -> Any:  # type: ignore[override]
        timeout = _time_left(float(self.timeout), api_method)
        if timeout >= self.timeout:
            return super().api_call(api_method, **kwargs)
        # A copy with the shorter timeout: the client is shared by the request's threads.
        clone = copy.copy(self)
        clone.timeout = timeout  # type: ignore[assignment]
        return MeteredWebClient.api_call(clone, api_method, **kwargs)


class TimelyRespond(Respond):
    """Bolt's ``respond`` (a POST to the request's ``response_url``) within the request's
    budget, where Bolt's waits up to 30 s and so could hold the answer to Slack past its
    deadline. Takes what the listeners pass: text (or a whole message), blocks and the
    message options."""

    def __call__(self, text: str | dict[str, Any] = "", **options: Any) -> WebhookResponse | None:  # type: ignore[override]
        if self.response_url is None:
            raise ValueError("respond is unsupported here as there is no response_url")
        message: dict[str, Any] = dict(text) if isinstance(text, dict) else {"text": text}
        for name, value in options.items():
            if value is not None:
                message[name] = [_as_dict(b) for b in value] if name == "blocks" else value
        try:
            timeout = _time_left(defaults.SLACK_REQUEST_TIMEOUT_SECONDS, "the response_url")
        except TimeoutError:
            # No time left to post it before Slack's answer is due (a loaded process). A
            # response_url takes posts for 30 minutes, so the reply (a loser told who won,
            # say) goes out in the background once the request is answered, rather than
            # never: a courtesy, lost only if the process stops first.
            _LATE_REPLIES.submit(self._send_late, message)
            return None
        client = WebhookClient(
            url=self.response_url, proxy=self.proxy, ssl=self.ssl, timeout=timeout
        )
        return client.send_dict(message)

    def _send_late(self, message: dict[str, Any]) -> None:
        assert self.response_url is not None
        client = WebhookClient(
            url=self.response_url,
            proxy=self.proxy,
            ssl=self.ssl,
            timeout=LATE_REPLY_TIMEOUT_SECONDS,
        )
        try:
            client.send_dict(message)
        except Exception:  # a courtesy reply; what the request did already stands
            logger.exception("late reply to a response_url failed")


LATE_REPLY_TIMEOUT_SECONDS = 10
"""A late reply's own timeout: no answer to Slack waits on it."""
_LATE_REPLIES = ThreadPoolExecutor(max_workers=4, thread_name_prefix="late-respond")
"""Posts the replies a request had no time left for (``TimelyRespond``)."""


def _as_dict(block: Any) -> Any:
    return block.to_dict() if hasattr(block, "to_dict") else block


def request_client(settings: Settings) -> WebClient:
    """A ``WebClient`` for the calls made while Slack waits for our answer (a click, a
    command, an event: 3 seconds, after which the person sees an error and a
    ``trigger_id`` is dead).

    Each call gets ``bot.defaults.SLACK_REQUEST_TIMEOUT_SECONDS`` and is never repeated: a
    retry after a 429 or a 5xx, or a sleep out of ``Retry-After``, would answer Slack too
    late to matter, so the caller tells the person to try again instead. Jobs, which have
    no such deadline, use ``make_web_client``'s retrying client.
    """
    return RequestClient(
        token=settings.slack_bot_token,
        base_url=settings.slack_api_url,
        timeout=defaults.SLACK_REQUEST_TIMEOUT_SECONDS,  # type: ignore[arg-type]
        retry_handlers=[],
    )


def posting_client(client: WebClient) -> WebClient:
    """A twin of ``client`` (same token, URL and timeout) for posts that must not be
    repeated blindly.

    It retries only 429s, after which Slack has done nothing, and only if ``client`` does.
    After a lost answer (timeout, reset) or a 5xx, Slack may have posted: repeating the call
    could leave a second message with live buttons, so the caller looks for the first one
    before posting again (see ``bot.delivery.posting``).
    """
    handlers: list[RetryHandler] = [
        h for h in client.retry_handlers if isinstance(h, RateLimitErrorRetryHandler)
    ]
    return _twin(client, token=client.token, retry_handlers=handlers)


def reading_client(client: WebClient) -> WebClient:
    """A twin of ``client`` that repeats no call: for reads each taken from a budget of the
    few calls Slack allows (``conversations.history``: one a minute), where a retry is one
    more call Slack may refuse."""
    return _twin(client, token=client.token, retry_handlers=[])


def patient_twin(client: WebClient) -> WebClient:
    """A twin of ``client`` (a request's, say) with the jobs' patience: the default
    timeout, retries of a reset connection and one more try after a 429. For calls that
    need not answer Slack in time, made after the answer and harmless if repeated (the
    courtesy replies to thread answers)."""
    twin = _twin(
        client,
        token=client.token,
        retry_handlers=[
            ConnectionErrorRetries(max_retry_count=2),
            RateLimitRetries(max_retry_count=1),
        ],
        cls=MeteredWebClient,  # not a request's: it has time
    )
    twin.timeout = defaults.SLACK_TIMEOUT_SECONDS
    return twin


def on_the_clock(client: WebClient) -> WebClient:
    """``client`` as a ``RequestClient`` (same token, URL, timeout and retries), whose
    calls share the request's budget. Bolt builds a plain ``WebClient`` for each request
    from the app's: ``handlers.deps.AnswerInTime`` puts this in its place."""
    if isinstance(client, RequestClient):
        return client
    return _twin(
        client, token=client.token, retry_handlers=list(client.retry_handlers), cls=RequestClient
    )


def metered(client: WebClient) -> WebClient:
    """``client``, or a twin of it (same token, URL, timeout and retries) whose calls are
    counted: for the plain client Bolt makes for each request, used before
    ``on_the_clock`` replaces it (by ``authorize``)."""
    if isinstance(client, MeteredWebClient):
        return client
    return _twin(client, token=client.token, retry_handlers=list(client.retry_handlers))


def tokenless(client: WebClient) -> WebClient:
    """A twin of ``client`` without its token, for a Bolt app whose ``authorize`` hands
    each request the token (Bolt copies the app's client for every request)."""
    return _twin(client, token=None, retry_handlers=list(client.retry_handlers))


def _twin(
    client: WebClient,
    *,
    token: str | None,
    retry_handlers: list[RetryHandler],
    cls: type[WebClient] | None = None,
) -> WebClient:
    # Of the same class by default: a request client's twin keeps sharing its budget (and
    # a plain client's, one Bolt made, is counted too).
    if cls is None:
        cls = type(client) if isinstance(client, MeteredWebClient) else MeteredWebClient
    return cls(
        token=token,
        base_url=client.base_url,
        timeout=client.timeout,
        ssl=client.ssl,
        proxy=client.proxy,
        headers=client.headers,
        retry_handlers=retry_handlers,
    )
