"""Each MCP tool's whole loop through Slack (the stand-in): an agent host calls the tool (over
stdio through `handoff mcp`, or over Streamable HTTP at `/mcp`), a real worker posts the
handoff, a person clicks, submits a modal or answers in the thread, and the call returns what
they decided."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from redis import Redis

from bot.api.app import ApiConfig
from bot.blockkit import ids
from store.api_keys import ApiKeys
from tests.support.api_server import serve_api
from tests.support.mcp_hosts import HTTP_RUN, STDIO_RUN, call_http, call_stdio
from tests.support.slack_env import ALICE, BOB, CHANNEL, SlackEnv, running_slack, wait_for

Person = Callable[[SlackEnv, str], None]
"""What a person does in Slack with the posted handoff of the given id."""


@pytest.fixture
def slack(redis: Redis, redis_url: str, tmp_path: Path) -> Iterator[SlackEnv]:
    yield from running_slack(redis, redis_url, tmp_path)


def _with_a_person(
    slack: SlackEnv,
    redis_url: str,
    person: Person,
    call: Callable[..., tuple[Any, list]],
    tool: str,
    arguments: dict[str, Any],
) -> tuple[Any, list]:
    """Call ``tool`` as a host would while ``person`` acts on the handoff once it is posted."""
    run_id = STDIO_RUN if call is call_stdio else HTTP_RUN
    key = ApiKeys(slack.redis, slack.handoffs.store.keys).create("host").key
    failures: list[BaseException] = []

    def act() -> None:
        try:
            deadline = time.monotonic() + 30
            while not (pending := slack.handoffs.list_pending(run_id=run_id).items):
                assert time.monotonic() < deadline, "the tool made no handoff"
                time.sleep(0.05)
            slack.posted(pending[0].id)
            person(slack, pending[0].id)
        except BaseException as exc:  # reported by the test, not lost in the thread
            failures.append(exc)

    with serve_api(slack.handoffs.store, ApiConfig(redis_url=redis_url)) as url:
        acting = threading.Thread(target=act, daemon=True)
        acting.start()
        answer = call(url, key, tool, arguments)
        acting.join(timeout=30)
    if failures:
        raise failures[0]
    return answer


def _click(button: str, user: str = ALICE) -> Person:
    def person(slack: SlackEnv, handoff_id: str) -> None:
        slack.standin.click(user, slack.posted(handoff_id), button)

    return person


def _modal(button: str, values: dict[str, Any], user: str = ALICE) -> Person:
    """Click ``button``, then submit the modal it opens with ``values``."""

    def person(slack: SlackEnv, handoff_id: str) -> None:
        slack.standin.click(user, slack.posted(handoff_id), button)
        [modal] = slack.standin.views(user)
        assert slack.standin.submit_view(user, modal, values).status == 200

    return person


def _result(answer: tuple[Any, list]) -> dict[str, Any]:
    result, progress = answer
    assert not result.is_error, result.content
    # The host heard progress while the person decided (so it did not time the call out).
    assert progress and "waiting for a person" in progress[0][2]
    return dict(result.structured_content)


def test_request_approval_is_approved_by_a_click(slack: SlackEnv, redis_url: str) -> None:
    arguments = {"action": "restart", "args": {"service": "api"}, "channel": CHANNEL}

    result = _result(
        _with_a_person(slack, redis_url, _click(ids.APPROVE), call_stdio, "request_approval",
                       {**arguments, "reviewers": [ALICE]})
    )  # fmt: skip

    assert (result["status"], result["decided_by"]) == ("approved", ALICE)


def test_request_approval_is_rejected_with_a_reason_over_http(
    slack: SlackEnv, redis_url: str
) -> None:
    reject = _modal(ids.REJECT, {ids.REASON_BLOCK: {ids.VALUE: "Not during the freeze"}})

    result = _result(
        _with_a_person(slack, redis_url, reject, call_http, "request_approval",
                       {"action": "deploy", "args": {"version": "2.1"}})
    )  # fmt: skip

    assert result["status"] == "rejected"
    assert result["comment"] == "Not during the freeze"


def test_ask_human_is_answered_in_the_thread(slack: SlackEnv, redis_url: str) -> None:
    def reply(slack: SlackEnv, handoff_id: str) -> None:
        message = slack.posted(handoff_id)
        slack.standin.post_message(BOB, CHANNEL, "eu-west-1", thread_ts=message.ts)

    result = _result(
        _with_a_person(slack, redis_url, reply, call_stdio, "ask_human",
                       {"question": "Which region?"})
    )  # fmt: skip

    assert (result["status"], result["answer"], result["decided_by"]) == (
        "answered",
        "eu-west-1",
        BOB,
    )


def test_ask_human_is_answered_in_a_modal_over_http(slack: SlackEnv, redis_url: str) -> None:
    answer = _modal(ids.ANSWER, {ids.ANSWER_BLOCK: {ids.VALUE: "Dana first"}}, user=BOB)

    result = _result(
        _with_a_person(slack, redis_url, answer, call_http, "ask_human",
                       {"question": "Which customer first?"})
    )  # fmt: skip

    assert (result["status"], result["answer"]) == ("answered", "Dana first")


def test_request_correction_returns_the_corrected_draft(slack: SlackEnv, redis_url: str) -> None:
    fixed = "Dear customer, we refunded you."
    correct = _modal(ids.CORRECT, {f"{ids.DRAFT_BLOCK_PREFIX}0": {ids.VALUE: fixed}})

    result = _result(
        _with_a_person(slack, redis_url, correct, call_http, "request_correction",
                       {"draft": "Dear custmer, we refunded you.", "instructions": "Fix typos"})
    )  # fmt: skip

    assert result["corrected_draft"] == fixed
    assert result["decided_by"] == ALICE


def test_escalate_is_claimed_then_resolved(slack: SlackEnv, redis_url: str) -> None:
    def operator(slack: SlackEnv, handoff_id: str) -> None:
        slack.standin.click(ALICE, slack.posted(handoff_id), ids.CLAIM)
        claimed = wait_for(
            lambda: (m := slack.posted(handoff_id)) and ids.RESOLVE in json.dumps(m.blocks) and m
        )
        slack.standin.click(ALICE, claimed, ids.RESOLVE)
        [modal] = slack.standin.views(ALICE)
        resolution = {ids.RESOLUTION_BLOCK: {ids.VALUE: "Called them; settled."}}
        assert slack.standin.submit_view(ALICE, modal, resolution).status == 200

    result = _result(
        _with_a_person(slack, redis_url, operator, call_stdio, "escalate",
                       {"summary": "Customer threatens legal action"})
    )  # fmt: skip

    assert (result["status"], result["answer"]) == ("answered", "Called them; settled.")


def _permission(answer: tuple[Any, list]) -> dict[str, Any]:
    result, _ = answer
    assert not result.is_error and len(result.content) == 1
    return dict(json.loads(result.content[0].text))


def test_permission_prompt_allows_with_the_input_edited_in_slack(
    slack: SlackEnv, redis_url: str
) -> None:
    edit = _modal(ids.EDIT, {ids.arg_block_id("command"): {ids.VALUE: "make deploy-staging"}})

    answer = _permission(
        _with_a_person(slack, redis_url, edit, call_stdio, "permission_prompt",
                       {"tool_name": "Bash", "input": {"command": "make deploy"},
                        "tool_use_id": "toolu_01"})
    )  # fmt: skip

    assert answer == {"behavior": "allow", "updatedInput": {"command": "make deploy-staging"}}


def test_permission_prompt_denies_with_the_reason_given_in_slack(
    slack: SlackEnv, redis_url: str
) -> None:
    reject = _modal(ids.REJECT, {ids.REASON_BLOCK: {ids.VALUE: "Use the staging target"}})

    answer = _permission(
        _with_a_person(slack, redis_url, reject, call_http, "permission_prompt",
                       {"tool_name": "Bash", "input": {"command": "make deploy"}})
    )  # fmt: skip

    assert answer == {"behavior": "deny", "message": "rejected: Use the staging target"}
