"""Redis deployments that survive losing a machine, started by the tests on loopback: a
master with a replica watched by three Sentinels (``SentinelGroup``), and a Redis Cluster of
three masters with a replica each (``ClusterNodes``). Every server is a `redis-server` of the
test's own in a temporary directory, killed at the end."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TypeVar

import pytest
from redis import Redis
from redis.backoff import NoBackoff
from redis.cluster import key_slot
from redis.exceptions import RedisError
from redis.retry import Retry

from tests.support.redis_server import RedisServer
from tests.support.slack_env import free_port

MASTER_NAME = "handoff"
DOWN_AFTER_MS = 1000
"""Sentinel's down-after-milliseconds: a master silent this long is taken for dead."""

NO_PERSISTENCE = ("--appendonly", "no")
"""Replication is the copy under test, not the disk: a dead machine takes its disk along."""


def require_redis_server() -> None:
    """Skip, saying why, where `redis-server` is absent (these tests need the real one)."""
    if shutil.which("redis-server") is None or shutil.which("redis-cli") is None:
        pytest.skip("redis-server and redis-cli are not installed (needed for the HA tests)")


def wait_for(condition, *, timeout: float, what: str, interval: float = 0.05):  # type: ignore[no-untyped-def]
    """``condition()`` once truthy, errors meanwhile ignored; fails the test after
    ``timeout`` seconds naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        with suppress(RedisError, OSError):
            found = condition()
            if found:
                return found
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


SENTINEL_START_ATTEMPTS = 5


def distinct_free_ports(count: int) -> list[int]:
    """``count`` free loopback ports, no two alike (``free_port`` alone may repeat one that
    nothing has bound yet)."""
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


class SentinelGroup:
    """A master, one replica (or two) and three Sentinels (quorum 2) on free loopback
    ports.

    ``master_extra`` are more arguments of both data servers (each may be promoted), e.g.
    ``min-replicas-to-write``.
    """

    def __init__(
        self, base: Path, *, replicas: int = 1, master_extra: tuple[str, ...] = ()
    ) -> None:
        self.base = base
        self.master = RedisServer(base / "a", extra=(*NO_PERSISTENCE, *master_extra))
        self.replicas = [
            RedisServer(
                base / name,
                extra=(
                    *NO_PERSISTENCE,
                    *master_extra,
                    "--replicaof",
                    "127.0.0.1",
                    str(self.master.port),
                ),
            )
            for name in "bc"[:replicas]
        ]
        self.replica = self.replicas[0]
        self.sentinel_ports = [free_port() for _ in range(3)]
        self.sentinels: list[subprocess.Popen[bytes]] = []

    @property
    def url(self) -> str:
        """The store's URL: the master through the three Sentinels, database 0."""
        hosts = ",".join(f"127.0.0.1:{port}" for port in self.sentinel_ports)
        return f"redis+sentinel://{hosts}/{MASTER_NAME}/0"

    def start(self) -> None:
        self.master.start()
        for server in self.replicas:
            server.start()
            replica = Redis(port=server.port)
            wait_for(
                lambda r=replica: r.info("replication").get("master_link_status") == "up",
                timeout=15,
                what="the replica to sync",
            )
            replica.close()
        for index in range(len(self.sentinel_ports)):
            self.sentinels.append(self._start_sentinel(index))
        for port in self.sentinel_ports:
            sentinel = Redis(port=port)
            wait_for(
                lambda s=sentinel: (
                    int(s.sentinel_master(MASTER_NAME)["num-other-sentinels"]) == 2
                    and s.sentinel_slaves(MASTER_NAME)
                ),
                timeout=20,
                what="the Sentinels to find each other and the replica",
                interval=0.2,
            )
            sentinel.close()

    def _start_sentinel(self, index: int) -> subprocess.Popen[bytes]:
        """Start Sentinel ``index``; on another free port when another process (a parallel
        test) took the one it was given before it could bind it."""
        folder = self.base / f"sentinel-{index}"
        folder.mkdir(parents=True, exist_ok=True)
        for attempt in range(SENTINEL_START_ATTEMPTS):
            if attempt:
                self.sentinel_ports[index] = distinct_free_ports(1)[0]
            port = self.sentinel_ports[index]
            config = folder / "sentinel.conf"
            config.write_text(
                f"port {port}\nbind 127.0.0.1\nprotected-mode no\ndir {folder}\n"
                f"sentinel monitor {MASTER_NAME} 127.0.0.1 {self.master.port} 2\n"
                f"sentinel down-after-milliseconds {MASTER_NAME} {DOWN_AFTER_MS}\n"
                f"sentinel failover-timeout {MASTER_NAME} 10000\n"
                f"sentinel parallel-syncs {MASTER_NAME} 1\n"
            )
            with open(folder / "sentinel.log", "ab") as log:
                process = subprocess.Popen(
                    ["redis-server", str(config), "--sentinel"],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            # No retries: a ping at a port another process holds would wait out redis-py's
            # ten resends of it before the dead Sentinel is looked at again.
            sentinel = Redis(port=port, socket_timeout=1, retry=Retry(NoBackoff(), 0))
            try:
                wait_for(
                    lambda p=process, s=sentinel: p.poll() is not None or s.ping(),
                    timeout=10,
                    what=f"Sentinel {index} to listen",
                )
            finally:
                sentinel.close()
            if process.poll() is None:
                return process
        pytest.fail(f"Sentinel {index} could not bind a port in {SENTINEL_START_ATTEMPTS} tries")

    def master_port(self) -> int:
        """The port the Sentinels name as the master now."""
        sentinel = Redis(port=self.sentinel_ports[0], socket_timeout=1)
        try:
            _, port = sentinel.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME)
            return int(port)
        finally:
            sentinel.close()

    def fail_over_while_replicas_lag(self, lag_seconds: float) -> tuple[float, float]:
        """The replicas fall behind for ``lag_seconds`` (a network hiccup, a busy machine)
        and the master is SIGKILLed then, so what it acknowledged meanwhile exists nowhere
        else; the replicas carry on, and Sentinel promotes one. Returns when the master was
        killed (monotonic) and the seconds from then to the promotion."""
        old_port = self.master.port
        for server in self.replicas:
            server.process.send_signal(signal.SIGSTOP)  # type: ignore[union-attr]
        # Cut the links too: what the master writes from now on stays in its own memory
        # (the kernel would otherwise keep it in the paused replicas' socket buffers).
        Redis(port=self.master.port).client_kill_filter(_type="replica")
        time.sleep(lag_seconds)
        killed_at = time.monotonic()
        self.master.kill()
        for server in self.replicas:
            server.process.send_signal(signal.SIGCONT)  # type: ignore[union-attr]
        wait_for(
            lambda: self.master_port() != old_port,
            timeout=30,
            what="Sentinel to promote a replica",
            interval=0.1,
        )
        return killed_at, time.monotonic() - killed_at

    def stop(self) -> None:
        for process in self.sentinels:
            with suppress(ProcessLookupError):
                process.kill()
        for process in self.sentinels:
            with suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)
        self.master.stop()
        for server in self.replicas:
            server.stop()


class ClusterNodes:
    """A Redis Cluster of three masters with ``replicas`` replicas each, on free loopback
    ports."""

    def __init__(self, base: Path, *, replicas: int = 1, extra: tuple[str, ...] = ()) -> None:
        self.replicas = replicas
        self.base = base
        count = 3 * (1 + replicas)
        ports = distinct_free_ports(2 * count)
        self.servers = [
            RedisServer(
                base / f"node-{index}",
                port=ports[2 * index],
                extra=(
                    *NO_PERSISTENCE,
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "1000",
                    # The bus port otherwise is the port + 10000, past 65535 for a free port.
                    "--cluster-port",
                    str(ports[2 * index + 1]),
                    *extra,
                ),
            )
            for index in range(count)
        ]

    @property
    def url(self) -> str:
        """The store's URL: the cluster through its first three nodes."""
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in self.servers[:3])
        return f"redis+cluster://{hosts}"

    def start(self) -> None:
        for server in self.servers:
            server.start()
        subprocess.run(
            [
                "redis-cli",
                "--cluster",
                "create",
                *(f"127.0.0.1:{s.port}" for s in self.servers),
                "--cluster-replicas",
                str(self.replicas),
                "--cluster-yes",
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )
        for server in self.servers:
            node = Redis(port=server.port)
            wait_for(
                lambda n=node: "cluster_state:ok" in _text(n.execute_command("CLUSTER", "INFO")),
                timeout=30,
                what="every node to see the cluster ok",
                interval=0.2,
            )
            wait_for(
                lambda n=node: _replication_ready(n.info("replication"), self.replicas),
                timeout=30,
                what="every master's replicas to sync",
                interval=0.2,
            )
            node.close()

    def master_of(self, key: str) -> int:
        """The port of the master serving ``key``'s slot now, as the first live node says."""
        slot = key_slot(key.encode())
        for server in self.servers:
            if server.process is None:
                continue
            node = Redis(port=server.port, socket_timeout=1)
            try:
                for start, end, master, *_ in node.execute_command("CLUSTER", "SLOTS"):
                    if start <= slot <= end:
                        return int(master[1])
            except RedisError:
                continue
            finally:
                node.close()
        raise RuntimeError("no live node answered CLUSTER SLOTS")

    def server_on(self, port: int) -> RedisServer:
        return next(s for s in self.servers if s.port == port)

    def kill_master_of(self, key: str) -> float:
        """SIGKILL the master serving ``key``'s slot and wait until the cluster promoted
        one of its replicas; returns when the master was killed (monotonic)."""
        old_master = self.master_of(key)
        killed_at = time.monotonic()
        self.server_on(old_master).kill()
        wait_for(
            lambda: self.master_of(key) != old_master,
            timeout=30,
            what="the cluster to promote a replica",
            interval=0.1,
        )
        return killed_at

    def stop(self) -> None:
        for server in self.servers:
            server.stop()


HighAvailability = TypeVar("HighAvailability", SentinelGroup, ClusterNodes)


@contextmanager
def running(servers: HighAvailability) -> Iterator[HighAvailability]:
    """``servers`` started (the test skipped where `redis-server` is absent), and stopped
    at the end."""
    require_redis_server()
    try:
        servers.start()
        yield servers
    finally:
        servers.stop()


def _replication_ready(info: dict, replicas: int) -> bool:  # type: ignore[type-arg]
    if info.get("role") == "master":
        return int(info.get("connected_slaves", 0)) == replicas and all(
            info.get(f"slave{i}", {}).get("state") == "online" for i in range(replicas)
        )
    return info.get("master_link_status") == "up"


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@contextmanager
def master_with_replica(base: Path) -> Iterator[tuple[RedisServer, RedisServer]]:
    """A master and one replica of the test's own (no disk, no Sentinel), the replica
    caught up; both killed at the end (a replica the test froze with SIGSTOP is let go
    first, so it can die)."""
    require_redis_server()
    master = RedisServer(base / "master", extra=NO_PERSISTENCE)
    master.start()
    replica = RedisServer(
        base / "replica", extra=(*NO_PERSISTENCE, "--replicaof", "127.0.0.1", str(master.port))
    )
    replica.start()
    try:
        probe = Redis(port=master.port)
        deadline = time.monotonic() + 20
        while probe.info("replication").get("connected_slaves", 0) < 1 or probe.wait(1, 100) < 1:
            assert time.monotonic() < deadline, "the replica never caught up"
            time.sleep(0.05)
        probe.close()
        yield master, replica
    finally:
        if replica.process is not None:
            with suppress(ProcessLookupError):
                os.killpg(replica.process.pid, signal.SIGCONT)
        replica.kill()
        master.kill()
