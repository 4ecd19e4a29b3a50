"""Handoffs: the agent API for creating, waiting for and deciding handoffs."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from redis import Redis

from store.exceptions import (
    AlreadyDecided,
    ConfigurationError,
    HandoffError,
    HandoffNotFound,
    IdempotencyConflict,
    InvalidHandoffRequest,
    InvalidResumeTarget,
    NotRetryable,
    PayloadTooLarge,
)
from store.models import (
    ApprovalPayload,
    CorrectionPayload,
    EscalationPayload,
    Handoff,
    QuestionPayload,
    RequestType,
    Status,
)
from store.settings import StoreSettings
from tests.conftest import ROOT
from tests.support.creating import CREATING_METHODS, creating_call
from tests.support.redis_state import snapshot
from worker.client import REQUEST_OPTIONS, Handoffs

UNKNOWN_ID = "ho_01JDZ3Q6T5N9W2V8K4M7R1X0BC"
RUN = {"run_id": "run-1", "thread_id": "t-1"}


@contextmanager
def writes_nothing(redis: Redis) -> Iterator[None]:
    """Assert that the block leaves every key of the database as it was."""
    size, keys, before = redis.dbsize(), set(redis.keys()), snapshot(redis)
    yield
    assert redis.dbsize() == size
    assert set(redis.keys()) == keys
    assert snapshot(redis) == before


def decide_later(action: Callable[[], Any], delay: float) -> tuple[threading.Thread, list[float]]:
    """Run ``action`` in a thread after ``delay`` s; the list receives when it returned."""
    returned_at: list[float] = []

    def run() -> None:
        time.sleep(delay)
        action()
        returned_at.append(time.monotonic())

    thread = threading.Thread(target=run)
    thread.start()
    return thread, returned_at


# -- creating -------------------------------------------------------------------------


def test_request_approval_stores_the_proposed_action(handoffs: Handoffs) -> None:
    handoff = handoffs.request_approval(
        **RUN,
        action="issue_refund",
        args={"amount": 30},
        args_schema={"type": "object"},
        description="Refund the double charge",
        context="Customer was double charged",
    )

    assert handoff.request_type is RequestType.APPROVAL
    assert isinstance(handoff.payload, ApprovalPayload)
    assert handoff.payload.action.name == "issue_refund"
    assert handoff.payload.action.args == {"amount": 30}
    assert handoff.payload.action.args_schema == {"type": "object"}
    assert handoff.payload.action.description == "Refund the double charge"
    assert handoff.context == "Customer was double charged"
    assert handoff.status is Status.PENDING
    assert handoffs.get(handoff.id) == handoff


def test_ask_stores_the_question_and_choices(handoffs: Handoffs) -> None:
    handoff = handoffs.ask(**RUN, question="Which plan?", choices=("basic", "pro"))

    assert handoff.request_type is RequestType.QUESTION
    assert handoff.payload == QuestionPayload(question="Which plan?", choices=["basic", "pro"])
    assert handoffs.get(handoff.id).payload == handoff.payload


def test_request_correction_stores_the_draft(handoffs: Handoffs) -> None:
    handoff = handoffs.request_correction(**RUN, draft="Dear cust", instructions="fix typos")

    assert handoff.request_type is RequestType.CORRECTION
    assert handoff.payload == CorrectionPayload(draft="Dear cust", instructions="fix typos")


def test_escalate_stores_the_summary(handoffs: Handoffs) -> None:
    handoff = handoffs.escalate(**RUN, summary="Customer threatens to sue")

    assert handoff.request_type is RequestType.ESCALATION
    assert handoff.payload == EscalationPayload(summary="Customer threatens to sue")


def test_request_options_are_stored_with_the_handoff(handoffs: Handoffs) -> None:
    handoff = handoffs.ask(
        **RUN,
        question="Which customer?",
        channel="C01",
        reviewers=["U01", "S01"],
        resume="tests.support.resume_targets:record",
        expires_in=timedelta(minutes=10),
        idempotency_key="key-1",
        requester="U09",
        agent_name="billing-bot",
        metadata={"ticket": 42},
    )

    stored = handoffs.get(handoff.id)
    assert stored.channel == "C01"
    assert stored.reviewers == ["U01", "S01"]
    assert stored.resume_target == "tests.support.resume_targets:record"
    assert stored.idempotency_key == "key-1"
    assert (stored.requester, stored.agent_name) == ("U09", "billing-bot")
    assert stored.metadata == {"ticket": 42}
    assert stored.expires_at is not None
    assert stored.expires_at - stored.created_at == timedelta(minutes=10)


def test_client_defaults_apply_when_the_request_gives_none(redis: Redis) -> None:
    handoffs = Handoffs(
        redis,
        default_channel="C0DEFAULT",
        default_reviewers=["U0LEAD"],
        default_expires_in=timedelta(seconds=90),
    )

    defaulted = handoffs.ask(**RUN, question="?")
    explicit = handoffs.ask(**RUN, question="?", channel="C02", reviewers=["U02"], expires_in=5)

    assert defaulted.channel == "C0DEFAULT"
    assert defaulted.reviewers == ["U0LEAD"]
    assert defaulted.expires_at is not None
    assert defaulted.expires_at - defaulted.created_at == timedelta(seconds=90)
    assert (explicit.channel, explicit.reviewers) == ("C02", ["U02"])
    assert explicit.expires_at is not None
    assert explicit.expires_at - explicit.created_at == timedelta(seconds=5)


def test_generic_request_accepts_the_type_as_a_string(handoffs: Handoffs) -> None:
    handoff = handoffs.request("escalation", {"kind": "escalation", "summary": "help"}, **RUN)

    assert handoff.request_type is RequestType.ESCALATION


def test_retry_with_the_same_idempotency_key_returns_the_first_handoff(
    redis: Redis, handoffs: Handoffs
) -> None:
    first = handoffs.ask(**RUN, question="?", idempotency_key="k1")

    with writes_nothing(redis):
        again = handoffs.ask(**RUN, question="?", idempotency_key="k1")
        with pytest.raises(IdempotencyConflict):
            handoffs.ask(run_id="run-2", thread_id="t-1", question="?", idempotency_key="k1")

    assert again.id == first.id


# -- refused requests write nothing ---------------------------------------------------


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda h: h.request("bogus", {"kind": "question", "question": "?"}, **RUN), "bogus"),
        (lambda h: h.ask(**RUN, question=""), "question"),
        (lambda h: h.request_approval(**RUN, action=""), "name"),
        (lambda h: h.request_correction(**RUN, draft=""), "draft"),
        (lambda h: h.escalate(**RUN, summary=""), "summary"),
        (lambda h: h.ask(run_id="", thread_id="t-1", question="?"), "run_id"),
        (lambda h: h.ask(run_id="r", thread_id="", question="?"), "thread_id"),
        (lambda h: h.request("approval", {"kind": "question", "question": "?"}, **RUN), "payload"),
        (lambda h: h.request("question", {"kind": "question"}, **RUN), "question"),
        (lambda h: h.request("question", {"question": "?", "x": 1}, **RUN), "payload"),
        (lambda h: h.ask(**RUN, question="?", expires_in=0), "expires_in"),
        (lambda h: h.ask(**RUN, question="?", expires_in=timedelta(seconds=-1)), "expires_in"),
        (lambda h: h.ask(**RUN, question="?", idempotency_key=""), "idempotency_key"),
    ],
)
def test_malformed_request_is_refused_and_writes_nothing(
    redis: Redis, handoffs: Handoffs, make: Callable[[Handoffs], Handoff], match: str
) -> None:
    handoffs.ask(**RUN, question="an unrelated handoff already stored")

    with writes_nothing(redis), pytest.raises(InvalidHandoffRequest, match=match) as caught:
        make(handoffs)

    assert type(caught.value) is InvalidHandoffRequest


BAD_ROUTING = {
    "mention-and-link": "S1> <!channel> <https://evil|x>",
    "a-name": "bob",
    "too-short": "C1",
    "lowercase": "u0alice",
    "escaped-mention": "<#C123>",
    "empty": "",
}
ROUTING_OPTIONS = [
    pytest.param(option, value, id=f"{option}-{name}")
    for option in ("reviewers", "escalate_to", "channel")
    for name, value in BAD_ROUTING.items()
    if (option, value) != ("channel", "")  # no channel: the client's default channel
]


@pytest.mark.parametrize("method", CREATING_METHODS)
@pytest.mark.parametrize(("option", "value"), ROUTING_OPTIONS)
def test_a_routing_option_that_is_no_slack_id_is_refused_saying_what_an_id_is(
    redis: Redis, handoffs: Handoffs, method: str, value: str, option: str
) -> None:
    handoffs.ask(**RUN, question="an unrelated handoff already stored")
    given = [value] if option == "reviewers" else value

    with writes_nothing(redis), pytest.raises(InvalidHandoffRequest) as caught:
        _creating_call(handoffs, method)(**{option: given})

    what = {
        "reviewers": "reviewers[0]: {!r} is not a Slack user id (U…/W…) or user-group id (S…)",
        "escalate_to": "escalate_to: {!r} is not a Slack channel id (C…/G…/D…) or user-group id",
        "channel": "channel: {!r} is not a Slack channel id (C…/G…/D…) or user id (U…/W…, "
        "for their DM with the bot), such as C0123ABCD or U0123ABCD",
    }[option]
    message = str(caught.value)
    assert message.startswith("invalid handoff request: " + what.format(value)), message
    assert "a capital letter, then 2 to 31 capitals or digits" in message
    assert "Value error" not in message


def test_a_default_reviewer_that_is_no_slack_id_is_refused_at_creation(redis: Redis) -> None:
    handoffs = Handoffs(redis, default_reviewers=["U0LEAD", "lead"])

    with (
        writes_nothing(redis),
        pytest.raises(InvalidHandoffRequest, match=r"reviewers\[1\]: 'lead'"),
    ):
        handoffs.ask(**RUN, question="?")


def test_payload_over_a_configured_limit_is_refused(redis: Redis) -> None:
    handoffs = Handoffs(redis, max_payload_bytes=200)

    accepted = handoffs.ask(**RUN, question="short", context="x" * 50)
    with writes_nothing(redis), pytest.raises(PayloadTooLarge) as caught:
        handoffs.ask(**RUN, question="short", context="x" * 300)
    with writes_nothing(redis), pytest.raises(PayloadTooLarge):
        handoffs.request_approval(**RUN, action="a", args={"blob": "y" * 300})

    assert accepted.is_pending
    assert caught.value.limit == 200
    assert caught.value.size > 300
    assert isinstance(caught.value, InvalidHandoffRequest)
    assert "HANDOFF_MAX_PAYLOAD_BYTES" in str(caught.value)


def test_default_limit_is_64_kb(redis: Redis, handoffs: Handoffs) -> None:
    accepted = handoffs.ask(**RUN, question="?", context="x" * 63_000)

    with writes_nothing(redis), pytest.raises(PayloadTooLarge) as caught:
        handoffs.ask(**RUN, question="?", context="x" * (64 * 1024))
    with writes_nothing(redis), pytest.raises(PayloadTooLarge):
        handoffs.request_approval(**RUN, action="a", args={"blob": "y" * 66_000})

    assert accepted.is_pending
    assert caught.value.limit == 64 * 1024


def test_payload_limit_counts_utf8_bytes_of_non_ascii_context(handoffs: Handoffs) -> None:
    # The limit is documented as "measured as UTF-8 JSON": 20,000 "é" are 40,002 bytes,
    # well under 64 KB, and must not be counted as 120,002 bytes of \u00e9 escapes.
    context = "é" * 20_000

    handoff = handoffs.ask(**RUN, question="?", context=context)

    assert handoffs.get(handoff.id).context == context


@pytest.mark.parametrize(
    "target",
    [
        "nocolon",
        ":f",
        "tests.support.resume_targets:",
        "no.such.module:f",
        "tests.support.resume_targets:missing",
        "tests.support.resume_targets:STARTED",
        "tests.support.resume_targets:not_callable_with_a_handoff",
    ],
)
def test_invalid_resume_target_is_refused_and_writes_nothing(
    redis: Redis, handoffs: Handoffs, target: str
) -> None:
    with writes_nothing(redis), pytest.raises(InvalidResumeTarget, match="resume target"):
        handoffs.ask(**RUN, question="?", resume=target)


@pytest.mark.parametrize(
    "call",
    [
        lambda h: h.get(UNKNOWN_ID),
        lambda h: h.decide(UNKNOWN_ID, "approved", by="U1"),
        lambda h: h.cancel(UNKNOWN_ID),
        lambda h: h.claim(UNKNOWN_ID, by="U1"),
        lambda h: h.wait(UNKNOWN_ID, timeout=0.1),
        lambda h: h.retry_resume(UNKNOWN_ID),
    ],
)
def test_unknown_id_raises_not_found_and_writes_nothing(
    redis: Redis, handoffs: Handoffs, call: Callable[[Handoffs], Any]
) -> None:
    handoffs.ask(**RUN, question="an unrelated handoff already stored")

    with writes_nothing(redis), pytest.raises(HandoffNotFound, match=UNKNOWN_ID):
        call(handoffs)


# -- deciding -------------------------------------------------------------------------


def test_decide_from_code_hands_the_answer_back(handoffs: Handoffs) -> None:
    handoff = handoffs.ask(**RUN, question="Which customer?")

    decided = handoffs.decide(handoff.id, "answered", by="U1", answer="ACME", comment="sure")

    assert decided.status is Status.ANSWERED
    assert decided.resume_data is not None
    assert (decided.resume_data.answer, decided.resume_data.comment) == ("ACME", "sure")
    assert decided.resume_data.decided_by == "U1"
    assert [e.event for e in handoffs.audit(handoff.id)] == ["created", "decided"]


@pytest.mark.parametrize("first", ["decide", "cancel"])
def test_deciding_a_handoff_that_is_no_longer_pending_is_refused(
    redis: Redis, handoffs: Handoffs, first: str
) -> None:
    handoff = handoffs.request_approval(**RUN, action="deploy")
    if first == "decide":
        handoffs.decide(handoff.id, Status.APPROVED, by="U1")
    else:
        handoffs.cancel(handoff.id, by="U1")

    with writes_nothing(redis), pytest.raises(AlreadyDecided) as caught:
        handoffs.decide(handoff.id, Status.REJECTED, by="U2")

    assert caught.value.decided_by == "U1"
    assert caught.value.status == ("approved" if first == "decide" else "cancelled")


def test_escalation_is_claimed_then_resolved_by_the_claimer(handoffs: Handoffs) -> None:
    handoff = handoffs.escalate(**RUN, summary="help")

    claimed = handoffs.claim(handoff.id, by="U1")
    resolved = handoffs.decide(handoff.id, "answered", by="U1", answer="handled")

    assert claimed.claimed_by == "U1"
    assert resolved.status is Status.ANSWERED


def test_cancel_without_resume_queues_no_resume(redis: Redis, handoffs: Handoffs) -> None:
    handoff = handoffs.ask(**RUN, question="?", resume="tests.support.resume_targets:record")

    cancelled = handoffs.cancel(handoff.id, reason="no longer needed", resume=False)

    assert cancelled.status is Status.CANCELLED
    assert cancelled.resume_data is not None
    assert cancelled.resume_data.comment == "no longer needed"
    outbox = [m.decode() for m in redis.zrange(handoffs.store.keys.outbox, 0, -1)]
    assert f"resume:{handoff.id}" not in outbox


def test_retry_resume_of_a_resume_that_did_not_fail_is_refused(
    redis: Redis, handoffs: Handoffs
) -> None:
    handoff = handoffs.ask(**RUN, question="?", resume="tests.support.resume_targets:record")
    handoffs.decide(handoff.id, "answered", by="U1", answer="x")

    with writes_nothing(redis), pytest.raises(NotRetryable):
        handoffs.retry_resume(handoff.id)


# -- waiting --------------------------------------------------------------------------


def test_wait_returns_within_100_ms_of_a_decision_made_in_another_thread(
    handoffs: Handoffs,
) -> None:
    handoff = handoffs.request_approval(**RUN, action="deploy")
    thread, decided_at = decide_later(
        lambda: handoffs.decide(handoff.id, "approved", by="U1"), delay=0.3
    )

    started = time.monotonic()
    result = handoffs.wait(handoff.id, timeout=10)
    returned = time.monotonic()
    thread.join()

    assert result.status is Status.APPROVED
    assert returned - started >= 0.25  # it really waited for the decision
    assert returned - decided_at[0] < 0.1


@pytest.mark.parametrize("close", ["cancel", "expire"])
def test_wait_also_returns_when_the_handoff_is_cancelled_or_expires(
    handoffs: Handoffs, close: str
) -> None:
    handoff = handoffs.ask(**RUN, question="?", expires_in=0.05 if close == "expire" else 60)
    if close == "cancel":
        action: Callable[[], Any] = lambda: handoffs.cancel(handoff.id)  # noqa: E731
    else:
        action = handoffs.store.expire_due
    thread, _ = decide_later(action, delay=0.15)

    result = handoffs.wait(handoff.id, timeout=10)
    thread.join()

    assert result.status is (Status.CANCELLED if close == "cancel" else Status.EXPIRED)


def test_wait_times_out_on_a_pending_handoff(handoffs: Handoffs) -> None:
    handoff = handoffs.ask(**RUN, question="?")

    started = time.monotonic()
    with pytest.raises(TimeoutError, match=handoff.id):
        handoffs.wait(handoff.id, timeout=0.3)
    elapsed = time.monotonic() - started

    assert 0.3 <= elapsed < 2
    assert handoffs.get(handoff.id).is_pending


def test_wait_on_a_decided_handoff_returns_at_once(handoffs: Handoffs) -> None:
    handoff = handoffs.ask(**RUN, question="?")
    handoffs.decide(handoff.id, "answered", by="U1", answer="yes")

    started = time.monotonic()
    result = handoffs.wait(handoff.id, timeout=5)

    assert time.monotonic() - started < 1  # not the 5 s timeout
    assert result.status is Status.ANSWERED


# -- listing --------------------------------------------------------------------------


def test_list_pending_filters_by_channel_run_reviewer_and_type(handoffs: Handoffs) -> None:
    a = handoffs.ask(run_id="r1", thread_id="t", question="?", channel="C01", reviewers=["U01"])
    b = handoffs.request_approval(run_id="r1", thread_id="t", action="x", channel="C02")
    c = handoffs.escalate(run_id="r2", thread_id="t", summary="s", reviewers=["U01", "U02"])
    handoffs.decide(c.id, "rejected", by="U3")
    d = handoffs.request_correction(run_id="r2", thread_id="t", draft="d", channel="C01")

    def ids(**filters: Any) -> list[str]:
        return [h.id for h in handoffs.list_pending(**filters).items]

    assert ids() == [a.id, b.id, d.id]
    assert ids(channel="C01") == [a.id, d.id]
    assert ids(channel="C02") == [b.id]
    assert ids(run_id="r1") == [a.id, b.id]
    assert ids(run_id="r2") == [d.id]
    assert ids(reviewer="U01") == [a.id]
    assert ids(reviewer="U02") == []
    assert ids(request_type="question") == [a.id]
    assert ids(request_type=RequestType.CORRECTION) == [d.id]
    assert ids(request_type="escalation") == []
    assert ids(channel="nobody") == []


def test_list_pending_refuses_two_filters_at_once(handoffs: Handoffs) -> None:
    with pytest.raises(ValueError, match="one of"):
        handoffs.list_pending(channel="C1", run_id="r1")


def test_list_pending_pages_with_a_cursor(handoffs: Handoffs) -> None:
    created = []
    for i in range(5):
        created.append(handoffs.ask(**RUN, question=f"q{i}", channel="C01").id)
        time.sleep(0.002)  # ids of different milliseconds sort by creation

    first = handoffs.list_pending(channel="C01", limit=3)
    second = handoffs.list_pending(channel="C01", limit=3, cursor=first.next_cursor)

    assert [h.id for h in first.items] + [h.id for h in second.items] == created
    assert second.next_cursor is None


# -- unknown options ------------------------------------------------------------------


def _creating_call(handoffs: Handoffs, method: str) -> Callable[..., Handoff]:
    """``method`` of ``handoffs`` with its required arguments bound; takes the options."""
    return creating_call(handoffs, method, RUN)


UNKNOWN_OPTIONS = [
    ({"reviewer": ["U1"]}, "argument 'reviewer' (did you mean 'reviewers'?);"),
    ({"totally_bogus": 5}, "argument 'totally_bogus';"),
    ({"reviewers": ["U01"], "chanel": "C01", "x": 1}, "arguments 'chanel', 'x' (did you mean"),
]


@pytest.mark.parametrize("method", CREATING_METHODS)
@pytest.mark.parametrize(("unknown", "named"), UNKNOWN_OPTIONS)
def test_an_unknown_option_is_a_type_error_naming_it_and_writes_nothing(
    redis: Redis, handoffs: Handoffs, method: str, unknown: dict[str, Any], named: str
) -> None:
    handoffs.ask(**RUN, question="an unrelated handoff already stored")
    create = _creating_call(handoffs, method)

    with writes_nothing(redis), pytest.raises(TypeError) as caught:
        create(**unknown)

    message = str(caught.value)
    assert message.startswith(f"Handoffs.{method}() got unexpected keyword {named}")
    accepted = message.split("; it accepts ")[1].split(", ")
    assert set(accepted) >= REQUEST_OPTIONS | {"run_id", "thread_id"}
    assert not (set(unknown) - REQUEST_OPTIONS) & set(accepted)
    # Without the unknown options the same call goes through.
    known = {name: value for name, value in unknown.items() if name in REQUEST_OPTIONS}
    assert create(**known).is_pending


def test_a_misspelt_reviewers_no_longer_opens_the_handoff_to_anyone(
    redis: Redis, handoffs: Handoffs
) -> None:
    with pytest.raises(TypeError, match="did you mean 'reviewers'"):
        handoffs.request_approval(**RUN, action="issue_refund", reviewer=["U1"])  # type: ignore[call-arg]

    assert handoffs.list_pending().items == []
    assert redis.dbsize() == 0


# -- configured from settings -----------------------------------------------------------


def test_from_settings_configures_the_store_as_the_settings_say(
    redis: Redis, redis_url: str
) -> None:
    settings = StoreSettings(redis_url=redis_url, namespace="tenant-4", max_payload_bytes=300)

    handoffs = Handoffs.from_settings(settings)
    handoff = handoffs.ask(**RUN, question="short")
    overridden = Handoffs.from_settings(settings, namespace="tenant-5")
    on_given_client = Handoffs.from_settings(
        settings.model_copy(update={"redis_url": None}), redis=redis
    )

    assert redis.exists(f"{{tenant-4}}:h:{handoff.id}")
    assert handoffs.store.config == settings.store_config()
    with writes_nothing(redis), pytest.raises(PayloadTooLarge, match="300-byte limit"):
        handoffs.ask(**RUN, question="long", context="x" * 400)
    assert overridden.store.keys.prefix == "{tenant-5}:"
    assert on_given_client.redis is redis
    assert on_given_client.store.config == settings.store_config()


def test_from_env_reads_the_environment(
    redis: Redis, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("HANDOFF_NAMESPACE", "tenant-6")

    handoff = Handoffs.from_env().ask(**RUN, question="?")

    assert redis.exists(f"{{tenant-6}}:h:{handoff.id}")


@pytest.mark.parametrize(
    ("url", "message"),
    [
        (None, "REDIS_URL is not set; point it at your Redis (e.g. redis://"),
        ("notaurl", "bad setting REDIS_URL: not a Redis URL; use redis://"),
    ],
)
def test_from_env_with_a_bad_or_missing_redis_url_says_what_to_set(
    monkeypatch: pytest.MonkeyPatch, url: str | None, message: str
) -> None:
    if url is None:
        monkeypatch.delenv("REDIS_URL", raising=False)
        monkeypatch.delenv("HANDOFF_REDIS_URL", raising=False)
    else:
        monkeypatch.setenv("REDIS_URL", url)

    with pytest.raises(ConfigurationError) as caught:
        Handoffs.from_env()

    assert isinstance(caught.value, HandoffError)
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)


def test_agent_code_configured_from_the_environment_imports_nothing_of_the_slack_app(
    redis_url: str,
) -> None:
    code = (
        "import sys\n"
        "import worker\n"
        "from worker import AsyncHandoffs, Handoffs, HandoffError\n"
        "assert Handoffs.from_env().redis.ping()\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('bot', 'handlers')))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "REDIS_URL": redis_url, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
