"""Run the project's RQ worker together with a dispatcher process."""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import logging
import math
import multiprocessing
import multiprocessing.connection
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
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
from store.connection import open_client
from store.exceptions import ConfigurationError, HandoffError
from store.keys import KeySpace
from store.metrics import FigureReader
from store.models import TaskKind
from store.repository import HandoffStore, StoreConfig
from worker import jobs, metrics
from worker.dispatcher import Dispatcher
from worker.notifier import Notifier
from worker.queues import ProjectJob, TaskQueues, make_queue, slack_queue_name
from worker.resume_targets import RESUME_MODULES_SETTING, allow_resume_modules
from worker.webhooks import WebhookConfig

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
DISPATCHER_STOP_SECONDS = 5.0
CHILD_RESTART_BACKOFF_SECONDS = 0.25
"""How long `handoff worker` waits before starting a dead child process again; doubled for
each further death within ``CHILD_DEATH_WINDOW_SECONDS``, up to the maximum below."""
CHILD_RESTART_BACKOFF_MAX_SECONDS = 4.0
CHILD_DEATHS_TOLERATED = 5
"""Deaths of one child within ``CHILD_DEATH_WINDOW_SECONDS`` after which `handoff worker`
stops (exit status 1) instead of starting it again: something a restart cannot mend (say,
memory too short to start it) is for its supervisor, and whoever reads its log, to see."""
CHILD_DEATH_WINDOW_SECONDS = 60.0
_WATCH_POLL_SECONDS = 0.5
"""How often the watching thread looks whether it is to stop, between deaths."""
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
    pool = getattr(redis, "connection_pool", None)  # a cluster client has one per node
    retry = pool.connection_kwargs.get("retry") if pool is not None else None
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
    return open_client(
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
    queue_redis_url: str | None = None,
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
    queue_redis = (
        background_redis(queue_redis_url, wait_seconds=redis_wait_seconds)
        if queue_redis_url
        else redis
    )
    dispatcher = Dispatcher(
        HandoffStore(redis, store_config),
        TaskQueues.named(queue_redis, queue_name),
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
    webhooks: WebhookConfig | None = None,
    metrics_address: tuple[str, int] | None = None,
    queue_redis_url: str | None = None,
) -> None:
    """Run RQ workers (JSON serializer) on the project's queues.

    The queues live on ``queue_redis_url`` when given (``HANDOFF_QUEUE_REDIS_URL``: the
    store on a Redis Cluster, which RQ does not run on), else beside the store.

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
    Slack worker are forked before the worker starts any thread (so they start without
    importing everything again), and end with this process. Either one that dies while this
    process runs is logged as an error and started again (``_Supervisor``: after a short
    backoff; one that dies ``CHILD_DEATHS_TOLERATED`` times within
    ``CHILD_DEATH_WINDOW_SECONDS`` stops the worker instead, with ``WorkerChildFailed``).

    Each waits up to ``redis_wait_seconds`` for an unreachable Redis; if RQ's loop ends on
    an error all the same, the RQ worker is started again here rather than the process
    exiting, so a Redis outage needs no supervisor to restart anything. A stop signal
    (SIGTERM, SIGINT) ends that waiting: the worker stops within seconds, Redis or not.

    RQ's scheduler is not run: nothing is scheduled through RQ (retries and timers are the
    store's outbox, moved to RQ by the dispatcher), and its process would outlive a worker
    killed outright. With ``burst``, one process dispatches and works until no task is due.

    Resume targets (and the paths the adapters import) are imported only from
    ``store_config.resume_modules`` (``HANDOFF_RESUME_MODULES``), in this process and every
    process it forks; with none, from anywhere, and a warning says so.

    With ``metrics_address`` (host, port), this process serves ``/metrics`` there
    (``MetricsEndpoint``): the counts of all its processes and the store's figures.
    """
    endpoint = None
    if metrics_address is not None:
        endpoint = MetricsEndpoint(metrics_address, redis_url, store_config.namespace)
    allow_resume_modules(store_config.resume_modules)
    if not store_config.resume_modules:
        logger.warning(
            "%s is not set: this worker imports and calls any resume target a handoff in "
            "Redis names, so whoever can write to Redis can run code here; set it to your "
            "agents' modules (comma-separated, e.g. myagent.steps)",
            RESUME_MODULES_SETTING,
        )
    jobs.configure(
        notifier=notifier,
        webhooks=webhooks,
        store_redis=(
            background_redis(redis_url, wait_seconds=redis_wait_seconds)
            if queue_redis_url
            else None
        ),
        replica_acks=store_config.replica_acks,
    )
    rq_url = queue_redis_url or redis_url
    if burst:
        try:
            if endpoint is not None:
                endpoint.start()
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
                queue_redis_url=queue_redis_url,
            )
        finally:
            if endpoint is not None:
                endpoint.close()
        return
    children: list[_Child] = []
    if with_dispatcher:
        children.append(
            _Child(
                "dispatcher",
                stop_seconds=DISPATCHER_STOP_SECONDS,
                daemon=True,
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
                    "queue_redis_url": queue_redis_url,
                },
            )
        )
    own_queue = slack_queue_name(queue_name) if work == "slack" else queue_name
    if work == "all":
        children.append(
            _Child(
                "Slack worker",
                stop_seconds=SLACK_WORKER_STOP_SECONDS,
                daemon=False,
                target=_serve_queue_as_child,
                args=(rq_url, slack_queue_name(queue_name)),
                kwargs={
                    "name": f"{name}-slack" if name else None,
                    "fork": fork,
                    "burst": False,
                    "redis_wait_seconds": redis_wait_seconds,
                    "parent_pid": os.getpid(),
                },
            )
        )
    supervisor = _Supervisor(children)
    supervisor.start()
    try:
        if endpoint is not None:
            # Once the children are forked: a process should not fork while threads run.
            endpoint.start()
        _serve_queue(
            rq_url,
            own_queue,
            name=name,
            fork=fork,
            burst=False,
            redis_wait_seconds=redis_wait_seconds,
            on_stop=supervisor.stop_restarting,
        )
    finally:
        supervisor.stop()
        if endpoint is not None:
            endpoint.close()
    if supervisor.failure is not None:
        raise WorkerChildFailed(supervisor.failure)


class MetricsEndpoint:
    """``/metrics`` of a `handoff worker` (``--metrics-port``), served from a thread of its
    first process: the counts of every process it runs (its RQ workers, its dispatcher, the
    work horses of ``--fork``), added up through a multiprocess directory made here, before
    any of them is forked, and the store's figures, read from Redis at each scrape."""

    def __init__(self, address: tuple[str, int], redis_url: str, namespace: str) -> None:
        self.address = address
        self.redis_url = redis_url
        self.namespace = namespace
        self.directory = metrics.MultiprocessDirectory()
        self._stop: Callable[[], None] | None = None

    def start(self) -> None:
        """Listen; a port that cannot be had is a ``ConfigurationError``."""
        # A scrape gives up on a Redis that does not answer within seconds (the store's
        # figures are then left out), rather than wait out an outage as the workers do.
        redis = open_client(self.redis_url, socket_connect_timeout=2, socket_timeout=5)
        reader = FigureReader(redis, KeySpace(self.namespace))
        registry = metrics.exposition_registry(reader, process="worker")
        host, port = self.address
        try:
            self._stop = metrics.serve_metrics(registry, host=host, port=port)
        except OSError as exc:
            raise ConfigurationError(
                f"cannot serve metrics on {host}:{port} ({exc}): choose another --metrics-port"
            ) from exc

    def close(self) -> None:
        """Stop serving, and remove the directory if it was made here."""
        if self._stop is not None:
            self._stop()
            self._stop = None
        self.directory.close()


class WorkerChildFailed(HandoffError):
    """A child process of `handoff worker` (its dispatcher or Slack worker) kept dying right
    after being started again, so the worker stopped: see the log for why it died."""


@dataclass(eq=False)
class _Child:
    """A process `handoff worker` runs beside its own RQ worker, and starts again when it
    dies: ``target`` called with ``args`` and ``kwargs`` in a forked process."""

    label: str
    stop_seconds: float
    """How long it is given to stop by itself, once asked, before it is killed."""
    daemon: bool
    target: Callable[..., None]
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    process: BaseProcess | None = None
    started: int = 0
    """How many processes of it were started."""
    deaths: deque[float] = field(default_factory=deque)
    """When its processes died (monotonic), within the last ``CHILD_DEATH_WINDOW_SECONDS``."""

    def launch(self) -> None:
        kwargs = dict(self.kwargs)
        if self.started and kwargs.get("name"):
            # The dead one may still be registered with RQ under its name (RQ refuses a
            # second live worker of one name) until its registration expires.
            kwargs["name"] = f"{kwargs['name']}-{self.started + 1}"
        self.process = multiprocessing.get_context("fork").Process(
            target=_child_main,
            args=(self.target, self.args, kwargs),
            name=f"handoff-{self.label.lower().replace(' ', '-')}",
            daemon=self.daemon,
        )
        self.process.start()
        self.started += 1


class _Supervisor:
    """Starts the children of a `handoff worker` and, from a thread of its own, starts each
    again when it dies, so that a Slack worker killed by the OOM killer, a crash or a stray
    signal does not leave its queue unserved (nor the outbox undispatched) while the worker
    process itself runs on.

    A child is started again after a backoff that doubles with each death within
    ``CHILD_DEATH_WINDOW_SECONDS`` (so one that dies at start-up does not spin); at
    ``CHILD_DEATHS_TOLERATED`` deaths in the window, ``failure`` says why and the worker
    process is sent SIGTERM, to stop (exit status 1) for its own supervisor to start again.
    What a dead Slack worker was running is not lost: its attempt's lease lapses after the
    task's timeout plus ``lease_grace_seconds``, and the dispatcher then dispatches the task
    again (its RQ job, started, no longer counts as waiting), for the child started meanwhile.

    Only the first children are forked before any thread starts. Those started again are
    forked from the watching thread while the worker may be busy; they use nothing of the
    parent's but the code and the notifier (each opens its own Redis connection), and Python
    renews the logging locks in a forked child. Linux sends the parent-death signal when the
    thread that forked a child ends, not the process: the watching thread ends only when the
    worker stops, which stops the children all the same.
    """

    def __init__(self, children: list[_Child]) -> None:
        self.children = children
        self.failure: str | None = None
        self._stopping = threading.Event()
        # Held while a child is started, so that ``stop`` never misses one started meanwhile.
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        for child in self.children:
            child.launch()
        if self.children:
            self._thread = threading.Thread(
                target=self._watch, name="handoff-supervisor", daemon=True
            )
            self._thread.start()

    def stop_restarting(self) -> None:
        """The worker is stopping (a stop signal): children that die from now on, say from
        the same Ctrl-C, are not started again. Safe in a signal handler."""
        self._stopping.set()

    def stop(self) -> None:
        """Stop watching, then stop the children: the dispatcher at once, the Slack worker
        after the job at hand (RQ's warm shutdown on SIGTERM), killing what does not stop in
        time."""
        with self._lock:
            self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=_WATCH_POLL_SECONDS + 1)
        running = [c for c in self.children if c.process is not None]
        for child in running:
            if child.process is not None and child.process.is_alive():
                child.process.terminate()
        for child in running:
            process = child.process
            assert process is not None
            process.join(timeout=child.stop_seconds)
            if process.is_alive():
                logger.warning("%s (pid %s) did not stop; killing it", child.label, process.pid)
                process.kill()
                process.join(timeout=1)

    def _watch(self) -> None:
        while not self._stopping.is_set():
            alive = {c.process.sentinel: c for c in self.children if c.process is not None}
            for sentinel in multiprocessing.connection.wait(list(alive), _WATCH_POLL_SECONDS):
                if self._stopping.is_set():
                    return
                self._replace(alive[sentinel])  # type: ignore[index]

    def _replace(self, child: _Child) -> None:
        process = child.process
        assert process is not None
        process.join(timeout=1)  # reaps it
        now = time.monotonic()
        child.deaths.append(now)
        while child.deaths and now - child.deaths[0] > CHILD_DEATH_WINDOW_SECONDS:
            child.deaths.popleft()
        deaths = len(child.deaths)
        delay = min(
            CHILD_RESTART_BACKOFF_MAX_SECONDS, CHILD_RESTART_BACKOFF_SECONDS * 2 ** (deaths - 1)
        )
        # Waited out before saying anything: a Ctrl-C reaches the whole process group, and
        # a child may end of it before this process's own handler has told us to stop.
        if self._stopping.wait(delay):
            return
        how = _how_it_ended(process.exitcode)
        if deaths >= CHILD_DEATHS_TOLERATED:
            self.failure = (
                f"the {child.label} process died {deaths} times within "
                f"{CHILD_DEATH_WINDOW_SECONDS:g} s (last: {how}); `handoff worker` stops so "
                "that its supervisor can start it again: see the log above for why it died"
            )
            logger.error("%s", self.failure)
            self._stopping.set()
            # The RQ worker of this process stops on it as on any stop signal (after the job
            # at hand), and ``run_worker`` then raises ``WorkerChildFailed``.
            os.kill(os.getpid(), signal.SIGTERM)
            return
        with self._lock:
            if self._stopping.is_set():
                return
            child.launch()
        logger.error(
            "%s (pid %s) died unexpectedly (%s); started it again (pid %s)",
            child.label,
            process.pid,
            how,
            child.process.pid if child.process is not None else "?",
        )


def _how_it_ended(exitcode: int | None) -> str:
    if exitcode is None:
        return "exit status unknown"
    if exitcode < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-exitcode).name}"
        return f"killed by signal {-exitcode}"
    return f"exit status {exitcode}"


def _child_main(target: Callable[..., None], args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Run a child's ``target``, with the stop signals' default handlers: a child started
    again is forked while this process's RQ worker has its own installed, which would act on
    the child's copy of that worker."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    target(*args, **kwargs)


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
    queue_redis_url: str | None = None,
) -> None:
    """A burst: dispatch what is due, work the queues empty, and again, until no task of
    the served kinds is due (tasks retried or put off for later are left for later). In one
    process: a worker that found its queue empty before a dispatcher elsewhere filled it
    would stop with a due task undone."""
    redis = background_redis(redis_url, wait_seconds=redis_wait_seconds)
    store = HandoffStore(redis, store_config)
    if queue_redis_url:
        redis = background_redis(queue_redis_url, wait_seconds=redis_wait_seconds)
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
            worker = worker_class(
                [queue],
                connection=redis,
                name=None,
                serializer=JSONSerializer,
                job_class=ProjectJob,
            )
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
    on_stop: Callable[[], None] | None = None,
) -> None:
    """Run an RQ worker on one queue until asked to stop (or, with ``burst``, until the
    queue is empty), starting it again when RQ's loop ends on an error. ``on_stop`` is
    called (in the signal handler) when a stop signal arrives."""
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
                job_class=ProjectJob,
            )
            worker.on_stop = on_stop
            with contextlib.suppress(RedisError):  # its teardown may fail the same way
                worker.work(with_scheduler=False, burst=burst)
            if burst or worker._shutdown_requested_date is not None:
                break
            # RQ ends its loop on an error it does not expect, such as Redis unreachable
            # for longer than the connection's retries: start again rather than exit.
            logger.warning("RQ worker stopped on an error; starting it again in 1 s")
            metrics.count_redis_error("worker")
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


PUBSUB_POLL_SECONDS = 1.0
"""How long an RQ worker's commands thread waits for a message before it looks whether it
should stop (``_PromptStop.subscribe``)."""


class _PromptStop:
    """RQ's warm shutdown, bounded when Redis is gone (mixed into RQ's worker classes).

    RQ's own waits for Redis at shutdown (deregistering) have no bound: with the
    connection's retries they took over a minute for a Redis that was gone.
    """

    connection: Redis
    pubsub: Any
    pubsub_thread: Any
    on_stop: Callable[[], None] | None = None
    """Told of the stop at once (RQ's loop may first finish its job): `handoff worker`'s
    children are not started again from then on."""

    def handle_warm_shutdown_request(self) -> None:
        super().handle_warm_shutdown_request()  # type: ignore[misc]
        stop_retrying(self.connection)
        if self.on_stop is not None:
            self.on_stop()

    def subscribe(self) -> None:
        """RQ's, polling its commands channel every ``PUBSUB_POLL_SECONDS`` instead of every
        60 s. RQ stops the polling thread at every worker's end, and redis-py's ``stop()``
        waits for it: once the unsubscribe has gone through, the thread may sit out a whole
        poll waiting for a subscription that never comes (a burst hung a minute between two
        queues, a stopping worker past its supervisor's patience)."""
        self.log.info("Worker %s: subscribing to channel %s", self.name, self.pubsub_channel_name)  # type: ignore[attr-defined]
        self.pubsub = self.connection.pubsub()
        self.pubsub.subscribe(**{self.pubsub_channel_name: self.handle_payload})  # type: ignore[attr-defined]
        self.pubsub_thread = self.pubsub.run_in_thread(
            sleep_time=PUBSUB_POLL_SECONDS,
            daemon=True,
            exception_handler=self._pubsub_exception_handler,  # type: ignore[attr-defined]
        )


class _SimpleWorker(_PromptStop, SimpleWorker):
    pass


class _ForkWorker(_PromptStop, Worker):
    def main_work_horse(self, *args: Any, **kwargs: Any) -> None:
        # Every job's horse counts into one set of files, not a set of its own each.
        metrics.in_work_horse(os.getppid())
        super().main_work_horse(*args, **kwargs)


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
