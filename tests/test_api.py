"""The HTTP API over real HTTP (uvicorn on a port, httpx), against the test Redis: create,
read, long-poll wait, cancel, decide, list, idempotency, keys and their scope."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from redis import Redis

from bot.api.app import ApiConfig
from bot.cli.output import summary_lines
from store.api_keys import ApiKeys
from store.models import Status
from tests.support.api_server import serve_api
from worker.client import Handoffs


@pytest.fixture
def api(redis: Redis, redis_url: str) -> Iterator[str]:
    store = Handoffs(redis).store
    config = ApiConfig(redis_url=redis_url, creates_per_minute=1000)
    with serve_api(store, config) as url:
        yield url


@pytest.fixture
def keys(redis: Redis) -> ApiKeys:
    store = Handoffs(redis).store
    return ApiKeys(redis, store.keys)


def _client(api: str, key: str | None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.Client(base_url=api, headers=headers, timeout=30)


APPROVAL = {
    "request_type": "approval",
    "run_id": "run-1",
    "thread_id": "ticket-1",
    "context": "Charged twice",
    "action": {"name": "refund", "args": {"amount": 30}},
    "channel": "C0PAY",
}


def test_create_wait_and_decide_over_http(api: str, keys: ApiKeys, redis: Redis) -> None:
    agent = _client(api, keys.create("agent").key)
    admin = _client(api, keys.create("ops", admin=True).key)

    created = agent.post("/v1/handoffs", json=APPROVAL)
    assert created.status_code == 201, created.text
    handoff = created.json()
    assert created.headers["location"] == f"/v1/handoffs/{handoff['id']}"
    assert handoff["status"] == "pending" and handoff["api_key"] == "agent"
    assert handoff["payload"]["action"] == {
        "name": "refund",
        "args": {"amount": 30},
        "args_schema": None,
        "description": None,
    }

    answers: list[httpx.Response] = []
    waiter = threading.Thread(
        target=lambda: answers.append(agent.get(f"/v1/handoffs/{handoff['id']}?wait=20"))
    )
    started = time.monotonic()
    waiter.start()
    time.sleep(0.3)
    decided = admin.post(
        f"/v1/handoffs/{handoff['id']}/decision",
        json={"outcome": "approved", "by": "U0ANA", "comment": "ok"},
    )
    waiter.join(timeout=25)

    assert decided.status_code == 200, decided.text
    [answer] = answers
    assert answer.status_code == 200
    assert answer.json()["status"] == "approved"
    assert answer.json()["resume_data"]["decided_by"] == "U0ANA"
    assert time.monotonic() - started < 5  # woken by the decision, not by the 20 s timeout
    twice = admin.post(
        f"/v1/handoffs/{handoff['id']}/decision", json={"outcome": "rejected", "by": "U0BEN"}
    )
    assert twice.status_code == 409
    assert twice.headers["content-type"] == "application/problem+json"
    assert "already approved by U0ANA" in twice.json()["detail"]
    trail = [e.event for e in Handoffs(redis).store.audit_trail(handoff["id"])]
    assert trail == ["created", "decided"]
    assert Handoffs(redis).store.audit_trail(handoff["id"])[0].actor == "api:agent"
    shown = summary_lines(Handoffs(redis).get(handoff["id"]), [])  # what `handoff show` prints
    assert "  created by API key agent" in shown


def test_wait_answers_the_pending_state_when_the_time_is_up(api: str, keys: ApiKeys) -> None:
    agent = _client(api, keys.create("agent").key)
    handoff = agent.post("/v1/handoffs", json=APPROVAL).json()

    started = time.monotonic()
    answer = agent.get(f"/v1/handoffs/{handoff['id']}", params={"wait": 1})

    assert answer.status_code == 200 and answer.json()["status"] == "pending"
    assert 0.9 < time.monotonic() - started < 5
    too_long = agent.get(f"/v1/handoffs/{handoff['id']}", params={"wait": 61})
    assert too_long.status_code == 422 and too_long.json()["errors"][0]["field"] == "query.wait"


def test_an_agent_key_sees_only_its_own_handoffs(api: str, keys: ApiKeys) -> None:
    mine = _client(api, keys.create("mine").key)
    theirs = _client(api, keys.create("theirs").key)
    admin = _client(api, keys.create("ops", admin=True).key)
    created = mine.post("/v1/handoffs", json=APPROVAL).json()
    theirs.post("/v1/handoffs", json={**APPROVAL, "run_id": "run-2"})

    assert theirs.get(f"/v1/handoffs/{created['id']}").status_code == 404
    assert theirs.post(f"/v1/handoffs/{created['id']}/cancel").status_code == 404
    assert [h["id"] for h in mine.get("/v1/handoffs").json()["handoffs"]] == [created["id"]]
    by_run = theirs.get("/v1/handoffs", params={"run_id": "run-1"}).json()
    assert by_run["handoffs"] == []
    assert len(admin.get("/v1/handoffs").json()["handoffs"]) == 2
    # An agent key may not decide.
    refused = mine.post(
        f"/v1/handoffs/{created['id']}/decision", json={"outcome": "approved", "by": "U0A"}
    )
    assert refused.status_code == 403
    assert mine.get(f"/v1/handoffs/{created['id']}").json()["status"] == "pending"


def test_cancel_resumes_with_cancelled(api: str, keys: ApiKeys) -> None:
    agent = _client(api, keys.create("agent").key)
    handoff = agent.post("/v1/handoffs", json=APPROVAL).json()

    cancelled = agent.post(f"/v1/handoffs/{handoff['id']}/cancel", json={"reason": "obsolete"})

    assert cancelled.status_code == 200
    assert cancelled.json()["status"] == Status.CANCELLED.value
    assert cancelled.json()["resume_data"]["comment"] == "obsolete"
    assert cancelled.json()["resume_data"]["decided_by"] == "api:agent"


def test_idempotency_returns_the_same_handoff_or_409(api: str, keys: ApiKeys) -> None:
    agent = _client(api, keys.create("agent").key)
    other = _client(api, keys.create("other").key)

    first = agent.post("/v1/handoffs", json=APPROVAL, headers={"Idempotency-Key": "k1"})
    again = agent.post("/v1/handoffs", json=APPROVAL, headers={"Idempotency-Key": "k1"})
    changed = agent.post(
        "/v1/handoffs", json={**APPROVAL, "context": "else"}, headers={"Idempotency-Key": "k1"}
    )
    elsewhere = other.post("/v1/handoffs", json=APPROVAL, headers={"Idempotency-Key": "k1"})

    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"]
    assert again.json()["idempotency_key"] == "k1"
    assert changed.status_code == 409
    # Keys are scoped to their API key: another key's "k1" is another handoff.
    assert elsewhere.status_code == 201 and elsewhere.json()["id"] != first.json()["id"]


def test_a_key_and_the_same_key_with_body_appended_make_two_handoffs(
    api: str, keys: ApiKeys
) -> None:
    # The API keeps its record of a key's first body apart from the keys themselves: the
    # key "k2:body" never reads the record of "k2" as a handoff (it answered 404 once).
    agent = _client(api, keys.create("agent").key)
    plain = agent.post("/v1/handoffs", json=APPROVAL, headers={"Idempotency-Key": "k2"})
    suffixed = agent.post("/v1/handoffs", json=APPROVAL, headers={"Idempotency-Key": "k2:body"})
    again = agent.post("/v1/handoffs", json=APPROVAL, headers={"Idempotency-Key": "k2:body"})

    assert (plain.status_code, suffixed.status_code, again.status_code) == (201, 201, 200)
    assert (
        suffixed.json()["id"]
        != plain.json()["id"]
        == agent.get(f"/v1/handoffs/{plain.json()['id']}").json()["id"]
    )
    assert again.json()["id"] == suffixed.json()["id"]


def test_keys_are_checked_on_every_request(api: str, keys: ApiKeys) -> None:
    created = keys.create("agent")
    agent = _client(api, created.key)
    assert agent.post("/v1/handoffs", json=APPROVAL).status_code == 201

    keys.revoke("agent")
    after = agent.post("/v1/handoffs", json=APPROVAL)
    anonymous = _client(api, None).get("/v1/handoffs")
    wrong = _client(api, "hk_nothing").get("/v1/handoffs")

    for refused in (after, anonymous, wrong):
        assert refused.status_code == 401
        assert refused.headers["www-authenticate"].startswith("Bearer")
        assert refused.headers["content-type"] == "application/problem+json"


def test_a_key_may_create_only_in_its_channels(api: str, keys: ApiKeys) -> None:
    # Two channels: a request naming none could mean either (one channel: it goes there).
    agent = _client(api, keys.create("payments", channels=["C0PAY", "C0REFUNDS"]).key)

    allowed = agent.post("/v1/handoffs", json=APPROVAL)
    elsewhere = agent.post("/v1/handoffs", json={**APPROVAL, "channel": "C0OPS"})
    default = agent.post("/v1/handoffs", json={**APPROVAL, "channel": None})

    assert allowed.status_code == 201
    assert elsewhere.status_code == 403 and default.status_code == 403


def test_creates_over_the_keys_limit_are_429_with_retry_after(api: str, keys: ApiKeys) -> None:
    agent = _client(api, keys.create("slow", creates_per_minute=2).key)

    answers = [agent.post("/v1/handoffs", json=APPROVAL).status_code for _ in range(3)]
    limited = agent.post("/v1/handoffs", json=APPROVAL)

    assert answers == [201, 201, 429]
    assert limited.status_code == 429 and 1 <= int(limited.headers["retry-after"]) <= 60


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({**APPROVAL, "colour": "red"}, "colour"),
        ({**APPROVAL, "action": None}, "action"),
        ({**APPROVAL, "request_type": "poll"}, "request_type"),
        ({**APPROVAL, "run_id": 5}, "run_id"),
        ({**APPROVAL, "question": "why?"}, "question"),
        ({**APPROVAL, "channel": "#general"}, "channel"),
        ({**APPROVAL, "callback": {"url": "http://127.0.0.1:9/x"}}, "callback.url"),
    ],
)
def test_bad_bodies_are_422_naming_the_field_and_change_nothing(
    api: str, keys: ApiKeys, redis: Redis, body: dict[str, object], field: str
) -> None:
    agent = _client(api, keys.create("agent").key)
    before = sorted(redis.keys("*"))

    refused = agent.post("/v1/handoffs", json=body)

    assert refused.status_code == 422, refused.text
    assert refused.headers["content-type"] == "application/problem+json"
    assert field in [e["field"] for e in refused.json()["errors"]], refused.json()
    after = [k for k in sorted(redis.keys("*")) if b"apicreates" not in k]
    assert after == [k for k in before if b"apicreates" not in k]


REFUND_FORM = {
    "type": "object",
    "required": ["amount"],
    "properties": {
        "amount": {"type": "integer", "minimum": 1, "maximum": 500},
        "reason": {"enum": ["damaged", "late"]},
    },
}


def test_a_question_takes_an_answer_schema_and_an_admin_a_typed_answer(
    api: str, keys: ApiKeys
) -> None:
    agent = _client(api, keys.create("agent").key)
    admin = _client(api, keys.create("ops", admin=True).key)
    question = {
        "request_type": "question",
        "run_id": "run-1",
        "thread_id": "ticket-1",
        "question": "Refund how much?",
        "answer_schema": REFUND_FORM,
    }

    created = agent.post("/v1/handoffs", json=question)
    assert created.status_code == 201, created.text
    handoff_id = created.json()["id"]
    assert created.json()["payload"]["answer_schema"] == REFUND_FORM
    decide = f"/v1/handoffs/{handoff_id}/decision"
    untyped = admin.post(decide, json={"outcome": "answered", "by": "U0ANA", "answer": "30"})
    assert untyped.status_code == 422 and "answer_data" in untyped.json()["detail"]
    too_much = {"outcome": "answered", "by": "U0ANA", "answer_data": {"amount": 501}}
    assert admin.post(decide, json=too_much).status_code == 422
    typed = {"outcome": "answered", "by": "U0ANA", "answer_data": {"amount": 30, "reason": "late"}}
    decided = admin.post(decide, json=typed)

    assert decided.status_code == 200, decided.text
    assert decided.json()["resume_data"]["answer_data"] == {"amount": 30, "reason": "late"}
    assert decided.json()["resume_data"]["answer"] == "amount: 30\nreason: late"
    refused = agent.post(
        "/v1/handoffs",
        json={
            **question,
            "answer_schema": {"type": "object", "properties": {"a": {"type": "object"}}},
        },
    )
    assert refused.status_code == 422
    assert refused.json()["errors"] == [
        {
            "field": "answer_schema",
            "message": "answer_schema.properties.a.type must be string, number, integer or "
            "boolean (or give an enum), not 'object'",
        }
    ]
    misplaced = agent.post("/v1/handoffs", json={**APPROVAL, "answer_schema": REFUND_FORM})
    assert misplaced.status_code == 422
    assert [e["field"] for e in misplaced.json()["errors"]] == ["answer_schema"]


def test_malformed_json_oversized_bodies_and_unknown_ids(api: str, keys: ApiKeys) -> None:
    agent = _client(api, keys.create("agent").key)

    malformed = agent.post(
        "/v1/handoffs", content=b"{nope", headers={"content-type": "application/json"}
    )
    huge = agent.post("/v1/handoffs", json={**APPROVAL, "context": "x" * 200_000})
    unknown = agent.get("/v1/handoffs/ho_01NOSUCH")

    assert malformed.status_code == 422
    assert huge.status_code == 413
    assert unknown.status_code == 404
    for answer in (malformed, huge, unknown):
        assert answer.headers["content-type"] == "application/problem+json"
        assert "Traceback" not in answer.text


def test_the_openapi_document_is_served(api: str) -> None:
    document = httpx.get(f"{api}/v1/openapi.json").json()

    assert document["openapi"].startswith("3.1")
    assert {"/v1/handoffs", "/v1/handoffs/{handoff_id}"} <= set(document["paths"])
    assert httpx.get(f"{api}/v1/docs").status_code == 200


def test_the_committed_openapi_document_is_the_codes() -> None:
    from bot.api.openapi import openapi_document
    from tests.conftest import ROOT

    committed = json.loads((ROOT / "docs" / "openapi.json").read_text())

    assert committed == openapi_document(), (
        "the API changed: run `python -m bot.api.openapi > docs/openapi.json` and commit it"
    )


def test_audit_of_a_handoff_for_its_key_and_of_the_namespace_for_admins(
    api: str, keys: ApiKeys
) -> None:
    agent = _client(api, keys.create("agent").key)
    admin = _client(api, keys.create("ops", admin=True).key)
    first = agent.post("/v1/handoffs", json=APPROVAL).json()
    agent.post(f"/v1/handoffs/{first['id']}/cancel")
    second = agent.post("/v1/handoffs", json={**APPROVAL, "run_id": "run-2"}).json()

    trail = agent.get(f"/v1/handoffs/{first['id']}/audit").json()["events"]
    refused = agent.get("/v1/audit")
    page = admin.get("/v1/audit", params={"limit": 2}).json()
    rest = admin.get("/v1/audit", params={"cursor": page["next_cursor"]}).json()
    bad_cursor = admin.get("/v1/audit", params={"cursor": "0; FLUSHALL"})

    assert [(e["event"], e["actor"]) for e in trail] == [
        ("created", "api:agent"),
        ("cancelled", "api:agent"),
    ]
    assert refused.status_code == 403
    events = [(e["event"], e["handoff_id"]) for e in page["events"] + rest["events"]]
    assert events == [
        ("created", first["id"]),
        ("cancelled", first["id"]),
        ("created", second["id"]),
    ]
    assert rest["next_cursor"] is None
    assert bad_cursor.status_code == 422


def _nested(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = {"x": value}
    return value


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"expires_in_seconds": 1e12}, "expires_in_seconds"),
        ({"action": {"name": "x", "args": {}, "args_schema": {"$ref": "http://127.0.0.1:9/"}}},
         "action.args_schema"),
        ({"metadata": {"a": {"b": {"c": 1}}} | {"deep": _nested(40)}}, "metadata"),
    ],
)  # fmt: skip
def test_requests_the_store_could_not_read_back_are_422_and_write_nothing(
    api: str, keys: ApiKeys, redis: Redis, change: dict[str, object], field: str
) -> None:
    agent = _client(api, keys.create("agent").key)
    before = sorted(redis.keys("*"))

    refused = agent.post("/v1/handoffs", json={**APPROVAL, **change})

    assert refused.status_code == 422, refused.text
    assert any(field in e["field"] for e in refused.json()["errors"]), refused.json()
    assert sorted(redis.keys("*")) == before


def test_non_finite_numbers_are_refused_not_stored_as_null(api: str, keys: ApiKeys) -> None:
    agent = _client(api, keys.create("agent").key)
    body = json.dumps(APPROVAL).replace('"amount": 30', '"amount": NaN')

    refused = agent.post("/v1/handoffs", content=body, headers={"content-type": "application/json"})

    assert refused.status_code == 422, refused.text
    assert "not a JSON number" in refused.text


def test_filters_never_show_another_keys_handoffs_or_cursors(api: str, keys: ApiKeys) -> None:
    mine = _client(api, keys.create("mine").key)
    theirs = _client(api, keys.create("theirs").key)
    victim = theirs.post("/v1/handoffs", json={**APPROVAL, "run_id": "victim-run"}).json()

    page = mine.get("/v1/handoffs", params={"run_id": "victim-run", "limit": 1}).json()
    by_channel = mine.get("/v1/handoffs", params={"channel": "C0PAY", "limit": 1}).json()
    other = mine.get(f"/v1/handoffs/{victim['id']}")
    missing = mine.get("/v1/handoffs/ho_01NOSUCHHANDOFF0000000000")

    assert page == {"handoffs": [], "next_cursor": None}
    assert by_channel == {"handoffs": [], "next_cursor": None}
    assert other.status_code == missing.status_code == 404
    # The same words for another key's handoff and for none at all.
    assert other.json()["detail"].replace(victim["id"], "X") == missing.json()["detail"].replace(
        "ho_01NOSUCHHANDOFF0000000000", "X"
    )


def test_an_idempotency_key_whose_create_failed_can_be_used_again(api: str, keys: ApiKeys) -> None:
    agent = _client(api, keys.create("agent").key)
    headers = {"Idempotency-Key": "retry-me"}
    too_big = agent.post(
        "/v1/handoffs", json={**APPROVAL, "context": "x" * 70_000}, headers=headers
    )

    fixed = agent.post("/v1/handoffs", json=APPROVAL, headers=headers)

    assert too_big.status_code == 413
    assert fixed.status_code == 201, fixed.text


def test_a_revoked_keys_name_is_never_given_to_a_new_key(api: str, keys: ApiKeys) -> None:
    from store.api_keys import ApiKeyNameTaken

    old = keys.create("reused")
    created = _client(api, old.key).post("/v1/handoffs", json=APPROVAL).json()
    keys.revoke("reused")

    with pytest.raises(ApiKeyNameTaken, match="never used again"):
        keys.create("reused")
    assert keys.get("reused") is None  # nothing left to sign its callbacks with
    assert [k.name for k in keys.list()] == []
    admin = _client(api, keys.create("ops", admin=True).key)
    assert admin.get(f"/v1/handoffs/{created['id']}").json()["api_key"] == "reused"
