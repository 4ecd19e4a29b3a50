"""worker.tracing: one trace from the agent's span through Slack and the person to the resume,
with OpenTelemetry's SDK and its in-memory exporter; and nothing of OpenTelemetry loaded
when it is not installed or not configured.

The traced test runs the whole loop in this process, so that one exporter sees every span:
the agent's client, the delivery, update and resume jobs (an RQ SimpleWorker), and the
WSGI app of `handoff serve` answering the stand-in's signed click."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once
from redis import Redis
from rq import SimpleWorker
from rq.serializers import JSONSerializer

from bot.blockkit import ids
from bot.cli.services import build_notifier
from bot.config import Settings
from bot.serve import build_wsgi_app
from bot.standin import SlackStandIn, StandInUser
from store.exceptions import ConfigurationError
from store.models import TaskState
from store.trace_context import trace_context_of
from tests.conftest import ROOT
from tests.support import traced_targets
from worker import jobs, tracing
from worker.client import Handoffs
from worker.dispatcher import Dispatcher
from worker.notifier import LoggingNotifier
from worker.queues import ProjectJob, TaskQueues

SECRET = "tracing-test-signing-secret"
ALICE, CHANNEL = "U0ALICE", "C0APPROVALS"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """This process traced into memory (its resume process forked afresh to inherit it)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    jobs._resume_process.close()
    try:
        yield exporter
    finally:
        jobs._resume_process.close()
        jobs.configure(notifier=LoggingNotifier())
        provider.shutdown()
        # As OpenTelemetry's own test utilities reset it (reset_trace_globals): the global
        # provider can be set only once per process.
        trace._TRACER_PROVIDER_SET_ONCE = Once()
        trace._TRACER_PROVIDER = None


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def _serving(settings: Settings) -> Iterator[str]:
    """`handoff serve`'s WSGI app in a thread of this process; yields its request URL."""
    server: WSGIServer = make_server("127.0.0.1", 0, build_wsgi_app(settings), handler_class=_Quiet)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/slack/events"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _work(redis: Redis) -> None:
    """What the dispatcher and `handoff worker` do, once, here: due tasks to RQ, RQ's jobs run."""
    queues = TaskQueues.named(redis)
    Dispatcher(Handoffs(redis).store, queues).tick()
    worker = SimpleWorker(
        queues.distinct, connection=redis, serializer=JSONSerializer, job_class=ProjectJob
    )
    worker.work(burst=True, with_scheduler=False)


def test_one_trace_from_the_agent_through_slack_and_the_person_to_the_resume(
    redis: Redis, redis_url: str, spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REDIS_URL", redis_url)  # the resume target reports there
    users = [StandInUser(ALICE, "alice")]
    with SlackStandIn(signing_secret=SECRET, users=users) as slack:
        settings = Settings(
            slack_bot_token=slack.bot_token,
            slack_signing_secret=SECRET,
            redis_url=redis_url,
            slack_api_url=slack.api_url,
        )
        jobs.configure(notifier=build_notifier(settings))
        handoffs = Handoffs(redis)
        with trace.get_tracer("agent").start_as_current_span("agent.run") as agent:
            handoff = handoffs.request_approval(
                run_id="run-traced",
                thread_id="t",
                action="issue_refund",
                args={"amount": 30},
                channel=CHANNEL,
                reviewers=[ALICE],
                resume="tests.support.traced_targets:continue_run",
            )
        traceparent = trace_context_of(handoff.trace_context or {})
        assert traceparent is not None and f"{agent.get_span_context().trace_id:032x}" in str(
            traceparent
        )

        _work(redis)  # delivery: posted
        refs = handoffs.get(handoff.id).message_refs
        with _serving(settings) as slack.bot_url:
            response = slack.click(ALICE, slack.message(refs["channel"], refs["ts"]), ids.APPROVE)
        assert response.status == 200
        _work(redis)  # the message updated, the run resumed

    decided = handoffs.get(handoff.id)
    assert decided.resume.state is TaskState.COMPLETED
    assert decided.notify.state is TaskState.COMPLETED
    finished = {span.name: span for span in spans.get_finished_spans()}
    root = finished["agent.run"].context
    for name in ("handoff.deliver", "handoff.decide", "handoff.update", "handoff.resume"):
        span = finished[name]
        assert span.context.trace_id == root.trace_id, name
        assert span.parent is not None and span.parent.span_id == root.span_id, name
        assert span.attributes["handoff.id"] == handoff.id
    assert finished["handoff.decide"].attributes["handoff.status"] == "approved"
    # The person's wait is the gap between the post and the decision.
    assert finished["handoff.decide"].start_time >= finished["handoff.deliver"].end_time
    # The agent's own span after the resume, in the resume process, is in the same trace.
    [after] = traced_targets.continued(redis)
    assert after["recording"] is True
    assert after["trace_id"] == f"{root.trace_id:032x}"
    assert after["parent_span_id"] == f"{finished['handoff.resume'].context.span_id:016x}"


def test_a_handoff_made_outside_any_span_stores_no_trace(redis: Redis) -> None:
    handoff = Handoffs(redis).ask(run_id="r", thread_id="t", question="Which region?")
    assert handoff.trace_context is None
    assert Handoffs(redis).get(handoff.id).trace_context is None


@pytest.mark.parametrize(
    ("environ", "wanted"),
    [
        ({}, False),
        ({"OTEL_SERVICE_NAME": "handoff"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_SERVICE_NAME": "handoff"}, False),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, False),
    ],
)
def test_only_the_standard_variables_turn_traces_on(environ: dict, wanted: bool) -> None:
    assert tracing.wanted(environ) is wanted


# Create, decide and resume (delivery and resume in an RQ SimpleWorker), then list what of
# OpenTelemetry the process loaded besides what redis-py loads by itself (8.x imports the
# OpenTelemetry SDK's metrics, when installed, for its own instrumentation). argv[1]:
# "blocked" makes OpenTelemetry unimportable.
_WITHOUT_TRACES = """
import json, sys
if sys.argv[1] == "blocked":
    sys.modules["opentelemetry"] = None
def loaded():
    return {n for n, m in sys.modules.items() if n.startswith("opentelemetry") and m}
import redis
by_redis = loaded()
from redis import Redis
from rq import SimpleWorker
from rq.serializers import JSONSerializer
from worker import tracing
from worker.client import Handoffs
from worker.dispatcher import Dispatcher
from worker.queues import ProjectJob, TaskQueues

redis = Redis.from_url(sys.argv[2])
configured = tracing.configure_from_env("handoff-worker")
handoffs = Handoffs(redis)
handoff = handoffs.request_approval(
    run_id="r", thread_id="t", action="refund", resume="tests.support.resume_targets:record"
)
handoffs.decide(handoff.id, "approved", by="U0ALICE")
queues = TaskQueues.named(redis)
for _ in range(2):
    Dispatcher(handoffs.store, queues).tick()
    SimpleWorker(queues.distinct, connection=redis, serializer=JSONSerializer,
                 job_class=ProjectJob).work(burst=True, with_scheduler=False)
print(json.dumps({
    "configured": configured,
    "resumed": handoffs.get(handoff.id).resume.state.value,
    "loaded": sorted(loaded() - by_redis),
}))
"""


@pytest.mark.parametrize(
    ("opentelemetry", "environ"),
    [("blocked", {"OTEL_SERVICE_NAME": "handoff"}), ("installed", {})],
    ids=["not-installed", "not-configured"],
)
def test_without_the_extra_or_its_configuration_nothing_of_it_is_loaded(
    redis: Redis, redis_url: str, opentelemetry: str, environ: dict[str, str]
) -> None:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    ran = subprocess.run(
        [sys.executable, "-c", _WITHOUT_TRACES, opentelemetry, redis_url],
        env={**clean, **environ, "REDIS_URL": redis_url, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr
    outcome = json.loads(ran.stdout.splitlines()[-1])
    assert outcome == {"configured": False, "resumed": "completed", "loaded": []}
    if opentelemetry == "blocked":  # asked for, but not installed: said so, in one line
        assert tracing.EXTRA in ran.stderr


_CONFIGURED = """
import json, sys
from worker import tracing
configured = tracing.configure_from_env("handoff-worker")
with tracing.span("handoff.deliver", {"traceparent": sys.argv[1]}, {"handoff.id": "ho_1"}):
    pass
from opentelemetry import trace
trace.get_tracer_provider().force_flush()
print(json.dumps({"configured": configured}))
"""


def test_the_standard_variables_configure_the_sdk_in_our_processes() -> None:
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    ran = subprocess.run(
        [sys.executable, "-c", _CONFIGURED, parent],
        env={**clean, "OTEL_TRACES_EXPORTER": "console", "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout.splitlines()[-1]) == {"configured": True}
    exported = json.loads(ran.stdout[: ran.stdout.rindex("}\n{") + 2])  # the console's span
    assert exported["name"] == "handoff.deliver"
    assert exported["context"]["trace_id"] == "0x0af7651916cd43dd8448eb211c80319c"
    assert exported["parent_id"] == "0xb7ad6b7169203331"
    assert exported["resource"]["attributes"]["service.name"] == "handoff-worker"


@pytest.mark.parametrize(
    ("environ", "named"),
    [
        ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, "http/json"),
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, "zipkin"),
        ({"OTEL_SERVICE_NAME": "h", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "proto-grpc"),
    ],
)
def test_an_exporter_that_cannot_be_had_is_refused_at_start(environ: dict, named: str) -> None:
    with pytest.raises(ConfigurationError, match=named):
        tracing.configure_from_env("handoff-worker", environ)
