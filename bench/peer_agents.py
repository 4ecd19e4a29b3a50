"""The agents of ``bench.peers``: one process of them per product, run by its own Python.

Not imported by the products: ``bench.peers`` runs this file as a script, with our
``.venv`` Python for our two clients and with the peer's virtualenv Python for the peer's,
so each product's agents load only that product's client. At the top it imports only the
standard library; each product's client is imported inside its own function.

``python bench/peer_agents.py MODE --count N --agents A --tag T`` where MODE is

- ``handoffs``: our Python client, ``Handoffs.request_approval`` then ``Handoffs.wait``
  (REDIS_URL and HANDOFF_NAMESPACE from the environment, as ``Handoffs.from_env`` reads
  them); ``A`` threads create, one more thread per request waits;
- ``http``: our HTTP API, ``POST /v1/handoffs`` then ``GET /v1/handoffs/{id}?wait=60``
  until decided (BENCH_API_URL and BENCH_API_KEY from the environment); ``A`` asyncio
  agents create, one more task per request waits;
- ``awaithumans``: the peer's client, ``await_human`` (AWAITHUMANS_URL and
  AWAITHUMANS_ADMIN_API_TOKEN from the environment, as its SDK reads them), which creates
  the task and then long-polls it; ``A`` asyncio agents create.

Each agent creates its share of the ``N`` requests one after the other (the next once the
previous create returned), and leaves a waiter per request: the product's recommended
wait, until the decision. Once imported and connected it prints ``{"ready": ...}`` and
waits for a line on stdin; then one JSON line per event on stdout: ``created`` (request
number, id, wall-clock time the create returned), ``ran`` (id, time the wait returned,
status), ``creates`` (when the first create started and the last returned), ``error``,
and ``done`` when every wait returned or ``--timeout`` passed; then it exits at the next
line on stdin (so that its CPU time can be read until then).
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import json
import os
import sys
import threading
import time
from typing import Any

ACTION = "issue_refund"
DESCRIPTION = "Refund one of two identical charges"
CONTEXT = "The customer was charged twice for the same order; refund one charge."
CHANNEL = "C0BENCHPEERS"
REVIEWER = "U0BENCHREVIEWER"
EXPIRES_IN_SECONDS = 3600
"""Both products' requests expire after an hour (the peer's timeout_seconds)."""
HTTP_WAIT_SECONDS = 60
"""``?wait=`` of our HTTP API's long-poll, its maximum."""
WAITS_PER_CLIENT = 50
"""Held ``?wait=`` requests per httpx client of the HTTP agents (see ``run_http``)."""

_emit_lock = threading.Lock()


def request_args(i: int) -> dict[str, Any]:
    """The arguments of request ``i``'s refund, the same for every product."""
    return {"order_id": f"A-{i:06d}", "amount_usd": 30, "reason": "charged twice"}


def emit(**fields: Any) -> None:
    """One JSON line on stdout (from any thread)."""
    line = json.dumps(fields)
    with _emit_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def wait_for_go(mode: str) -> None:
    """Say the agents are ready, then block until the benchmark says go."""
    emit(ready=mode, pid=os.getpid())
    sys.stdin.readline()


# -- our Python client -----------------------------------------------------------------


def run_handoffs(options: argparse.Namespace) -> None:
    """Our Python client: threads create, a thread per request waits with ``wait()``."""
    from store.settings import StoreSettings
    from worker.client import Handoffs

    # Each wait holds a pub/sub connection while it waits, and a second as it reads the
    # decision: one process holding all the agents' waits needs a pool that large
    # (redis-py's default holds 100), as would a deployment waiting on that many handoffs
    # from one process.
    settings = StoreSettings.from_env()
    redis = settings.open_redis(max_connections=2 * options.count + options.agents + 16)
    handoffs = Handoffs.from_settings(settings, redis=redis)
    handoffs.redis.ping()
    waiters: list[threading.Thread] = []
    waiters_lock = threading.Lock()

    def wait(handoff_id: str) -> None:
        try:
            decided = handoffs.wait(handoff_id, timeout=options.timeout)
        except Exception as exc:
            emit(error=f"wait for {handoff_id}: {exc!r}")
            return
        emit(ran=handoff_id, at=time.time(), status=str(decided.status.value))

    def agent(first: int) -> None:
        for i in range(first, options.count, options.agents):
            try:
                handoff = handoffs.request_approval(
                    run_id=f"{options.tag}-run-{i}",
                    thread_id=f"{options.tag}-thread-{i}",
                    action=ACTION,
                    args=request_args(i),
                    description=DESCRIPTION,
                    context=CONTEXT,
                    channel=CHANNEL,
                    reviewers=[REVIEWER],
                    expires_in=EXPIRES_IN_SECONDS,
                    idempotency_key=f"{options.tag}-{i}",
                    agent_name="bench-agent",
                )
            except Exception as exc:
                emit(error=f"create {i}: {exc!r}")
                continue
            emit(created=i, id=handoff.id, at=time.time())
            waiter = threading.Thread(target=wait, args=(handoff.id,), daemon=True)
            waiter.start()
            with waiters_lock:
                waiters.append(waiter)

    wait_for_go("handoffs")
    started = time.time()
    agents = [threading.Thread(target=agent, args=(k,)) for k in range(options.agents)]
    for thread in agents:
        thread.start()
    for thread in agents:
        thread.join()
    emit(creates={"started": started, "finished": time.time()})
    deadline = time.monotonic() + options.timeout
    for waiter in list(waiters):
        waiter.join(timeout=max(0.0, deadline - time.monotonic()))
    emit(done=True)


# -- our HTTP API --------------------------------------------------------------------------


async def run_http(options: argparse.Namespace) -> None:
    """Our HTTP API: asyncio agents create, a task per request holds ``?wait=``.

    One httpx client makes the creates, and the held waits are spread over clients of at
    most ``WAITS_PER_CLIENT`` connections each: httpx's pool does work proportional to the
    requests in flight in it on every request, so a thousand waits in one pool cost the
    agents' process more CPU than the server (many agents, each with its own client, is
    what a deployment has).
    """
    import httpx

    headers = {"Authorization": f"Bearer {os.environ['BENCH_API_KEY']}"}
    base_url = os.environ["BENCH_API_URL"]
    timeout = httpx.Timeout(HTTP_WAIT_SECONDS + 30)

    def client(connections: int) -> httpx.AsyncClient:
        limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
        return httpx.AsyncClient(base_url=base_url, headers=headers, limits=limits, timeout=timeout)

    creating = client(options.agents)
    waiting = [client(WAITS_PER_CLIENT) for _ in range(-(-options.count // WAITS_PER_CLIENT))]
    try:
        await creating.get("/healthz")
        waits: list[asyncio.Task[None]] = []

        async def wait(handoff_id: str, waiter: httpx.AsyncClient) -> None:
            try:
                while True:
                    answer = await waiter.get(
                        f"/v1/handoffs/{handoff_id}", params={"wait": HTTP_WAIT_SECONDS}
                    )
                    answer.raise_for_status()
                    status = answer.json()["status"]
                    if status != "pending":
                        emit(ran=handoff_id, at=time.time(), status=status)
                        return
            except Exception as exc:
                emit(error=f"wait for {handoff_id}: {exc!r}")

        async def agent(first: int) -> None:
            for i in range(first, options.count, options.agents):
                body = {
                    "request_type": "approval",
                    "run_id": f"{options.tag}-run-{i}",
                    "thread_id": f"{options.tag}-thread-{i}",
                    "action": {"name": ACTION, "args": request_args(i), "description": DESCRIPTION},
                    "context": CONTEXT,
                    "channel": CHANNEL,
                    "reviewers": [REVIEWER],
                    "expires_in_seconds": EXPIRES_IN_SECONDS,
                    "idempotency_key": f"{options.tag}-{i}",
                }
                try:
                    answer = await creating.post("/v1/handoffs", json=body)
                    answer.raise_for_status()
                except Exception as exc:
                    emit(error=f"create {i}: {exc!r}")
                    continue
                handoff_id = answer.json()["id"]
                emit(created=i, id=handoff_id, at=time.time())
                waiter = waiting[i // WAITS_PER_CLIENT]
                waits.append(asyncio.create_task(wait(handoff_id, waiter)))

        await asyncio.to_thread(wait_for_go, "http")
        started = time.time()
        await asyncio.gather(*(agent(k) for k in range(options.agents)))
        emit(creates={"started": started, "finished": time.time()})
        if waits:
            await asyncio.wait(waits, timeout=options.timeout)
    finally:
        for each in (creating, *waiting):
            await each.aclose()
    emit(done=True)


# -- the peer's client -------------------------------------------------------------------


async def run_awaithumans(options: argparse.Namespace) -> None:
    """The peer's client: asyncio agents call ``await_human``, which creates the task and
    long-polls it; an agent goes on to its next request once the create returned.

    ``await_human`` does both in one call, so the moment its create returned is read by
    wrapping the client's long-poll function (called with the new task's id right after
    the create's answer), and a context variable says which request the call is for.
    Nothing of the client's behaviour is changed.
    """
    import awaithumans.client
    from awaithumans import await_human
    from pydantic import BaseModel

    class RefundRequest(BaseModel):
        order_id: str
        amount_usd: int
        reason: str
        context: str

    class RefundDecision(BaseModel):
        approved: bool
        note: str | None = None

    number: contextvars.ContextVar[int] = contextvars.ContextVar("number")
    created: dict[int, asyncio.Event] = {}
    task_ids: dict[int, str] = {}
    long_poll = awaithumans.client._poll_until_terminal

    async def noting_creates(base_url: str, task_id: str, *args: Any, **kwargs: Any) -> Any:
        i = number.get()
        task_ids[i] = task_id
        emit(created=i, id=task_id, at=time.time())
        created[i].set()
        return await long_poll(base_url, task_id, *args, **kwargs)

    awaithumans.client._poll_until_terminal = noting_creates  # type: ignore[assignment]

    async def one_request(i: int) -> None:
        number.set(i)
        payload = RefundRequest(**request_args(i), context=CONTEXT)
        try:
            decision = await await_human(
                task=DESCRIPTION,
                payload_schema=RefundRequest,
                payload=payload,
                response_schema=RefundDecision,
                timeout_seconds=EXPIRES_IN_SECONDS,
                idempotency_key=f"{options.tag}-{i}",
            )
        except Exception as exc:
            emit(error=f"request {i}: {exc!r}")
            created[i].set()  # its agent goes on
            return
        status = "approved" if decision.approved else "rejected"
        emit(ran=task_ids[i], at=time.time(), status=status)

    waits: list[asyncio.Task[None]] = []

    async def agent(first: int) -> None:
        for i in range(first, options.count, options.agents):
            created[i] = asyncio.Event()
            waits.append(asyncio.create_task(one_request(i)))
            await created[i].wait()

    await asyncio.to_thread(wait_for_go, "awaithumans")
    started = time.time()
    await asyncio.gather(*(agent(k) for k in range(options.agents)))
    emit(creates={"started": started, "finished": time.time()})
    if waits:
        await asyncio.wait(waits, timeout=options.timeout)
    emit(done=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="The agents of bench.peers (not run by hand).")
    parser.add_argument("mode", choices=["handoffs", "http", "awaithumans"])
    parser.add_argument("--count", type=int, required=True, help="requests in all")
    parser.add_argument("--agents", type=int, required=True, help="agents creating them")
    parser.add_argument("--tag", required=True, help="makes run ids and idempotency keys unique")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds to wait, at most")
    options = parser.parse_args(argv)
    if options.mode == "handoffs":
        run_handoffs(options)
    elif options.mode == "http":
        asyncio.run(run_http(options))
    else:
        asyncio.run(run_awaithumans(options))
    # Alive until told: the benchmark reads this process's CPU time after the last wait.
    sys.stdin.readline()
    return 0


if __name__ == "__main__":
    sys.exit(main())
