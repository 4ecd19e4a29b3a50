"""The Bolt app factory: built from settings, with nothing for Bolt to warn about."""

from __future__ import annotations

import logging
import os

import pytest
from redis import Redis
from slack_bolt import App
from slack_sdk import WebClient

from bot.app import create_app
from bot.config import Settings

UNUSED_TOKEN_WARNING = "As you gave `client` as well, `token` will be unused."


def _settings(redis_url: str) -> Settings:
    return Settings(
        redis_url=redis_url,
        namespace="app-test",
        slack_bot_token="xoxb-app-test",
        slack_signing_secret="app-test-signing-secret",
        slack_api_url="http://127.0.0.1:9/api/",
    )


def test_bolt_logs_no_warning_while_the_app_is_built(
    redis: Redis, redis_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # As `handoff serve` runs: the token in the environment, where Settings read it.
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-app-test")
    caplog.set_level(logging.DEBUG)

    # The control: Bolt given a client with the token in the environment does warn, and
    # this test sees it.
    App(
        client=WebClient(token="xoxb-control"),
        signing_secret="s",
        token_verification_enabled=False,
        logger=logging.getLogger("bot.bolt"),
    )
    assert UNUSED_TOKEN_WARNING in caplog.text
    caplog.clear()

    app = create_app(_settings(redis_url), redis=redis)

    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert os.environ["SLACK_BOT_TOKEN"] == "xoxb-app-test"  # left as it was
    # Built as before: Slack calls go to SLACK_API_URL, the token comes from `authorize`.
    assert app.client.base_url == "http://127.0.0.1:9/api/"
    assert app.client.token is None


def test_the_app_is_built_without_the_token_in_the_environment_too(
    redis: Redis, redis_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("SLACK_BOT_TOKEN", raising=False)
    caplog.set_level(logging.WARNING)

    create_app(_settings(redis_url), redis=redis)

    assert caplog.records == []
    assert "SLACK_BOT_TOKEN" not in os.environ
