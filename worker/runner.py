"""Run the project's RQ worker together with a dispatcher process."""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import threading
from multiprocessing.process import BaseProcess

from redis import Redis
from rq import Queue, SimpleWorker, Worker
from rq.serializers import JSONSerializer

from store import defaults
from store.repository import HandoffStore, StoreConfig
from worker import jobs
from worker.dispatcher import Dispatcher
from worker.notifier import Notifier

logger = logging.getLogger(__name__)


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
) -> None:
    """Run a dispatcher until interrupted (or until ``parent_pid`` is gone)."""
    redis = Redis.from_url(redis_url)
    dispatcher = Dispatcher(
        HandoffStore(redis, store_config),
        make_queue(redis, queue_name),
        interval=interval,
        dispatch_timeout=dispatch_timeout,
    )
    stop = threading.Event()
    if parent_pid is not None:
        threading.Thread(target=_stop_when_orphaned, args=(parent_pid, stop), daemon=True).start()
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
) -> None:
    """Run an RQ worker (JSON serializer, scheduler on) on the project's queue.

    By default jobs run in the worker process itself (RQ's ``SimpleWorker``): deliveries
    and resumes are short, the agent's modules stay imported between jobs, and a worker
    that dies mid-job is covered by the task leases, not by process isolation. With
    ``fork``, each job runs in a forked work horse (RQ's ``Worker``), for resume targets
    that leak memory or may crash the interpreter.

    With ``with_dispatcher``, a dispatcher runs beside it in a separate process (spawned,
    not forked, so the worker's own forks stay single-threaded).
    """
    if notifier is not None:
        jobs.configure(notifier=notifier)
    dispatcher: BaseProcess | None = None
    if with_dispatcher:
        dispatcher = multiprocessing.get_context("spawn").Process(
            target=run_dispatcher,
            kwargs={
                "redis_url": redis_url,
                "store_config": store_config,
                "queue_name": queue_name,
                "interval": dispatch_interval,
                "dispatch_timeout": dispatch_timeout,
                "parent_pid": os.getpid(),
            },
            name="handoff-dispatcher",
            daemon=True,
        )
        dispatcher.start()
    redis = Redis.from_url(redis_url)
    try:
        worker_class = Worker if fork else SimpleWorker
        worker = worker_class(
            [make_queue(redis, queue_name)], connection=redis, name=name, serializer=JSONSerializer
        )
        worker.work(with_scheduler=True, burst=burst)
    finally:
        if dispatcher is not None and dispatcher.is_alive():
            dispatcher.terminate()
            dispatcher.join(timeout=5)


def _stop_when_orphaned(parent_pid: int, stop: threading.Event) -> None:
    while not stop.wait(1.0):
        if os.getppid() != parent_pid:
            logger.warning("worker process %d is gone; dispatcher stopping", parent_pid)
            stop.set()
