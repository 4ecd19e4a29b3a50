"""What the adapter tests share: the records their graphs and agents keep in Redis (read
here and written by workers), the environment they run in, and how an adapter is built
on a test module."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from redis import Redis

from worker.adapters.pauses import forget_built

if TYPE_CHECKING:
    import pytest


def env_redis() -> Redis:
    """A client of ``$REDIS_URL``: the test's Redis, in this process and in workers."""
    return Redis.from_url(os.environ["REDIS_URL"])


def record(key: str, entry: Mapping[str, Any]) -> None:
    """Append ``entry`` to the list at ``key`` (as JSON)."""
    env_redis().rpush(key, json.dumps(entry))


def recorded(redis: Redis, key: str) -> list[dict[str, Any]]:
    """Every entry recorded at ``key`` so far, oldest first."""
    return [json.loads(raw) for raw in redis.lrange(key, 0, -1)]


def adapter_env(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> Iterator[dict[str, str]]:
    """Body of an adapter test's environment fixture: ``env`` set here (and yielded, for
    the workers), with every graph or agent built so far forgotten before and after."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    forget_built()
    yield env
    forget_built()


def make_adapter(adapter: Any, handoffs: Any, module: str, factory: str, **options: Any) -> Any:
    """``adapter`` (the adapter class) on ``module:factory``, posting to C0SUPPORT and
    finishing through ``module:record_finish``."""
    return adapter(
        handoffs,
        f"{module}:{factory}",
        channel="C0SUPPORT",
        on_finish=f"{module}:record_finish",
        **options,
    )
