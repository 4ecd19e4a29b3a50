"""Redis commands per handoff step: what a create, a delivery, a decision and a resume cost
the server, for sizing (docs/capacity.md).

Not a test: it measures and prints figures. In a fresh namespace it creates ``--count``
approvals with a resume target, works their deliveries with an in-process burst worker
(dispatcher and RQ, the notifier logging instead of posting), decides them all, and works
their resumes (and the message updates a decision queues), reading the server's
``INFO commandstats`` before and after each phase: commands per handoff, in all and by
command (those the store's Lua scripts run count too; ``evalsha`` is one round trip each),
the server's CPU time (``INFO cpu``) and its memory growth (``used_memory``: a decided
handoff is kept ``HANDOFF_RETENTION_DAYS`` with its trail, the queue's RQ jobs 10 minutes).
RQ's own bookkeeping (a burst worker's start and end) is spread over the count.

Counts are exact only on a server nobody else uses: by default it starts an embedded one.
Run from the repository root::

    .venv/bin/python -m bench.redis_ops
    .venv/bin/python -m bench.redis_ops --count 500
    .venv/bin/python -m bench.redis_ops --queue-redis-url redis://127.0.0.1:6379/10
"""

from __future__ import annotations

import logging
from collections import Counter

from redis import Redis

from bench.common import (
    add_redis_option,
    argument_parser,
    new_namespace,
    progress,
    redis_server,
    run_main,
)
from store.models import Status
from store.repository import StoreConfig
from worker.client import Handoffs
from worker.runner import run_worker

PHASES = ("create", "deliver", "decide", "resume")


def resumed(handoff: object, *, attempt: int, idempotency_key: str) -> None:
    """The resume target: does nothing, so only the framework's commands are counted."""


def _calls(redis: Redis) -> Counter[str]:
    stats = redis.info("commandstats")
    return Counter(
        {
            name.removeprefix("cmdstat_"): int(value["calls"])
            for name, value in stats.items()
            if name not in ("cmdstat_info",)
        }
    )


def _cpu_and_memory(redis: Redis) -> tuple[float, int]:
    cpu = redis.info("cpu")
    memory = redis.info("memory")
    return (
        float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"]),
        int(memory["used_memory"]),
    )


def measure(url: str, count: int, queue_url: str | None = None) -> dict[str, Counter[str]]:
    """Commands by phase (summed over ``count`` handoffs)."""
    redis = Redis.from_url(url)
    namespace = new_namespace("ops")
    queue = f"{namespace}-q"
    handoffs = Handoffs(redis, namespace=namespace, resume_modules=("bench",))
    config = StoreConfig(namespace=namespace, resume_modules=("bench",))
    used: dict[str, Counter[str]] = {}

    def work() -> None:
        run_worker(
            url, store_config=config, queue_name=queue, burst=True, queue_redis_url=queue_url
        )

    before = _calls(redis)
    usage = _cpu_and_memory(redis)
    ids = [
        handoffs.request_approval(
            run_id=f"run-{n}",
            thread_id="t",
            action="deploy",
            args={"n": n},
            channel="C0OPS",
            resume="bench.redis_ops:resumed",
        ).id
        for n in range(count)
    ]
    for phase, step in (
        ("create", None),
        ("deliver", work),
        ("decide", lambda: [handoffs.decide(i, Status.APPROVED, by="U0OPS") for i in ids]),
        ("resume", work),
    ):
        if step is not None:
            progress(phase)
            step()
        after = _calls(redis)
        now = _cpu_and_memory(redis)
        used[phase] = after - before
        # Kept apart from the commands: microseconds of CPU, bytes of memory.
        used[f"{phase}:cpu_us"] = Counter({"": int((now[0] - usage[0]) * 1e6)})
        used[f"{phase}:memory"] = Counter({"": now[1] - usage[1]})
        before = _calls(redis)
        usage = _cpu_and_memory(redis)
    redis.close()
    return used


def print_report(used: dict[str, Counter[str]], count: int, description: str) -> None:
    print(f"Redis commands per handoff ({count} handoffs; {description})")
    print(f"{'phase':<10}{'commands':>10}{'CPU us':>9}{'memory B':>10}  top commands")
    totals = [0.0, 0.0, 0.0]
    for phase in PHASES:
        calls = used[phase]
        per = sum(calls.values()) / count
        cpu = used[f"{phase}:cpu_us"][""] / count
        memory = used[f"{phase}:memory"][""] / count
        for index, value in enumerate((per, cpu, memory)):
            totals[index] += value
        top = ", ".join(f"{name} {n / count:.1f}" for name, n in calls.most_common(5))
        print(f"{phase:<10}{per:>10.1f}{cpu:>9.0f}{memory:>10,.0f}  {top}")
    print(f"{'total':<10}{totals[0]:>10.1f}{totals[1]:>9.0f}{totals[2]:>10,.0f}")


def main() -> int:
    parser = argument_parser(__name__, "Redis commands per create, delivery, decision, resume.")
    parser.add_argument("--count", type=int, default=200, help="handoffs")
    parser.add_argument(
        "--queue-redis-url",
        help="put RQ's queues on this Redis (HANDOFF_QUEUE_REDIS_URL), so that the figures "
        "are the store's alone",
    )
    add_redis_option(parser)
    args = parser.parse_args()
    logging.getLogger().setLevel(logging.ERROR)

    def run() -> int:
        with redis_server(args.redis_url) as server:
            used = measure(server.url, args.count, args.queue_redis_url)
            where = server.description
            if args.queue_redis_url:
                where += "; RQ elsewhere: the store's commands only"
            print_report(used, args.count, where)
        return 0

    return run_main(run)


if __name__ == "__main__":
    raise SystemExit(main())
