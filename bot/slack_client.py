"""The Slack Web API client, with retries for rate limits and server errors."""

from __future__ import annotations

from slack_sdk import WebClient
from slack_sdk.http_retry.builtin_handlers import (
    ConnectionErrorRetryHandler,
    RateLimitErrorRetryHandler,
    ServerErrorRetryHandler,
)

from bot.config import Settings


def make_web_client(settings: Settings, *, timeout: int = 10) -> WebClient:
    """A ``WebClient`` for the bot token, pointed at ``SLACK_API_URL``.

    slack_sdk retries only one connection error by default; we add retries that honour a
    429's ``Retry-After`` and back off on 5xx, so a short Slack hiccup never fails a job.
    """
    return WebClient(
        token=settings.slack_bot_token,
        base_url=settings.slack_api_url,
        timeout=timeout,
        retry_handlers=[
            ConnectionErrorRetryHandler(max_retry_count=2),
            RateLimitErrorRetryHandler(max_retry_count=3),
            ServerErrorRetryHandler(max_retry_count=2),
        ],
    )
