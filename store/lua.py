"""Calling the store's Lua scripts by their SHA1, loading them when the server lacks them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis import Redis
from redis.exceptions import NoScriptError


class LuaScript:
    """One Lua script, called with ``EVALSHA`` straight through ``execute_command``.

    redis-py's ``Script`` does the same with about 8 µs more Python per call, and every
    create, decision and task step is one script call. A server that does not know the
    script (restarted, flushed, failed over) gets it loaded and the call is made again.
    """

    def __init__(self, redis: Redis, text: str) -> None:
        self._redis = redis
        self._script = redis.register_script(text)

    def __call__(self, keys: Sequence[Any], args: Sequence[Any], client: Any | None = None) -> Any:
        """Run the script on ``keys`` with ``args``; ``client`` may be a pipeline."""
        if client is not None:
            return self._script(keys=keys, args=args, client=client)
        try:
            return self._evalsha(keys, args)
        except NoScriptError:
            self._script.sha = self._redis.script_load(self._script.script)
            return self._evalsha(keys, args)

    def _evalsha(self, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        return self._redis.execute_command("EVALSHA", self._script.sha, len(keys), *keys, *args)
