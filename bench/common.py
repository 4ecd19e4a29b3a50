"""What every benchmark shares: the Redis it runs on, its figures, cleanup and the entry point.

Each benchmark module (``bench.lifecycle``, ``bench.clicks``, ...) exposes the same three
things, so that ``bench/run_all`` can run them all and print one table:

- ``Options``: a dataclass of its sizes, whose defaults are the sizes the issue asks for;
  ``QUICK`` is a tiny instance for smoke runs;
- ``run(server, options) -> Report``: measures and returns the figures as data;
- the returned report: ``figures()`` (rows of the table), ``problems`` (broken checks,
  not missed targets) and ``print_report()`` (the benchmark's own detailed report).

Run alone (``python -m bench.<name>``), each still parses its options, runs on a Redis
from ``--redis-url`` (default: env ``REDIS_URL``, else an embedded server) and prints its
own report.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import os
import signal
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, Literal, Protocol, TypeVar

from redis import Redis

from bot.dev.embedded_redis import start_embedded_redis
from store.keys import KeySpace
from worker.queues import slack_queue_name

ROOT = Path(__file__).resolve().parent.parent
"""Repository root: the subprocesses' working directory and PYTHONPATH."""

SCAN_BATCH = 1000
"""Keys read or deleted per round trip when cleaning up."""


# -- figures -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """What a figure should be: ``value <comparison> bound``."""

    comparison: Literal["<", "<=", ">=", ">"]
    bound: float

    def met_by(self, value: float) -> bool:
        """Whether ``value`` meets the target (a value not measured never does)."""
        if math.isnan(value):
            return False
        return {
            "<": value < self.bound,
            "<=": value <= self.bound,
            ">=": value >= self.bound,
            ">": value > self.bound,
        }[self.comparison]


@dataclass(frozen=True)
class Figure:
    """One measured figure: a row of ``bench/run_all``'s table.

    ``value`` is NaN when the benchmark could not measure it (its report's ``problems``
    say why). ``unit`` is one of ``ms``, ``B``, ``/s`` (a rate) or ``x`` (a ratio).
    """

    name: str
    value: float
    unit: Literal["ms", "B", "/s", "x"]
    target: Target | None = None

    @property
    def met(self) -> bool | None:
        """True or False against the target; None when the figure has no target."""
        return None if self.target is None else self.target.met_by(self.value)

    def shown_value(self) -> str:
        """The value with its unit, as the table shows it."""
        return _show(self.value, self.unit)

    def shown_target(self) -> str:
        """``<= 2,048 B``, or ``-`` without a target."""
        if self.target is None:
            return "-"
        return f"{self.target.comparison} {_show(self.target.bound, self.unit)}"

    def verdict(self) -> str:
        """``met``, ``NOT met``, or ``-`` without a target."""
        return {None: "-", True: "met", False: "NOT met"}[self.met]


def _show(value: float, unit: str) -> str:
    if math.isnan(value):
        return "not measured"
    if unit == "x":
        return f"{value:.2f}x"
    if unit == "ms":
        return f"{value:,.1f} ms" if value < 100 else f"{value:,.0f} ms"
    if unit == "B":
        return f"{value:,.0f} B"
    return f"{value:,.0f}/s"


def latency_figures(
    name: str, values: list[float], *, p50: Target | None = None, p99: Target | None = None
) -> list[Figure]:
    """``name p50`` and ``name p99`` of ``values`` (ms); NaN when there are none."""
    return [
        Figure(f"{name} p50", percentile(values, 0.5), "ms", p50),
        Figure(f"{name} p99", percentile(values, 0.99), "ms", p99),
    ]


class Report(Protocol):
    """What ``run(server, options)`` of every benchmark returns."""

    @property
    def problems(self) -> list[str]:
        """Checks the run broke (a resume ran twice, a click got a 500, ...); not missed
        targets, which are figures, not failures."""
        ...

    def figures(self) -> list[Figure]:
        """The rows this benchmark adds to ``bench/run_all``'s table."""
        ...

    def print_report(self) -> None:
        """Print the benchmark's own detailed report to stdout."""
        ...


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile (``fraction`` in 0..1) of ``values``; NaN if empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))]


def progress(message: str) -> None:
    """A progress line on stderr, so stdout keeps only the report."""
    print(f"  .. {message}", file=sys.stderr, flush=True)


def load_average() -> str:
    """``0.4, 0.6, 0.3`` (1, 5 and 15 minutes): other work on the machine skews wall-clock
    figures, so every report says how busy it was."""
    return ", ".join(f"{value:.1f}" for value in os.getloadavg())


# -- the Redis a run uses ----------------------------------------------------------------


@dataclass(frozen=True)
class RedisServer:
    """The Redis a benchmark runs on: its URL and a description for the report."""

    url: str
    description: str
    embedded: bool
    """True when the benchmark started it (so it may change its configuration)."""

    def client(self) -> Redis:
        """A new client; the caller closes it."""
        return Redis.from_url(self.url)


@contextlib.contextmanager
def redis_server(url: str | None) -> Iterator[RedisServer]:
    """The server at ``url``, or an embedded one (started here, stopped on exit)."""
    with contextlib.ExitStack() as cleanup:
        embedded = not url
        if not url:
            server = start_embedded_redis()
            cleanup.callback(server.stop)
            url = server.connection_url
        probe = Redis.from_url(url)
        try:
            info = probe.info("server")
        finally:
            probe.close()
        name = "valkey" if "valkey_version" in info else "redis"
        version = info.get("valkey_version") or info.get("redis_version")
        where = f"embedded server at {url}" if embedded else url
        yield RedisServer(url, f"{where} ({name} {version})", embedded)


def add_redis_option(parser: argparse.ArgumentParser) -> None:
    """``--redis-url``, defaulting to env ``REDIS_URL`` (else an embedded server)."""
    parser.add_argument(
        "--redis-url",
        default=os.environ.get("REDIS_URL"),
        help="Redis to use (default: env REDIS_URL, else an embedded server); "
        "only the run's own keys are written and deleted, nothing is flushed",
    )


OptionsT = TypeVar("OptionsT")
ReportT = TypeVar("ReportT", bound=Report)


def argument_parser(module: str, description: str) -> argparse.ArgumentParser:
    """The parser of ``python -m <module>`` (add ``--redis-url`` with ``add_redis_option``)."""
    return argparse.ArgumentParser(prog=f"python -m {module}", description=description)


def add_options(
    parser: argparse.ArgumentParser,
    defaults: object,
    helps: dict[str, str],
    *,
    kind: Callable[[str], Any] = int,
) -> None:
    """``--<name>`` (``_`` as ``-``) of type ``kind`` per field name of ``helps``, defaulting
    to that field of ``defaults`` (an ``Options``), in the order of ``helps``."""
    for name, help_text in helps.items():
        parser.add_argument(
            "--" + name.replace("_", "-"),
            type=kind,
            default=getattr(defaults, name),
            help=help_text,
        )


def options_from(cls: type[OptionsT], args: argparse.Namespace) -> OptionsT:
    """An ``Options`` dataclass filled from the parsed arguments of the same names."""
    names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    return cls(**{name: getattr(args, name) for name in names})


def no_problems(report: Report) -> bool:
    """The default verdict of ``measure_and_print``: the run broke no check."""
    return not report.problems


def all_targets_met(report: Report) -> bool:
    """A verdict for ``measure_and_print``: every figure of the report meets its target."""
    return all(figure.met for figure in report.figures())


def measure_and_print(
    args: argparse.Namespace,
    options_cls: type[OptionsT],
    run: Callable[[RedisServer, OptionsT], ReportT],
    *,
    passed: Callable[[ReportT], bool] = no_problems,
    interruptible: bool = False,
) -> int:
    """A benchmark's ``main`` after parsing ``args``: ``run`` it on the Redis of
    ``--redis-url`` with the ``options_cls`` the arguments give, print its report; 0 when
    ``passed(report)``, 1 otherwise. ``interruptible``: through ``run_main`` (a SIGTERM
    or Ctrl-C stops it cleanly and returns 130)."""

    def measure() -> int:
        with redis_server(args.redis_url) as server:
            report = run(server, options_from(options_cls, args))
        report.print_report()
        return 0 if passed(report) else 1

    return run_main(measure) if interruptible else measure()


def run_main(run: Callable[[], int]) -> int:
    """Run a benchmark's ``main``: a SIGTERM unwinds like Ctrl-C (so processes are
    stopped and the run's keys deleted), and either returns 130."""
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        return run()
    except KeyboardInterrupt:
        print("interrupted; processes stopped and the run's keys deleted", file=sys.stderr)
        return 130


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


# -- cleaning up only what a benchmark wrote ---------------------------------------------


def new_namespace(prefix: str, hex_digits: int = 12) -> str:
    """A fresh random namespace of a run: ``prefix`` and ``hex_digits`` random hex digits."""
    return f"{prefix}{uuid.uuid4().hex[:hex_digits]}"


@contextlib.contextmanager
def namespaced_client(server: RedisServer, prefix: str) -> Iterator[tuple[Redis, str]]:
    """A client of ``server`` and a fresh namespace (``new_namespace(prefix)``); on exit
    the namespace's keys are deleted and the client closed."""
    namespace = new_namespace(prefix)
    redis = server.client()
    try:
        yield redis, namespace
    finally:
        delete_namespace(redis, namespace)
        redis.close()


def bench_key(namespace: str, label: str) -> str:
    """Base name of keys a benchmark's resume targets record under; inside the namespace,
    so deleting the namespace deletes them."""
    return f"{KeySpace(namespace).prefix}bench:{label}"


def delete_namespace(redis: Redis, namespace: str) -> None:
    """Delete every key of ``namespace`` (``{ns}:*``), and nothing else."""
    # Braces are literal in Redis glob patterns; the random namespace has no * ? [ or \.
    unlink_matching(redis, f"{KeySpace(namespace).prefix}*")


def delete_queue(redis: Redis, queue: str) -> None:
    """Delete the RQ keys of ``queue`` and of its queue of Slack work: their jobs,
    registries, workers and schedulers."""
    names = {queue.encode(), slack_queue_name(queue).encode()}
    job_keys = [
        key
        for key in redis.scan_iter(match="rq:job:*", count=SCAN_BATCH)
        if key.count(b":") == 2  # rq:job:<id>, not rq:job:<id>:dependents
    ]
    ours: list[bytes] = []
    for first in range(0, len(job_keys), SCAN_BATCH):
        batch = job_keys[first : first + SCAN_BATCH]
        with redis.pipeline(transaction=False) as pipe:
            for key in batch:
                pipe.hget(key, "origin")
            origins = pipe.execute()
        ours.extend(key for key, origin in zip(batch, origins, strict=True) if origin in names)
    for first in range(0, len(ours), SCAN_BATCH):
        batch = ours[first : first + SCAN_BATCH]
        job_ids = [key.split(b":", 2)[2] for key in batch]
        related = [
            b"rq:%s:%s" % (kind, job_id)
            for job_id in job_ids
            for kind in (b"results", b"executions")
        ]
        redis.unlink(*batch, *related)
    # Queue, registries, scheduler lock and worker keys all carry the (random) queue name.
    unlink_matching(redis, f"rq:*{queue}*")
    redis.srem("rq:queues", *(b"rq:queue:" + name for name in names))
    workers = [m for m in redis.smembers("rq:workers") if queue.encode() in m]
    if workers:
        redis.srem("rq:workers", *workers)
    for key in redis.scan_iter(match="rq:scheduler:*", count=SCAN_BATCH):
        if redis.type(key) == b"hash" and redis.hget(key, "queues") in names:
            redis.unlink(key)


def unlink_matching(redis: Redis, pattern: str) -> None:
    """Delete the keys matching ``pattern``, a batch per round trip."""
    batch: list[Any] = []
    for key in redis.scan_iter(match=pattern, count=SCAN_BATCH):
        batch.append(key)
        if len(batch) >= SCAN_BATCH:
            redis.unlink(*batch)
            batch.clear()
    if batch:
        redis.unlink(*batch)
