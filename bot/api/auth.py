"""Bearer keys: every request names its key (``Authorization: Bearer hk_...``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from bot.api.problems import ApiProblem
from store.api_keys import ApiKey, ApiKeys

_CHALLENGE = 'Bearer realm="handoff"'


def authenticate(request: Request) -> ApiKey:
    """The caller's live key; 401 (with ``WWW-Authenticate``) for none, a malformed one,
    an unknown, revoked or expired one. Read from Redis on every request, so a
    revocation takes effect at once."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise ApiProblem(
            401,
            "send your API key as Authorization: Bearer <key> (`handoff keys create` makes one)",
            headers={"WWW-Authenticate": _CHALLENGE},
        )
    keys: ApiKeys = request.app.state.api_keys
    record = keys.authenticate(token.strip())
    if record is None:
        raise dead_key()
    return record


def dead_key() -> ApiProblem:
    """The 401 for a key that is unknown, revoked or expired."""
    return ApiProblem(
        401,
        "the API key is unknown, revoked or expired",
        headers={"WWW-Authenticate": f'{_CHALLENGE}, error="invalid_token"'},
    )


def require_admin(key: ApiKey) -> None:
    """403 unless ``key`` is an admin key."""
    if not key.admin:
        raise ApiProblem(403, f"key {key.name!r} is not an admin key; this needs one")


Key = Annotated[ApiKey, Depends(authenticate)]
"""The caller's key, as a route parameter (module level: FastAPI resolves annotations by the
module's globals)."""
