"""OpenTelemetry traces of a handoff: agent -> Slack -> person -> resume, as one trace.

When the agent creates a handoff inside a span, the client stores that span's W3C Trace
Context with it (``current_trace_context``; the HTTP API stores its ``traceparent`` header).
The work done for the handoff later, in other processes, continues that trace: each is a
span whose parent is the stored context, so one trace shows the agent's span, then
``handoff.deliver`` (the post), ``handoff.decide`` (the person's click, in `handoff serve`),
``handoff.update`` (the message showing the decision) and ``handoff.resume``, with the wait
for the person as the gap between them. The resume target runs inside ``handoff.resume``
(``attached``), so the spans the agent starts after the resume are its children.

Everything here is optional and costs nothing when unused. OpenTelemetry is the ``otel``
extra (``pip install 'slack-handoff[otel]'``); nothing imports it at import time:

- agent side: ``current_trace_context`` reads a span only if the process has loaded
  OpenTelemetry already (an agent that traces nothing has no span to continue);
- our processes (`handoff serve`, `handoff worker`, `handoff api`): ``configure_from_env`` sets up
  the SDK at start from the standard ``OTEL_*`` variables, only when they ask for traces
  (``OTEL_TRACES_EXPORTER``, an OTLP endpoint or ``OTEL_SERVICE_NAME``), or leaves a tracer
  provider already set (``opentelemetry-instrument``) in place; ``span`` does nothing
  unless a tracer provider is set.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import sys
from collections.abc import Iterator, Mapping
from typing import Any

from store.exceptions import ConfigurationError
from store.trace_context import trace_context_of

logger = logging.getLogger(__name__)

TRACER_NAME = "slack_handoff"
EXTRA = "pip install 'slack-handoff[otel]'"
EXPORTER_ENTRY_POINTS = "opentelemetry_traces_exporter"
"""The entry point group where exporter packages name their exporters (``console``,
``otlp_proto_http``...), as the SDK's own configuration looks them up."""
OTLP_PROTOCOLS = {"http/protobuf": "otlp_proto_http", "grpc": "otlp_proto_grpc"}
"""``OTEL_EXPORTER_OTLP_PROTOCOL`` -> the exporter that speaks it (the extra installs the
HTTP one, the protocol OpenTelemetry's specification makes the default)."""
DEFAULT_OTLP_PROTOCOL = "http/protobuf"

_configured_in: int | None = None
"""The pid of the process that configured the SDK (a fork flushes its spans itself)."""


def current_trace_context() -> dict[str, str] | None:
    """The W3C Trace Context of the span current in the calling code, to store with a
    handoff; None when there is none, or this process never loaded OpenTelemetry."""
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None or not trace.get_current_span().get_span_context().is_valid:
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    return trace_context_of(carrier)


def propagation_headers(stored: Mapping[str, str] | None) -> dict[str, str]:
    """W3C headers for an outgoing request made for a handoff (its webhook): the current
    span's when tracing, else the handoff's ``stored`` context."""
    return current_trace_context() or dict(stored or {})


@contextlib.contextmanager
def span(
    name: str,
    stored: Mapping[str, str] | None,
    attributes: Mapping[str, str | int | bool] | None = None,
    *,
    refusals: tuple[type[BaseException], ...] = (),
) -> Iterator[None]:
    """Run the block in a span ``name``: a child of the handoff's ``stored`` context (the
    agent's span, so the trace is one), linked to the span current in this process, if any
    (an instrumented HTTP request or RQ job). A root span when nothing was stored. An
    exception raised in the block marks the span failed, but one of ``refusals`` (an
    answer, such as "already decided") is only named in ``handoff.refused``. Nothing at
    all when no tracer provider is set."""
    if not _tracing():
        yield
        return
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    current = trace.get_current_span().get_span_context()
    links = [trace.Link(current)] if current.is_valid else None
    # No stored context: a root span (an empty Context), not a child of the current one.
    parent = TraceContextTextMapPropagator().extract(dict(stored or {}))
    tracer = trace.get_tracer(TRACER_NAME)
    try:
        with tracer.start_as_current_span(
            name,
            context=parent,
            links=links,
            attributes=dict(attributes or {}),
            record_exception=False,
            set_status_on_exception=False,
        ) as started:
            try:
                yield
            except refusals as refused:
                started.set_attribute("handoff.refused", type(refused).__name__)
                raise
            except BaseException as failed:
                started.record_exception(failed)
                started.set_status(trace.StatusCode.ERROR, f"{type(failed).__name__}: {failed}")
                raise
    finally:
        flush_forked()  # an RQ work horse ends without exporting what it holds


def set_attributes(attributes: Mapping[str, str | int | bool]) -> None:
    """Add ``attributes`` to the current span (what a ``span`` learnt while it ran)."""
    if _tracing():
        from opentelemetry import trace

        trace.get_current_span().set_attributes(dict(attributes))


@contextlib.contextmanager
def attached(context: Mapping[str, str] | None) -> Iterator[None]:
    """Make the W3C ``context`` the current one while the block runs (the resume target's
    process: the spans the agent's code starts are its children). Nothing when there is
    none, or when this process has not loaded OpenTelemetry (its code traces nothing)."""
    if not context or "opentelemetry.context" not in sys.modules:
        yield
        return
    from opentelemetry import context as otel_context
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    token = otel_context.attach(TraceContextTextMapPropagator().extract(dict(context)))
    try:
        yield
    finally:
        otel_context.detach(token)


def flush_forked(timeout_millis: int = 5000) -> None:
    """Export the spans of a process forked from the one that configured tracing (a work
    horse, the resume process) now: it may end without running the exit hooks that would."""
    if _configured_in is None or os.getpid() == _configured_in or not _tracing():
        return
    from opentelemetry import trace

    flush = getattr(trace.get_tracer_provider(), "force_flush", None)
    if flush is not None:
        flush(timeout_millis)


def _installed(module: str) -> bool:
    """Can ``module`` be imported (without importing it; its parents are)?"""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _tracing() -> bool:
    """Is a tracer provider set in this process (so that spans are recorded somewhere)?"""
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return False
    provider = trace.get_tracer_provider()
    return not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)


# -- configuring a process ------------------------------------------------------------------


def wanted(environ: Mapping[str, str]) -> bool:
    """Do the standard ``OTEL_*`` variables ask for traces? ``OTEL_SDK_DISABLED=true`` and
    ``OTEL_TRACES_EXPORTER=none`` say no; an exporter, an OTLP endpoint
    (``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) or a service
    name (``OTEL_SERVICE_NAME``) say yes."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporters:
        return exporters != "none"
    return any(
        environ.get(name, "").strip()
        for name in (
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "OTEL_SERVICE_NAME",
        )
    )


def configure_from_env(service_name: str, environ: Mapping[str, str] | None = None) -> bool:
    """Set up OpenTelemetry traces in this process from the ``OTEL_*`` variables, when they
    ask for them (``wanted``); ``service_name`` is ``service.name`` unless they name one.
    Returns whether spans are now recorded. Leaves a tracer provider already set alone.

    The SDK reads the rest itself: ``OTEL_TRACES_SAMPLER``, ``OTEL_RESOURCE_ATTRIBUTES``,
    ``OTEL_BSP_*``, and the exporters their endpoint, headers and timeouts. Raises
    ``ConfigurationError`` for an exporter or protocol that cannot be had."""
    environ = os.environ if environ is None else environ
    if not wanted(environ):
        return False
    if not _installed("opentelemetry.sdk"):
        logger.warning("OTEL_* variables ask for traces but OpenTelemetry is missing: %s", EXTRA)
        return False
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    global _configured_in
    if _tracing():
        logger.info("traces: a tracer provider is set already; it is used as it is")
        _configured_in = os.getpid()
        return True
    exporters = [_exporter(name) for name in _exporter_names(environ)]
    named = environ.get("OTEL_SERVICE_NAME") or "service.name=" in environ.get(
        "OTEL_RESOURCE_ATTRIBUTES", ""
    )
    resource = Resource.create({} if named else {"service.name": service_name})
    provider = TracerProvider(resource=resource)
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    _configured_in = os.getpid()
    logger.info("traces: exported by %s", ", ".join(type(e).__name__ for e in exporters))
    return True


def _exporter_names(environ: Mapping[str, str]) -> list[str]:
    """The exporters ``OTEL_TRACES_EXPORTER`` lists (default ``otlp``), ``otlp`` made the
    exporter of its protocol."""
    listed = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() or "otlp"
    names = []
    for name in (part.strip() for part in listed.split(",")):
        if not name or name == "none":
            continue
        if name == "otlp":
            protocol = (
                environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
                or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
                or DEFAULT_OTLP_PROTOCOL
            ).strip()
            if protocol not in OTLP_PROTOCOLS:
                raise ConfigurationError(
                    f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r} is no protocol the OTLP trace "
                    f"exporters speak here; use {' or '.join(OTLP_PROTOCOLS)}"
                )
            name = OTLP_PROTOCOLS[protocol]
        names.append(name)
    return names


def _exporter(name: str) -> Any:
    """A new exporter of the installed package that registers ``name``."""
    from importlib.metadata import entry_points

    found = list(entry_points(group=EXPORTER_ENTRY_POINTS, name=name))
    if not found:
        hint = {"otlp_proto_grpc": "opentelemetry-exporter-otlp-proto-grpc"}.get(name)
        raise ConfigurationError(
            f"the trace exporter {name!r} (OTEL_TRACES_EXPORTER, OTEL_EXPORTER_OTLP_PROTOCOL) "
            f"is not installed; install {hint or 'the package that provides it'}, or {EXTRA} "
            "for OTLP over HTTP"
        )
    return found[0].load()()
