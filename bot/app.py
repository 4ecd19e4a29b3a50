"""The Bolt app factory."""

from __future__ import annotations

import logging
import os

from redis import Redis
from slack_bolt import App
from slack_sdk import WebClient

from bot.access.admins import AdminPolicy
from bot.access.authorize import BotIdentity
from bot.access.reviewers import ReviewerPolicy
from bot.config import Settings
from bot.delivery.client import make_web_client, tokenless
from bot.keys import BotKeys
from handlers import HandlerDeps, register
from handlers.modal_metadata import metadata_key
from store.repository import HandoffStore


class ConfigurationError(Exception):
    """The settings cannot run the bot; the message says which to set."""


def create_app(settings: Settings, *, redis: Redis, client: WebClient | None = None) -> App:
    """Build the Bolt app with every slack-handoff listener.

    Listeners run before the HTTP response (``process_before_response``): a decision is
    one Redis transaction, well inside Slack's 3 seconds, and is committed before Slack
    hears "ok". Slow work (message updates, resumes) happens in workers.
    """
    if os.environ.get("SLACK_CLIENT_ID") and os.environ.get("SLACK_CLIENT_SECRET"):
        # Bolt would silently switch to multi-workspace OAuth mode.
        raise ConfigurationError(
            "SLACK_CLIENT_ID and SLACK_CLIENT_SECRET are set; slack-handoff is a "
            "single-workspace app: unset them and use SLACK_BOT_TOKEN"
        )
    if not settings.slack_bot_token:
        raise ConfigurationError("SLACK_BOT_TOKEN is not set (xoxb-...)")
    if not settings.slack_signing_secret and not settings.slack_app_token:
        raise ConfigurationError(
            "SLACK_SIGNING_SECRET is not set; it is needed to verify requests from Slack "
            "(or set SLACK_APP_TOKEN to use Socket Mode)"
        )
    client = client or make_web_client(settings)
    app = App(
        signing_secret=settings.slack_signing_secret or "socket-mode",
        # Without a token of its own, Bolt takes it from ``authorize`` on each request: a
        # slow auth.test then never fails a person's click (see bot.access.authorize).
        client=tokenless(client),
        authorize=BotIdentity(settings.slack_bot_token),
        process_before_response=True,
        logger=logging.getLogger("bot.bolt"),
    )
    store = HandoffStore(redis, settings.store_config())
    reviewers = ReviewerPolicy.from_settings(settings, client, redis, store.keys)
    admins = AdminPolicy(client, redis, BotKeys(store.keys), admins=settings.admin_ids)
    register(
        app,
        HandlerDeps(
            store=store,
            reviewers=reviewers,
            admins=admins,
            slash_command=settings.slash_command,
            modal_key=metadata_key(settings.slack_signing_secret or settings.slack_app_token or ""),
        ),
    )
    return app
