"""Resume any agent by webhook, end to end: a handoff created over HTTP with a callback,
decided, is POSTed by a real `handoff worker` to a local receiver that verifies the Standard
Webhooks signature; failures are retried with the same webhook-id, a receiver that never
answers ends in resume_failed, and `handoff retry` sends it again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest
from redis import Redis
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from bot.api.app import ApiConfig
from store.api_keys import ApiKeys
from store.ids import new_handoff_id
from store.models import TaskState
from tests.conftest import ROOT, WorkerProcesses, wait_until
from tests.support.api_server import serve_api
from tests.support.webhook_receiver import HANG, webhook_receiver
from worker.client import Handoffs

LOOPBACK = {"HANDOFF_WEBHOOK_ALLOWED_HOSTS": "127.0.0.1", "HANDOFF_WEBHOOK_TIMEOUT_SECONDS": "1"}


@pytest.fixture
def api(handoffs: Handoffs, redis_url: str) -> Iterator[str]:
    config = ApiConfig(redis_url=redis_url, webhook_allowed_hosts=frozenset({"127.0.0.1"}))
    with serve_api(handoffs.store, config) as url:
        yield url


def _create(api: str, key: str, callback: str) -> dict[str, object]:
    answer = httpx.post(
        f"{api}/v1/handoffs",
        headers={"Authorization": f"Bearer {key}"},
        json={
            "request_type": "question",
            "run_id": "ts-agent-1",
            "thread_id": "t",
            "question": "Which region?",
            "callback": {"url": callback},
        },
    )
    assert answer.status_code == 201, answer.text
    return dict(answer.json())


def test_a_decided_handoff_is_posted_signed_and_retried_with_the_same_id(
    api: str, handoffs: Handoffs, redis: Redis, workers: WorkerProcesses
) -> None:
    created = ApiKeys(redis, handoffs.store.keys).create("ts-agent")
    workers.start(extra_env=LOOPBACK)
    with webhook_receiver(created.record.webhook_secret, answers=[500, 503]) as receiver:
        handoff = _create(api, created.key, receiver.url)
        handoffs.decide(str(handoff["id"]), "answered", by="U0ANA", answer="eu-west")

        wait_until(lambda: handoffs.get(str(handoff["id"])).resume.state is TaskState.COMPLETED)
        received = receiver.wait_for(3)

    assert len(received) == 3  # two failures, then the one that completed the resume
    ids = {r.headers["webhook-id"] for r in received}
    assert ids == {f"msg_{handoff['id']}"}
    for attempt in received:
        assert isinstance(attempt.verified, dict), attempt.verified
        assert attempt.verified["status"] == "answered"
        assert attempt.verified["resume_data"]["answer"] == "eu-west"
    stored = handoffs.get(str(handoff["id"]))
    assert stored.resume.attempt == 3
    # A forged signature fails verification as a receiver would check it.
    tampered = json.loads(received[0].body)
    tampered["resume_data"]["answer"] = "us-east"

    with pytest.raises(WebhookVerificationError):
        Webhook(created.record.webhook_secret).verify(json.dumps(tampered), received[0].headers)


def test_a_receiver_that_never_answers_ends_resume_failed_and_retry_sends_again(
    api: str, handoffs: Handoffs, redis: Redis, redis_url: str, workers: WorkerProcesses
) -> None:
    created = ApiKeys(redis, handoffs.store.keys).create("silent")
    workers.start(extra_env=LOOPBACK)
    with webhook_receiver(created.record.webhook_secret, answers=[HANG, HANG, HANG]) as receiver:
        handoff_id = str(_create(api, created.key, receiver.url)["id"])
        handoffs.decide(handoff_id, "answered", by="U0ANA", answer="x")
        wait_until(lambda: handoffs.get(handoff_id).resume.state is TaskState.FAILED, timeout=60)
        failed = handoffs.get(handoff_id).resume
        assert failed.attempt == 3 and "did not answer within 1 s" in (failed.last_error or "")

        retried = subprocess.run(
            [sys.executable, "-m", "bot.cli", "retry", handoff_id],
            env={**os.environ, "REDIS_URL": redis_url, "PYTHONPATH": str(ROOT)},
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert retried.returncode == 0, retried.stderr
        wait_until(lambda: handoffs.get(handoff_id).resume.state is TaskState.COMPLETED)
        received = receiver.wait_for(4)

    assert len(received) == 4
    assert {r.headers["webhook-id"] for r in received} == {f"msg_{handoff_id}"}


def test_a_redirect_is_not_followed(
    api: str, handoffs: Handoffs, redis: Redis, workers: WorkerProcesses
) -> None:
    created = ApiKeys(redis, handoffs.store.keys).create("redirected")
    workers.start(extra_env=LOOPBACK)
    with (
        webhook_receiver(created.record.webhook_secret) as internal,
        webhook_receiver(
            created.record.webhook_secret, answers=[302, 302, 302], location=internal.url
        ) as receiver,
    ):
        handoff_id = str(_create(api, created.key, receiver.url)["id"])
        handoffs.decide(handoff_id, "answered", by="U0ANA", answer="x")
        wait_until(lambda: handoffs.get(handoff_id).resume.state is TaskState.FAILED, timeout=60)

        assert len(receiver.received) == 3
        assert internal.received == []  # the redirect's target was never called
    assert "answered 302" in (handoffs.get(handoff_id).resume.last_error or "")


def test_a_receiver_that_drips_its_answer_is_given_up_on_in_time(
    handoffs: Handoffs, redis: Redis
) -> None:
    import socket
    import threading
    import time

    from store.models import Callback, HandoffRequest, QuestionPayload
    from worker.webhooks import WebhookConfig, WebhookFailed, send_callback

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    stop = threading.Event()

    def drip() -> None:
        connection, _ = listener.accept()
        connection.recv(65536)
        for byte in b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok":
            if stop.wait(0.3):
                break
            connection.send(bytes([byte]))
        connection.close()

    threading.Thread(target=drip, daemon=True).start()
    key = ApiKeys(redis, handoffs.store.keys).create("drip")
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/hook"
    request = HandoffRequest(
        run_id="r",
        thread_id="t",
        request_type="question",
        payload=QuestionPayload(question="?"),
        api_key="drip",
        callback=Callback(url=url),
    )
    handoff = handoffs.store.create(request, handoff_id=new_handoff_id()).handoff
    config = WebhookConfig(allowed_hosts=frozenset({"127.0.0.1"}), timeout_seconds=1)

    started = time.monotonic()
    with pytest.raises(WebhookFailed, match="did not answer within 1 s"):
        send_callback(handoffs.store, handoff, config)
    took = time.monotonic() - started
    stop.set()
    listener.close()

    assert took < 3, took  # the whole exchange, not each read, is bounded
    assert key.record.name == "drip"
