"""An agent's args_schema is untrusted: refused at creation when it is invalid or refers
outside itself (nothing is fetched), and applied with patterns under a time limit."""

from __future__ import annotations

import http.server
import threading
import time

import pytest

from store.arg_schemas import argument_errors, schema_problem
from store.exceptions import InvalidHandoffRequest
from worker.client import Handoffs


@pytest.mark.parametrize(
    ("schema", "problem"),
    [
        ({"$ref": "http://127.0.0.1:9/x"}, "only references inside the schema"),
        ({"properties": {"a": {"$ref": "file:///etc/passwd"}}}, "only references inside"),
        ({"$dynamicRef": "https://example.com/s"}, "only references inside"),
        ({"type": 5}, "not a valid JSON schema"),
        ({"properties": {"a": {"pattern": "("}}}, "not a valid JSON schema"),
    ],
)
def test_unsafe_or_invalid_schemas_are_refused(schema: dict[str, object], problem: str) -> None:
    assert problem in (schema_problem(schema) or "")


def test_a_handoff_with_such_a_schema_is_refused_at_creation(handoffs: Handoffs) -> None:
    with pytest.raises(InvalidHandoffRequest, match="only references inside the schema"):
        handoffs.request_approval(
            run_id="r",
            thread_id="t",
            action="refund",
            args={"amount": 1},
            args_schema={"$ref": "http://127.0.0.1:9/schema"},
        )
    assert handoffs.list_pending().items == []


def test_validation_fetches_nothing_even_for_a_schema_that_was_never_checked() -> None:
    hits: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits.append(self.path)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b'{"type": "integer"}')

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/internal"
        errors = argument_errors({"properties": {"a": {"$ref": url}}}, {"a": "x"})
    finally:
        server.shutdown()
    assert hits == []
    assert errors and "cannot be applied" in errors[0].message


def test_a_catastrophic_pattern_gives_up_in_time() -> None:
    schema = {"properties": {"a": {"type": "string", "pattern": "^(a|aa)+$"}}}

    started = time.monotonic()
    errors = argument_errors(schema, {"a": "a" * 60 + "!"})

    # Backtracking without the time limit takes years on this value; the bound is loose so
    # a loaded machine (tests run two at a time) cannot fail it.
    assert time.monotonic() - started < 5
    assert [e.message for e in errors] == [
        "the pattern '^(a|aa)+$' took too long on this value; simplify the schema"
    ]
    assert argument_errors(schema, {"a": "aaa"}) == []
    assert [e.message for e in argument_errors(schema, {"a": "b"})] == [
        "'b' does not match '^(a|aa)+$'"
    ]


def test_a_schema_whose_refs_branch_exponentially_is_cut_short() -> None:
    depth = 30  # 2**30 keyword applications without a budget
    defs: dict[str, object] = {
        f"d{i}": {"anyOf": [{"$ref": f"#/$defs/d{i + 1}"}, {"$ref": f"#/$defs/d{i + 1}"}]}
        for i in range(depth)
    }
    defs[f"d{depth}"] = {"not": {}}
    schema = {"$defs": defs, "properties": {"a": {"$ref": "#/$defs/d0"}}}
    assert schema_problem(schema) is None  # valid, so it is the check that must be bounded

    started = time.monotonic()
    errors = argument_errors(schema, {"a": 1})

    # 2**30 applications would take hours; the budget stops it in well under a second.
    assert time.monotonic() - started < 10
    assert [e.message for e in errors] == [
        "args_schema is too costly to check these arguments against (over 20000 steps); "
        "the agent should simplify it"
    ]


def test_unique_items_is_linear_and_keeps_json_equality() -> None:
    schema = {"properties": {"rows": {"type": "array", "uniqueItems": True}}}
    rows = [{"id": i, "tags": ["a", i]} for i in range(20_000)]

    started = time.monotonic()
    assert argument_errors(schema, {"rows": rows}) == []
    # Quadratic comparison of 20,000 rows takes minutes; linear takes a fraction of a second.
    assert time.monotonic() - started < 10
    assert argument_errors(schema, {"rows": [1, 1.0]})  # one number
    assert argument_errors(schema, {"rows": [True, 1]}) == []  # not one value
    assert argument_errors(schema, {"rows": [{"a": 1, "b": 2}, {"b": 2, "a": 1}]})
