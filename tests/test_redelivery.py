"""Redelivery: an ``undeliverable`` handoff asked again as a new pending handoff of the same
request (``HandoffStore.redeliver``, ``handoff redeliver``, the ``/handoff redeliver``
grammar), linked both ways, once however often it is asked for, and only for an
undeliverable handoff. Through real workers and the Slack stand-in:
``tests/test_undeliverable_e2e.py``."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from click.testing import CliRunner, Result
from redis import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from bot.cli import main
from bot.cli.exit_codes import ExitCode
from handlers.commands.grammar import Command, UsageError, parse_command
from store import scripts
from store.exceptions import HandoffNotFound, InvalidHandoffRequest, NotRetryable
from store.ids import new_handoff_id
from store.models import HandoffRequest, RequestType, Status, TaskKind, TaskState
from store.policies import parse_policy
from store.repository import HandoffStore, StoreConfig, TaskPolicy, redelivery_key
from store.settings import StoreSettings
from tests.support.redis_proxy import LosingProxy
from tests.support.redis_state import snapshot

RESUME_TARGET = "tests.support.resume_targets:record"
UNKNOWN_ID = "ho_01JDZ3Q6T5N9W2V8K4M7R1X0BC"
ADMIN = "U0ADMIN001"
ARCHIVED = "Slack refused the message to C0ARCHIVED: is_archived (the channel is archived)"

Run = Callable[..., Result]


@pytest.fixture
def store(redis: Redis, fast_tasks: TaskPolicy) -> HandoffStore:
    return HandoffStore(redis, StoreConfig(tasks=fast_tasks))


def _request(**fields: Any) -> HandoffRequest:
    return HandoffRequest.model_validate(
        {
            "run_id": "run-1",
            "thread_id": "t-1",
            "request_type": RequestType.APPROVAL,
            "payload": {"kind": "approval", "action": {"name": "refund", "args": {"n": 30.25}}},
            "context": "Customer was charged twice.",
            "channel": "C0ARCHIVED",
            "reviewers": ["U0ALICE001", "S0FINANCE1"],
            "requester": "refund-bot",
            "agent_name": "refunds",
            "resume_target": RESUME_TARGET,
            "idempotency_key": "agent-key-1",
            "expires_in_seconds": 3600,
            "remind_after_seconds": 600,
            "metadata": {"order": "A-1001", "nested": {"x": [1, None]}},
            **fields,
        }
    )


def _undeliverable(store: HandoffStore, *, tasks: TaskPolicy | None = None, **fields: Any) -> str:
    """A handoff whose first post Slack refused for good: closed, its run resumed."""
    handoff_id = store.create(
        _request(**fields), handoff_id=new_handoff_id(), tasks=tasks
    ).handoff.id
    start = store.begin_task(handoff_id, TaskKind.DELIVER, run_token="job-1")
    assert start.action == "run"
    verdict = store.finish_task(
        handoff_id, TaskKind.DELIVER, attempt=1, error=ARCHIVED, permanent=True
    )
    assert verdict == "undeliverable"
    return handoff_id


def _outbox(redis: Redis, store: HandoffStore) -> list[str]:
    return [m.decode() for m in redis.zrange(store.keys.outbox, 0, -1)]


def _handoff_keys(redis: Redis, store: HandoffStore) -> list[bytes]:
    return list(redis.scan_iter(match=store.keys.handoff("*")))


def _events(store: HandoffStore, handoff_id: str) -> list[str]:
    return [e.event for e in store.audit_trail(handoff_id)]


# -- the store ------------------------------------------------------------------------------


def test_an_undeliverable_handoff_is_redelivered_as_a_new_pending_handoff_of_the_same_request(
    redis: Redis, store: HandoffStore
) -> None:
    old_id = _undeliverable(store)
    old = store.get(old_id)
    old_trail = store.audit_trail(old_id)

    made = store.redeliver(old_id, by=ADMIN, channel="C0WORKING1")

    new = made.handoff
    assert made.created and new.id != old_id
    assert new.status is Status.PENDING
    assert new.redelivered_from == old_id and old.redelivered_from is None
    assert new.channel == "C0WORKING1"
    same = ["run_id", "thread_id", "request_type", "payload", "context", "reviewers"]
    same += ["requester", "agent_name", "resume_target", "metadata", "api_key", "callback"]
    assert {f: getattr(new, f) for f in same} == {f: getattr(old, f) for f in same}
    assert new.idempotency_key == redelivery_key(old_id)
    assert new.expires_at is not None and new.expires_at > old.created_at
    assert new.delivery.state is TaskState.QUEUED and new.resume.state is TaskState.NONE
    assert f"deliver:{new.id}" in _outbox(redis, store)
    assert f"remind:{new.id}" in _outbox(redis, store)  # the request's own settings kept
    pending = [h.id for h in store.list_pending(store.keys.pending_by_run("run-1")).items]
    assert pending == [new.id]
    assert redis.zscore(store.keys.pending_by_channel("C0WORKING1"), new.id) is not None
    # The old one is closed as it was: its decision, its one resume, its trail plus the link.
    after = store.get(old_id)
    assert after.model_dump(exclude={"version"}) == old.model_dump(exclude={"version"})
    assert after.status is Status.UNDELIVERABLE and after.resume.state is TaskState.QUEUED
    assert _outbox(redis, store).count(f"resume:{old_id}") == 1
    trail = store.audit_trail(old_id)
    assert trail[:-1] == old_trail
    assert (trail[-1].event, trail[-1].actor) == ("redelivered", ADMIN)
    assert trail[-1].detail == {"handoff_id": new.id, "channel": "C0WORKING1"}
    [created] = store.audit_trail(new.id)
    assert (created.event, created.actor) == ("created", ADMIN)
    # The agent's own idempotency key still names the old handoff.
    assert store.created_under("agent-key-1") == old_id


def test_redelivering_a_handoff_twice_gives_one_new_handoff(
    redis: Redis, store: HandoffStore
) -> None:
    old_id = _undeliverable(store)

    first = store.redeliver(old_id, by=ADMIN, channel="C0WORKING1")
    second = store.redeliver(old_id, by="U0ADMIN002", channel="C0WORKING2")

    assert first.created and not second.created
    assert second.handoff.id == first.handoff.id
    assert second.handoff.channel == "C0WORKING1"  # the first redelivery's
    assert len(_handoff_keys(redis, store)) == 2
    assert _events(store, old_id).count("redelivered") == 1
    assert _outbox(redis, store).count(f"deliver:{first.handoff.id}") == 1


def test_without_a_channel_the_new_handoff_goes_where_the_old_one_was_routed(
    store: HandoffStore,
) -> None:
    handoff_id = store.create(_request(), handoff_id=new_handoff_id()).handoff.id
    # Moved before its first post, which Slack then refused in the new channel as well.
    store.reassign(handoff_id, by=ADMIN, channel="C0MOVED001", reviewers=["U0BEN0001"])
    assert store.begin_task(handoff_id, TaskKind.DELIVER, run_token="job-1").action == "run"
    store.finish_task(handoff_id, TaskKind.DELIVER, attempt=1, error=ARCHIVED, permanent=True)
    assert store.get(handoff_id).status is Status.UNDELIVERABLE

    new = store.redeliver(handoff_id, by=ADMIN).handoff

    assert (new.channel, new.reviewers) == ("C0MOVED001", ["U0BEN0001"])


def test_a_redelivery_keeps_the_task_settings_stamped_on_the_old_handoff(
    redis: Redis, fast_tasks: TaskPolicy
) -> None:
    agent = HandoffStore(redis, StoreConfig(tasks=fast_tasks))
    stamped = TaskPolicy(delivery_max_attempts=3, resume_max_attempts=4, backoff_seconds=0.01)
    old_id = _undeliverable(agent, tasks=stamped)
    admin = HandoffStore(redis, StoreConfig(tasks=TaskPolicy(delivery_max_attempts=8)))

    new = admin.redeliver(old_id, by=ADMIN).handoff

    assert new.delivery.max_attempts == 3
    (policy,) = admin.stored_fields(new.id, "policy")
    assert json.loads(policy or b"{}") == json.loads(
        admin.stored_fields(old_id, "policy")[0] or b"{}"
    )
    assert json.loads(policy or b"{}")["resume_max"] == 4


def test_a_redelivery_is_not_routed_again_by_the_routing_policy(
    redis: Redis, fast_tasks: TaskPolicy
) -> None:
    # The rule routed the old request when it was created; the admin's channel then wins.
    policy = parse_policy(
        "rules:\n  - name: refunds\n    match: {action: refund}\n    set: {channel: C0FINANCE1}\n",
        source="policy.yaml",
    )
    store = HandoffStore(redis, StoreConfig(tasks=fast_tasks, policy=policy))
    old_id = _undeliverable(store)
    assert store.get(old_id).channel == "C0FINANCE1"

    moved = store.redeliver(old_id, by=ADMIN, channel="C0WORKING1").handoff

    assert moved.channel == "C0WORKING1"
    assert _events(store, moved.id) == ["created"]
    again_id = _undeliverable(store, idempotency_key="agent-key-2")
    assert store.redeliver(again_id, by=ADMIN).handoff.channel == "C0FINANCE1"


@pytest.mark.parametrize("state", ["pending", "approved", "cancelled"])
def test_only_an_undeliverable_handoff_is_redelivered(
    redis: Redis, store: HandoffStore, state: str
) -> None:
    handoff = store.create(_request(), handoff_id=new_handoff_id()).handoff
    if state == "approved":
        store.decide(handoff.id, Status.APPROVED, decided_by="U0ALICE001")
    elif state == "cancelled":
        store.cancel(handoff.id, cancelled_by=ADMIN)
    before = snapshot(redis)

    with pytest.raises(NotRetryable, match=rf"is {state}, not undeliverable"):
        store.redeliver(handoff.id, by=ADMIN, channel="C0WORKING1")

    assert snapshot(redis) == before


def test_redelivering_an_unknown_handoff_is_not_found_and_writes_nothing(
    redis: Redis, store: HandoffStore
) -> None:
    with pytest.raises(HandoffNotFound):
        store.redeliver(UNKNOWN_ID, by=ADMIN)
    assert redis.dbsize() == 0


def test_a_redelivery_to_something_that_is_not_a_conversation_is_refused(
    redis: Redis, store: HandoffStore
) -> None:
    old_id = _undeliverable(store)
    before = snapshot(redis)

    with pytest.raises(InvalidHandoffRequest, match="channel"):
        store.redeliver(old_id, by=ADMIN, channel="#general")

    assert snapshot(redis) == before


def test_a_redelivery_cut_off_before_its_link_is_finished_by_asking_again(
    redis: Redis, store: HandoffStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    old_id = _undeliverable(store)
    link = store._scripts["LINK_REDELIVERY"]

    def cut_off(**_: Any) -> None:
        raise RedisConnectionError("the process died here")

    monkeypatch.setitem(store._scripts, "LINK_REDELIVERY", cut_off)
    with pytest.raises(RedisConnectionError):
        store.redeliver(old_id, by=ADMIN, channel="C0WORKING1")
    monkeypatch.setitem(store._scripts, "LINK_REDELIVERY", link)

    again = store.redeliver(old_id, by=ADMIN)

    assert not again.created
    assert again.handoff.redelivered_from == old_id
    assert again.handoff.channel == "C0WORKING1"
    assert _events(store, old_id).count("redelivered") == 1
    assert len(_handoff_keys(redis, store)) == 2


@pytest.fixture
def proxy(redis: Redis, redis_url: str) -> Iterator[LosingProxy]:
    with LosingProxy(redis_url) as running:
        yield running


@pytest.mark.parametrize("script", ["CREATE", "LINK_REDELIVERY"])
def test_a_redelivery_whose_reply_was_lost_makes_one_linked_handoff(
    redis: Redis, proxy: LosingProxy, fast_tasks: TaskPolicy, script: str
) -> None:
    settings = StoreSettings(redis_url=proxy.url)
    store = HandoffStore(
        settings.open_redis(),
        StoreConfig(namespace=settings.store_config().namespace, tasks=fast_tasks),
    )
    old_id = _undeliverable(store)
    proxy.lose_reply(script=getattr(scripts, script))

    made = store.redeliver(old_id, by=ADMIN, channel="C0WORKING1")

    assert proxy.lost
    assert made.created and made.handoff.redelivered_from == old_id
    assert len(_handoff_keys(redis, store)) == 2
    assert _events(store, old_id).count("redelivered") == 1
    assert _events(store, made.handoff.id) == ["created"]


# -- the CLI --------------------------------------------------------------------------------


@pytest.fixture
def run(redis_url: str) -> Run:
    def invoke(*args: str) -> Result:
        return CliRunner().invoke(main, list(args), env={"REDIS_URL": redis_url})

    return invoke


def test_handoff_redeliver_prints_the_new_handoff_once(store: HandoffStore, run: Run) -> None:
    old_id = _undeliverable(store)

    first = run("redeliver", old_id, "--channel", "C0WORKING1", "--by", ADMIN)
    again = run("redeliver", old_id, "--json")

    assert first.exit_code == 0, first.output
    [new] = [h for h in store.list_pending().items]
    assert first.stdout.strip() == (
        f"{old_id} is redelivered as {new.id}; a worker posts it in C0WORKING1"
    )
    assert again.exit_code == 0, again.output
    printed = json.loads(again.stdout)
    assert (printed["id"], printed["created"]) == (new.id, False)
    assert (printed["redelivered_from"], printed["status"]) == (old_id, "pending")
    assert "redelivered already" in run("redeliver", old_id).stdout
    assert store.audit_trail(old_id)[-1].actor == ADMIN


def test_handoff_redeliver_exit_codes(redis: Redis, store: HandoffStore, run: Run) -> None:
    pending = store.create(_request(), handoff_id=new_handoff_id()).handoff
    old_id = _undeliverable(store, idempotency_key="agent-key-2")
    before = snapshot(redis)

    unknown = run("redeliver", UNKNOWN_ID)
    not_undeliverable = run("redeliver", pending.id)
    bad_id = run("redeliver", "not-a-handoff")
    bad_channel = run("redeliver", old_id, "--channel", "#ops")

    assert unknown.exit_code == ExitCode.NOT_FOUND, unknown.output
    assert not_undeliverable.exit_code == ExitCode.CONFLICT, not_undeliverable.output
    assert "pending, not undeliverable" in not_undeliverable.output
    assert bad_id.exit_code == ExitCode.USAGE and "not a handoff id" in bad_id.output
    assert bad_channel.exit_code == ExitCode.USAGE and "--channel" in bad_channel.output
    assert snapshot(redis) == before


def test_handoff_reassign_and_retry_of_an_undeliverable_handoff_point_at_redeliver(
    store: HandoffStore, run: Run
) -> None:
    old_id = _undeliverable(store)

    reassign = run("reassign", old_id, "--channel", "C0WORKING1")
    retry = run("retry", old_id)

    assert reassign.exit_code == ExitCode.CONFLICT
    assert f"handoff redeliver {old_id}" in reassign.output
    assert retry.exit_code == ExitCode.CONFLICT and "redeliver" in retry.output
    assert store.get(old_id).status is Status.UNDELIVERABLE


# -- the slash command's grammar ------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "channel"),
    [
        (f"redeliver {UNKNOWN_ID}", None),
        (f"redeliver {UNKNOWN_ID} C0OTHER001", "C0OTHER001"),
        (f"redeliver {UNKNOWN_ID} <#C0OTHER001|ops>", "C0OTHER001"),
        (f"redeliver {UNKNOWN_ID} <@U0BEN0001>", "U0BEN0001"),
    ],
)
def test_redeliver_takes_a_handoff_id_and_where_to(text: str, channel: str | None) -> None:
    assert parse_command(text) == Command("redeliver", handoff_id=UNKNOWN_ID, channel=channel)


@pytest.mark.parametrize(
    "text", [f"redeliver {UNKNOWN_ID} #ops", f"redeliver {UNKNOWN_ID} C0A001 C0B001", "redeliver"]
)
def test_redeliver_refuses_what_is_not_one_destination(text: str) -> None:
    with pytest.raises(UsageError):
        parse_command(text)
