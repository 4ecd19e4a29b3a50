"""The Bolt app factory."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator

from redis import Redis
from slack_bolt import App
from slack_sdk import WebClient

from bot.access.authorize import BotIdentity
from bot.access.reviewers import ReviewerPolicy
from bot.config import Settings
from bot.slack_client import request_client, tokenless
from handlers import HandlerDeps, register
from handlers.modal_metadata import metadata_key
from store.exceptions import ConfigurationError  # raised here; also imported from here

__all__ = ["ConfigurationError", "create_app"]


def create_app(settings: Settings, *, redis: Redis, client: WebClient | None = None) -> App:
    """Build the Bolt app with every slack-handoff listener.

    Listeners run before the HTTP response (``process_before_response``): a decision is
    one Redis transaction, well inside Slack's 3 seconds, and is committed before Slack
    hears "ok". Slow work (message updates, resumes) happens in workers. The Web API calls
    the listeners make (``views.open``, ``users.info``...) go through ``request_client``,
    which waits at most ``SLACK_REQUEST_TIMEOUT_SECONDS`` and repeats nothing, so a slow or
    rate-limiting Slack never keeps the answer past Slack's 3 seconds.
    """
    if os.environ.get("SLACK_CLIENT_ID") and os.environ.get("SLACK_CLIENT_SECRET"):
        # Bolt would silently switch to multi-workspace OAuth mode.
        raise ConfigurationError(
            "SLACK_CLIENT_ID and SLACK_CLIENT_SECRET are set; slack-handoff is a "
            "single-workspace app: unset them and use SLACK_BOT_TOKEN"
        )
    if not settings.slack_bot_token:
        raise ConfigurationError(
            "SLACK_BOT_TOKEN is not set; set it to the app's bot token (xoxb-..., on the "
            "app's OAuth & Permissions page)"
        )
    if not settings.slack_signing_secret and not settings.slack_app_token:
        raise ConfigurationError(
            "SLACK_SIGNING_SECRET is not set; set it (the app's Basic Information page) to "
            "verify requests from Slack, or set SLACK_APP_TOKEN to use Socket Mode"
        )
    client = client or request_client(settings)
    with _bot_token_hidden_from_bolt():
        app = App(
            signing_secret=settings.slack_signing_secret or "socket-mode",
            # Without a token of its own, Bolt takes it from ``authorize`` on each request:
            # a slow auth.test then never fails a person's click (see bot.access.authorize).
            client=tokenless(client),
            authorize=BotIdentity(settings.slack_bot_token),
            process_before_response=True,
            logger=logging.getLogger("bot.bolt"),
        )
    store = settings.open_store(redis=redis)
    reviewers = ReviewerPolicy.from_settings(settings, client, redis, store.keys)
    register(
        app,
        HandlerDeps(
            store=store,
            reviewers=reviewers,
            slash_command=settings.slash_command,
            modal_key=metadata_key(settings.slack_signing_secret or settings.slack_app_token or ""),
        ),
    )
    return app


_BOLT_ENVIRONMENT = threading.Lock()


@contextlib.contextmanager
def _bot_token_hidden_from_bolt() -> Iterator[None]:
    """Keep ``SLACK_BOT_TOKEN`` out of the environment while Bolt's ``App`` is built.

    Given no ``token``, ``App`` reads ``SLACK_BOT_TOKEN`` itself and, as it was given a
    ``client`` too, logs "As you gave `client` as well, `token` will be unused." (once per
    process building an app: three times for `handoff serve`). The token reaches Bolt
    through ``authorize`` instead, and the settings are read in one place, so Bolt has no
    business reading it. The app is built at start-up, before any thread that could read
    the environment meanwhile; the lock keeps two builds from restoring it out of order.
    """
    with _BOLT_ENVIRONMENT:
        token = os.environ.pop("SLACK_BOT_TOKEN", None)
        try:
            yield
        finally:
            if token is not None:
                os.environ["SLACK_BOT_TOKEN"] = token
