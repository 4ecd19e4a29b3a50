"""What a break-it review of the HTTP API, its HumanLayer routes and the MCP client found,
each as it was reproduced: a create limit bypassed by a request racing its own retry, 500s
for bodies the store cannot take, a revoked key still handed a decision it waited for, an
edited approval read as unchanged (true == 1), and non-ASCII text counted six times over."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from redis import Redis

from bot.api.app import ApiConfig, _claim_idempotency
from bot.api.schemas import CreateHandoff
from store.api_keys import ApiKeys
from store.models import Status
from tests.support.api_server import serve_api
from tests.support.mcp_hosts import call_stdio
from worker.client import Handoffs

HL = "/humanlayer/v1"


@pytest.fixture
def handoffs(redis: Redis) -> Handoffs:
    return Handoffs(redis)


@pytest.fixture
def api(handoffs: Handoffs, redis_url: str) -> Iterator[str]:
    with serve_api(handoffs.store, ApiConfig(redis_url=redis_url)) as url:
        yield url


def _client(api: str, handoffs: Handoffs, name: str, **options: object) -> httpx.Client:
    key = ApiKeys(handoffs.redis, handoffs.store.keys).create(name, **options).key  # type: ignore[arg-type]
    return httpx.Client(base_url=api, headers={"Authorization": f"Bearer {key}"}, timeout=30)


def _question(run: str) -> dict[str, object]:
    return {"request_type": "question", "run_id": run, "thread_id": "t", "question": "Which?"}


def test_a_create_whose_first_request_is_under_way_counts_against_the_limit(
    api: str, handoffs: Handoffs
) -> None:
    agent = _client(api, handoffs, "limited", creates_per_minute=1)
    assert agent.post("/v1/handoffs", json=_question("r1")).status_code == 201
    body = _question("r2")
    # A first request with this key and body has claimed it and not created yet (or is
    # about to let go of it after its own 429), as a request racing it finds it.
    assert _claim_idempotency(handoffs.store, "limited/k", CreateHandoff(**body)).claimed

    racing = agent.post("/v1/handoffs", json=body, headers={"Idempotency-Key": "k"})

    # No replay of a create that happened: counted, so over the limit (it was created
    # uncounted before, and 40 racing pairs made 36 handoffs on a limit of 2).
    assert racing.status_code == 429, racing.text
    assert [h.run_id for h in handoffs.list_pending().items] == ["r1"]


def test_humanlayer_bodies_the_store_cannot_take_are_422_or_stored_safely(
    api: str, handoffs: Handoffs
) -> None:
    hl = _client(api, handoffs, "legacy")
    # Half an emoji, as JSON may carry it (httpx would not encode it: sent as written).
    surrogate_call = (
        '{"run_id": "r", "call_id": "c1", "spec": {"fn": "f", "kwargs": {"x": "\\ud83d"}}}'
    )
    deep: dict[str, object] = {}
    for _ in range(300):
        deep = {"d": deep}
    nested = {"run_id": "r", "call_id": "c2", "spec": {"fn": "f", "kwargs": deep}}
    nan_state = '{"run_id": "r", "call_id": "c3", "spec": {"fn": "f", "state": {"n": NaN}}}'

    as_json = {"content-type": "application/json"}
    surrogate = hl.post(f"{HL}/function_calls", content=surrogate_call, headers=as_json)
    too_deep = hl.post(f"{HL}/function_calls", json=nested)
    not_finite = hl.post(f"{HL}/function_calls", content=nan_state, headers=as_json)

    assert surrogate.status_code == 200, surrogate.text
    assert surrogate.json()["spec"]["kwargs"] == {"x": "\ufffd"}
    assert too_deep.status_code == 422 and "nested deeper" in too_deep.text
    assert not_finite.status_code == 422 and "spec.state.n: nan" in not_finite.text
    assert len(handoffs.list_pending().items) == 1


def test_a_v1_handoff_with_a_look_alike_key_and_metadata_is_no_humanlayer_call(
    api: str, handoffs: Handoffs
) -> None:
    agent = _client(api, handoffs, "mixed")
    body = {**_question("r"), "metadata": {"humanlayer": {"call": "not a call"}}}
    created = agent.post("/v1/handoffs", json=body, headers={"Idempotency-Key": "function-call:x"})
    assert created.status_code == 201

    assert agent.get(f"{HL}/function_calls/x").status_code == 404


def test_an_approval_edited_from_1_to_true_is_not_the_original_call(
    api: str, handoffs: Handoffs
) -> None:
    hl = _client(api, handoffs, "legacy")
    call = {"run_id": "r", "call_id": "c9", "spec": {"fn": "scale", "kwargs": {"x": 1}}}
    assert hl.post(f"{HL}/function_calls", json=call).status_code == 200
    [pending] = handoffs.list_pending().items
    handoffs.store.decide(pending.id, Status.APPROVED, decided_by="U0ANA", edited_args={"x": True})

    status = hl.get(f"{HL}/function_calls/c9").json()["status"]

    assert status["approved"] is False
    assert "other arguments" in status["comment"]


def test_a_key_revoked_while_its_long_poll_waits_is_not_told_the_decision(
    api: str, handoffs: Handoffs
) -> None:
    agent = _client(api, handoffs, "soon-gone")
    handoff_id = agent.post("/v1/handoffs", json=_question("r")).json()["id"]
    answers: list[httpx.Response] = []
    waiting = threading.Thread(
        target=lambda: answers.append(agent.get(f"/v1/handoffs/{handoff_id}?wait=20"))
    )
    waiting.start()
    time.sleep(0.5)

    ApiKeys(handoffs.redis, handoffs.store.keys).revoke("soon-gone")
    handoffs.store.decide(handoff_id, Status.ANSWERED, decided_by="U0ANA", answer="secret")
    waiting.join(timeout=25)

    assert answers[0].status_code == 401
    assert "secret" not in answers[0].text


def test_mcp_counts_non_ascii_text_as_the_api_does(api: str, handoffs: Handoffs) -> None:
    key = ApiKeys(handoffs.redis, handoffs.store.keys).create("host").key
    context = "日" * 20_000  # 60,000 bytes of UTF-8: under the 64 KiB limit

    result, _ = call_stdio(
        api, key, "ask_human", {"question": "?", "context": context, "timeout_seconds": 0.1}
    )

    assert not result.is_error, result.content
    assert handoffs.get(result.structured_content["id"]).context == context


def test_a_key_kept_to_one_channel_posts_there_when_the_request_names_none(
    api: str, handoffs: Handoffs
) -> None:
    # So that a permission prompt (which cannot name a channel) works with such a key.
    key = ApiKeys(handoffs.redis, handoffs.store.keys).create("ops", channels=["C0OPS"]).key

    agent = httpx.Client(base_url=api, headers={"Authorization": f"Bearer {key}"}, timeout=30)
    created = agent.post("/v1/handoffs", json=_question("r"))
    elsewhere = agent.post("/v1/handoffs", json={**_question("r2"), "channel": "C0OTHER"})

    assert created.status_code == 201 and created.json()["channel"] == "C0OPS"
    assert elsewhere.status_code == 403
