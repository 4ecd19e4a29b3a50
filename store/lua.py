"""Calling the store's Lua scripts by their SHA1, loading them when the server lacks them,
and, for the writes someone is told about, waiting for replicas to have them."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from redis import Redis
from redis.client import Pipeline
from redis.cluster import RedisCluster
from redis.exceptions import (
    ClusterDownError,
    ConnectionError,
    MovedError,
    NoScriptError,
    ResponseError,
    TimeoutError,
    TryAgainError,
)

from store import defaults
from store.exceptions import MasterCutOff, ReplicasNotConfirmed

CLUSTER_REROUTES = 20
"""Most times a confirmed write is sent again to a cluster whose slot map changed under it
(a failover inside the cluster): each time after the map is read again and a short pause."""

CLUSTER_REROUTE_PAUSE_SECONDS = 0.25


@dataclass(frozen=True)
class ReplicaAcks:
    """``HANDOFF_MIN_REPLICA_ACKS``: how many replicas must have a write before anyone is
    told of it, and how long to wait for them (Redis ``WAIT``, in the write's round trip)."""

    replicas: int = 0
    timeout_seconds: float = defaults.REPLICA_ACK_TIMEOUT_SECONDS

    def check(self, confirmed: int, replies: list[Any] | None = None) -> None:
        """Raise ``ReplicasNotConfirmed`` (carrying ``replies``, what the unconfirmed
        commands answered) when fewer than ``replicas`` confirmed."""
        if confirmed < self.replicas:
            exc = ReplicasNotConfirmed(self.replicas, confirmed, self.timeout_seconds)
            exc.replies = list(replies or [])
            raise exc

    def wait_args(self) -> tuple[str, int, int]:
        """The ``WAIT`` command for a pipeline."""
        return ("WAIT", self.replicas, max(1, int(self.timeout_seconds * 1000)))


def confirmed_pipeline(
    redis: Redis, key: str, acks: ReplicaAcks, queue: Callable[[Pipeline], None]
) -> list[Any]:
    """Run the commands ``queue`` adds, then ``WAIT`` for ``acks.replicas``, in one round
    trip on one connection (``WAIT`` counts the writes of its own connection), to the
    server holding ``key``. Returns the commands' replies (errors among them as exception
    objects); raises ``ReplicasNotConfirmed`` when too few replicas confirmed.

    On a cluster the pipeline goes to the master of ``key``'s slot; when that moved (a
    failover inside the cluster) the slot map is read again and the whole pipeline sent
    again: the store's writes are idempotent, so a resend answers what the first did.
    """
    if not isinstance(redis, RedisCluster):
        pipe = redis.pipeline(transaction=False)
        queue(pipe)
        pipe.execute_command(*acks.wait_args())
        *replies, confirmed = pipe.execute(raise_on_error=False)
        if isinstance(confirmed, Exception):
            raise confirmed
        acks.check(int(confirmed), replies)
        return replies
    for attempt in range(CLUSTER_REROUTES + 1):
        try:
            node = redis.get_node_from_key(key, replica=False)
            client = node.redis_connection or redis.get_redis_connection(node)
            pipe = client.pipeline(transaction=False)
            queue(pipe)
            pipe.execute_command(*acks.wait_args())
            *replies, confirmed = pipe.execute(raise_on_error=False)
            moved = next((r for r in replies if isinstance(r, (MovedError, TryAgainError))), None)
            if moved is not None:
                raise moved
            if isinstance(confirmed, Exception):
                raise confirmed
        except (MovedError, TryAgainError, ClusterDownError, ConnectionError, TimeoutError):
            if attempt == CLUSTER_REROUTES:
                raise
            time.sleep(CLUSTER_REROUTE_PAUSE_SECONDS)
            redis.nodes_manager.initialize()
            continue
        acks.check(int(confirmed), replies)
        return replies
    raise AssertionError("unreachable")  # pragma: no cover


class LuaScript:
    """One Lua script, called with ``EVALSHA`` straight through ``execute_command``.

    redis-py's ``Script`` does the same with about 8 µs more Python per call, and every
    create, decision and task step is one script call. A server that does not know the
    script (restarted, flushed, failed over) gets it loaded and the call is made again.
    """

    def __init__(self, redis: Redis, text: str, *, acks: ReplicaAcks | None = None) -> None:
        self._redis = redis
        self._acks = acks if acks is not None and acks.replicas > 0 else None
        """Set for the scripts whose writes someone is told about (a creation, a decision,
        a claim): each call waits for the replicas in its own round trip."""
        self._script = redis.register_script(text)
        # Whether this client has seen the server know the script (a call worked, or it
        # loaded it): pipelined calls cannot load it on demand.
        self._seen_loaded = False

    def __call__(self, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        """Run the script on ``keys`` with ``args``; with replica acks, raises
        ``ReplicasNotConfirmed`` when too few replicas confirmed its write in time."""
        try:
            if self._acks is not None:
                return self._call_confirmed(keys, args)
            try:
                result = self._evalsha(keys, args)
            except NoScriptError:
                self._load()
                result = self._evalsha(keys, args)
        except ResponseError as exc:
            if str(exc).startswith("NOREPLICAS"):
                # The master's min-replicas-to-write refused it: nothing was written.
                raise MasterCutOff() from exc
            raise
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

    def queue_text(self, pipe: Pipeline, keys: Sequence[Any], args: Sequence[Any]) -> None:
        """Add a call of the script to ``pipe`` by its text (``EVAL``), which never fails
        for a script the server lacks: for a transaction whose calls must all run or none
        (a lost script would fail its own call only, after the others committed)."""
        pipe.execute_command("EVAL", self._script.script, len(keys), *keys, *args)

    def _call_confirmed(self, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        acks = self._acks
        assert acks is not None

        def queue(pipe: Pipeline) -> None:
            pipe.execute_command("EVALSHA", self._script.sha, len(keys), *keys, *args)

        for _ in range(2):
            (result,) = confirmed_pipeline(self._redis, str(keys[0]), acks, queue)
            if isinstance(result, NoScriptError):
                # Nothing ran (and the WAIT confirmed nothing of ours): load and call again.
                self._load()
                continue
            if isinstance(result, Exception):
                raise result
            self._seen_loaded = True
            return result
        raise NoScriptError("the server lost the store's script again as it was loaded")

    def _load(self) -> None:
        self._script.sha = self._redis.script_load(self._script.script)

    def _evalsha(self, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        return self._redis.execute_command("EVALSHA", self._script.sha, len(keys), *keys, *args)
