"""The settings of the store, the workers and agent code, read from the environment (and a
``.env`` file), and the one place a store is built from them.

``bot.config.Settings`` adds the Slack settings to these; agent code reads only these, so
it never imports the Slack app.
"""

from __future__ import annotations

import functools
from datetime import timedelta
from typing import Any, Self
from urllib.parse import urlsplit, urlunsplit

from pydantic import AliasChoices, Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict
from redis import Redis
from redis.backoff import EqualJitterBackoff
from redis.connection import ConnectionPool
from redis.retry import Retry

from store import defaults, slack_ids
from store.connection import URL_FORMS, open_client, parse_redis_url
from store.exceptions import ConfigurationError
from store.keys import KeySpace
from store.lua import ReplicaAcks
from store.policies import RoutingPolicy, load_policy
from store.repository import HandoffStore, StoreConfig, TaskPolicy

REDIS_URL_FORMS = URL_FORMS
"""The URLs a Redis setting takes (``store.connection``), as the error for a bad one names
them."""

REDIS_RETRIES = 3
"""Resends of a command whose connection failed (``redis_retry``)."""

REDIS_RETRY_BASE_SECONDS = 0.05
REDIS_RETRY_CAP_SECONDS = 0.4
"""Backoff between resends: equal jitter, doubling up to the cap (the three resends wait
0.35 to 0.7 s in all), well inside the 3 s Slack waits for an answer."""


def redis_retry() -> Retry:
    """The retry of the store's clients: a command whose connection failed
    (``ConnectionError``, ``TimeoutError``: a reset, a reply lost on the way) is sent again
    on a new connection, a few times with a short backoff, before the error is raised.

    redis-py resends the whole command, so a script whose first run committed runs twice:
    every store script is idempotent for that (``store.scripts``), answering the resend
    with what the first run did. So a decision whose reply was lost is reported as made,
    not as "nothing was recorded".
    """
    return Retry(
        EqualJitterBackoff(base=REDIS_RETRY_BASE_SECONDS, cap=REDIS_RETRY_CAP_SECONDS),
        REDIS_RETRIES,
    )


def redacted_url(url: str) -> str:
    """A Redis URL fit to show: its password, in the user part or as a ``password=`` query
    option (redis-py takes both), replaced by ``***``."""
    parts = urlsplit(url)
    if parts.password is None and "password=" not in parts.query.lower():
        return url
    netloc = parts.netloc
    if parts.password is not None:
        host = netloc.rpartition("@")[2]
        netloc = (f"{parts.username}:***@" if parts.username else ":***@") + host
    query = "&".join(
        f"{name}=***" if name.lower().endswith("password") else f"{name}={value}" if sep else name
        for name, sep, value in (item.partition("=") for item in parts.query.split("&"))
        if name
    )
    return urlunsplit(parts._replace(netloc=netloc, query=query))


def connect(url: str, **options: Any) -> Redis:
    """A client for ``url`` (a server, a master through Sentinel or a cluster:
    ``store.connection``) that resends a command whose connection failed (``redis_retry``,
    unless ``options`` give a ``retry`` of their own); ``options`` are those of
    ``Redis.from_url``. Connects on first use."""
    options.setdefault("retry", redis_retry())
    return open_client(url, **options)


class StoreSettings(BaseSettings):
    """What the store, the workers and agent code need. Environment names are
    ``HANDOFF_<NAME>`` unless noted."""

    model_config = SettingsConfigDict(
        env_prefix="HANDOFF_",
        env_file=".env",
        extra="ignore",
        populate_by_name=True,
        # An error must not echo the value: a Redis URL may carry a password, and the
        # Slack settings of the subclass are secrets.
        hide_input_in_errors=True,
    )

    redis_url: str | None = Field(
        default=None,
        validation_alias=AliasChoices("REDIS_URL", "HANDOFF_REDIS_URL"),
        description="Redis URL (env REDIS_URL). Unset: `handoff dev` starts an embedded server.",
    )
    queue_redis_url: str | None = Field(
        default=None,
        description="Redis URL of the RQ queues when they are not on REDIS_URL (plain or "
        "Sentinel); required when REDIS_URL is a Redis Cluster, which RQ does not run on.",
    )
    min_replica_acks: int = Field(
        default=0,
        ge=0,
        le=16,
        description="Replicas that must confirm each acknowledged write (creation, decision, "
        "claim, cancel) before anyone is told of it (Redis WAIT); 0: do not wait.",
    )
    replica_ack_timeout_seconds: float = Field(
        default=defaults.REPLICA_ACK_TIMEOUT_SECONDS,
        gt=0,
        le=10,
        description="Longest wait for HANDOFF_MIN_REPLICA_ACKS replicas; then the caller is "
        "told to try again (the write stays, a retry is the same decision).",
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
        le=36_500,
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
        default=defaults.REDIS_WAIT_SECONDS,
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
    resume_modules: str = Field(
        default="",
        description="Comma-separated modules whose functions may be resume targets "
        "(`pkg.mod:fn` is allowed when pkg.mod is one or lies under one); the worker imports "
        "nothing else a handoff names. Empty: any module (a worker warns at start).",
    )
    webhook_allowed_hosts: str = Field(
        default="",
        description="Comma-separated hosts callbacks may reach over http or at private, "
        "loopback or link-local addresses (otherwise: https to public addresses only).",
    )
    webhook_timeout_seconds: float = Field(
        default=10.0, gt=0, le=120, description="Longest wait for a callback's answer."
    )
    policy_file: str = Field(
        default="",
        description="A routing policy (TOML or YAML, docs/policies.md) applied to every new "
        "handoff; checked at start. Empty: no policy.",
    )

    @field_validator("redis_url", mode="before")
    @classmethod
    def _blank_redis_url_is_unset(cls, value: object) -> object:
        # `REDIS_URL=` in a .env file or a compose file means "not set", not "a bad URL".
        if isinstance(value, str) and not value.strip():
            return None
        return value

    @field_validator("queue_redis_url", mode="before")
    @classmethod
    def _blank_queue_url_is_unset(cls, value: object) -> object:
        if isinstance(value, str) and not value.strip():
            return None
        return value

    @field_validator("queue_redis_url")
    @classmethod
    def _queue_url_is_not_a_cluster(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if parse_redis_url(value).kind == "cluster":
            raise ValueError(
                "RQ does not run on Redis Cluster; give the queues a plain or Sentinel URL "
                "(redis://... or redis+sentinel://...)"
            )
        return value

    @field_validator("redis_url")
    @classmethod
    def _redis_url_is_a_redis_url(cls, value: str | None) -> str | None:
        # Checked here, with redis-py's own parser, so a typo is reported when the settings
        # are read, as a setting, not as a traceback from the first connection.
        if value is None:
            return None
        parse_redis_url(value)  # its ValueError says what is wrong and which forms work
        return value

    @field_validator("redis_url")
    @classmethod
    def _redis_url_names_a_database_by_number(cls, value: str | None) -> str | None:
        # redis-py reads redis://host/abc as database 0, silently.
        if value is not None and value.startswith(("redis://", "rediss://")):
            database = urlsplit(value).path.strip("/")
            if database and not database.isdigit():
                raise ValueError("the database in REDIS_URL is a number, e.g. redis://host:6379/0")
            try:
                ConnectionPool.from_url(value).make_connection()  # builds, does not connect
            except (TypeError, ValueError) as exc:
                raise ValueError(
                    f"REDIS_URL has an option redis-py does not take ({exc})"
                ) from None
        return value

    @field_validator("resume_modules")
    @classmethod
    def _resume_modules_are_module_names(cls, value: str) -> str:
        return ",".join(parse_module_list(value))

    @field_validator("escalate_to")
    @classmethod
    def _escalate_to_is_a_channel_or_group_id(cls, value: str | None) -> str | None:
        # Posted to or mentioned, as an agent's escalate_to is (store.slack_ids).
        return check_id_setting(value, slack_ids.ESCALATION_TARGET) or None

    @field_validator("namespace")
    @classmethod
    def _namespace_is_a_key_prefix(cls, value: str) -> str:
        KeySpace(value)  # its ValueError says what a namespace may hold
        return value

    @classmethod
    def from_env(cls, **overrides: Any) -> Self:
        """The settings of the environment (and ``.env``), with ``overrides`` (field names,
        e.g. ``redis_url=...``) in place of what they say; raises ``ConfigurationError``
        with a one-line message naming each bad variable."""
        try:
            return cls(**overrides)
        except ValidationError as exc:
            raise ConfigurationError(describe_settings_error(exc, cls)) from exc

    @classmethod
    def env_name(cls, field_name: str) -> str:
        """The environment variable of a field (``redis_url`` -> ``REDIS_URL``)."""
        field = cls.model_fields.get(field_name)
        if field is None:
            return field_name
        choices = getattr(field.validation_alias, "choices", None)
        if choices:
            return str(choices[0])
        return f"{cls.model_config.get('env_prefix', '')}{field_name}".upper()

    def require_redis_url(self) -> str:
        """``REDIS_URL``; raises ``ConfigurationError`` saying how to set it when unset."""
        if not self.redis_url:
            raise ConfigurationError(
                "REDIS_URL is not set; point it at your Redis (e.g. redis://127.0.0.1:6379/0) "
                "or run `handoff dev`, which starts an embedded one"
            )
        return self.redis_url

    def open_redis(self, **options: Any) -> Redis:
        """A client for ``REDIS_URL`` that resends a command whose connection failed
        (``connect``); ``options`` are those of ``Redis.from_url`` (timeouts, retries).
        Connects on first use."""
        return connect(self.require_redis_url(), **options)

    def require_queue_redis_url(self) -> str:
        """The URL of the RQ queues: ``HANDOFF_QUEUE_REDIS_URL``, else ``REDIS_URL``. Raises
        ``ConfigurationError`` when that is a cluster (RQ does not run on one)."""
        if self.queue_redis_url:
            return self.queue_redis_url
        url = self.require_redis_url()
        if parse_redis_url(url).kind == "cluster":
            raise ConfigurationError(
                "REDIS_URL is a Redis Cluster, which RQ does not run on: set "
                "HANDOFF_QUEUE_REDIS_URL to a plain or Sentinel Redis for the queues"
            )
        return url

    def open_store(self, *, redis: Redis | None = None) -> HandoffStore:
        """The store these settings describe, on ``redis`` (default: a new client for
        ``REDIS_URL``)."""
        return HandoffStore(redis if redis is not None else self.open_redis(), self.store_config())

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
            resume_modules=parse_module_list(self.resume_modules),
            policy=self.routing_policy(),
            replica_acks=ReplicaAcks(self.min_replica_acks, self.replica_ack_timeout_seconds),
        )

    def routing_policy(self) -> RoutingPolicy | None:
        """The policy in ``HANDOFF_POLICY_FILE``, loaded once per process (every store
        built from these settings shares it); None when unset. Raises ``PolicyError`` (a
        ``ConfigurationError``) naming each bad rule and field."""
        path = self.policy_file.strip()
        return _load_policy_once(path) if path else None


@functools.lru_cache(maxsize=4)
def _load_policy_once(path: str) -> RoutingPolicy:
    # A process builds several stores from one environment (the bot, its API, its
    # workers); the file is read and compiled once. A changed file needs a restart.
    return load_policy(path)


def parse_module_list(text: str) -> tuple[str, ...]:
    """The module names of a comma-separated list (``HANDOFF_RESUME_MODULES``), stripped,
    blanks dropped. Raises ``ValueError`` naming the first that is no dotted module name."""
    modules = tuple(name.strip() for name in text.split(",") if name.strip())
    for name in modules:
        if not all(part.isidentifier() for part in name.split(".")):
            raise ValueError(
                f"{name!r} is not a module name; list modules by their dotted names, "
                "comma-separated, e.g. myagent.steps,billing"
            )
    return modules


def check_id_setting(value: str | None, kind: slack_ids.IdKind, *, many: bool = False) -> str:
    """``value``, a setting holding a Slack id (or, with ``many``, comma-separated ids),
    stripped; blank is unset (``""``). Raises ``ValueError`` naming the first that is not
    an id of ``kind``; the error names it (ids are no secret)."""
    text = (value or "").strip()
    ids = slack_ids.parse_id_list(text) if many else [text] if text else []
    if problem := kind.first_refusal(ids):
        raise ValueError(problem)
    return text


def describe_settings_error(exc: ValidationError, settings_type: type[StoreSettings]) -> str:
    """One line naming each bad environment variable and what is wrong with it, e.g.
    ``bad setting REDIS_URL: not a Redis URL; use redis://...``."""
    problems = []
    for error in exc.errors():
        name = settings_type.env_name(str(error["loc"][0])) if error["loc"] else "settings"
        message = str(error["msg"]).removeprefix("Value error, ")
        problems.append(f"{name}: {message}")
    label, it = ("bad setting", "it") if len(problems) == 1 else ("bad settings", "them")
    # One line whatever the messages hold, so the CLI prints exactly one.
    text = f"{label} {'; '.join(problems)} (fix {it} in the environment or in .env)"
    return " ".join(text.split())
