"""A click's handoff read in the request gate's replay round trip, and used by its listener."""

from __future__ import annotations

import io
import json
import time
from typing import Any
from urllib.parse import urlencode

import pytest
from redis import Redis
from slack_sdk import WebClient
from slack_sdk.signature import SignatureVerifier

from bot.access.reviewers import ReviewerPolicy
from bot.http.checks import Admitted, Rejection, RequestGate
from bot.http.prefetch import clicked_handoff_read
from bot.http.replay import Prefetched, ReplayGuard
from bot.keys import BotKeys
from handlers.decisions import Refusal, load_for
from handlers.deps import HandlerDeps
from store.models import Handoff, Status
from tests.support.fixtures import EVENTS, INTERACTIVITY, slack_fixture, slack_fixtures
from worker.client import Handoffs

SECRET = "prefetch-test-signing-secret"
REVIEWER = "U0REVIEWER"
BUTTON_CLICKS = sorted(
    name
    for name, payload in slack_fixtures(INTERACTIVITY).items()
    if payload["type"] == "block_actions" and payload["actions"][0]["type"] == "button"
)
"""The button clicks among the fixtures: on a message, in a thread, on the Home, on an
ephemeral reply."""
NOT_CLICKS = sorted(
    name
    for name, payload in slack_fixtures(INTERACTIVITY).items()
    if payload["type"] != "block_actions"
)


def _environ(payload: dict[str, Any], *, form: bool = True) -> dict[str, Any]:
    body = (urlencode({"payload": json.dumps(payload)}) if form else json.dumps(payload)).encode()
    timestamp = str(int(time.time()))
    signature = SignatureVerifier(SECRET).generate_signature(timestamp=timestamp, body=body)
    return {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": "/slack/events",
        "CONTENT_LENGTH": str(len(body)),
        "CONTENT_TYPE": "application/x-www-form-urlencoded" if form else "application/json",
        "wsgi.input": io.BytesIO(body),
        "HTTP_X_SLACK_REQUEST_TIMESTAMP": timestamp,
        "HTTP_X_SLACK_SIGNATURE": signature,
    }


def _click(value: str, example: str = "block_actions_message") -> dict[str, Any]:
    """The fixture click ``example`` (tests/fixtures/slack/), on a button whose value is
    ``value``."""
    click = slack_fixture(example)
    click["actions"][0]["value"] = value
    return click


def _gate(redis: Redis, handoffs: Handoffs) -> RequestGate:
    store = handoffs.store
    return RequestGate(
        SECRET, ReplayGuard(redis, BotKeys(store.keys)), read_for=clicked_handoff_read(store)
    )


def _read(handoffs: Handoffs, handoff_id: str) -> Prefetched:
    """What the gate reads for a click on ``handoff_id``, read now."""
    pipe = handoffs.redis.pipeline(transaction=False)
    handoffs.store.queue_read(pipe, handoff_id)
    return Prefetched(handoffs.store.keys.handoff(handoff_id), pipe.execute()[0])


def _approval(handoffs: Handoffs) -> Handoff:
    return handoffs.request_approval(
        run_id="run-1", thread_id="t-1", action="refund", channel="C01", reviewers=[REVIEWER]
    )


@pytest.mark.parametrize("example", BUTTON_CLICKS)
def test_a_click_on_a_handoff_button_comes_with_its_handoff_read(
    redis: Redis, handoffs: Handoffs, example: str
) -> None:
    handoff = _approval(handoffs)
    environ = _environ(_click(handoff.id, example))

    admitted = _gate(redis, handoffs).admit(environ)

    assert isinstance(admitted, Admitted) and admitted.prefetched is not None
    assert admitted.prefetched.key == handoffs.store.keys.handoff(handoff.id)
    assert handoffs.store.from_document(handoff.id, admitted.prefetched.reply) == handoff


def test_a_click_is_admitted_without_a_read_when_the_server_lost_the_scripts(
    redis: Redis, handoffs: Handoffs
) -> None:
    first, second = _approval(handoffs), _approval(handoffs)
    gate = _gate(redis, handoffs)
    before = gate.admit(_environ(_click(first.id)))
    redis.script_flush()  # as after a restart of a server that keeps nothing
    environ = _environ(_click(second.id))
    replay = dict(environ, **{"wsgi.input": io.BytesIO(environ["wsgi.input"].getvalue())})

    admitted = gate.admit(environ)

    assert isinstance(before, Admitted) and before.prefetched is not None
    assert isinstance(admitted, Admitted) and admitted.prefetched is None
    # The replay check still counted; the listener reads for itself, loading the scripts.
    assert gate.admit(replay) == Rejection("401 Unauthorized", "invalid request")
    assert handoffs.get(second.id) == second


def test_a_click_on_an_unknown_handoff_reads_as_not_found(redis: Redis, handoffs: Handoffs) -> None:
    unknown = "ho_01JDZ3Q6T5N9W2V8K4M7R1X0BC"
    admitted = _gate(redis, handoffs).admit(_environ(_click(unknown)))

    assert isinstance(admitted, Admitted) and admitted.prefetched is not None
    loaded = load_for(
        _deps(redis, handoffs),
        unknown,
        REVIEWER,
        via="button",
        channel="C01",
        prefetched=admitted.prefetched,
    )
    assert isinstance(loaded, Refusal)


def test_a_replayed_click_is_still_refused_when_its_handoff_is_read_along(
    redis: Redis, handoffs: Handoffs
) -> None:
    handoff = _approval(handoffs)
    environ = _environ(_click(handoff.id))
    replay = dict(environ, **{"wsgi.input": io.BytesIO(environ["wsgi.input"].getvalue())})
    gate = _gate(redis, handoffs)

    assert isinstance(gate.admit(environ), Admitted)
    refused = gate.admit(replay)

    assert refused == Rejection("401 Unauthorized", "invalid request")


def test_nothing_is_read_for_requests_that_name_no_handoff(
    redis: Redis, handoffs: Handoffs
) -> None:
    gate = _gate(redis, handoffs)
    not_an_id = gate.admit(_environ(_click("ho_not-an-id")))
    no_value = _click("")
    del no_value["actions"][0]["value"]
    event = gate.admit(_environ(slack_fixture("event_app_home_opened"), form=False))

    for admitted in (not_an_id, gate.admit(_environ(no_value)), event):
        assert isinstance(admitted, Admitted) and admitted.prefetched is None


def test_nothing_is_read_for_submissions_closed_modals_and_events(
    redis: Redis, handoffs: Handoffs
) -> None:
    gate = _gate(redis, handoffs)
    sent = [(name, slack_fixture(name), True) for name in NOT_CLICKS]
    sent += [(name, payload, False) for name, payload in slack_fixtures(EVENTS).items()]

    assert {"view_submission", "view_closed", "event_thread_reply"} <= {n for n, _, _ in sent}
    for name, payload, form in sent:
        admitted = gate.admit(_environ(payload, form=form))

        assert isinstance(admitted, Admitted) and admitted.prefetched is None, name


def _deps(redis: Redis, handoffs: Handoffs) -> HandlerDeps:
    # The reviewer is a user id, so the policy never calls Slack.
    client = WebClient(token="xoxb-unused", base_url="http://127.0.0.1:9/api/")
    return HandlerDeps(
        store=handoffs.store,
        reviewers=ReviewerPolicy(client, redis, handoffs.store.keys),
    )


def test_the_listener_uses_the_gates_read_instead_of_reading_again(
    redis: Redis, handoffs: Handoffs
) -> None:
    handoff = _approval(handoffs)
    read_at_the_gate = _read(handoffs, handoff.id)
    handoffs.decide(handoff.id, "rejected", by="U0OTHER")  # after the gate's read
    deps = _deps(redis, handoffs)

    used = load_for(
        deps, handoff.id, REVIEWER, via="button", channel="C01", prefetched=read_at_the_gate
    )
    read_again = load_for(deps, handoff.id, REVIEWER, via="button", channel="C01")

    # The listener acts on what the gate read; the store's decide script, not this read,
    # is what keeps a second decision out (tests/test_repository.py).
    assert isinstance(used, Handoff) and used.status is Status.PENDING
    assert isinstance(read_again, Refusal) and "U0OTHER" in read_again.message


def test_a_read_of_another_handoff_is_ignored(redis: Redis, handoffs: Handoffs) -> None:
    first, second = _approval(handoffs), _approval(handoffs)
    handoffs.decide(second.id, "rejected", by="U0OTHER")

    loaded = load_for(
        _deps(redis, handoffs),
        second.id,
        REVIEWER,
        via="button",
        channel="C01",
        prefetched=_read(handoffs, first.id),
    )

    assert isinstance(loaded, Refusal) and "U0OTHER" in loaded.message
