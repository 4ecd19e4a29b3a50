"""Metrics for ``/metrics``: the counters of this process, and the store's figures.

Two kinds, exposed together (docs/monitoring.md lists every metric):

- Per process, in prometheus_client's default registry: what this process did (task attempts
  here; Slack requests and Web API calls in ``bot.metrics``). Where a command runs several
  processes (``handoff serve``'s gunicorn workers, ``handoff worker``'s children) they share
  a directory of prometheus_client's multiprocess mode (``MultiprocessDirectory``), and
  every process's counts are added up at each scrape.
- Store-wide, read from Redis at each scrape by ``StoreCollector`` (``store.metrics``):
  handoffs created, closed and pending, decision times, the outbox, failed tasks. Every
  process shows the same values: aggregate them with ``max()``, never ``sum()``.

Counting costs a few microseconds and never fails what it counts: an error inside it is
logged, never raised. ``disable()`` (``HANDOFF_METRICS=false``) turns the counting off.
Labels are low-cardinality (kinds, results, surfaces, Slack method names): never an id.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    generate_latest,
    values,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.mmap_dict import MmapedDict
from prometheus_client.multiprocess import MultiProcessCollector
from redis.exceptions import RedisError

from store.exceptions import ConfigurationError
from store.metrics import FigureReader, StoreFigures

logger = logging.getLogger(__name__)

MULTIPROCESS_SETTING = "PROMETHEUS_MULTIPROC_DIR"
"""prometheus_client's own setting: the directory its processes share their counts in."""
CONTENT_TYPE = CONTENT_TYPE_LATEST
"""The content type of ``exposition``'s body."""
ATTEMPT_BUCKETS = (1, 2, 3, 5, 10)
"""Bounds of the histogram of attempt numbers (the default policy allows 5 deliveries)."""

# The created-at samples (`*_created`) double every series for little use, and multiprocess
# mode has none: leave them out everywhere.
disable_created_metrics()

TASK_ATTEMPTS = Counter(
    "handoff_task_attempts",
    "Attempts of background tasks that ran, by task kind (deliver, notify, resume, remind, "
    "escalate) and result (completed, retrying, deferred, failed, undeliverable, stale).",
    ["kind", "result"],
)
TASK_ATTEMPT_NUMBER = Histogram(
    "handoff_task_attempt_number",
    "Which attempt of its task each attempt was (1 for a first try), by kind and result.",
    ["kind", "result"],
    buckets=ATTEMPT_BUCKETS,
)
REDIS_ERRORS = Counter(
    "handoff_redis_errors",
    "Redis errors caught and ridden out, by process (serve, worker, dispatcher, api).",
    ["process"],
)
SLACK_RETRY_WAIT = Counter(
    "handoff_slack_retry_wait_seconds",
    "Seconds waited on Slack's word: slept before a retry inside a call ('slept'), or a "
    "task put off for a 429's Retry-After ('deferred').",
    ["how"],
)

_enabled = True


def disable() -> None:
    """Count nothing in this process (and those it forks) from now on."""
    global _enabled
    _enabled = False


def enabled() -> bool:
    """Whether this process counts (``disable`` was not called)."""
    return _enabled


def guarded(count: Callable[..., None]) -> Callable[..., None]:
    """``count`` as a function that does nothing when counting is off and never raises:
    metrics must not fail the request or the task they count."""

    def call(*args: Any, **kwargs: Any) -> None:
        if not _enabled:
            return
        try:
            count(*args, **kwargs)
        except Exception:
            logger.warning("counting %s failed", count.__name__, exc_info=True)

    call.__name__ = count.__name__
    call.__doc__ = count.__doc__
    return call


@guarded
def count_task(kind: str, result: str, attempt: int) -> None:
    """An attempt of a task of ``kind`` ended with ``result`` (``HandoffStore.finish_task``'s
    answer); ``attempt`` is its number."""
    TASK_ATTEMPTS.labels(kind, result).inc()
    TASK_ATTEMPT_NUMBER.labels(kind, result).observe(attempt)


@guarded
def count_redis_error(process: str) -> None:
    """A Redis error was caught (and ridden out) in ``process``."""
    REDIS_ERRORS.labels(process).inc()


@guarded
def count_retry_wait(how: str, seconds: float) -> None:
    """``seconds`` waited because Slack asked to (``how``: slept or deferred)."""
    if seconds > 0:
        SLACK_RETRY_WAIT.labels(how).inc(seconds)


# -- several processes -------------------------------------------------------------------

_horse_of: int | None = None
_multiprocess = False


def _process_identity() -> str:
    """Whose files a process writes its counts to: its own pid, or, in a work horse RQ
    forked for one job (``handoff worker --fork``), its worker's pid with ``h``. The horses
    of one worker run one at a time, so they share one set of files instead of leaving a
    set for each job."""
    if _horse_of is not None:
        return f"{_horse_of}h"
    return str(os.getpid())


def in_work_horse(worker_pid: int) -> None:
    """Called first thing in a work horse RQ forked from the worker ``worker_pid``."""
    global _horse_of
    _horse_of = worker_pid


def use_multiprocess_mode() -> None:
    """Count into ``PROMETHEUS_MULTIPROC_DIR`` (which must be set) from now on.

    prometheus_client picks its mode when it is imported, and this package's modules are
    imported before a command knows whether it will run several processes; every metric
    here has labels, so its values are made when first counted, in the mode set by then.
    """
    global _multiprocess
    if not _multiprocess:
        values.MmapedDict = AllocatedFile  # type: ignore[misc]
        values.ValueClass = values.MultiProcessValue(process_identifier=_process_identity)
        _multiprocess = True


ALLOCATED_BYTES = 64 * 1024
"""The size a process's file of counts is made with, every byte of it allocated at once: room
for some 400 series, many times what our labels make (prometheus_client grows a full file)."""


class AllocatedFile(MmapedDict):  # type: ignore[misc]
    """prometheus_client's file of one process's counts, made with its blocks allocated.

    prometheus_client makes it sparse (``truncate``) and writes through a memory map: on a
    full file system the first write to the map is a SIGBUS that kills the process (a
    gunicorn worker on its first request, again after each restart), which no ``except``
    can catch. Allocated first, a full disk is an ``OSError`` when the file is made, which
    ``guarded`` logs: nothing is counted, the request goes on.
    """

    def __init__(self, filename: str, read_mode: bool = False) -> None:
        if not read_mode and not os.path.exists(filename):
            _allocate(filename, ALLOCATED_BYTES)
        super().__init__(filename, read_mode)


def _allocate(filename: str, size: int) -> None:
    """Make ``filename`` with ``size`` bytes allocated (zeros: prometheus_client reads an
    empty file), or nothing at all: it appears whole, never short (a short one would
    fail every scrape)."""
    partial = f"{filename}.{os.getpid()}.new"
    descriptor = os.open(partial, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.posix_fallocate(descriptor, 0, size)
        os.replace(partial, filename)
    except BaseException:
        os.unlink(partial)
        raise
    finally:
        os.close(descriptor)


def given_directory(path: str) -> str:
    """``path``, the ``PROMETHEUS_MULTIPROC_DIR`` set in the environment, made if it does not
    exist yet (prometheus_client refuses a missing one with a ValueError: ``handoff api``
    stopped with a traceback); one that cannot be made is a ``ConfigurationError``."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise ConfigurationError(
            f"{MULTIPROCESS_SETTING} is {path!r}, which is no directory this process can make "
            f"({exc.strerror or exc}): point it at a writable directory, or unset it"
        ) from None
    return path


def use_single_process_mode() -> None:
    """Count in this process's memory, whatever ``PROMETHEUS_MULTIPROC_DIR`` says, and show
    only this process's counts: for a command that runs one process (``handoff api``).

    prometheus_client counts into the directory's files once the setting is there when it
    is imported (set for ``handoff serve`` on the same host, say), and ``/metrics`` then
    showed every file of it: the other commands' counts too. Call it before counting.
    """
    global _multiprocess
    os.environ.pop(MULTIPROCESS_SETTING, None)
    values.ValueClass = values.MutexValue
    _multiprocess = False


class MultiprocessDirectory:
    """A fresh directory where this process and those it forks add up their counts, removed
    by ``close``: inside the ``PROMETHEUS_MULTIPROC_DIR`` that is set (made if missing), else
    a temporary one. ``PROMETHEUS_MULTIPROC_DIR`` names it until ``close``.

    Fresh, because prometheus_client adds up every file of the directory: commands that
    share the setting (``handoff serve``, ``handoff worker``, ``handoff api`` on one host)
    each showed the others' counts, and files left by an earlier start were counted again.

    Make it before forking, and before counting anything. Example::

        with MultiprocessDirectory():
            ...  # fork the processes, serve /metrics
    """

    def __init__(self) -> None:
        given = os.environ.get(MULTIPROCESS_SETTING)
        self.given = given
        parent = given_directory(given) if given else None
        self.path = tempfile.mkdtemp(prefix="handoff-metrics-", dir=parent)
        self._owner = os.getpid()
        os.environ[MULTIPROCESS_SETTING] = self.path
        use_multiprocess_mode()

    def close(self) -> None:
        """Remove the directory (not in forked processes: the one that made it does)."""
        if os.getpid() != self._owner:
            return
        if self.given:
            os.environ[MULTIPROCESS_SETTING] = self.given
        else:
            os.environ.pop(MULTIPROCESS_SETTING, None)
        shutil.rmtree(self.path, ignore_errors=True)

    def __enter__(self) -> MultiprocessDirectory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- exposing them -----------------------------------------------------------------------


STORE_FIGURES_MAX_AGE_SECONDS = 1.0
"""How long a process shows the store's figures it read before reading them again: at most
one read a second, however often ``/metrics`` is asked for (it answers without a key, and a
read walks up to ``FAILED_TASKS_COUNTED`` failed tasks in Redis: a few ms of its time)."""


class StoreCollector:
    """The store-wide figures (``store.metrics``), read from Redis in one script call, at
    most once every ``max_age`` seconds (scrapes in between, or waiting on the read under
    way, get its figures). A Redis that does not answer gives ``handoff_store_up 0`` and
    nothing else, never an error."""

    def __init__(
        self,
        reader: FigureReader,
        *,
        process: str,
        max_age: float = STORE_FIGURES_MAX_AGE_SECONDS,
    ) -> None:
        self.reader = reader
        self.process = process
        self.max_age = max_age
        self._lock = threading.Lock()
        self._read_at: float | None = None
        self._figures: StoreFigures | None = None

    def describe(self) -> Iterable[Metric]:
        # Nothing is read when the collector is registered.
        return []

    def collect(self) -> Iterable[Metric]:
        up = GaugeMetricFamily(
            "handoff_store_up", "1 when the store's figures could be read from Redis."
        )
        figures = self._current()
        if figures is None:
            up.add_metric([], 0)
            return [up]
        up.add_metric([], 1)
        return [up, *store_metrics(figures)]

    def _current(self) -> StoreFigures | None:
        """The figures read less than ``max_age`` ago, else read now (None: Redis did not
        answer)."""
        with self._lock:
            now = time.monotonic()
            if self._read_at is not None and now - self._read_at < self.max_age:
                return self._figures
            try:
                self._figures = self.reader.read()
            except RedisError:
                logger.warning("metrics: the store's figures could not be read", exc_info=True)
                count_redis_error(self.process)
                self._figures = None
            self._read_at = time.monotonic()
            return self._figures


def store_metrics(figures: StoreFigures) -> list[Metric]:
    """The store's figures as Prometheus metrics (see docs/monitoring.md)."""
    created = CounterMetricFamily(
        "handoff_created", "Handoffs created, by request type (store-wide).", labels=["type"]
    )
    for request_type, count in sorted(figures.created.items()):
        created.add_metric([request_type], count)
    closed = CounterMetricFamily(
        "handoff_closed",
        "Handoffs closed (decided, expired, cancelled, undeliverable), by request type, "
        "status and where (via: slack, api, python, cli, admin, policy, expiry, delivery, "
        "other) (store-wide).",
        labels=["type", "status", "via"],
    )
    for (request_type, status, via), count in sorted(figures.closed.items()):
        closed.add_metric([request_type, status, via], count)
    decision = HistogramMetricFamily(
        "handoff_decision_seconds",
        "Time from creation to decision, by request type: decisions by people and agents, "
        "not by a routing policy (store-wide).",
        labels=["type"],
    )
    for request_type, times in sorted(figures.decision_times.items()):
        decision.add_metric(
            [request_type],
            [(bound, float(count)) for bound, count in times.cumulative()],
            times.sum_seconds,
        )
    given_up = CounterMetricFamily(
        "handoff_tasks_given_up",
        "Tasks that used up their attempts or failed for good, by kind (store-wide).",
        labels=["kind"],
    )
    for kind, count in sorted(figures.given_up.items()):
        given_up.add_metric([kind], count)
    pending = GaugeMetricFamily(
        "handoff_pending", "Pending handoffs now, by request type (store-wide).", labels=["type"]
    )
    for request_type, count in figures.pending.items():
        pending.add_metric([request_type], count)
    failed = GaugeMetricFamily(
        "handoff_tasks_failed",
        "Tasks marked failed now (handoff failed lists them; handoff retry queues one "
        "again), by kind (store-wide).",
        labels=["kind"],
    )
    for kind, count in sorted(figures.failed.items()):
        failed.add_metric([kind], count)
    return [
        created,
        closed,
        decision,
        given_up,
        pending,
        failed,
        GaugeMetricFamily(
            "handoff_outbox_depth",
            "Tasks in the outbox: due, running under a lease, retrying later, timers (store-wide).",
            value=figures.outbox,
        ),
        GaugeMetricFamily(
            "handoff_outbox_due",
            "Outbox tasks due now that no dispatcher has taken yet (store-wide).",
            value=figures.outbox_due,
        ),
        GaugeMetricFamily(
            "handoff_outbox_oldest_due_seconds",
            "How long the oldest due outbox task has waited for a dispatcher; 0 when none "
            "waits (store-wide).",
            value=figures.oldest_due_seconds,
        ),
    ]


class _ThisProcess:
    """The default registry's metrics, as a collector of another registry."""

    def collect(self) -> Iterable[Metric]:
        return REGISTRY.collect()


def exposition_registry(reader: FigureReader | None, *, process: str) -> CollectorRegistry:
    """What ``/metrics`` shows: every process's counts (all the processes sharing the
    multiprocess directory, when one is set; else this process's) and the store's figures
    (with a ``reader``)."""
    registry = CollectorRegistry()
    directory = os.environ.get(MULTIPROCESS_SETTING)
    if directory:
        MultiProcessCollector(registry, path=given_directory(directory))
    else:
        registry.register(_ThisProcess())
    if reader is not None:
        registry.register(StoreCollector(reader, process=process))
    return registry


def exposition(registry: CollectorRegistry) -> bytes:
    """The text format of ``registry``'s metrics, the body of a ``/metrics`` answer."""
    return generate_latest(registry)


def serve_metrics(registry: CollectorRegistry, *, host: str, port: int) -> Callable[[], None]:
    """Serve ``registry`` on ``http://host:port/metrics`` (any path answers) from a
    thread of this process; returns the function that stops it."""
    from prometheus_client import start_http_server

    server, thread = start_http_server(port, addr=host, registry=registry)
    logger.info("metrics on http://%s:%d/metrics", host, port)

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

    return stop
