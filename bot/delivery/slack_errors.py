"""Which Slack Web API errors are worth retrying: one table for every delivery job.

Slack answers a call it will not carry out with ``ok: false`` and an ``error`` code (raised by
slack_sdk as ``SlackApiError``, whose ``response`` holds the HTTP status and the code). Some
codes say "not now" (rate limits, Slack's own trouble): a later attempt may succeed. Others say
"never, as things are" (the channel is archived, the bot is not in it, the token is revoked,
the message is malformed): retrying them for minutes only delays telling the agent. See
https://api.slack.com/methods/chat.postMessage#errors and
https://api.slack.com/web#errors for the codes.

An error that is neither listed nor a 429 or 5xx counts as transient: it is retried, and a
delivery whose last attempt fails is closed ``undeliverable`` anyway, so an unknown code only
costs time, never the agent's answer.
"""

from __future__ import annotations

from slack_sdk.errors import SlackApiError

TRANSIENT_ERRORS: frozenset[str] = frozenset(
    {
        "ratelimited",
        "rate_limited",
        "internal_error",
        "fatal_error",
        "service_unavailable",
        "request_timeout",
        "team_added_to_org",  # an Enterprise Grid migration: unavailable until it ends
        "org_login_required",
    }
)
"""Codes after which a later attempt may succeed: Slack's trouble, not the request's."""

PERMANENT_ERRORS: dict[str, str] = {
    # Where it goes
    "is_archived": "the channel is archived",
    "channel_not_found": "the channel does not exist or the bot cannot see it",
    "not_in_channel": "the bot is not a member of the channel",
    "restricted_action": "the workspace does not let the bot post there",
    "restricted_action_read_only_channel": "the channel is read-only",
    "restricted_action_thread_only_channel": "the channel takes thread replies only",
    "restricted_action_non_threadable_channel": "the channel takes no threads",
    "restricted_action_thread_locked": "the thread is locked",
    "cannot_reply_to_message": "the message cannot be replied to",
    "ekm_access_denied": "the workspace's encryption keys refuse access",
    "team_access_not_granted": "the bot's token has no access to that workspace",
    "messages_tab_disabled": "the user's messages tab is disabled",
    "user_not_found": "no such person to write to",
    "user_disabled": "the person's account is deactivated",
    "cannot_dm_bot": "the bot cannot write to another bot",
    # Who posts
    "invalid_auth": "the bot token is invalid",
    "not_authed": "no bot token was sent",
    "account_inactive": "the bot's account is deactivated",
    "token_revoked": "the bot token was revoked",
    "token_expired": "the bot token expired",
    "no_permission": "the bot lacks the permission",
    "missing_scope": "the bot token lacks a needed scope",
    "not_allowed_token_type": "the token is of the wrong type",
    # What is posted
    "msg_too_long": "the message is too long",
    "msg_blocks_too_long": "the message's blocks are too long",
    "invalid_blocks": "Slack refused the message's blocks",
    "invalid_blocks_format": "Slack refused the message's blocks",
    "invalid_attachments": "Slack refused the message's attachments",
    "invalid_metadata_format": "Slack refused the message's metadata",
    "invalid_metadata_schema": "Slack refused the message's metadata",
    "metadata_too_large": "the message's metadata is too large",
    "metadata_must_be_sent_from_app": "the message's metadata needs an app token",
    "no_text": "the message has no text",
    "too_many_attachments": "the message has too many attachments",
    "too_many_contact_cards": "the message has too many contact cards",
    "invalid_arguments": "Slack refused the call's arguments",
    "invalid_arg_name": "Slack refused the call's arguments",
    "invalid_array_arg": "Slack refused the call's arguments",
    "invalid_charset": "Slack refused the call's character set",
    "invalid_form_data": "Slack refused the call's form data",
    "invalid_post_type": "Slack refused the call's content type",
    "missing_post_type": "the call had no content type",
    "method_deprecated": "the API method is deprecated",
    "deprecated_endpoint": "the API method is deprecated",
    "two_factor_setup_required": "the workspace requires two-factor setup",
}
"""Codes no retry can fix, with what each means, in words for an admin."""


def error_code(exc: BaseException) -> str | None:
    """Slack's ``error`` code of ``exc``, or None when it is not a Slack API answer."""
    if not isinstance(exc, SlackApiError):
        return None
    try:
        code = exc.response.get("error")
    except Exception:  # a response that is not a JSON object (a proxy's page)
        return None
    return str(code) if code else None


def is_permanent(exc: BaseException) -> bool:
    """Did Slack refuse the call for good? False for anything a retry may fix: a 429, a
    5xx, a transient code, a lost answer, an unknown code."""
    if not isinstance(exc, SlackApiError):
        return False
    status = getattr(exc.response, "status_code", 200)
    if status == 429 or status >= 500:
        return False
    code = error_code(exc)
    return code is not None and code not in TRANSIENT_ERRORS and code in PERMANENT_ERRORS


MAYBE_CARRIED_OUT_ERRORS: frozenset[str] = frozenset({"internal_error", "fatal_error"})
"""Codes after which Slack may have done part of the call ("It's possible some aspect of the
operation succeeded before the error was raised", says its reference of the first two)."""

_NOT_JSON = "Received a response in a non-JSON format"
"""How slack_sdk's error reads for an answer that was no JSON (cut short, a proxy's page):
it raises ``SlackApiError`` for it, with that text as the error code."""


def maybe_carried_out(exc: BaseException) -> bool:
    """Could Slack have carried the call out although it answered ``exc``? True for a 5xx,
    for Slack's own trouble codes and for an answer that was no JSON (whatever it said, it
    may have been an ``ok: true`` cut short); False for a refusal, after which nothing was
    done."""
    if not isinstance(exc, SlackApiError):
        return False
    if getattr(exc.response, "status_code", 200) >= 500:
        return True
    code = error_code(exc) or ""
    return code in MAYBE_CARRIED_OUT_ERRORS or code.startswith(_NOT_JSON)


RETRY_AFTER_DEFAULT_SECONDS = 60.0
"""How long to wait after a 429 that names no ``Retry-After`` (Slack's limits are per
minute)."""
RETRY_AFTER_MAX_SECONDS = 3600.0
"""Longest wait taken from a ``Retry-After`` (a malformed or hostile header)."""


def retry_after(exc: BaseException) -> float | None:
    """Seconds Slack asked to wait before calling again, when ``exc`` is a 429 (from its
    ``Retry-After`` header); None for any other error."""
    if not isinstance(exc, SlackApiError):
        return None
    response = exc.response
    if getattr(response, "status_code", 200) != 429 and error_code(exc) != "ratelimited":
        return None
    headers = getattr(response, "headers", None) or {}
    value = next((v for k, v in headers.items() if str(k).lower() == "retry-after"), None)
    if isinstance(value, list | tuple):
        value = value[0] if value else None
    try:
        seconds = float(value) if value is not None else RETRY_AFTER_DEFAULT_SECONDS
    except (TypeError, ValueError):
        seconds = RETRY_AFTER_DEFAULT_SECONDS
    if seconds != seconds:  # NaN
        seconds = RETRY_AFTER_DEFAULT_SECONDS
    return min(max(seconds, 1.0), RETRY_AFTER_MAX_SECONDS)


def describe(exc: BaseException) -> str:
    """``exc`` as an admin reads it: ``is_archived (the channel is archived)``."""
    code = error_code(exc)
    if code is None:
        return f"{type(exc).__name__}: {exc}"
    meaning = PERMANENT_ERRORS.get(code)
    return f"{code} ({meaning})" if meaning else code
