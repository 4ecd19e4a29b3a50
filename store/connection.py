"""The one place a Redis URL becomes a redis-py client, for every process (the bot, the API,
the workers, the dispatcher and agent code), so each of them can reach a plain server, a
master found through Sentinel, or a Redis Cluster by changing ``REDIS_URL`` only.

The URLs:

- ``redis://``, ``rediss://`` (TLS), ``unix://``: one server, as redis-py reads them;
- ``redis+sentinel://[user:password@]host1:26379,host2:26379/<master name>[/<db>]``
  (``rediss+sentinel://`` for TLS to the Sentinels and the data nodes): the master the
  Sentinels name, found again after a failover. The user and password are the data nodes';
  Sentinels that want their own give them as ``?sentinel_password=...`` (and
  ``sentinel_username=...``);
- ``redis+cluster://[user:password@]host1:7000,host2:7001`` (``rediss+cluster://``): a Redis
  Cluster, reached through any of the nodes listed (``MOVED``/``ASK`` followed by
  ``redis.cluster.RedisCluster``). For the store only: RQ does not run on Cluster, so the
  queues then need ``HANDOFF_QUEUE_REDIS_URL`` (a plain or Sentinel URL).

A failover is followed by redis-py itself: a Sentinel-managed pool asks the Sentinels for
the master again whenever a connection fails or the server answers ``READONLY`` (a demoted
master), and the retry of every client (``store.settings.redis_retry``) sends the command
again on the new master.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import parse_qsl, unquote, urlsplit

from redis import Redis
from redis import asyncio as aioredis
from redis.asyncio.connection import SSLConnection as AsyncSSLConnection
from redis.asyncio.sentinel import Sentinel as AsyncSentinel
from redis.asyncio.sentinel import SentinelManagedConnection as AsyncSentinelManagedConnection
from redis.cluster import ClusterNode, RedisCluster
from redis.connection import SSLConnection, parse_url
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException
from redis.sentinel import Sentinel, SentinelManagedConnection

SENTINEL_SCHEMES = ("redis+sentinel", "rediss+sentinel")
CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")

URL_FORMS = (
    "redis://[:password@]host[:port][/db], rediss://... (TLS), unix:///path/to/redis.sock, "
    "redis+sentinel://[:password@]host1:26379,host2:26379/<master name>[/db] "
    "(rediss+sentinel:// for TLS) or redis+cluster://[:password@]host1:7000,host2:7001"
)
"""Every URL a Redis setting takes, as the error for a bad one names them."""

SENTINEL_OPTIONS = ("sentinel_password", "sentinel_username", "ssl_ca_certs", "ssl_cert_reqs")
"""The query options a Sentinel or Cluster URL takes (the TLS ones for ``rediss+...``)."""

Kind = Literal["server", "sentinel", "cluster"]


@dataclass(frozen=True)
class RedisTarget:
    """What a Redis URL names: one server (``url`` as redis-py reads it), a master by the
    Sentinels at ``hosts``, or a cluster reached through ``hosts``."""

    kind: Kind
    url: str
    hosts: tuple[tuple[str, int], ...] = ()
    master: str = ""
    db: int = 0
    username: str | None = None
    password: str | None = None
    tls: bool = False
    options: dict[str, str] = field(default_factory=dict)

    def node_options(self) -> dict[str, Any]:
        """Connection options for the data nodes (the master and replicas, or the cluster's
        nodes): credentials and TLS."""
        options: dict[str, Any] = {}
        if self.username:
            options["username"] = self.username
        if self.password:
            options["password"] = self.password
        if self.tls:
            options["ssl"] = True
            for name in ("ssl_ca_certs", "ssl_cert_reqs"):
                if name in self.options:
                    options[name] = self.options[name]
        return options

    def sentinel_options(self) -> dict[str, Any]:
        """Connection options for the Sentinels themselves."""
        options: dict[str, Any] = {}
        if "sentinel_username" in self.options:
            options["username"] = self.options["sentinel_username"]
        if "sentinel_password" in self.options:
            options["password"] = self.options["sentinel_password"]
        if self.tls:
            options["ssl"] = True
            for name in ("ssl_ca_certs", "ssl_cert_reqs"):
                if name in self.options:
                    options[name] = self.options[name]
        return options


def parse_redis_url(url: str) -> RedisTarget:
    """What ``url`` names; raises ``ValueError`` saying what is wrong and which forms are
    taken (never echoing the URL: it may hold a password)."""
    scheme = url.partition("://")[0].lower() if "://" in url else ""
    if scheme in SENTINEL_SCHEMES or scheme in CLUSTER_SCHEMES:
        return _parse_multi_host(url, scheme)
    try:
        parse_url(url)
    except ValueError:
        raise ValueError(f"not a Redis URL; use {URL_FORMS}") from None
    return RedisTarget(kind="server", url=url)


def _parse_multi_host(url: str, scheme: str) -> RedisTarget:
    parts = urlsplit(url)
    kind: Kind = "sentinel" if scheme in SENTINEL_SCHEMES else "cluster"
    default_port = 26379 if kind == "sentinel" else 6379
    netloc = parts.netloc
    userinfo, _, hostlist = netloc.rpartition("@")
    username = password = None
    if userinfo:
        user, has_password, secret = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(secret) if has_password else None
    hosts = []
    for item in hostlist.split(","):
        item = item.strip()
        if not item:
            continue
        host, _, port = item.rpartition(":") if ":" in item else (item, "", str(default_port))
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]  # an IPv6 address, [::1]:26379
        elif ":" in host:
            # ::1 or h1:26379:5: a port that cannot be told from an address (it was read
            # as host ':' port 1, and Sentinel asked there).
            raise ValueError(
                f"{scheme} URLs write an IPv6 address in brackets, [::1]:{default_port}, "
                "and one port per host"
            )
        if not port.isdigit() or not host or not 0 < int(port) < 65536:
            raise ValueError(
                f"{scheme} URLs list host:port pairs separated by commas "
                f"(e.g. {scheme}://node1:{default_port},node2:{default_port}/...)"
            )
        hosts.append((host, int(port)))
    if not hosts:
        raise ValueError(f"a {scheme} URL names at least one host:port; use {URL_FORMS}")
    options = dict(parse_qsl(parts.query, keep_blank_values=True))
    unknown = sorted(set(options) - set(SENTINEL_OPTIONS))
    if unknown:
        raise ValueError(
            f"a {scheme} URL takes the options {', '.join(SENTINEL_OPTIONS)}, not "
            f"{', '.join(unknown)}"
        )
    path = [segment for segment in parts.path.split("/") if segment]
    if kind == "sentinel":
        if not path or len(path) > 2:
            raise ValueError(
                f"a {scheme} URL ends with the master's name as the Sentinels know it and "
                f"an optional database number: {scheme}://host1:26379,host2:26379/mymaster/0"
            )
        master = unquote(path[0])
        database = path[1] if len(path) == 2 else "0"
    else:
        master = ""
        database = path[0] if path else "0"
        if len(path) > 1 or database != "0":
            raise ValueError(f"Redis Cluster has database 0 only; write {scheme}://host:port")
    if not database.isdigit():
        raise ValueError(f"the database in a {scheme} URL is a number, e.g. .../mymaster/0")
    return RedisTarget(
        kind=kind,
        url=url,
        hosts=tuple(hosts),
        master=master,
        db=int(database),
        username=username,
        password=password,
        tls=scheme.startswith("rediss"),
        options=options,
    )


class MasterFollowingConnection(SentinelManagedConnection):
    """A connection to the master the Sentinels name that asks them again whenever it
    connects, also when a command or a pipeline reconnects it in its retry.

    redis-py's own asks only when the pool hands a connection out: a retried command
    reconnects the same connection to the address it had, so during a failover a worker's
    retries (up to HANDOFF_REDIS_WAIT_SECONDS) kept knocking on the dead master.
    """

    _resolving = False

    def connect_to(self, address: tuple[str, int]) -> None:
        self._resolving = True  # the pool just asked the Sentinels
        try:
            super().connect_to(address)
        finally:
            self._resolving = False

    def connect_check_health(self, *args: Any, **kwargs: Any) -> None:
        if self._sock is None and not self._resolving and self.connection_pool.is_master:
            self.host, self.port = self.connection_pool.get_master_address()
        super().connect_check_health(*args, **kwargs)


class MasterFollowingSSLConnection(MasterFollowingConnection, SSLConnection):
    """``MasterFollowingConnection`` over TLS."""


class AsyncMasterFollowingConnection(AsyncSentinelManagedConnection):
    """``MasterFollowingConnection`` for asyncio clients (the API)."""

    _resolving = False

    async def connect_to(self, address: tuple[str, int]) -> None:
        self._resolving = True
        try:
            await super().connect_to(address)
        finally:
            self._resolving = False

    async def connect_check_health(self, *args: Any, **kwargs: Any) -> None:
        if not self.is_connected and not self._resolving and self.connection_pool.is_master:
            self.host, self.port = await self.connection_pool.get_master_address()
        await super().connect_check_health(*args, **kwargs)


class AsyncMasterFollowingSSLConnection(AsyncMasterFollowingConnection, AsyncSSLConnection):
    """``AsyncMasterFollowingConnection`` over TLS."""


def _sentinel_side(options: dict[str, Any]) -> dict[str, Any]:
    # Questions to a Sentinel are as bounded as the client's own commands.
    return {
        name: options[name]
        for name in ("socket_timeout", "socket_connect_timeout")
        if name in options
    }


MAX_CONNECTIONS = 10_000
"""A client's pool size unless told otherwise. redis-py 8 caps a pool at 100 connections,
and every ``Handoffs.wait`` holds one (subscribed) while it waits, so an agent process with
more than 100 waits at once failed with MaxConnectionsError; before redis-py 8 a pool had no
practical cap, which this restores within what a Redis server accepts (maxclients 10,000)."""


def open_client(url: str, **options: Any) -> Redis:
    """A synchronous client for ``url``; ``options`` are those of ``Redis.from_url``
    (timeouts, ``retry``, ``health_check_interval``). Connects on first use. A Cluster URL
    gives a ``RedisCluster`` (typed as ``Redis``: the store uses what both have)."""
    target = parse_redis_url(url)
    options.setdefault("max_connections", MAX_CONNECTIONS)
    if target.kind == "server":
        return Redis.from_url(url, **options)
    if target.kind == "sentinel":
        sentinel = Sentinel(
            list(target.hosts),
            sentinel_kwargs={**_sentinel_side(options), **target.sentinel_options()},
        )
        node_options = target.node_options()
        connection_class = (
            MasterFollowingSSLConnection
            if node_options.pop("ssl", False)
            else MasterFollowingConnection
        )
        return sentinel.master_for(
            target.master,
            db=target.db,
            connection_class=connection_class,
            **node_options,
            **options,
        )
    return _open_cluster(target, options)


def _open_cluster(target: RedisTarget, options: dict[str, Any]) -> Redis:
    options = dict(options)
    # A cluster client follows MOVED/ASK and retries on a refreshed slot map itself; its
    # own ``retry`` is for each node's connection.
    options.pop("max_connections", None)
    try:
        client = RedisCluster(
            startup_nodes=[ClusterNode(host, port) for host, port in target.hosts],
            **target.node_options(),
            **options,
        )
    except RedisClusterException as exc:
        # A cluster client reads the slot map as it is made: no node answering (or a node
        # not in cluster mode) was a RedisClusterException, which is no RedisError, so
        # `handoff check` and every process's start showed a traceback instead of "cannot
        # reach Redis". The message names hosts and ports only, never the password.
        raise RedisConnectionError(
            f"cannot read the Redis Cluster's slot map from "
            f"{', '.join(f'{host}:{port}' for host, port in target.hosts)}: {exc}"
        ) from None
    return client  # type: ignore[return-value]


def open_async_client(url: str, **options: Any) -> aioredis.Redis:
    """An asyncio client for ``url`` (a plain server or a master through Sentinel);
    ``options`` are those of ``redis.asyncio.Redis.from_url``. Cluster: the asyncio
    ``RedisCluster`` has no pub/sub, which the API's waits need, so it is refused."""
    target = parse_redis_url(url)
    if target.kind == "server":
        options.setdefault("max_connections", MAX_CONNECTIONS)
        return aioredis.Redis.from_url(url, **options)
    if target.kind == "sentinel":
        options.pop("max_connections", None)
        sentinel = AsyncSentinel(
            list(target.hosts),
            sentinel_kwargs={**_sentinel_side(options), **target.sentinel_options()},
        )
        node_options = target.node_options()
        connection_class = (
            AsyncMasterFollowingSSLConnection
            if node_options.pop("ssl", False)
            else AsyncMasterFollowingConnection
        )
        return sentinel.master_for(
            target.master,
            db=target.db,
            connection_class=connection_class,
            **node_options,
            **options,
        )
    raise ValueError(
        "the HTTP API does not run on Redis Cluster (its waits use pub/sub on one server); "
        "give `handoff api` a plain or Sentinel REDIS_URL"
    )


def is_cluster_url(url: str) -> bool:
    """Whether ``url`` names a Redis Cluster."""
    return url.partition("://")[0].lower() in CLUSTER_SCHEMES
