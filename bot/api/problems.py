"""Every failure of the API as RFC 9457 problem details (``application/problem+json``),
with the offending fields named; never a traceback, never a 500 for bad input."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from redis.exceptions import RedisError
from starlette.exceptions import HTTPException

from store.exceptions import (
    AlreadyDecided,
    ClaimedByOther,
    ClaimRequired,
    HandoffError,
    HandoffNotFound,
    IdempotencyConflict,
    InvalidDecision,
    InvalidHandoffRequest,
    NotRetryable,
    PayloadTooLarge,
    ReplicasNotConfirmed,
    VoteRefused,
)
from worker.metrics import count_redis_error

logger = logging.getLogger(__name__)

MEDIA_TYPE = "application/problem+json"
_TITLES = {
    400: "Bad request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not found",
    405: "Method not allowed",
    409: "Conflict",
    413: "Content too large",
    415: "Unsupported media type",
    422: "Unprocessable content",
    429: "Too many requests",
    500: "Internal error",
    501: "Not implemented",
    503: "Service unavailable",
}


class ApiProblem(Exception):
    """Raised by the routes: answered as problem details with ``status``."""

    def __init__(
        self,
        status: int,
        detail: str,
        *,
        errors: list[dict[str, str]] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.errors = errors
        self.headers = headers


def problem_response(
    status: int,
    detail: str,
    *,
    errors: list[dict[str, str]] | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    body: dict[str, Any] = {
        "type": "about:blank",
        "title": _TITLES.get(status, "Error"),
        "status": status,
        "detail": detail,
    }
    if errors:
        body["errors"] = errors
    return JSONResponse(body, status_code=status, media_type=MEDIA_TYPE, headers=headers)


def _field(location: tuple[Any, ...]) -> str:
    parts = [str(p) for p in location if p not in ("body",)]
    return ".".join(parts) or "body"


def _validation_errors(exc: RequestValidationError) -> list[dict[str, str]]:
    errors = []
    for error in exc.errors():
        message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
        if error.get("type") == "extra_forbidden":
            message = "unknown field; see GET /v1/openapi.json for the fields"
        errors.append({"field": _field(tuple(error.get("loc", ()))), "message": message})
    return errors


_STATUS_OF_ERROR: list[tuple[type[HandoffError], int]] = [
    (HandoffNotFound, 404),
    (PayloadTooLarge, 413),
    (AlreadyDecided, 409),
    (ClaimedByOther, 409),
    (ClaimRequired, 409),
    (IdempotencyConflict, 409),
    (NotRetryable, 409),
    (VoteRefused, 409),
    (InvalidHandoffRequest, 422),
    (InvalidDecision, 422),
]


def status_of(exc: HandoffError) -> int:
    for kind, status in _STATUS_OF_ERROR:
        if isinstance(exc, kind):
            return status
    return 400


def install(app: FastAPI) -> None:
    """Answer every error the app can meet as problem details."""

    @app.exception_handler(ApiProblem)
    async def _problem(request: Request, exc: ApiProblem) -> JSONResponse:
        return problem_response(exc.status, exc.detail, errors=exc.errors, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = _validation_errors(exc)
        fields = ", ".join(e["field"] for e in errors)
        return problem_response(422, f"the request is not valid: {fields}", errors=errors)

    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: HTTPException) -> JSONResponse:
        detail = exc.detail if isinstance(exc.detail, str) else _TITLES.get(exc.status_code, "")
        return problem_response(
            exc.status_code, detail, headers=dict(exc.headers) if exc.headers else None
        )

    @app.exception_handler(HandoffError)
    async def _store(request: Request, exc: HandoffError) -> JSONResponse:
        if isinstance(exc, ReplicasNotConfirmed):
            # Not the caller's fault: the write may not survive a failover yet, and the
            # same request, sent again, is the same decision (or the same handoff).
            logger.warning("replicas did not confirm %s %s", request.method, request.url.path)
            return problem_response(503, " ".join(str(exc).split()), headers={"Retry-After": "1"})
        return problem_response(status_of(exc), " ".join(str(exc).split()))

    @app.exception_handler(RedisError)
    async def _redis(request: Request, exc: RedisError) -> JSONResponse:
        logger.warning("Redis failed during %s %s: %s", request.method, request.url.path, exc)
        count_redis_error("api")
        return problem_response(
            503, "the store is unavailable; try again shortly", headers={"Retry-After": "5"}
        )

    @app.exception_handler(Exception)
    async def _bug(request: Request, exc: Exception) -> JSONResponse:
        logger.exception("unexpected error in %s %s", request.method, request.url.path)
        return problem_response(500, "internal error; it is logged on the server")
