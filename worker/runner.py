"""Run the project's RQ worker together with a dispatcher process."""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import logging
import math
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable
from multiprocessing.process import BaseProcess
from typing import Any, Literal, TypeVar

from redis import Redis
from redis.backoff import AbstractBackoff, EqualJitterBackoff
from redis.exceptions import RedisError
from redis.retry import Retry
from rq import SimpleWorker, Worker
from rq.exceptions import StopRequested
from rq.serializers import JSONSerializer

from store import defaults
from store.models import TaskKind
from store.repository import HandoffStore, StoreConfig
from worker import jobs
from worker.dispatcher import Dispatcher
from worker.notifier import Notifier
from worker.queues import TaskQueues, make_queue, slack_queue_name

logger = logging.getLogger(__name__)

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
"""How `handoff` commands and the dispatcher they spawn format log lines."""

REDIS_RETRY_BASE_SECONDS = 0.05
REDIS_RETRY_CAP_SECONDS = 1.0
"""Retries after a lost connection come quickly at first, then about once a second."""
REDIS_CONNECT_TIMEOUT_SECONDS = 5.0
SLACK_WORKER_STOP_SECONDS = 10.0
"""How long the Slack worker gets to finish the job at hand when its `handoff worker` stops,
before it is killed (the task's lease covers the rest)."""
_PR_SET_PDEATHSIG = 1

T = TypeVar("T")


class _StoppableRetry(Retry):
    """Redis retries that end as soon as the process is asked to stop.

    Riding out an outage is right while working, wrong once a stop is asked for: RQ's
    teardown (deregistering the worker) would wait out the whole
    ``wait_seconds`` for a Redis that is gone, and a supervisor (or `handoff dev`) would have
    to kill the worker. What a stopping worker could not write is covered by the task
    leases, as for a worker that died.
    """

    def __init__(self, backoff: AbstractBackoff, retries: int) -> None:
        super().__init__(backoff, retries)
        self.stopping = False

    def __deepcopy__(self, memo: dict[int, Any]) -> _StoppableRetry:
        # Each connection of a pool takes a deep copy of its retry policy; sharing this one
        # instead lets `stop_retrying` reach connections already in the middle of a retry.
        return self

    def call_with_retry(
        self, do: Callable[[], T], fail: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> T:
        def fail_or_give_up(error: Exception, *rest: Any) -> None:
            fail(error, *rest)
            if self.stopping:
                raise error

        return super().call_with_retry(do, fail_or_give_up, *args, **kwargs)


def stop_retrying(redis: Redis) -> None:
    """Make a ``background_redis`` client give up at the next error instead of retrying."""
    retry = redis.connection_pool.connection_kwargs.get("retry")
    if isinstance(retry, _StoppableRetry):
        retry.stopping = True


def background_redis(redis_url: str, *, wait_seconds: float = defaults.REDIS_WAIT_SECONDS) -> Redis:
    """A client for workers and dispatchers that rides out a Redis restart or failover.

    It retries a lost connection for about ``wait_seconds`` (redis-py's default gives up
    at once on a refused connection), so a job waits for Redis instead of failing half
    done, and RQ's own bookkeeping between jobs does not end the worker; after
    ``stop_retrying`` it gives up at once.
    """
    # Equal jitter waits between half and all of each step: the first five steps add up
    # to about 1 s, then each adds about 0.75 s.
    retries = 5 + math.ceil(max(0.0, wait_seconds - 1) / (0.75 * REDIS_RETRY_CAP_SECONDS))
    return Redis.from_url(
        redis_url,
        retry=_StoppableRetry(
            EqualJitterBackoff(base=REDIS_RETRY_BASE_SECONDS, cap=REDIS_RETRY_CAP_SECONDS),
            retries,
        ),
        socket_connect_timeout=min(REDIS_CONNECT_TIMEOUT_SECONDS, wait_seconds),
    )


WorkKind = Literal["all", "resumes", "slack"]
"""What a `handoff worker` works on: both queues (an RQ worker on each), or one of them."""


def run_dispatcher(
    redis_url: str,
    *,
    store_config: StoreConfig,
    queue_name: str = defaults.QUEUE_NAME,
    interval: float = defaults.SWEEP_INTERVAL_SECONDS,
    dispatch_timeout: float = defaults.DISPATCH_TIMEOUT_SECONDS,
    parent_pid: int | None = None,
    redis_wait_seconds: float = defaults.REDIS_WAIT_SECONDS,
    log_level: int | None = None,
) -> None:
    """Run a dispatcher until interrupted (or until ``parent_pid`` is gone).

    ``log_level`` sets up logging in a process that has none configured (one started
    without the `handoff` command), so the dispatcher's warnings and failed passes are
    not lost.
    """
    if log_level is not None:
        logging.basicConfig(level=log_level, format=LOG_FORMAT)
    if parent_pid is not None:
        _die_with_parent()
    redis = background_redis(redis_url, wait_seconds=redis_wait_seconds)
    dispatcher = Dispatcher(
        HandoffStore(redis, store_config),
        TaskQueues.named(redis, queue_name),
        interval=interval,
        dispatch_timeout=dispatch_timeout,
    )
    stop = threading.Event()
    if parent_pid is not None:
        threading.Thread(target=_stop_when_orphaned, args=(parent_pid, stop), daemon=True).start()
    logger.info("dispatcher started (pid %d) on queue %s", os.getpid(), queue_name)
    with contextlib.suppress(KeyboardInterrupt):
        dispatcher.run(stop)


def run_worker(
    redis_url: str,
    *,
    store_config: StoreConfig,
    queue_name: str = defaults.QUEUE_NAME,
    notifier: Notifier | None = None,
    with_dispatcher: bool = True,
    dispatch_interval: float = defaults.SWEEP_INTERVAL_SECONDS,
    dispatch_timeout: float = defaults.DISPATCH_TIMEOUT_SECONDS,
    burst: bool = False,
    name: str | None = None,
    fork: bool = False,
    redis_wait_seconds: float = defaults.REDIS_WAIT_SECONDS,
    work: WorkKind = "all",
) -> None:
    """Run RQ workers (JSON serializer) on the project's queues.

    ``work`` "all" (the default) runs a pair: an RQ worker on the resume queue in this
    process and one on the queue of Slack work (``worker.queues``) in a child process, so
    that a resume never waits for a Slack call; "resumes" or "slack" runs only one of them
    (to scale the two apart).

    By default jobs run in the worker process itself (RQ's ``SimpleWorker``): deliveries
    and resumes are short, the agent's modules stay imported between jobs, and a worker
    that dies mid-job is covered by the task leases, not by process isolation. With
    ``fork``, each job runs in a forked work horse (RQ's ``Worker``), for resume targets
    that leak memory or may crash the interpreter. In both, resume targets are called in a
    process of the worker's own (``worker.killable``), killed at the job's timeout, so that
    a target that swallows RQ's timeout exception never outlives its lease.

    With ``with_dispatcher``, a dispatcher runs beside it in a separate process; it and the
    Slack worker are forked before the worker starts any thread (so all stay safe to fork,
    and they start without importing everything again), and end with this process.

    Each waits up to ``redis_wait_seconds`` for an unreachable Redis; if RQ's loop ends on
    an error all the same, the RQ worker is started again here rather than the process
    exiting, so a Redis outage needs no supervisor to restart anything. A stop signal
    (SIGTERM, SIGINT) ends that waiting: the worker stops within seconds, Redis or not.

    RQ's scheduler is not run: nothing is scheduled through RQ (retries and timers are the
    store's outbox, moved to RQ by the dispatcher), and its process would outlive a worker
    killed outright. With ``burst``, one process dispatches and works until no task is due.
    """
    if notifier is not None:
        jobs.configure(notifier=notifier)
    if burst:
        _work_until_quiet(
            redis_url,
            store_config=store_config,
            queue_name=queue_name,
            dispatch=with_dispatcher,
            dispatch_timeout=dispatch_timeout,
            name=name,
            fork=fork,
            redis_wait_seconds=redis_wait_seconds,
            work=work,
        )
        return
    fork_context = multiprocessing.get_context("fork")
    children: list[BaseProcess] = []
    if with_dispatcher:
        children.append(
            fork_context.Process(
                target=run_dispatcher,
                kwargs={
                    "redis_url": redis_url,
                    "store_config": store_config,
                    "queue_name": queue_name,
                    "interval": dispatch_interval,
                    "dispatch_timeout": dispatch_timeout,
                    "parent_pid": os.getpid(),
                    "log_level": logging.getLogger().getEffectiveLevel(),
                    "redis_wait_seconds": redis_wait_seconds,
                },
                name="handoff-dispatcher",
                daemon=True,
            )
        )
    own_queue = slack_queue_name(queue_name) if work == "slack" else queue_name
    slack_worker: BaseProcess | None = None
    if work == "all":
        slack_worker = fork_context.Process(
            target=_serve_queue_as_child,
            args=(redis_url, slack_queue_name(queue_name)),
            kwargs={
                "name": f"{name}-slack" if name else None,
                "fork": fork,
                "burst": False,
                "redis_wait_seconds": redis_wait_seconds,
                "parent_pid": os.getpid(),
            },
            name="handoff-slack-worker",
        )
        children.append(slack_worker)
    for child in children:
        child.start()
    try:
        _serve_queue(
            redis_url,
            own_queue,
            name=name,
            fork=fork,
            burst=False,
            redis_wait_seconds=redis_wait_seconds,
        )
    finally:
        _stop_children(children, slack_worker)


BURST_ROUNDS = 10_000
"""Most dispatch-and-work rounds of a burst (each ends when its queues are empty)."""


def _work_until_quiet(
    redis_url: str,
    *,
    store_config: StoreConfig,
    queue_name: str,
    dispatch: bool,
    dispatch_timeout: float,
    name: str | None,
    fork: bool,
    redis_wait_seconds: float,
    work: WorkKind,
) -> None:
    """A burst: dispatch what is due, work the queues empty, and again, until no task of
    the served kinds is due (tasks retried or put off for later are left for later). In one
    process: a worker that found its queue empty before a dispatcher elsewhere filled it
    would stop with a due task undone."""
    redis = background_redis(redis_url, wait_seconds=redis_wait_seconds)
    store = HandoffStore(redis, store_config)
    queues = TaskQueues.named(redis, queue_name)
    served = {
        "all": queues.distinct,
        "resumes": [queues.resumes],
        "slack": [queues.slack],
    }[work]
    kinds = [kind for kind in TaskKind if queues.for_kind(kind) in served]
    dispatcher = Dispatcher(store, queues, dispatch_timeout=dispatch_timeout)
    worker_class = _ForkWorker if fork else _SimpleWorker
    for _ in range(BURST_ROUNDS):
        if dispatch:
            dispatcher.tick()
        for queue in served:
            worker = worker_class([queue], connection=redis, name=None, serializer=JSONSerializer)
            worker.work(with_scheduler=False, burst=True)
        if not any(q.count for q in served) and not store.due_tasks(kinds):
            return
    logger.warning("burst stopped after %d rounds with work still due", BURST_ROUNDS)


def _serve_queue(
    redis_url: str,
    queue_name: str,
    *,
    name: str | None,
    fork: bool,
    burst: bool,
    redis_wait_seconds: float,
) -> None:
    """Run an RQ worker on one queue until asked to stop (or, with ``burst``, until the
    queue is empty), starting it again when RQ's loop ends on an error."""
    redis = background_redis(redis_url, wait_seconds=redis_wait_seconds)
    worker_class = _ForkWorker if fork else _SimpleWorker
    try:
        for generation in itertools.count():
            worker = worker_class(
                [make_queue(redis, queue_name)],
                connection=redis,
                # A worker that died with Redis may still be registered under its name.
                name=f"{name}.{generation}" if name and generation else name,
                serializer=JSONSerializer,
            )
            with contextlib.suppress(RedisError):  # its teardown may fail the same way
                worker.work(with_scheduler=False, burst=burst)
            if burst or worker._shutdown_requested_date is not None:
                break
            # RQ ends its loop on an error it does not expect, such as Redis unreachable
            # for longer than the connection's retries: start again rather than exit.
            logger.warning("RQ worker stopped on an error; starting it again in 1 s")
            time.sleep(1)
    except StopRequested:
        # A stop signal between two runs of RQ's loop, or before the next one installed its
        # handlers: the last one's handler raises this outside of its loop.
        pass


def _serve_queue_as_child(
    redis_url: str, queue_name: str, *, parent_pid: int, **options: Any
) -> None:
    """The Slack worker of a pair: ends with the process that forked it."""
    _die_with_parent()
    if os.getppid() != parent_pid:  # the parent died before the signal was armed
        return
    logger.info("Slack worker started (pid %d) on queue %s", os.getpid(), queue_name)
    with contextlib.suppress(KeyboardInterrupt):
        _serve_queue(redis_url, queue_name, **options)


def _stop_children(children: list[BaseProcess], slack_worker: BaseProcess | None) -> None:
    """Stop the dispatcher at once, and the Slack worker after the job at hand (RQ's warm
    shutdown on SIGTERM), killing what does not stop in time."""
    for child in children:
        if child.is_alive():
            child.terminate()
    for child in children:
        child.join(timeout=SLACK_WORKER_STOP_SECONDS if child is slack_worker else 5)
        if child.is_alive():
            logger.warning("%s (pid %s) did not stop; killing it", child.name, child.pid)
            child.kill()
            child.join(timeout=1)


class _PromptStop:
    """RQ's warm shutdown, bounded when Redis is gone (mixed into RQ's worker classes).

    RQ's own waits for Redis at shutdown (deregistering) have no bound: with the
    connection's retries they took over a minute for a Redis that was gone.
    """

    connection: Redis

    def handle_warm_shutdown_request(self) -> None:
        super().handle_warm_shutdown_request()  # type: ignore[misc]
        stop_retrying(self.connection)


class _SimpleWorker(_PromptStop, SimpleWorker):
    pass


class _ForkWorker(_PromptStop, Worker):
    pass


def _die_with_parent() -> None:
    """Have Linux send SIGTERM to this process when the process that forked it dies.

    The thread that watches ``parent_pid`` only asks the dispatcher loop to stop, which takes
    as long as the pass under way (up to ``redis_wait_seconds`` with Redis gone); SIGTERM's
    default action ends it at once, as the worker's own ``terminate()`` does. Only on Linux;
    elsewhere the watching thread is all there is.
    """
    with contextlib.suppress(AttributeError, OSError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _stop_when_orphaned(parent_pid: int, stop: threading.Event) -> None:
    while not stop.wait(1.0):
        if os.getppid() != parent_pid:
            logger.warning("worker process %d is gone; dispatcher stopping", parent_pid)
            stop.set()
