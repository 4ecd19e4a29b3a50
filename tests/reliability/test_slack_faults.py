"""Slack faults: the stand-in fails 30% of the bot's Web API calls (429 with Retry-After,
500s, timeouts whose call is carried out late, connection resets before and after the call
is made) while 60 handoffs (400 with --soak) are posted, decided by signed clicks and modal
submissions, updated and resumed through real `handoff serve` and `handoff worker` processes.

Promise under test: every message is posted and then updated to show its outcome without
buttons; at no point does a handoff have two messages with live buttons (a post whose
answer was lost is looked for before it is posted again, and extra copies are
neutralised); every run is resumed exactly once; the bot never answers a person with a
5xx. ``--soak`` drives 400 handoffs. Set RELIABILITY_SEED to replay a run's fault draws.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from redis import Redis

from bot.blockkit import ids as block_ids
from bot.delivery.slack_notifier import DUPLICATE_EVENT_TYPE, METADATA_EVENT_TYPE, RECORD_EVENT_TYPE
from bot.standin import Message
from handlers.decisions import STILL_POSTING
from store.models import Status, TaskState
from tests.conftest import wait_until
from tests.support import resume_targets
from tests.support.policies import task_policy
from tests.support.slack_env import ALICE, BOB, CAROL, CHANNEL, SlackEnv, running_slack
from worker.client import Handoffs

HANDOFFS = 60
SOAK_HANDOFFS = 400
FAULT_RATE = 0.3
CLIENT_TIMEOUT_SECONDS = 1
LATE_ANSWER_SECONDS = 1.5
"""A 'timeout' answer comes this late: after the bot gave up, and the call is carried out."""
WORKERS = 6
REJECT_EVERY = 5
"""One handoff in five is rejected through the modal (views.open is faulted too)."""
POLICY = task_policy(
    attempts=20, resume_attempts=10, timeout=30, backoff=(0.2, 1.0), lease_grace=1.0
)
"""Attempts enough that 30% faults never exhaust them; short backoff to keep the run short."""


@pytest.fixture
def slack(redis: Redis, redis_url: str, tmp_path: Path) -> Iterator[SlackEnv]:
    yield from _running(redis, redis_url, tmp_path, workers=WORKERS)


@pytest.fixture
def one_worker(redis: Redis, redis_url: str, tmp_path: Path) -> Iterator[SlackEnv]:
    """The same setup with one worker, for single-handoff scenarios."""
    yield from _running(redis, redis_url, tmp_path, workers=1)


def _running(redis: Redis, redis_url: str, log_dir: Path, *, workers: int) -> Iterator[SlackEnv]:
    yield from running_slack(
        redis,
        redis_url,
        log_dir,
        workers=workers,
        extra_env={"HANDOFF_SLACK_TIMEOUT_SECONDS": str(CLIENT_TIMEOUT_SECONDS)},
    )


def _handoff_of(message: Message) -> str | None:
    return ((message.metadata or {}).get("event_payload") or {}).get("handoff_id")


def _has_buttons(message: Message) -> bool:
    return any(block.get("type") == "actions" for block in message.blocks)


def _live_posts(slack: SlackEnv) -> dict[str, list[str]]:
    """Per handoff, the ts of its top-level messages that still show buttons."""
    live: dict[str, list[str]] = defaultdict(list)
    for message in slack.standin.messages(CHANNEL):
        handoff_id = _handoff_of(message)
        if handoff_id and not message.thread_ts and _has_buttons(message):
            live[handoff_id].append(message.ts)
    return live


def _decide(
    slack: SlackEnv, handoff_id: str, reject: bool, statuses: Counter[int], approver: str = ALICE
) -> None:
    """Decide as a person would: click, and click again if Slack showed an error."""
    message = slack.posted(handoff_id)
    for _ in range(10):
        if not reject:
            response = slack.standin.click(approver, message, block_ids.APPROVE)
            statuses[response.status] += 1
            if slack.handoffs.get(handoff_id).status is not Status.PENDING:
                return
            continue
        shown = len(slack.standin.views(BOB))
        response = slack.standin.click(BOB, message, block_ids.REJECT)
        statuses[response.status] += 1
        # A views.open that timed out at the bot may still open the modal a moment later.
        time.sleep(LATE_ANSWER_SECONDS if response.status != 200 else 0)
        opened = [v for v in slack.standin.views(BOB)[shown:] if not v.closed]
        if opened:
            submitted = slack.standin.submit_view(
                BOB, opened[-1], {block_ids.REASON_BLOCK: {block_ids.VALUE: "not this one"}}
            )
            statuses[submitted.status] += 1
            if slack.handoffs.get(handoff_id).status is not Status.PENDING:
                return
    raise AssertionError(f"{handoff_id} could not be decided in 10 tries:\n{slack.logs()[-5000:]}")


def test_a_flaky_slack_never_leaves_duplicate_live_posts_and_every_run_resumes_once(
    slack: SlackEnv, soak: bool
) -> None:
    count = SOAK_HANDOFFS if soak else HANDOFFS
    seed = int(os.environ.get("RELIABILITY_SEED") or random.randrange(1 << 30))
    print(f"\nRELIABILITY_SEED={seed}")
    started = time.monotonic()
    faults = slack.standin.fail_randomly(
        rate=FAULT_RATE, seed=seed, timeout_delay=LATE_ANSWER_SECONDS, retry_after=1
    )
    agent = Handoffs(slack.redis, tasks=POLICY)
    ids = [
        agent.request_approval(
            run_id=f"run-{n}",
            thread_id="t",
            action="issue_refund",
            args={"order_id": f"A-{n}", "amount": n},
            resume="tests.support.resume_targets:record",
        ).id
        for n in range(count)
    ]

    # Delivery: every handoff posted, each with exactly one message that has buttons.
    wait_until(
        lambda: all(agent.get(i).delivery.state is TaskState.COMPLETED for i in ids),
        timeout=count * 1.2,
    )
    time.sleep(LATE_ANSWER_SECONDS)  # let any post still on its way land
    live = _live_posts(slack)
    refs = {i: agent.get(i).message_refs for i in ids}
    assert {i: live.get(i) for i in ids} == {i: [refs[i]["ts"]] for i in ids}
    delivered_at = time.monotonic()

    # Decisions by people, then message updates and resumes by the workers.
    # Two people approve side by side; one rejects through modals (one modal at a time).
    statuses: Counter[int] = Counter()
    rejected = ids[::REJECT_EVERY]
    approved = [i for i in ids if i not in rejected]
    with ThreadPoolExecutor(3) as people:
        decisions = [
            people.submit(lambda: [_decide(slack, i, True, statuses) for i in rejected]),
            *(
                people.submit(
                    lambda share=share, who=who: [
                        _decide(slack, i, False, statuses, who) for i in share
                    ]
                )
                for share, who in ((approved[::2], ALICE), (approved[1::2], CAROL))
            ),
        ]
        for decision in decisions:
            decision.result()
    decided_at = time.monotonic()
    wait_until(
        lambda: all(
            (h := agent.get(i)).resume.state is TaskState.COMPLETED
            and h.notify.state is TaskState.COMPLETED
            and h.message_refs.get("record_ts")
            for i in ids
        ),
        timeout=count * 1.2,
    )
    time.sleep(LATE_ANSWER_SECONDS)
    slack.standin.fail_randomly(rate=0)
    elapsed = time.monotonic() - started

    # No 5xx to people; no message with buttons left; each primary shows its outcome.
    assert not [status for status in statuses if status >= 500], statuses
    assert _live_posts(slack) == {}
    by_handoff: dict[str, list[Message]] = defaultdict(list)
    for message in slack.standin.messages(CHANNEL):
        if _handoff_of(message) and not message.thread_ts:
            by_handoff[_handoff_of(message) or ""].append(message)
    duplicates = 0
    for n, handoff_id in enumerate(ids):
        primary = slack.standin.message(CHANNEL, refs[handoff_id]["ts"])
        assert primary.metadata["event_type"] == METADATA_EVENT_TYPE
        verb = "Rejected" if n % REJECT_EVERY == 0 else "Approved"
        assert f"*{verb}* by" in json.dumps(primary.blocks), primary.blocks
        extras = [m for m in by_handoff[handoff_id] if m.ts != primary.ts]
        assert all(m.metadata["event_type"] == DUPLICATE_EVENT_TYPE for m in extras)
        duplicates += len(extras)
        records = slack.standin.thread(CHANNEL, primary.ts)
        assert [r.metadata["event_type"] for r in records] == [RECORD_EVENT_TYPE], records

    # Every run resumed exactly once, with the decision that was made.
    completed = Counter(
        json.loads(raw)["handoff_id"] for raw in slack.redis.lrange(resume_targets.COMPLETED, 0, -1)
    )
    assert completed == Counter(ids)

    # The faults happened, including the ambiguous ones on posts.
    counts = faults.counts()
    posts = Counter(
        kind
        for (method, kind), n in faults.injected.items()
        for _ in range(n)
        if method == "chat.postMessage"
    )
    assert set(counts) == {"ratelimited", "server_error", "timeout", "reset", "answer_lost"}
    assert posts["timeout"] + posts["answer_lost"] > 0
    calls = Counter(call.method for call in slack.standin.calls())
    print(
        f"{count} handoffs in {elapsed:.1f} s (delivered after {delivered_at - started:.1f} s, "
        f"decided after {decided_at - started:.1f} s); "
        f"{sum(calls.values())} Web API calls {dict(calls)}; faults injected {counts} "
        f"(on chat.postMessage {dict(posts)}); extra copies neutralised {duplicates}; "
        f"answers to people by HTTP status {dict(statuses)}"
    )


def test_a_modal_whose_views_open_answer_is_lost_still_gets_a_200_and_can_be_submitted(
    one_worker: SlackEnv,
) -> None:
    slack = one_worker
    handoff_id = (
        Handoffs(slack.redis, tasks=POLICY)
        .request_approval(
            run_id="run-late-modal",
            thread_id="t",
            action="issue_refund",
            resume="tests.support.resume_targets:record",
        )
        .id
    )
    message = slack.posted(handoff_id)
    slack.standin.fail_next("views.open", status=200, delay=LATE_ANSWER_SECONDS)

    response = slack.standin.click(BOB, message, block_ids.REJECT)

    assert response.status == 200
    [modal] = slack.standin.wait_for(
        lambda: slack.standin.views(BOB), timeout=LATE_ANSWER_SECONDS + 1
    )
    submitted = slack.standin.submit_view(
        BOB, modal, {block_ids.REASON_BLOCK: {block_ids.VALUE: "late"}}
    )
    assert submitted.status == 200
    assert slack.handoffs.get(handoff_id).status is Status.REJECTED


def test_a_click_on_a_post_still_being_reconciled_is_told_to_try_again_then_counts(
    one_worker: SlackEnv,
) -> None:
    slack = one_worker
    # The post lands after the bot gave up on it; the bot then looks for it (slowly).
    slack.standin.fail_next("chat.postMessage", status=200, delay=CLIENT_TIMEOUT_SECONDS + 0.1)
    slack.standin.fail_next("conversations.history", status=200, delay=0.8)
    handoff_id = (
        Handoffs(slack.redis, tasks=POLICY)
        .request_approval(run_id="run-slow-post", thread_id="t", action="issue_refund")
        .id
    )
    [message] = slack.standin.wait_for(lambda: slack.standin.messages(CHANNEL), timeout=10)

    early = slack.standin.click(ALICE, message, block_ids.APPROVE)

    assert early.status == 200
    assert [e.text for e in slack.standin.ephemerals(ALICE)] == [STILL_POSTING]
    assert slack.handoffs.get(handoff_id).status is Status.PENDING
    assert slack.posted(handoff_id).ts == message.ts  # adopted, not posted again
    slack.standin.click(ALICE, message, block_ids.APPROVE)
    assert slack.handoffs.get(handoff_id).status is Status.APPROVED
