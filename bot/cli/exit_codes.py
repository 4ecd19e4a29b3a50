"""The exit codes of ``handoff``, one per kind of failure a script may want to tell apart
(documented in docs/cli.md)."""

from __future__ import annotations

from enum import IntEnum

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import ResponseError as RedisResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from store.api_keys import ApiKeyError, ApiKeyNameTaken, UnknownApiKey
from store.exceptions import (
    AlreadyDecided,
    ClaimedByOther,
    ClaimRequired,
    ConfigurationError,
    HandoffError,
    HandoffNotFound,
    IdempotencyConflict,
    InvalidDecision,
    InvalidHandoffRequest,
    NotRetryable,
    VoteRefused,
)


class ExitCode(IntEnum):
    OK = 0
    ERROR = 1
    """Anything not below; also ``handoff check`` finding a problem."""
    USAGE = 2
    """A bad option or argument, a bad setting, or a request that does not fit the handoff
    (an answer for an approval, claiming an approval); click's own usage errors use 2 too."""
    NOT_FOUND = 3
    """No handoff has this id."""
    CONFLICT = 4
    """The handoff is not in a state for this: already decided, claimed by someone else,
    not claimed yet, nothing failed to retry, an idempotency key reused, a vote that cannot
    count (already voted, the requester, arguments edited since)."""
    UNAVAILABLE = 5
    """Redis cannot be reached, timed out, or refused the command."""


_CONFLICTS = (
    AlreadyDecided,
    ClaimedByOther,
    ClaimRequired,
    IdempotencyConflict,
    NotRetryable,
    ApiKeyNameTaken,
    VoteRefused,
)
_USAGE = (ConfigurationError, InvalidHandoffRequest, InvalidDecision, ApiKeyError)


def exit_code_of(exc: HandoffError | RedisError) -> ExitCode:
    """The exit code for an expected failure."""
    if isinstance(exc, (HandoffNotFound, UnknownApiKey)):
        return ExitCode.NOT_FOUND
    if isinstance(exc, _CONFLICTS):
        return ExitCode.CONFLICT
    if isinstance(exc, _USAGE):
        return ExitCode.USAGE
    if isinstance(exc, (RedisConnectionError, RedisTimeoutError, RedisResponseError)):
        return ExitCode.UNAVAILABLE
    if isinstance(exc, RedisError):
        return ExitCode.UNAVAILABLE
    return ExitCode.ERROR
