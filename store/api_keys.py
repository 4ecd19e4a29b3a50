"""API keys: who may call the HTTP API, and what each key may see and do.

A key is shown once, when it is created; Redis keeps only its SHA-256. A key is 32 random
bytes, so a fast hash is as safe as a slow one here: slow hashes (bcrypt, argon2) protect
guessable passwords, and nothing about a random 256-bit key is guessable; a fast hash keeps
the check to one ``GET`` per request, which also makes a revocation take effect at once.
Each key also gets a webhook signing secret (``whsec_...``, Standard Webhooks), kept in
the clear: the worker needs it to sign callbacks.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import secrets
from datetime import UTC, datetime, timedelta

from pydantic import BaseModel, Field
from redis import Redis
from redis.client import Pipeline

from store import slack_ids
from store.exceptions import HandoffError
from store.keys import KeySpace
from store.lua import ReplicaAcks, confirmed_pipeline

KEY_PREFIX = "hk_"
"""Every API key starts so (a secret scanner can find leaked ones)."""
REVOKED = "revoked"
"""What a revoked key's name maps to, for ever."""
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class ApiKeyError(HandoffError, ValueError):
    """A key cannot be created as asked (a bad name, channel or limit)."""


class ApiKeyNameTaken(ApiKeyError):
    """A key of this name exists."""


class UnknownApiKey(ApiKeyError, LookupError):
    """No key has this name."""


class ApiKey(BaseModel):
    """An API key's record (without the key itself)."""

    name: str
    admin: bool = False
    channels: list[str] = Field(default_factory=list)
    """Where the key may create handoffs; empty: anywhere."""
    created_at: datetime
    expires_at: datetime | None = None
    creates_per_minute: int | None = None
    """At most this many creates a minute; None: the deployment's default."""
    webhook_secret: str
    """The ``whsec_`` secret callbacks of this key's handoffs are signed with."""

    def expired(self, now: datetime | None = None) -> bool:
        return self.expires_at is not None and (now or datetime.now(UTC)) >= self.expires_at

    def may_post_in(self, channel: str | None) -> bool:
        """Whether the key may create a handoff routed to ``channel`` (None: the default)."""
        return not self.channels or channel in self.channels


class CreatedKey(BaseModel):
    """What ``create`` returns: the record and the key, shown once."""

    record: ApiKey
    key: str


def digest(key: str) -> str:
    """The SHA-256 of a key, as stored."""
    return hashlib.sha256(key.encode()).hexdigest()


class ApiKeys:
    """The API keys of a namespace.

    ``acks`` (``HANDOFF_MIN_REPLICA_ACKS``, the store's ``config.replica_acks``): a key's
    creation and revocation wait for that many replicas, as a decision does, so that a
    failover neither brings back a key its admin was told is revoked nor forgets one that
    was handed out; ``ReplicasNotConfirmed`` when they do not confirm (try again: both
    are idempotent as far as the replicas go).
    """

    def __init__(self, redis: Redis, keys: KeySpace, *, acks: ReplicaAcks | None = None) -> None:
        self.redis = redis
        self.keys = keys
        self.acks = acks or ReplicaAcks()

    def create(
        self,
        name: str,
        *,
        admin: bool = False,
        channels: list[str] | None = None,
        expires_in: timedelta | None = None,
        creates_per_minute: int | None = None,
    ) -> CreatedKey:
        """A new key named ``name``; raises ``ApiKeyError`` when the name is bad or taken."""
        if not NAME_PATTERN.fullmatch(name):
            raise ApiKeyError(
                f"key name {name!r}: use 1 to 64 letters, digits, '.', '_' or '-', "
                "starting with a letter or digit"
            )
        wanted = list(channels or [])
        if problem := slack_ids.DESTINATION.first_refusal(wanted):
            raise ApiKeyError(problem)
        if creates_per_minute is not None and creates_per_minute < 1:
            raise ApiKeyError("creates_per_minute must be at least 1")
        key = KEY_PREFIX + secrets.token_urlsafe(32)
        now = datetime.now(UTC)
        record = ApiKey(
            name=name,
            admin=admin,
            channels=wanted,
            created_at=now,
            expires_at=now + expires_in if expires_in else None,
            creates_per_minute=creates_per_minute,
            webhook_secret="whsec_" + base64.b64encode(secrets.token_bytes(32)).decode(),
        )
        hashed = digest(key)
        # The name is claimed first (HSETNX), so two creates of one name cannot both win.
        if not self.redis.hsetnx(self.keys.api_key_names, name, hashed):
            if _text(self.redis.hget(self.keys.api_key_names, name) or b"") == REVOKED:
                raise ApiKeyNameTaken(
                    f"a key named {name!r} was revoked, and names are never used again (its "
                    "handoffs and idempotency keys stay its own); pick another name"
                )
            raise ApiKeyNameTaken(f"a key named {name!r} exists; pick another name")
        record_key, record_json = self.keys.api_key(hashed), record.model_dump_json()
        if self.acks.replicas:
            # The name and the record, confirmed together (WAIT covers every earlier write).
            confirmed_pipeline(
                self.redis,
                self.keys.api_key_names,
                self.acks,
                lambda pipe: pipe.set(record_key, record_json),
            )
        else:
            self.redis.set(record_key, record_json)
        return CreatedKey(record=record, key=key)

    def authenticate(self, key: str) -> ApiKey | None:
        """The record of ``key`` if it is a live key (not revoked, not expired), else None."""
        if not key.startswith(KEY_PREFIX) or len(key) > 200:
            return None
        raw = self.redis.get(self.keys.api_key(digest(key)))
        if raw is None:
            return None
        record = ApiKey.model_validate_json(raw)
        # Compare the name's hash too: a record left behind by a revoke racing a create of
        # the same name must not come back to life.
        current = self.redis.hget(self.keys.api_key_names, record.name)
        if current is None or not hmac.compare_digest(_text(current), digest(key)):
            return None
        return None if record.expired() else record

    def get(self, name: str) -> ApiKey | None:
        """A key's record by name."""
        hashed = self.redis.hget(self.keys.api_key_names, name)
        if hashed is None:
            return None
        raw = self.redis.get(self.keys.api_key(_text(hashed)))
        return None if raw is None else ApiKey.model_validate_json(raw)

    def list(self) -> list[ApiKey]:
        """Every key's record, by name."""
        names = self.redis.hgetall(self.keys.api_key_names)
        found = []
        for _, hashed in sorted((_text(n), _text(h)) for n, h in names.items()):
            raw = self.redis.get(self.keys.api_key(hashed))
            if raw is not None:
                found.append(ApiKey.model_validate_json(raw))
        return found

    def revoke(self, name: str) -> None:
        """Revoke the key named ``name`` at once; raises ``ApiKeyError`` for an unknown name."""
        hashed = self.redis.hget(self.keys.api_key_names, name)
        if hashed is None or _text(hashed) == REVOKED:
            raise UnknownApiKey(f"no live key named {name!r}; `handoff keys list` shows them")
        record_key = self.keys.api_key(_text(hashed))
        if self.acks.replicas:
            # MULTI and EXEC by hand, so that WAIT follows EXEC on the same connection.
            def queue(pipe: Pipeline) -> None:
                pipe.execute_command("MULTI")
                self._queue_revoke(pipe, name, record_key)
                pipe.execute_command("EXEC")

            replies = confirmed_pipeline(self.redis, self.keys.api_key_names, self.acks, queue)
            failed = next((r for r in replies if isinstance(r, Exception)), None)
            if failed is not None:
                raise failed
            return
        pipe = self.redis.pipeline(transaction=True)
        self._queue_revoke(pipe, name, record_key)
        pipe.execute()

    def _queue_revoke(self, pipe: Pipeline, name: str, record_key: str) -> None:
        # The name stays taken: handoffs are scoped to their key by name, and a new key of
        # the same name must not inherit them (nor sign their callbacks).
        pipe.hset(self.keys.api_key_names, name, REVOKED)
        pipe.delete(record_key)

    def take_create(self, record: ApiKey, *, default_per_minute: int) -> float | None:
        """Count one create against the key's per-minute limit: None when allowed, else
        the seconds until the next minute (for ``Retry-After``). A fixed window, counted by
        Redis's clock so every API process shares it."""
        limit = record.creates_per_minute or default_per_minute
        seconds, micros = self.redis.time()
        now = int(seconds) + int(micros) / 1e6
        minute = int(now // 60)
        key = self.keys.api_rate(record.name, minute)
        # Each create is a member of the minute's set, not an increment: the client resends
        # the transaction when EXEC's reply is lost, and the same member counts once.
        pipe = self.redis.pipeline(transaction=True)
        pipe.zadd(key, {secrets.token_hex(8): 0})
        pipe.expire(key, 120)
        pipe.zcard(key)
        _, _, count = pipe.execute()
        if int(count) <= limit:
            return None
        return max(1.0, (minute + 1) * 60 - now)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def describe(record: ApiKey) -> dict[str, object]:
    """A key's record as listings show it: everything but the webhook secret."""
    shown = json.loads(record.model_dump_json(exclude={"webhook_secret"}))
    return dict(shown)
