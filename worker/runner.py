"""Run the project's RQ worker together with a dispatcher process."""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
import multiprocessing
import os
import threading
import time
from multiprocessing.process import BaseProcess

from redis import Redis
from redis.backoff import EqualJitterBackoff
from redis.exceptions import RedisError
from redis.retry import Retry
from rq import Queue, SimpleWorker, Worker
from rq.serializers import JSONSerializer

from store import defaults
from store.repository import HandoffStore, StoreConfig
from worker import jobs
from worker.dispatcher import Dispatcher
from worker.notifier import Notifier

logger = logging.getLogger(__name__)

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
"""How `handoff` commands and the dispatcher they spawn format log lines."""

REDIS_RETRY_BASE_SECONDS = 0.05
REDIS_RETRY_CAP_SECONDS = 1.0
"""Retries after a lost connection come quickly at first, then about once a second."""
REDIS_CONNECT_TIMEOUT_SECONDS = 5.0


def background_redis(redis_url: str, *, wait_seconds: float = 60.0) -> Redis:
    """A client for workers and dispatchers that rides out a Redis restart or failover.

    It retries a lost connection for about ``wait_seconds`` (redis-py's default gives up
    at once on a refused connection), so a job waits for Redis instead of failing half
    done, and RQ's own bookkeeping between jobs does not end the worker.
    """
    # Equal jitter waits between half and all of each step: the first five steps add up
    # to about 1 s, then each adds about 0.75 s.
    retries = 5 + math.ceil(max(0.0, wait_seconds - 1) / (0.75 * REDIS_RETRY_CAP_SECONDS))
    return Redis.from_url(
        redis_url,
        retry=Retry(
            EqualJitterBackoff(base=REDIS_RETRY_BASE_SECONDS, cap=REDIS_RETRY_CAP_SECONDS),
            retries,
        ),
        socket_connect_timeout=min(REDIS_CONNECT_TIMEOUT_SECONDS, wait_seconds),
    )


def make_queue(redis: Redis, queue_name: str = defaults.QUEUE_NAME) -> Queue:
    """The project's one RQ queue, with the JSON serializer."""
    return Queue(queue_name, connection=redis, serializer=JSONSerializer)


def run_dispatcher(
    redis_url: str,
    *,
    store_config: StoreConfig,
    queue_name: str = defaults.QUEUE_NAME,
    interval: float = defaults.SWEEP_INTERVAL_SECONDS,
    dispatch_timeout: float = defaults.DISPATCH_TIMEOUT_SECONDS,
    parent_pid: int | None = None,
    redis_wait_seconds: float = 60.0,
    log_level: int | None = None,
) -> None:
    """Run a dispatcher until interrupted (or until ``parent_pid`` is gone).

    ``log_level`` sets up logging in a process that has none configured (one started
    without the `handoff` command), so the dispatcher's warnings and failed passes are
    not lost.
    """
    if log_level is not None:
        logging.basicConfig(level=log_level, format=LOG_FORMAT)
    redis = background_redis(redis_url, wait_seconds=redis_wait_seconds)
    dispatcher = Dispatcher(
        HandoffStore(redis, store_config),
        make_queue(redis, queue_name),
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
    redis_wait_seconds: float = 60.0,
) -> None:
    """Run an RQ worker (JSON serializer, scheduler on) on the project's queue.

    By default jobs run in the worker process itself (RQ's ``SimpleWorker``): deliveries
    and resumes are short, the agent's modules stay imported between jobs, and a worker
    that dies mid-job is covered by the task leases, not by process isolation. With
    ``fork``, each job runs in a forked work horse (RQ's ``Worker``), for resume targets
    that leak memory or may crash the interpreter.

    With ``with_dispatcher``, a dispatcher runs beside it in a separate process, forked
    before the worker starts any thread (so both stay safe to fork, and the dispatcher
    starts without importing everything again).

    Both wait up to ``redis_wait_seconds`` for an unreachable Redis; if RQ's loop ends on
    an error all the same, the RQ worker is started again here rather than the process
    exiting, so a Redis outage needs no supervisor to restart anything.
    """
    if notifier is not None:
        jobs.configure(notifier=notifier)
    dispatcher: BaseProcess | None = None
    if with_dispatcher:
        dispatcher = multiprocessing.get_context("fork").Process(
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
        dispatcher.start()
    redis = background_redis(redis_url, wait_seconds=redis_wait_seconds)
    try:
        worker_class = Worker if fork else SimpleWorker
        for generation in itertools.count():
            worker = worker_class(
                [make_queue(redis, queue_name)],
                connection=redis,
                # A worker that died with Redis may still be registered under its name.
                name=f"{name}.{generation}" if name and generation else name,
                serializer=JSONSerializer,
            )
            with contextlib.suppress(RedisError):  # its teardown may fail the same way
                worker.work(with_scheduler=True, burst=burst)
            if burst or worker._shutdown_requested_date is not None:
                break
            # RQ ends its loop on an error it does not expect, such as Redis unreachable
            # for longer than the connection's retries: start again rather than exit.
            logger.warning("RQ worker stopped on an error; starting it again in 1 s")
            time.sleep(1)
    finally:
        if dispatcher is not None and dispatcher.is_alive():
            dispatcher.terminate()
            dispatcher.join(timeout=5)


def _stop_when_orphaned(parent_pid: int, stop: threading.Event) -> None:
    while not stop.wait(1.0):
        if os.getppid() != parent_pid:
            logger.warning("worker process %d is gone; dispatcher stopping", parent_pid)
            stop.set()
