"""Listing benchmark: ``/handoff list`` and the App Home with 100,000 pending handoffs.

Not a test: it measures and prints figures. It fills a fresh random namespace with
``--count`` pending handoffs (default 100,000) of every type, spread over 20 channels,
1,000 runs, 200 reviewers, 5 user groups and no reviewers at all (one in ten), then times
the server-side work of:

- ``/handoff list`` (first page, and a page deep in the listing) as an admin, both as the
  command's own work (parse, read, render) and as a whole signed request dispatched through
  the Bolt app (signature check, middleware, listener, JSON answer);
- ``/handoff list mine`` and the App Home of a reviewer (their queue: own index, a user
  group's and the handoffs naming no reviewers, merged; their recent decisions; the Home's
  Block Kit), and the Home of an admin (every pending handoff).

Slack's own HTTP is left out: the bot talks to the local Slack stand-in, whose answers
(who the bot is, user groups and their members) are cached after the warm-up (the report
counts Web API calls made while measuring), and the Home is built, not published. Each
figure is p50/p99 over ``--runs`` runs after a warm-up, next to the 50 ms target. The first
Homes of the namespace, which sort the backlog of pending handoffs into the bot's "no
reviewers" index, are reported apart.

The handoffs are created by the store's own CREATE script, pipelined (the arguments are
the ones ``HandoffStore.create`` computes, captured from it), so the data is what the
store writes. Only the namespace's keys are deleted at the end; it never flushes.

Run from the repository root::

    .venv/bin/python -m bench.listing                                 # embedded server
    .venv/bin/python -m bench.listing --redis-url redis://127.0.0.1:6379
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from redis import Redis
from slack_bolt import App
from slack_bolt.request import BoltRequest
from slack_sdk import WebClient
from slack_sdk.signature import SignatureVerifier

from bench import common
from bench.common import Figure, RedisServer, Target
from bot.access.reviewers import ReviewerPolicy
from bot.app import create_app
from bot.blockkit.replies import render_listing
from bot.config import Settings
from bot.delivery.home_publisher import Homes
from bot.queries.listings import PAGE_SIZE, ListFilter, Listings, ListKind
from bot.standin import SlackStandIn, StandInUser
from handlers.commands import parse_command, run_command
from handlers.deps import HandlerDeps
from store.ids import new_handoff_id
from store.models import HandoffRequest
from store.repository import HandoffStore, StoreConfig

TARGET_MS = 50.0
"""Server time the issue allows for the first page of ``list`` and of the Home."""

CHANNELS = [f"C0BENCH{i:02d}" for i in range(20)]
USERS = [f"U0BENCH{i:03d}" for i in range(200)]
GROUPS = {f"S0BENCH{g}": USERS[g * 20 : (g + 1) * 20] for g in range(5)}
VIEWER = USERS[7]
"""The reviewer whose queue is measured: their own handoffs, group S0BENCH0's, and those
naming no reviewers."""
ADMIN = "U0BENCHADMIN"
SIGNING_SECRET = "bench-listing-signing-secret"
CACHE_SECONDS = 3600
"""Slack answers (user groups) are cached longer than the benchmark runs."""
CREATE_BATCH = 1000


@dataclass(frozen=True)
class Options:
    """The sizes of a run (defaults: the issue's)."""

    count: int = 100_000
    """Pending handoffs in the namespace."""
    runs: int = 200
    """Timed runs per scenario."""
    warmup: int = 20
    """Untimed runs first."""
    keep: bool = False
    """Keep the namespace afterwards."""


QUICK = Options(count=500, runs=5, warmup=1)
"""A smoke run: seconds, not figures."""


# -- filling the namespace ---------------------------------------------------------------


def request_for(index: int) -> HandoffRequest:
    """The ``index``-th handoff of the mix."""
    kind = ("approval", "question", "correction", "escalation")[index % 4]
    payloads: dict[str, dict[str, Any]] = {
        "approval": {
            "kind": "approval",
            "action": {"name": "issue_refund", "args": {"order": f"A-{index}", "usd": 30}},
        },
        "question": {"kind": "question", "question": f"Which region for order A-{index}?"},
        "correction": {"kind": "correction", "draft": f"Dear customer {index}, ..."},
        "escalation": {"kind": "escalation", "summary": f"Order A-{index} needs a human."},
    }
    payload = payloads[kind]
    if index % 10 == 0:
        reviewers: list[str] = []
    elif index % 10 == 1:
        reviewers = [list(GROUPS)[index // 10 % len(GROUPS)]]
    else:
        reviewers = [USERS[index % len(USERS)]]
    return HandoffRequest.model_validate(
        {
            "run_id": f"run-{index % 1000}",
            "thread_id": f"thread-{index}",
            "request_type": kind,
            "context": "Customer was charged twice for this order; the agent wants to refund.",
            "payload": payload,
            "channel": CHANNELS[index % len(CHANNELS)],
            "reviewers": reviewers,
        }
    )


class _Captured(Exception):
    pass


@dataclass
class _CaptureCreate:
    """Stands in for the store's CREATE script and keeps what ``create`` passes to it."""

    keys: list[Any] | None = None
    args: list[Any] | None = None

    def __call__(self, keys: list[Any], args: list[Any]) -> Any:
        self.keys, self.args = keys, args
        raise _Captured


def fill(redis: Redis, store: HandoffStore, count: int) -> float:
    """Create ``count`` pending handoffs with the store's CREATE script, pipelined; returns
    the seconds it took."""
    capturing = HandoffStore(redis, store.config)
    capture = _CaptureCreate()
    capturing._scripts["CREATE"] = capture  # type: ignore[assignment]
    script = store._scripts["CREATE"]
    started = time.perf_counter()
    for first in range(0, count, CREATE_BATCH):
        pipe = redis.pipeline(transaction=False)
        for index in range(first, min(count, first + CREATE_BATCH)):
            with contextlib.suppress(_Captured):
                capturing.create(request_for(index), handoff_id=new_handoff_id())
            script.queue(pipe, keys=capture.keys or [], args=capture.args or [])
        pipe.execute()
        if (first // CREATE_BATCH) % 20 == 19:
            common.progress(f"{first + CREATE_BATCH:,} created")
    return time.perf_counter() - started


# -- measuring ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Timing:
    """Milliseconds of repeated runs of one scenario: wall clock, and this process's CPU
    (which a busy machine inflates less than the wall clock)."""

    label: str
    millis: list[float]
    cpu_millis: list[float]

    def line(self) -> str:
        p50, p99 = common.percentile(self.millis, 0.5), common.percentile(self.millis, 0.99)
        verdict = "met" if p99 < TARGET_MS else "NOT met"
        return (
            f"  {self.label:<48}p50 {p50:6.1f} ms   p99 {p99:6.1f} ms   "
            f"CPU p50 {common.percentile(self.cpu_millis, 0.5):5.1f} ms   "
            f"(target < {TARGET_MS:.0f} ms: {verdict})"
        )


def measure(label: str, work: Callable[[], object], *, runs: int, warmup: int) -> Timing:
    """Time ``work`` ``runs`` times after ``warmup`` untimed runs."""
    for _ in range(warmup):
        work()
    millis, cpu_millis = [], []
    for _ in range(runs):
        started, cpu_started = time.perf_counter(), time.process_time()
        work()
        millis.append((time.perf_counter() - started) * 1000)
        cpu_millis.append((time.process_time() - cpu_started) * 1000)
    return Timing(label, millis, cpu_millis)


def bolt_app(redis: Redis, namespace: str, slack: SlackStandIn) -> App:
    """The bot's Bolt app on ``namespace``, as ``handoff serve`` builds it."""
    return create_app(
        Settings(
            redis_url=None,
            namespace=namespace,
            slack_bot_token=slack.bot_token,
            slack_signing_secret=SIGNING_SECRET,
            slack_api_url=slack.api_url,
            admins=ADMIN,
            usergroup_cache_seconds=CACHE_SECONDS,
        ),
        redis=redis,
    )


def signed_command(app: App, text: str, user: str) -> Callable[[], object]:
    """A function that dispatches ``/handoff <text>`` by ``user`` to ``app`` as a signed
    request, the way the HTTP adapter hands it over."""
    body = urlencode(
        {
            "command": "/handoff",
            "text": text,
            "user_id": user,
            "channel_id": CHANNELS[0],
            "team_id": "T0BENCH",
            "response_url": "https://hooks.slack.invalid/commands/1",
            "trigger_id": "1.2.3",
        }
    )
    verifier = SignatureVerifier(SIGNING_SECRET)

    def dispatch() -> object:
        timestamp = str(int(time.time()))
        response = app.dispatch(
            BoltRequest(
                body=body,
                headers={
                    "content-type": ["application/x-www-form-urlencoded"],
                    "x-slack-request-timestamp": [timestamp],
                    "x-slack-signature": [
                        str(verifier.generate_signature(timestamp=timestamp, body=body))
                    ],
                },
            )
        )
        if response.status != 200 or "blocks" not in response.body:
            raise RuntimeError(f"/handoff {text}: HTTP {response.status} {response.body[:200]}")
        return response

    return dispatch


@dataclass
class ListingReport:
    """The timings of one run, and what the report says about the data they ran on."""

    options: Options
    server: str
    timings: list[Timing]
    fill_seconds: float
    cold_homes_ms: list[float]
    """The first Homes after the fill, which sort the backlog of handoffs without
    reviewers into the bot's index."""
    stats_ms: float
    own_pending: int
    group_pending: int
    home_shown: int
    home_blocks: int
    web_api_calls: int
    """Web API calls made while measuring (cached answers: should be 0)."""
    problems: list[str] = field(default_factory=list)

    def figures(self) -> list[Figure]:
        """The rows for ``bench/run_all``'s table: each scenario's p99."""
        count = f"{self.options.count:,} pending"
        return [
            Figure(
                f"{timing.label} p99, {count}",
                common.percentile(timing.millis, 0.99),
                "ms",
                Target("<", TARGET_MS),
            )
            for timing in self.timings
        ]

    def print_report(self) -> None:
        """Every scenario's p50, p99 and CPU next to the target."""
        options = self.options
        print(f"\nslack-handoff listing benchmark: {options.count:,} pending handoffs")
        print(f"  {self.server}")
        print(f"  filled in {self.fill_seconds:.1f} s; load average {common.load_average()}")
        print(
            f"  reviewer {VIEWER}: {self.own_pending:,} own, group S0BENCH0 "
            f"{self.group_pending:,}, {options.count // 10:,} naming no reviewers; their "
            f"Home shows {self.home_shown} handoffs in {self.home_blocks} blocks"
        )
        print(
            f"  {options.runs} runs each after {options.warmup} warm-up runs; "
            f"Web API calls while measuring: {self.web_api_calls}\n"
        )
        for timing in self.timings:
            print(timing.line())
        print(
            f"\n  first Homes after the fill (sorting {options.count // 10:,} handoffs without "
            f"reviewers out of {options.count:,}): "
            + ", ".join(f"{ms:.0f} ms" for ms in self.cold_homes_ms)
        )
        print(
            "  /handoff stats 7d, once (reads the whole audit stream of the window): "
            f"{self.stats_ms:.0f} ms"
        )
        missed = [t.label for t in self.timings if common.percentile(t.millis, 0.99) >= TARGET_MS]
        print("\nOK: every p99 under the target" if not missed else f"\nNOT met: {missed}")


def run(server: RedisServer, options: Options) -> ListingReport:
    """Fill a fresh namespace on ``server``, time every scenario, delete the namespace."""
    users = [StandInUser(user, user.lower()) for user in [*USERS, ADMIN]]
    standin = SlackStandIn(signing_secret=SIGNING_SECRET, users=users, usergroups=GROUPS)
    redis = server.client()
    try:
        with standin:
            return _run(redis, standin, options, server.description)
    finally:
        redis.close()


def _run(redis: Redis, slack: SlackStandIn, options: Options, server: str) -> ListingReport:
    namespace = common.new_namespace("benchlist")
    store = HandoffStore(redis, StoreConfig(namespace=namespace))
    client = WebClient(token=slack.bot_token, base_url=slack.api_url)
    # Handoffs naming no reviewers are their channels' members' (everyone is in every
    # channel of the stand-in), so they are in every viewer's queue: the heavier case.
    reviewers = ReviewerPolicy(
        client,
        redis,
        store.keys,
        admins={ADMIN},
        cache_seconds=CACHE_SECONDS,
        allow_any_channel_member=True,
    )
    deps = HandlerDeps(store=store, reviewers=reviewers)
    try:
        common.progress(f"creating {options.count:,} pending handoffs in namespace {namespace}")
        seconds = fill(redis, store, options.count)
        common.progress(f"created in {seconds:.1f} s ({options.count / seconds:,.0f}/s)")
        if store.count_pending() != options.count:
            raise RuntimeError(f"{store.count_pending()} pending, expected {options.count}")
        mine = store.list_pending(store.keys.pending_by_reviewer(VIEWER), limit=10).items
        for handoff in mine:
            store.decide(handoff.id, "rejected", decided_by=VIEWER, via="bench")

        app = bolt_app(redis, namespace, slack)
        homes = Homes(store, reviewers)
        listings = Listings(store, reviewers)
        cold = []
        while True:  # the first Homes work off the backlog of the "no reviewers" index
            started = time.perf_counter()
            homes.build(VIEWER)
            cold.append((time.perf_counter() - started) * 1000)
            if listings.unassigned.is_complete():
                break
        started = time.perf_counter()
        run_command(deps, ADMIN, parse_command("stats 7d"))
        stats_ms = (time.perf_counter() - started) * 1000
        deep = _text(store.pending_ids(limit=options.count // 2 + 1)[-1:])
        everything = ListFilter(ListKind.PENDING)
        scenarios: list[tuple[str, Callable[[], object]]] = [
            (
                "list, first page (command work)",
                lambda: run_command(deps, ADMIN, parse_command("list")),
            ),
            ("list, first page (signed request via Bolt)", signed_command(app, "list", ADMIN)),
            (
                f"list, Next to page {options.count // 2 // PAGE_SIZE + 1:,}",
                lambda: render_listing(listings.page(everything, viewer=ADMIN, after=deep)),
            ),
            (
                "list run <id>, first page (command work)",
                lambda: run_command(deps, ADMIN, parse_command("list run run-7")),
            ),
            (
                "list mine, reviewer (signed request via Bolt)",
                signed_command(app, "list mine", VIEWER),
            ),
            ("App Home, reviewer (data + Block Kit)", lambda: homes.build(VIEWER)),
            ("App Home, admin (data + Block Kit)", lambda: homes.build(ADMIN)),
        ]
        for _, work in scenarios:
            work()  # Bolt's one auth.test, the user-group lookups: cached from here on
        calls = len(slack.calls())
        timings = [
            measure(label, work, runs=options.runs, warmup=options.warmup)
            for label, work in scenarios
        ]
        calls = len(slack.calls()) - calls
        built = homes.build(VIEWER)
        return ListingReport(
            options=options,
            server=server,
            timings=timings,
            fill_seconds=seconds,
            cold_homes_ms=cold,
            stats_ms=stats_ms,
            own_pending=store.count_pending(store.keys.pending_by_reviewer(VIEWER)),
            group_pending=store.count_pending(store.keys.pending_by_reviewer("S0BENCH0")),
            home_shown=len(built.shown),
            home_blocks=len(built.view["blocks"]),
            web_api_calls=calls,
        )
    finally:
        if not options.keep:
            common.progress("deleting the namespace")
            common.delete_namespace(redis, namespace)


def _text(values: list[Any]) -> str:
    [value] = values
    return value.decode() if isinstance(value, bytes) else str(value)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line."""
    parser = common.argument_parser("bench.listing", __doc__.split("\n\n")[0] if __doc__ else "")
    helps = {
        "count": "pending handoffs",
        "runs": "timed runs per scenario",
        "warmup": "untimed runs first",
    }
    common.add_options(parser, Options(), helps)
    common.add_redis_option(parser)
    parser.add_argument("--keep", action="store_true", help="keep the namespace afterwards")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 when every p99 is under the target, 1 otherwise."""
    return common.measure_and_print(parse_args(argv), Options, run, passed=common.all_targets_met)


if __name__ == "__main__":
    sys.exit(main())
