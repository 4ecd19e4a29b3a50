"""The W3C Trace Context a handoff keeps, so that its delivery, decision and resume continue
the agent's trace (``worker.tracing``).

A handoff stores the agent's ``traceparent`` (and ``tracestate``) as the W3C Trace Context
headers carry them. The store only checks their form: it imports nothing of OpenTelemetry.
See https://www.w3.org/TR/trace-context/.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
MAX_TRACESTATE_CHARS = 512
"""The most of a ``tracestate`` kept: what W3C asks every vendor to pass on (longer ones,
up to 32 members, may be cut; the stored one is dropped instead)."""

_TRACEPARENT = re.compile(
    r"(?P<version>[0-9a-f]{2})-(?P<trace_id>[0-9a-f]{32})-(?P<span_id>[0-9a-f]{16})"
    r"-(?P<flags>[0-9a-f]{2})(?P<rest>-[\x20-\x7e]*)?"
)
_TRACESTATE = re.compile(r"[\x20-\x7e]*")
# Both are matched whole (``fullmatch``): ``$`` would also match before a final newline, and
# a stored value is sent again as an HTTP header (a webhook's), where a newline is illegal.


def traceparent_problem(value: str) -> str | None:
    """What makes ``value`` no W3C ``traceparent`` (None: it is one). Version 00 has four
    fields; a later version may add fields after them (``ff`` is invalid); neither id may be
    all zeros."""
    found = _TRACEPARENT.fullmatch(value) if len(value) <= 256 else None
    if found is None:
        return "traceparent must look like 00-<32 hex digits>-<16 hex digits>-<2 hex digits>"
    if found["version"] == "ff" or (found["version"] == "00" and found["rest"]):
        return f"traceparent version {found['version']} is not one this format allows"
    if not found["trace_id"].strip("0") or not found["span_id"].strip("0"):
        return "traceparent ids must not be all zeros"
    return None


def trace_context_problem(context: Mapping[str, str]) -> str | None:
    """What is wrong with a stored trace context (None: nothing): a ``traceparent`` and
    at most a ``tracestate`` of up to ``MAX_TRACESTATE_CHARS`` printable characters."""
    unknown = sorted(set(context) - {TRACEPARENT, TRACESTATE})
    if unknown:
        return f"trace_context holds only traceparent and tracestate, not {', '.join(unknown)}"
    parent = context.get(TRACEPARENT)
    if not isinstance(parent, str):
        return "trace_context needs a traceparent"
    if problem := traceparent_problem(parent):
        return problem
    state = context.get(TRACESTATE, "")
    if not isinstance(state, str) or len(state) > MAX_TRACESTATE_CHARS:
        return f"tracestate must be text of at most {MAX_TRACESTATE_CHARS} characters"
    if not _TRACESTATE.fullmatch(state):
        return "tracestate must be printable ASCII"
    return None


def trace_context_of(carrier: Mapping[str, str]) -> dict[str, str] | None:
    """The trace context to store from W3C headers (``carrier``: header names lower case),
    or None when they carry no valid ``traceparent``. A ``tracestate`` that cannot be kept
    (too long, not printable) is left out, as W3C lets a participant do."""
    parent = carrier.get(TRACEPARENT)
    if not isinstance(parent, str) or traceparent_problem(parent.strip()):
        return None
    context = {TRACEPARENT: parent.strip()}
    state = carrier.get(TRACESTATE)
    if isinstance(state, str) and state.strip():
        candidate = {**context, TRACESTATE: state.strip()}
        if trace_context_problem(candidate) is None:
            context = candidate
    return context
