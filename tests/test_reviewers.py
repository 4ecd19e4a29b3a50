"""Who may decide a handoff: listed reviewers and user-group members, admins, never the
requester when self-approval is blocked. User groups are resolved through a real
``slack_sdk.WebClient`` talking to a small local HTTP server that stands in for Slack, and
cached as one snapshot of ``usergroups.list`` (``bot.access.usergroups``)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
from redis import Redis
from slack_sdk import WebClient

from bot.access.reviewers import ReviewerPolicy
from bot.keys import BotKeys
from store.keys import KeySpace
from store.models import Handoff
from tests.support.blockkit import make_handoff

USERGROUPS_KEY = BotKeys(KeySpace()).usergroups
"""Where the snapshot of the workspace's user groups is cached."""


class FakeSlack:
    """Answers ``usergroups.list`` (with ``include_users``) from ``groups``, a group id ->
    member ids, and records every call's method.

    With ``error`` set, every call is answered ``{"ok": false, "error": error}``.
    """

    def __init__(self) -> None:
        self.groups: dict[str, list[str]] = {}
        self.error: str | None = None
        self.calls: list[str] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urlparse(self.path)
                self._answer(url.path, parse_qs(url.query))

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                url = urlparse(self.path)
                self._answer(url.path, {**parse_qs(url.query), **parse_qs(body.decode())})

            def _answer(self, path: str, params: dict[str, list[str]]) -> None:
                method = path.rsplit("/", 1)[-1]
                if method != "usergroups.list":
                    self._send({"ok": False, "error": "unknown_method"})
                    return
                fake.calls.append(method)
                if fake.error is not None:
                    self._send({"ok": False, "error": fake.error})
                    return
                with_users = params.get("include_users", [""])[0] in ("1", "true")
                groups = [
                    {"id": group, **({"users": members} if with_users else {})}
                    for group, members in fake.groups.items()
                ]
                self._send({"ok": True, "usergroups": groups})

            def _send(self, data: dict[str, Any]) -> None:
                body = json.dumps(data).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}/api/"

    def client(self) -> WebClient:
        return WebClient(token="xoxb-test", base_url=self.base_url, timeout=5)


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    fake = FakeSlack()
    fake.thread.start()
    yield fake
    fake.server.shutdown()
    fake.server.server_close()


PolicyFactory = Callable[..., ReviewerPolicy]


@pytest.fixture
def policy(slack: FakeSlack, redis: Redis) -> PolicyFactory:
    """Build a policy on the fake Slack and the test database."""

    def build(**options: Any) -> ReviewerPolicy:
        return ReviewerPolicy(slack.client(), redis, KeySpace(), **options)

    return build


def handoff(reviewers: list[str] | None = None, requester: str | None = None) -> Handoff:
    payload = {"kind": "approval", "action": {"name": "issue_refund", "args": {"amount": 30}}}
    return make_handoff(payload, reviewers=reviewers or [], requester=requester)


def test_a_listed_reviewer_may_decide(policy: PolicyFactory, slack: FakeSlack) -> None:
    assert policy().denial("U1", handoff(["U1", "U2"])) is None
    assert slack.calls == []


def test_a_member_of_a_listed_user_group_may_decide(
    policy: PolicyFactory, slack: FakeSlack
) -> None:
    slack.groups["S0FINANCE"] = ["U2", "U3"]

    assert policy().denial("U3", handoff(["U1", "S0FINANCE"])) is None
    assert slack.calls == ["usergroups.list"]


def test_anyone_else_is_told_who_the_reviewers_are(policy: PolicyFactory, slack: FakeSlack) -> None:
    slack.groups["S0FINANCE"] = ["U2", "U3"]

    denial = policy().denial("U9", handoff(["U1", "S0FINANCE"]))

    assert denial == "Only <@U1>, <!subteam^S0FINANCE> can decide this request."


def test_the_requester_may_not_decide_their_own_request(policy: PolicyFactory) -> None:
    denial = policy().denial("U1", handoff(["U1"], requester="U1"))

    assert denial is not None
    assert "someone else" in denial


def test_the_requester_is_refused_even_when_an_admin(policy: PolicyFactory) -> None:
    reviewers = policy(admins=["U1"])

    assert reviewers.denial("U1", handoff(["U1"], requester="U1")) is not None
    assert reviewers.denial("U1", handoff(requester="U1")) is not None


def test_the_requester_may_decide_when_self_approval_is_allowed(policy: PolicyFactory) -> None:
    reviewers = policy(block_self_approval=False)

    assert reviewers.denial("U1", handoff(["U1"], requester="U1")) is None
    assert reviewers.denial("U1", handoff(requester="U1")) is None
    # Being the requester grants nothing by itself.
    assert reviewers.denial("U1", handoff(["U2"], requester="U1")) is not None


def test_admins_may_decide_any_other_request(policy: PolicyFactory, slack: FakeSlack) -> None:
    slack.groups["S0FINANCE"] = ["U2"]

    assert policy(admins=["UADMIN"]).denial("UADMIN", handoff(["U1", "S0FINANCE"])) is None
    assert slack.calls == []


def test_without_reviewers_or_defaults_anyone_may_decide(policy: PolicyFactory) -> None:
    reviewers = policy()

    assert reviewers.denial("U1", handoff()) is None
    assert reviewers.denial("W0ANYONE", handoff(requester="U2")) is None


def test_default_reviewers_apply_when_the_handoff_names_none(
    policy: PolicyFactory, slack: FakeSlack
) -> None:
    slack.groups["S0ONCALL"] = ["U5"]
    reviewers = policy(default_reviewers=["U1", "S0ONCALL"])

    assert reviewers.denial("U1", handoff()) is None
    assert reviewers.denial("U5", handoff()) is None
    assert reviewers.denial("U9", handoff()) == (
        "Only <@U1>, <!subteam^S0ONCALL> can decide this request."
    )
    # The handoff's own reviewers replace the defaults.
    assert reviewers.denial("U1", handoff(["U2"])) is not None


def test_group_members_are_cached_in_redis(
    policy: PolicyFactory, slack: FakeSlack, redis: Redis
) -> None:
    slack.groups["S0FINANCE"] = ["U2", "U3"]
    request = handoff(["S0FINANCE"])

    assert policy().denial("U2", request) is None
    # Another process (a new policy, same Redis) and a non-member: still no second call.
    assert policy().denial("U3", request) is None
    assert policy().denial("U9", request) is not None

    assert slack.calls == ["usergroups.list"]
    cached = [key for key in redis.keys("*") if b"usergroup" in key]
    assert cached == [USERGROUPS_KEY.encode()]  # one snapshot of every group, in BotKeys
    assert 0 < redis.ttl(cached[0]) <= 300


def test_a_group_change_is_seen_once_the_cache_expires(
    policy: PolicyFactory, slack: FakeSlack, redis: Redis
) -> None:
    slack.groups["S0FINANCE"] = ["U2"]
    reviewers = policy(cache_seconds=60)
    assert reviewers.denial("U3", handoff(["S0FINANCE"])) is not None

    slack.groups["S0FINANCE"] = ["U2", "U3"]
    redis.delete(USERGROUPS_KEY)  # what expiry does after cache_seconds

    assert reviewers.denial("U3", handoff(["S0FINANCE"])) is None
    assert slack.calls == ["usergroups.list", "usergroups.list"]


def test_a_slack_error_denies_instead_of_crashing(policy: PolicyFactory, slack: FakeSlack) -> None:
    slack.error = "missing_scope"

    denial = policy().denial("U2", handoff(["S0GONE"]))

    assert denial == "Only <!subteam^S0GONE> can decide this request."
    assert slack.calls == ["usergroups.list"]


def test_a_group_slack_does_not_list_has_no_members(
    policy: PolicyFactory, slack: FakeSlack
) -> None:
    slack.groups["S0FINANCE"] = ["U2"]  # S0GONE was deleted (or disabled) in Slack

    denial = policy().denial("U2", handoff(["S0GONE"]))

    assert denial == "Only <!subteam^S0GONE> can decide this request."
    assert slack.calls == ["usergroups.list"]


def test_a_failed_group_lookup_is_retried_on_the_next_check(
    policy: PolicyFactory, slack: FakeSlack
) -> None:
    slack.error = "ratelimited"
    reviewers = policy()
    assert reviewers.denial("U2", handoff(["S0FINANCE"])) is not None

    slack.error = None
    slack.groups["S0FINANCE"] = ["U2"]

    assert reviewers.denial("U2", handoff(["S0FINANCE"])) is None
    assert slack.calls == ["usergroups.list", "usergroups.list"]


def test_an_unreachable_slack_denies_instead_of_crashing(
    policy: PolicyFactory, slack: FakeSlack
) -> None:
    # A click must get an answer even when Slack's API cannot be reached.
    slack.server.shutdown()
    slack.server.server_close()

    denial = policy().denial("U2", handoff(["S0FINANCE"]))

    assert denial == "Only <!subteam^S0FINANCE> can decide this request."
