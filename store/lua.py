"""Calling the store's Lua scripts by their SHA1, loading them when the server lacks them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis import Redis
from redis.client import Pipeline
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
        # Whether this client has seen the server know the script (a call worked, or it
        # loaded it): pipelined calls cannot load it on demand.
        self._seen_loaded = False

    def __call__(self, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        """Run the script on ``keys`` with ``args``."""
        try:
            result = self._evalsha(keys, args)
        except NoScriptError:
            self._load()
            result = self._evalsha(keys, args)
        self._seen_loaded = True
        return result

    def queue(self, pipe: Pipeline, keys: Sequence[Any], args: Sequence[Any]) -> None:
        """Add a call of the script to ``pipe``.

        The script is loaded first if this client never saw the server know it. A server
        that lost it since (restarted, flushed) makes the pipeline's reply for this call a
        ``NoScriptError``, which the caller handles; a direct call then loads it again.
        redis-py's own pipelined scripts cost an extra ``SCRIPT EXISTS`` round trip on
        every execute instead.
        """
        if not self._seen_loaded:
            self._load()
            self._seen_loaded = True
        pipe.execute_command("EVALSHA", self._script.sha, len(keys), *keys, *args)

    def _load(self) -> None:
        self._script.sha = self._redis.script_load(self._script.script)

    def _evalsha(self, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        return self._redis.execute_command("EVALSHA", self._script.sha, len(keys), *keys, *args)
