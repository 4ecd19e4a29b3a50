"""Settings, read from the environment (and a ``.env`` file) in one place: the store's
(``store.settings.StoreSettings``, all agent code needs) and the Slack app's."""

from __future__ import annotations

from typing import Literal

from pydantic import AliasChoices, Field, field_validator

from bot import defaults
from store import slack_ids
from store.settings import StoreSettings, check_id_setting


class Settings(StoreSettings):
    """Every setting of slack-handoff: the store's and the Slack app's. Environment names
    are ``HANDOFF_<NAME>`` unless noted."""

    slack_bot_token: str | None = Field(
        default=None,
        validation_alias=AliasChoices("SLACK_BOT_TOKEN"),
        description="Bot token (xoxb-...); unset: handoffs are delivered to the log.",
    )
    slack_signing_secret: str | None = Field(
        default=None,
        validation_alias=AliasChoices("SLACK_SIGNING_SECRET"),
        description="Signing secret that verifies requests from Slack (HTTP mode).",
    )
    slack_app_token: str | None = Field(
        default=None,
        validation_alias=AliasChoices("SLACK_APP_TOKEN"),
        description="App-level token (xapp-...); set: `handoff serve` uses Socket Mode.",
    )
    slack_api_url: str = Field(
        default=defaults.SLACK_API_URL,
        validation_alias=AliasChoices("SLACK_API_URL"),
        description="Base URL of the Slack Web API (point at the local stand-in in dev).",
    )
    slack_timeout_seconds: float = Field(
        default=defaults.SLACK_TIMEOUT_SECONDS,
        gt=0,
        le=300,
        description="Seconds to wait for each Slack Web API answer before treating it as lost.",
    )
    slack_history_calls_per_minute: float = Field(
        default=defaults.SLACK_HISTORY_CALLS_PER_MINUTE,
        gt=0,
        le=6000,
        description="Calls a minute the whole deployment makes to conversations.history (and "
        "to conversations.replies) to find a post whose answer was lost: 1 for apps outside "
        "the Slack Marketplace; a Marketplace app may set 50.",
    )
    slack_history_page_size: int = Field(
        default=defaults.SLACK_HISTORY_PAGE_SIZE,
        ge=2,
        le=1000,
        description="Messages per page of those calls (15 at most for apps outside the "
        "Marketplace).",
    )
    slack_clock_skew_seconds: float = Field(
        default=defaults.SLACK_CLOCK_SKEW_SECONDS,
        ge=0,
        le=3600,
        description="How far Slack's clock may be from Redis's: a look-up for a lost post "
        "reads this much more on each side.",
    )
    channel: str | None = Field(
        default=None,
        validation_alias=AliasChoices("HANDOFF_CHANNEL"),
        description="Channel id (C…, G…) for handoffs that name none.",
    )
    admins: str = Field(
        default="",
        validation_alias=AliasChoices("HANDOFF_ADMINS"),
        description="Comma-separated user ids who may decide anything and run admin commands.",
    )
    default_reviewers: str = Field(
        default="",
        description="Comma-separated user or user-group ids who may decide handoffs naming none.",
    )
    allow_any_channel_member: bool = Field(
        default=False,
        description=(
            "A handoff naming no reviewers (with HANDOFF_DEFAULT_REVIEWERS unset) may be seen "
            "and decided by any member of its channel; unset, only by the admins."
        ),
    )
    channel_members_cache_seconds: int = Field(
        default=defaults.CHANNEL_MEMBERS_CACHE_SECONDS,
        ge=0,
        description="How long a channel's members are cached (HANDOFF_ALLOW_ANY_CHANNEL_MEMBER).",
    )
    block_self_approval: bool = Field(
        default=True,
        description="The requester (a Slack user id) may not decide their own handoff.",
    )
    usergroup_cache_seconds: int = Field(
        default=defaults.USERGROUP_CACHE_SECONDS,
        ge=0,
        description="How long the workspace's user groups and their members are cached.",
    )
    api_creates_per_minute: int = Field(
        default=600,
        ge=1,
        description="Handoffs an HTTP API key may create a minute (unless the key sets its own).",
    )
    slash_command: str = Field(
        default=defaults.SLASH_COMMAND,
        pattern=r"^/[a-z0-9_-]{1,31}$",
        description="The slash command the bot answers (as declared in manifest.yml).",
    )
    log_format: Literal["text", "json"] = Field(
        default="text",
        description="How the handoff commands write log lines: text, or one JSON object a "
        "line (time, level, logger, message, and handoff_id, run_id, event, user when known).",
    )
    metrics: bool = Field(
        default=True,
        description="Count requests, Slack calls and task attempts for /metrics (serve, api, "
        "worker --metrics-port); false: nothing is counted and /metrics is not served.",
    )

    # The ids are posted to and mentioned, so only ids are taken (store.slack_ids); the
    # error names the one that is not (ids are no secret, unlike the tokens).
    @field_validator("channel")
    @classmethod
    def _channel_is_a_channel_id(cls, value: str | None) -> str | None:
        return check_id_setting(value, slack_ids.DESTINATION) or None

    @field_validator("admins")
    @classmethod
    def _admins_are_user_ids(cls, value: str) -> str:
        return check_id_setting(value, slack_ids.USER, many=True)

    @field_validator("default_reviewers")
    @classmethod
    def _default_reviewers_are_reviewer_ids(cls, value: str) -> str:
        return check_id_setting(value, slack_ids.REVIEWER, many=True)

    @property
    def admin_ids(self) -> frozenset[str]:
        """``HANDOFF_ADMINS`` as a set of user ids."""
        return frozenset(part.strip() for part in self.admins.split(",") if part.strip())

    @property
    def default_reviewer_ids(self) -> list[str]:
        """``HANDOFF_DEFAULT_REVIEWERS`` as a list of ids."""
        return [part.strip() for part in self.default_reviewers.split(",") if part.strip()]
