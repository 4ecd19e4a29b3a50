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
    member ids, and ``conversations.members`` from ``channels``, a channel id -> member ids,
    and records every call's method.

    With ``error`` set, every call is answered ``{"ok": false, "error": error}``.
    """

    def __init__(self) -> None:
        self.groups: dict[str, list[str]] = {}
        self.channels: dict[str, list[str]] = {}
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
                if method not in ("usergroups.list", "conversations.members"):
                    self._send({"ok": False, "error": "unknown_method"})
                    return
                fake.calls.append(method)
                if fake.error is not None:
                    self._send({"ok": False, "error": fake.error})
                    return
                if method == "conversations.members":
                    self._members(params)
                    return
                with_users = params.get("include_users", [""])[0] in ("1", "true")
                groups = [
                    {"id": group, **({"users": members} if with_users else {})}
                    for group, members in fake.groups.items()
                ]
                self._send({"ok": True, "usergroups": groups})

            def _members(self, params: dict[str, list[str]]) -> None:
                channel = params.get("channel", [""])[0]
                if channel not in fake.channels:
                    self._send({"ok": False, "error": "channel_not_found"})
                    return
                # Two members a page, so that paging is exercised.
                start = int(params.get("cursor", ["0"])[0])
                members = fake.channels[channel]
                more = start + 2 < len(members)
                self._send(
                    {
                        "ok": True,
                        "members": members[start : start + 2],
                        "response_metadata": {"next_cursor": str(start + 2) if more else ""},
                    }
                )

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


def handoff(
    reviewers: list[str] | None = None,
    requester: str | None = None,
    *,
    channel: str = "C0OPS",
    posted_in: str | None = None,
) -> Handoff:
    payload = {"kind": "approval", "action": {"name": "issue_refund", "args": {"amount": 30}}}
    made = make_handoff(payload, reviewers=reviewers or [], requester=requester, channel=channel)
    if posted_in:
        made = made.model_copy(update={"message_refs": {"channel": posted_in, "ts": "1.0"}})
    return made


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

    denial = policy().denial("U9", handoff(["U01", "S0FINANCE"]))

    assert denial == "Only <@U01>, <!subteam^S0FINANCE> can decide this request."


def test_the_requester_may_not_decide_their_own_request(policy: PolicyFactory) -> None:
    denial = policy().denial("U1", handoff(["U1"], requester="U1"))

    assert denial is not None
    assert "someone else" in denial


def test_the_requester_is_refused_even_when_an_admin(policy: PolicyFactory) -> None:
    reviewers = policy(admins=["U1"])

    assert reviewers.denial("U1", handoff(["U1"], requester="U1")) is not None
    assert reviewers.denial("U1", handoff(requester="U1")) is not None


def test_the_requester_may_decide_when_self_approval_is_allowed(
    policy: PolicyFactory, slack: FakeSlack
) -> None:
    slack.channels["C0OPS"] = ["U1", "U2"]
    reviewers = policy(block_self_approval=False, allow_any_channel_member=True)

    assert reviewers.denial("U1", handoff(["U1"], requester="U1")) is None
    assert reviewers.denial("U1", handoff(requester="U1")) is None
    # Being the requester grants nothing by itself.
    assert reviewers.denial("U1", handoff(["U2"], requester="U1")) is not None


def test_admins_may_decide_any_other_request(policy: PolicyFactory, slack: FakeSlack) -> None:
    slack.groups["S0FINANCE"] = ["U2"]

    assert policy(admins=["UADMIN"]).denial("UADMIN", handoff(["U1", "S0FINANCE"])) is None
    assert slack.calls == []


def test_without_reviewers_or_defaults_only_admins_may_decide(
    policy: PolicyFactory, slack: FakeSlack
) -> None:
    slack.channels["C0OPS"] = ["U1", "U2"]
    reviewers = policy(admins=["UADMIN"])

    assert reviewers.denial("UADMIN", handoff()) is None
    assert reviewers.denial("U1", handoff()) == (
        "This request names no reviewers, so only a handoff admin can decide it "
        "(or reassign it to reviewers)."
    )
    assert slack.calls == []  # no need to ask who is in the channel


def test_when_allowed_only_members_of_the_channel_may_decide_an_unassigned_handoff(
    policy: PolicyFactory, slack: FakeSlack
) -> None:
    slack.channels["C0OPS"] = ["U0BOT", "U1", "U2", "U3", "U4"]
    slack.channels["C0PRIVATE"] = ["U9"]
    reviewers = policy(allow_any_channel_member=True)

    assert reviewers.denial("U4", handoff()) is None  # on the third page of members
    assert reviewers.denial("W0ANYONE", handoff(requester="U2")) == (
        "Only members of <#C0OPS> can decide this request."
    )
    # The channel it was posted in counts, not the one it names.
    assert reviewers.denial("U9", handoff(posted_in="C0PRIVATE")) is None
    assert reviewers.denial("U1", handoff(posted_in="C0PRIVATE")) is not None
    # Members are read once per channel (three pages of C0OPS, one of C0PRIVATE), then cached.
    assert slack.calls == ["conversations.members"] * 4


def test_when_slack_cannot_list_a_channel_the_person_is_told_to_try_again(
    policy: PolicyFactory, slack: FakeSlack, redis: Redis
) -> None:
    reviewers = policy(allow_any_channel_member=True)

    assert reviewers.denial("U1", handoff(channel="C0GONE")) == (
        "slack-handoff cannot ask Slack who is in <#C0GONE> right now, so nothing was done. "
        "Please try again in a minute."
    )
    slack.channels["C0GONE"] = ["U1"]
    # A failed lookup is not cached: the next check asks again.
    assert reviewers.denial("U1", handoff(channel="C0GONE")) is None
    assert redis.ttl(BotKeys(KeySpace()).channel_members("C0GONE")) > 0


def test_default_reviewers_apply_when_the_handoff_names_none(
    policy: PolicyFactory, slack: FakeSlack
) -> None:
    slack.groups["S0ONCALL"] = ["U5"]
    reviewers = policy(default_reviewers=["U01", "S0ONCALL"])

    assert reviewers.denial("U01", handoff()) is None
    assert reviewers.denial("U5", handoff()) is None
    assert reviewers.denial("U9", handoff()) == (
        "Only <@U01>, <!subteam^S0ONCALL> can decide this request."
    )
    # The handoff's own reviewers replace the defaults.
    assert reviewers.denial("U01", handoff(["U2"])) is not None


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
