"""The Slack Web API clients: one with retries for rate limits, server errors and resets
(for jobs' calls that are safe to repeat), twins of it (one for posts, which retries only
rate limits; one without a token, for Bolt), and a fast one that repeats nothing for the
calls made while Slack waits for our answer."""

from __future__ import annotations

import http.client
import json

from slack_sdk import WebClient
from slack_sdk.http_retry.builtin_handlers import (
    ConnectionErrorRetryHandler,
    RateLimitErrorRetryHandler,
    ServerErrorRetryHandler,
)
from slack_sdk.http_retry.handler import RetryHandler

from bot import defaults
from bot.config import Settings

AMBIGUOUS_ERRORS: tuple[type[Exception], ...] = (
    OSError,  # TimeoutError, ConnectionResetError, urllib's URLError
    http.client.HTTPException,  # RemoteDisconnected, IncompleteRead
    json.JSONDecodeError,  # a truncated or non-JSON answer, where a caller parses one
)
"""Failures after which a call may have reached Slack though no answer came back (a post
may have been made; a read may be repeated). slack_sdk raises ``SlackApiError`` for an answer
that was no JSON (a truncated ``ok: true``, a proxy's page): see
``bot.delivery.slack_errors.maybe_carried_out``."""


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
        ConnectionErrorRetryHandler(max_retry_count=2),
        ServerErrorRetryHandler(max_retry_count=2),
    ]
    if retry_rate_limits:
        handlers.append(RateLimitErrorRetryHandler(max_retry_count=3))
    return WebClient(
        token=settings.slack_bot_token,
        base_url=settings.slack_api_url,
        # slack_sdk annotates an int, and hands it to urllib, which takes float seconds.
        timeout=timeout or settings.slack_timeout_seconds,  # type: ignore[arg-type]
        retry_handlers=handlers,
    )


def request_client(settings: Settings) -> WebClient:
    """A ``WebClient`` for the calls made while Slack waits for our answer (a click, a
    command, an event: 3 seconds, after which the person sees an error and a
    ``trigger_id`` is dead).

    Each call gets ``bot.defaults.SLACK_REQUEST_TIMEOUT_SECONDS`` and is never repeated: a
    retry after a 429 or a 5xx, or a sleep out of ``Retry-After``, would answer Slack too
    late to matter, so the caller tells the person to try again instead. Jobs, which have
    no such deadline, use ``make_web_client``'s retrying client.
    """
    return WebClient(
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
            ConnectionErrorRetryHandler(max_retry_count=2),
            RateLimitErrorRetryHandler(max_retry_count=1),
        ],
    )
    twin.timeout = defaults.SLACK_TIMEOUT_SECONDS
    return twin


def tokenless(client: WebClient) -> WebClient:
    """A twin of ``client`` without its token, for a Bolt app whose ``authorize`` hands
    each request the token (Bolt copies the app's client for every request)."""
    return _twin(client, token=None, retry_handlers=list(client.retry_handlers))


def _twin(client: WebClient, *, token: str | None, retry_handlers: list[RetryHandler]) -> WebClient:
    return WebClient(
        token=token,
        base_url=client.base_url,
        timeout=client.timeout,
        ssl=client.ssl,
        proxy=client.proxy,
        headers=client.headers,
        retry_handlers=retry_handlers,
    )
