"""bot.delivery.slack_errors: which Slack errors a retry may fix, and which it never will."""

from __future__ import annotations

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web import SlackResponse

from bot.delivery.slack_errors import PERMANENT_ERRORS, TRANSIENT_ERRORS, describe, is_permanent


def _error(code: str | None, status: int = 200) -> SlackApiError:
    data = {"ok": False, "error": code} if code else {"ok": False}
    response = SlackResponse(
        client=None,
        http_verb="POST",
        api_url="https://slack.com/api/chat.postMessage",
        req_args={},
        data=data,
        headers={},
        status_code=status,
    )
    return SlackApiError("refused", response)


@pytest.mark.parametrize(
    "code",
    [
        "is_archived",
        "channel_not_found",
        "not_in_channel",
        "invalid_auth",
        "account_inactive",
        "token_revoked",
        "missing_scope",
        "msg_too_long",
        "invalid_blocks",
        "no_text",
        "too_many_attachments",
    ],
)
def test_refusals_no_retry_can_fix_are_permanent(code: str) -> None:
    assert is_permanent(_error(code))
    assert code in describe(_error(code))


@pytest.mark.parametrize(
    "code",
    ["ratelimited", "internal_error", "fatal_error", "service_unavailable", "request_timeout"],
)
def test_slacks_own_trouble_is_transient(code: str) -> None:
    assert not is_permanent(_error(code))


def test_429s_5xx_unknown_codes_and_other_exceptions_are_transient() -> None:
    assert not is_permanent(_error("is_archived", status=429))
    assert not is_permanent(_error("is_archived", status=503))
    assert not is_permanent(_error("some_new_error"))
    assert not is_permanent(_error(None))
    assert not is_permanent(TimeoutError("read timed out"))


def test_no_code_is_both_permanent_and_transient() -> None:
    assert not set(PERMANENT_ERRORS) & TRANSIENT_ERRORS
