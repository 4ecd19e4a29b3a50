"""Settings, read from the environment (and a ``.env`` file) in one place."""

from __future__ import annotations

from datetime import timedelta

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from store import defaults
from store.repository import StoreConfig, TaskPolicy


class Settings(BaseSettings):
    """Every setting of slack-handoff. Environment names are ``HANDOFF_<NAME>`` unless noted."""

    model_config = SettingsConfigDict(
        env_prefix="HANDOFF_", env_file=".env", extra="ignore", populate_by_name=True
    )

    redis_url: str | None = Field(
        default=None,
        validation_alias=AliasChoices("REDIS_URL", "HANDOFF_REDIS_URL"),
        description="Redis URL (env REDIS_URL). Unset: `handoff dev` starts an embedded server.",
    )
    namespace: str = Field(
        default=defaults.NAMESPACE, description="Key namespace (one Redis Cluster hash tag)."
    )
    queue: str = Field(default=defaults.QUEUE_NAME, description="Name of the RQ queue.")
    max_payload_bytes: int = Field(
        default=defaults.MAX_PAYLOAD_BYTES, gt=0, description="Largest context + payload."
    )
    retention_days: float = Field(
        default=defaults.RETENTION_SECONDS / 86400,
        gt=0,
        description="Days a decided handoff and its audit trail are kept.",
    )
    resume_max_attempts: int = Field(
        default=defaults.RESUME_MAX_ATTEMPTS, ge=1, description="Attempts per resume round."
    )
    resume_timeout_seconds: float = Field(
        default=defaults.RESUME_TIMEOUT_SECONDS, gt=0, description="Longest one resume attempt."
    )
    delivery_max_attempts: int = Field(
        default=defaults.DELIVERY_MAX_ATTEMPTS, ge=1, description="Attempts per delivery round."
    )
    delivery_timeout_seconds: float = Field(
        default=defaults.DELIVERY_TIMEOUT_SECONDS, gt=0, description="Longest one delivery."
    )
    retry_backoff_seconds: float = Field(
        default=defaults.RETRY_BACKOFF_SECONDS, gt=0, description="First retry delay (doubles)."
    )
    retry_backoff_max_seconds: float = Field(
        default=defaults.RETRY_BACKOFF_MAX_SECONDS, gt=0, description="Longest retry delay."
    )
    lease_grace_seconds: float = Field(
        default=defaults.LEASE_GRACE_SECONDS,
        ge=0,
        description="Time past a job's timeout before another attempt may start.",
    )
    remind_after_seconds: float = Field(
        default=0, ge=0, description="Remind reviewers after this long, repeatedly; 0: never."
    )
    max_reminders: int = Field(
        default=defaults.MAX_REMINDERS, ge=0, description="Most reminders per handoff."
    )
    escalate_after_seconds: float = Field(
        default=0, ge=0, description="Escalate a pending handoff after this long; 0: never."
    )
    escalate_to: str | None = Field(
        default=None, description="Escalation channel id (copy posted) or user group id."
    )
    redis_wait_seconds: float = Field(
        default=60,
        gt=0,
        description="How long workers and dispatchers wait for an unreachable Redis "
        "(a restart, a failover) before the attempt at hand fails.",
    )
    sweep_interval_seconds: float = Field(
        default=defaults.SWEEP_INTERVAL_SECONDS,
        gt=0,
        description="Dispatcher's idle check interval (expiry, retries).",
    )
    dispatch_timeout_seconds: float = Field(
        default=defaults.DISPATCH_TIMEOUT_SECONDS,
        gt=0,
        description="Re-dispatch a queued job not started after this long.",
    )

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
        default="https://slack.com/api/",
        validation_alias=AliasChoices("SLACK_API_URL"),
        description="Base URL of the Slack Web API (point at the local stand-in in dev).",
    )
    slack_timeout_seconds: int = Field(
        default=10,
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
        default=300, ge=0, description="How long user-group members are cached."
    )
    slash_command: str = Field(
        default="/handoff",
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

    def task_policy(self) -> TaskPolicy:
        """Attempts, timeouts and backoff for new handoffs."""
        return TaskPolicy(
            resume_max_attempts=self.resume_max_attempts,
            resume_timeout_seconds=self.resume_timeout_seconds,
            delivery_max_attempts=self.delivery_max_attempts,
            delivery_timeout_seconds=self.delivery_timeout_seconds,
            backoff_seconds=self.retry_backoff_seconds,
            backoff_max_seconds=self.retry_backoff_max_seconds,
            lease_grace_seconds=self.lease_grace_seconds,
            remind_after_seconds=self.remind_after_seconds,
            max_reminders=self.max_reminders,
            escalate_after_seconds=self.escalate_after_seconds,
            escalate_to=self.escalate_to,
        )

    def store_config(self) -> StoreConfig:
        """The store's limits and lifetimes."""
        return StoreConfig(
            namespace=self.namespace,
            max_payload_bytes=self.max_payload_bytes,
            retention_seconds=timedelta(days=self.retention_days).total_seconds(),
            tasks=self.task_policy(),
        )
