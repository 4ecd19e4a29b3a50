"""Settings, read from the environment (and a ``.env`` file) in one place: the store's
(``store.settings.StoreSettings``, all agent code needs) and the Slack app's."""

from __future__ import annotations

from pydantic import AliasChoices, Field

from bot import defaults
from store.settings import StoreSettings


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
    slack_timeout_seconds: int = Field(
        default=defaults.SLACK_TIMEOUT_SECONDS,
        ge=1,
        description="Seconds to wait for each Slack Web API answer before treating it as lost.",
    )
    channel: str | None = Field(
        default=None,
        validation_alias=AliasChoices("HANDOFF_CHANNEL"),
        description="Channel for handoffs that name none.",
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
    block_self_approval: bool = Field(
        default=True,
        description="The requester (a Slack user id) may not decide their own handoff.",
    )
    usergroup_cache_seconds: int = Field(
        default=defaults.USERGROUP_CACHE_SECONDS,
        ge=0,
        description="How long the workspace's user groups and their members are cached.",
    )
    slash_command: str = Field(
        default=defaults.SLASH_COMMAND,
        pattern=r"^/[a-z0-9_-]{1,31}$",
        description="The slash command the bot answers (as declared in manifest.yml).",
    )

    @property
    def admin_ids(self) -> frozenset[str]:
        """``HANDOFF_ADMINS`` as a set of user ids."""
        return frozenset(part.strip() for part in self.admins.split(",") if part.strip())

    @property
    def default_reviewer_ids(self) -> list[str]:
        """``HANDOFF_DEFAULT_REVIEWERS`` as a list of ids."""
        return [part.strip() for part in self.default_reviewers.split(",") if part.strip()]
