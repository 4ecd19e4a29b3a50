"""The W3C Trace Context a handoff keeps (store.trace_context): only a well-formed one is
stored, because it is sent again as HTTP headers (a webhook's traceparent/tracestate)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from store.models import HandoffRequest, QuestionPayload, RequestType
from store.trace_context import trace_context_of, trace_context_problem, traceparent_problem

PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def _request(trace_context: dict[str, str]) -> HandoffRequest:
    return HandoffRequest(
        run_id="r",
        thread_id="t",
        request_type=RequestType.QUESTION,
        payload=QuestionPayload(question="Which customer?"),
        trace_context=trace_context,
    )


def test_a_well_formed_context_is_kept() -> None:
    context = {"traceparent": PARENT, "tracestate": "vendor=abc,other=1"}
    assert _request(context).trace_context == context
    assert traceparent_problem("01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-x") is None


@pytest.mark.parametrize(
    "context",
    [
        {"traceparent": PARENT + "\n"},
        {"traceparent": PARENT, "tracestate": "vendor=abc\n"},
        {"traceparent": "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-x\r\n"},
        {"traceparent": "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-\tx"},
    ],
    ids=["traceparent-newline", "tracestate-newline", "future-version-crlf", "future-tab"],
)
def test_a_value_that_cannot_be_an_http_header_is_refused(context: dict[str, str]) -> None:
    # "$" matched before a final newline: such a value was stored, and every webhook of the
    # handoff then failed (h11: "Illegal header value"), attempt after attempt.
    assert trace_context_problem(context) is not None
    with pytest.raises(ValidationError, match="trace"):
        _request(context)


def test_headers_with_surrounding_spaces_are_kept_stripped() -> None:
    assert trace_context_of({"traceparent": f" {PARENT} ", "tracestate": " a=b "}) == {
        "traceparent": PARENT,
        "tracestate": "a=b",
    }
    assert trace_context_of({"traceparent": PARENT + "\n-x"}) is None
