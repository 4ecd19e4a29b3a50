"""The FastAPI app of ``handoff api``: routes over the same store as everything else.

Reads and changes are the store's own calls (one Lua script each, so a decision here is
as exactly-once as one in Slack); FastAPI runs the plain ``def`` routes in its thread pool,
and the long-poll wait is ``async`` so that thousands of held requests cost no threads.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Annotated, Any

import anyio
import httpx
from fastapi import FastAPI, Header, Query, Request, Response
from pydantic import ValidationError
from redis import Redis
from redis.asyncio import BlockingConnectionPool as AsyncBlockingConnectionPool
from redis.asyncio import Redis as AsyncRedis
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from bot import mcp as mcp_extra
from bot.api.auth import Key, dead_key, require_admin
from bot.api.humanlayer import install_humanlayer
from bot.api.problems import ApiProblem, install, problem_response
from bot.api.schemas import (
    IDEMPOTENCY_KEY_MAX,
    AuditEventOut,
    AuditPage,
    CancelHandoff,
    CreateHandoff,
    DecideHandoff,
    HandoffOut,
    HandoffPage,
    Problem,
)
from bot.api.waiters import AsyncReads, DecisionHub
from store.api_keys import ApiKey, ApiKeys
from store.arg_schemas import argument_errors
from store.canonical import canonical_json
from store.connection import open_async_client, parse_redis_url
from store.decoding import as_text, well_formed
from store.exceptions import HandoffError, HandoffNotFound, IdempotencyConflict
from store.ids import new_handoff_id
from store.metrics import FigureReader
from store.models import AuditEvent, Callback, Handoff, HandoffRequest, RequestType, Status
from store.repository import Created, HandoffStore
from store.trace_context import trace_context_of
from worker import metrics
from worker.outbound import UnsafeUrl, check_url
from worker.tracing import span

if TYPE_CHECKING:
    from bot.mcp.server import Api

API_VERSION = "1"
MAX_POLL_SECONDS = 60
JSON = "application/json"
READ_CONNECTIONS = 32
"""Redis connections the waits' reads share (each read takes one for a round trip)."""
_BODY_OVERHEAD = 16 * 1024
"""Bytes of a create body beyond its context and payload (ids, routing, metadata keys)."""
TRACEPARENT_HELP = (
    "The caller's trace (W3C Trace Context): the handoff's delivery, decision and resume "
    "continue it when traces are configured. Ignored when malformed."
)
TRACESTATE_HELP = "Kept with traceparent (W3C Trace Context), up to 512 characters."


@dataclass(frozen=True)
class ApiConfig:
    """What the API needs besides the store."""

    redis_url: str
    """The store's Redis, for the waits' own (asyncio) connection."""
    creates_per_minute: int = 600
    webhook_allowed_hosts: frozenset[str] = field(default_factory=frozenset)
    metrics: bool = True
    """Serve ``GET /metrics`` (``HANDOFF_METRICS``)."""


class BodyLimit:
    """Refuse a request body over ``limit`` bytes (``wider[path]`` on those paths) with 413,
    before the app reads it.

    A body with a ``Content-Length`` over the limit is refused unread; one without (chunked)
    is read here up to the limit, then handed on whole: raising from inside the app's own
    read would come out as FastAPI's 400, not 413. The limit is small (the payload limit
    plus an envelope), so holding it costs little.
    """

    def __init__(self, app: ASGIApp, limit: int, wider: dict[str, int] | None = None) -> None:
        self.app = app
        self.limit = limit
        self.wider = wider or {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.wider.get(scope["path"], self.limit)
        declared = dict(scope.get("headers", [])).get(b"content-length")
        if declared is not None:
            if declared.isdigit() and int(declared) > limit:
                await self._refuse(scope, limit, receive, send)
                return
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break  # the client went away
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > limit:
                await self._refuse(scope, limit, receive, send)
                return
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, scope: Scope, limit: int, receive: Receive, send: Send) -> None:
        response = problem_response(
            413, f"the body is over {limit} bytes; send a summary and keep the rest"
        )
        await response(scope, receive, send)


class _BearerGate:
    """The API's bearer-key check in front of the MCP app (401 as for /v1), and the path the
    MCP app routes on."""

    def __init__(self, app: ASGIApp, keys: ApiKeys) -> None:
        self.app = app
        self.keys = keys

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        given = [v for k, v in scope.get("headers", []) if k.lower() == b"authorization"]
        header = given[0].decode("latin-1") if len(given) == 1 else ""  # one key, no doubt
        scheme, _, token = header.partition(" ")
        key = None
        if scheme.lower() == "bearer" and token.strip():
            key = await anyio.to_thread.run_sync(self.keys.authenticate, token.strip())
        if key is None:
            response = problem_response(
                401,
                "send your API key as Authorization: Bearer <key>",
                headers={"WWW-Authenticate": 'Bearer realm="handoff"'},
            )
            await response(scope, receive, send)
            return
        await self.app({**scope, "path": "/", "raw_path": b"/"}, receive, send)


def _in_process_api(app: FastAPI, ctx: Any) -> Api:
    """The HTTP API as the MCP caller's key sees it, called in process."""
    from bot.mcp.server import Api

    headers = ctx.headers or {}
    authorization = headers.get("authorization") or headers.get("Authorization") or ""
    client = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://handoff-api",
        headers={"Authorization": authorization},
        timeout=httpx.Timeout(10.0, read=MAX_POLL_SECONDS + 15),
    )
    return Api("http://handoff-api", "", client=client)


def _mount_mcp(app: FastAPI, keys: ApiKeys) -> Any:
    """The MCP tools over Streamable HTTP at /mcp, and the server to run with the app; or,
    without the mcp extra, a /mcp that says how to install it (and None)."""
    if not mcp_extra.installed():

        async def not_installed(request: Request) -> Response:
            return problem_response(501, mcp_extra.NOT_INSTALLED)

        app.router.routes.append(
            Route("/mcp", endpoint=not_installed, methods=["GET", "POST", "DELETE"])
        )
        return None
    from bot.mcp.server import build_server

    # Each call goes through this app's own routes (in process) with the caller's key, so
    # the keys' scopes hold there too.
    server = build_server(lambda ctx: _in_process_api(app, ctx), run_id="mcp")
    # Each call's answer is a stream (SSE): progress goes out while the person decides, and a
    # host that goes away ends the stream, which cancels the call and its wait.
    mcp_http = server.streamable_http_app(streamable_http_path="/", stateless_http=True)
    app.router.routes.append(
        Route("/mcp", endpoint=_BearerGate(mcp_http, keys), methods=["GET", "POST", "DELETE"])
    )
    return server


def _visible(handoff: Handoff, key: ApiKey) -> bool:
    return key.admin or handoff.api_key == key.name


def build_app(store: HandoffStore, config: ApiConfig) -> FastAPI:
    """The API over ``store``."""
    keys = ApiKeys(store.redis, store.keys, acks=store.config.replica_acks)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # The subscription's connection waits for messages as long as it likes (a health
        # check finds a dead one); reads give up after a few seconds (a 503), and share a
        # bounded pool, however many waits are held.
        subscriber = open_async_client(
            config.redis_url, socket_connect_timeout=2, health_check_interval=15
        )
        if parse_redis_url(config.redis_url).kind == "server":
            readers = AsyncRedis(
                connection_pool=AsyncBlockingConnectionPool.from_url(
                    config.redis_url,
                    max_connections=READ_CONNECTIONS,
                    timeout=10,
                    socket_connect_timeout=2,
                    socket_timeout=5,
                )
            )
        else:
            # Through Sentinel: the pool that follows the master (it does not block when
            # full; redis-py has no blocking one of its kind).
            readers = open_async_client(
                config.redis_url, socket_connect_timeout=2, socket_timeout=5
            )
        hub = DecisionHub(subscriber, store.keys)
        await hub.start()
        app.state.hub = hub
        app.state.reads = AsyncReads(readers, store)
        try:
            async with AsyncExitStack() as running:
                if mcp_server is not None:
                    await running.enter_async_context(mcp_server.session_manager.run())
                yield
        finally:
            await hub.stop()
            await subscriber.aclose()
            await readers.aclose()

    app = FastAPI(
        title="slack-handoff API",
        version=API_VERSION,
        summary="AI agents hand work to people in Slack and get it back.",
        openapi_url="/v1/openapi.json",
        docs_url="/v1/docs",
        redoc_url=None,
        lifespan=lifespan,
        responses={
            401: {"model": Problem, "description": "No, a malformed or a dead key."},
            422: {"model": Problem, "description": "A field is missing or wrong."},
        },
    )
    app.state.store = store
    app.state.api_keys = keys
    install(app)
    mcp_server = _mount_mcp(app, keys)
    limit = store.config.max_payload_bytes + _BODY_OVERHEAD
    # A tool call over /mcp may be larger than the create it makes: its own limit is the
    # create's own check (a tool error that says what to do), not a bare 413 on the envelope.
    app.add_middleware(BodyLimit, limit=limit, wider={"/mcp": 2 * limit})

    def visible(handoff_id: str, key: ApiKey) -> Handoff:
        handoff = store.get(handoff_id)  # HandoffNotFound: 404
        if not _visible(handoff, key):
            # Another key's handoff is "not found", in the same words, so ids do not leak.
            raise HandoffNotFound(handoff_id)
        return handoff

    @app.get("/healthz", include_in_schema=False)
    def healthz() -> dict[str, str]:
        store.redis.ping()
        return {"status": "ok"}

    if config.metrics:
        # This process's counts (`handoff api` counts in its own memory:
        # metrics.use_single_process_mode) and the store's figures, read at most once a
        # second (in a thread: the read blocks).
        registry = metrics.exposition_registry(FigureReader(store.redis, store.keys), process="api")

        @app.get("/metrics", include_in_schema=False)
        def metrics_page() -> Response:
            return Response(metrics.exposition(registry), media_type=metrics.CONTENT_TYPE)

    def create(
        body: CreateHandoff,
        key: ApiKey,
        idempotency_key: str | None,
        trace_context: dict[str, str] | None = None,
    ) -> Created:
        """The one way the API creates a handoff: checked, idempotent, counted per key."""
        request = _request_of(body, key, idempotency_key, config, trace_context)
        scoped = request.idempotency_key
        claim = _claim_idempotency(store, scoped, body) if scoped else None
        try:
            # Only a replay of a create that happened is not counted: one whose first
            # request is still under way (or failed, and released the key) counts.
            replay = bool(
                claim is not None
                and not claim.claimed
                and scoped
                and store.created_under(scoped) is not None
            )
            if not replay:
                wait = keys.take_create(key, default_per_minute=config.creates_per_minute)
                if wait is not None:
                    raise ApiProblem(
                        429,
                        f"key {key.name!r} created its handoffs for this minute; retry "
                        f"after {wait:.0f} s",
                        headers={"Retry-After": str(int(wait + 0.999))},
                    )
            made = store.create(request, handoff_id=new_handoff_id(), actor=f"api:{key.name}")
        except BaseException as exc:
            if claim is not None and claim.claimed and scoped:
                # Nothing was created under the key by this request: a corrected request may
                # use it (a conflict found another request's handoff under it).
                if isinstance(exc, IdempotencyConflict):
                    _drop_claim(store, claim)
                else:
                    _release_idempotency(store, scoped, claim)
            raise
        if (
            claim is not None
            and claim.claimed
            and not made.created
            and _created_before_claim(store, claim, made.handoff)
        ):
            # This request wrote the key's body record, yet the key named a handoff made
            # before that: its first body's record was gone (one written before 0.2
            # expired), so nothing says this body is that one. Refused, and the record this
            # request wrote goes. (One made after the claim is a twin's, which found this
            # request's record: the same body.)
            _drop_claim(store, claim)
            raise ApiProblem(
                409,
                "this Idempotency-Key was used before and its first body is no longer on "
                "record; use a new key for a new request",
            )
        if claim is not None:
            _keep_idempotency(store, claim)
        return made

    install_humanlayer(app, store=store, create=create, visible=visible)

    @app.post(
        "/v1/handoffs",
        status_code=201,
        response_model=HandoffOut,
        responses={
            200: {"model": HandoffOut, "description": "Created before, same key and body."},
            409: {"model": Problem, "description": "Idempotency key reused, another body."},
            413: {"model": Problem, "description": "Context and payload over the limit."},
            429: {"model": Problem, "description": "Over the key's creates per minute."},
        },
    )
    def create_handoff(
        body: CreateHandoff,
        key: Key,
        response: Response,
        idempotency_key: Annotated[str | None, Header(max_length=IDEMPOTENCY_KEY_MAX)] = None,
        traceparent: Annotated[str | None, Header(description=TRACEPARENT_HELP)] = None,
        tracestate: Annotated[str | None, Header(description=TRACESTATE_HELP)] = None,
    ) -> HandoffOut:
        """Create a handoff; it is posted to Slack by a worker."""
        trace = trace_context_of({"traceparent": traceparent or "", "tracestate": tracestate or ""})
        created = create(body, key, idempotency_key, trace)
        response.status_code = 201 if created.created else 200
        response.headers["Location"] = f"/v1/handoffs/{created.handoff.id}"
        return HandoffOut.of(created.handoff)

    @app.get("/v1/handoffs/{handoff_id}", response_model=HandoffOut)
    async def get_handoff(
        handoff_id: str,
        key: Key,
        request: Request,
        wait: Annotated[
            float,
            Query(
                ge=0,
                le=MAX_POLL_SECONDS,
                description="Hold the request up to this many seconds until the handoff "
                "is decided; answers with its state either way.",
            ),
        ] = 0,
    ) -> Response:
        """A handoff; with ``wait``, once it is decided or the time is up."""
        hub: DecisionHub = request.app.state.hub
        reads: AsyncReads = request.app.state.reads

        live = True  # the key not revoked, as read with the handoff in a wait

        async def read(*, with_key: bool = False) -> Handoff:
            nonlocal live
            if with_key:
                handoff, live = await reads.get_with_key(handoff_id, key.name)
            else:
                handoff = await reads.get(handoff_id)
            if not _visible(handoff, key):
                raise HandoffNotFound(handoff_id)
            return handoff

        event = hub.register(handoff_id) if wait else None
        try:
            handoff = await read(with_key=event is not None)
            if event is not None:
                deadline = anyio.current_time() + wait
                while handoff.is_pending:
                    remaining = deadline - anyio.current_time()
                    if remaining <= 0:
                        break
                    with anyio.move_on_after(remaining):
                        await event.wait()
                    event.clear()
                    handoff = await read(with_key=True)
                if handoff.is_pending:  # the time is up: the key as it is now
                    live = await reads.key_is_live(key.name)
                if key.expired() or not live:
                    # Revoked (or expired) while it waited: "takes effect at once".
                    raise dead_key()
            if not handoff.is_pending:
                await reads.confirm_replicated(handoff_id)
            # Serialized here, once: returned as a model, FastAPI would validate it again
            # against the response model, which costs more than the read when a thousand
            # waits wake together.
            return Response(HandoffOut.of(handoff).model_dump_json(), media_type=JSON)
        finally:
            if event is not None:
                hub.unregister(handoff_id, event)

    @app.get("/v1/handoffs", response_model=HandoffPage)
    def list_handoffs(
        key: Key,
        status: Annotated[Status, Query(description="Only pending can be listed.")] = (
            Status.PENDING
        ),
        run_id: str | None = None,
        channel: str | None = None,
        cursor: Annotated[str | None, Query(max_length=64)] = None,
        limit: Annotated[int, Query(ge=1, le=200)] = 50,
    ) -> HandoffPage:
        """Pending handoffs, oldest first, a page at a time (agent keys: their own)."""
        if status is not Status.PENDING:
            raise ApiProblem(
                422,
                "only pending handoffs are listed; read a decided one by its id",
                errors=[{"field": "status", "message": "must be pending"}],
            )
        if run_id and channel:
            raise ApiProblem(
                422,
                "filter by run_id or by channel, not both",
                errors=[{"field": "channel", "message": "give run_id or channel"}],
            )
        if not key.admin:
            # An agent key pages through its own index only, so neither the handoffs nor
            # the cursors of other keys show; the filters apply within it.
            index: str | None = store.keys.pending_by_key(key.name)
        elif run_id:
            index = store.keys.pending_by_run(run_id)
        elif channel:
            index = store.keys.pending_by_channel(channel)
        else:
            index = None  # every pending handoff
        page = store.list_pending(index, cursor=cursor, limit=limit)
        shown = [
            HandoffOut.of(h)
            for h in page.items
            if _visible(h, key)
            and (not run_id or h.run_id == run_id)
            and (not channel or h.channel == channel)
        ]
        return HandoffPage(handoffs=shown, next_cursor=page.next_cursor)

    @app.get("/v1/handoffs/{handoff_id}/audit", response_model=AuditPage)
    def handoff_audit(handoff_id: str, key: Key) -> AuditPage:
        """The handoff's audit trail, oldest first."""
        visible(handoff_id, key)
        events = [
            AuditEventOut(
                id=None,
                time=e.at,
                event=e.event,
                actor=e.actor,
                handoff_id=e.handoff_id,
                detail=e.detail,
            )
            for e in store.audit_trail(handoff_id)
        ]
        return AuditPage(events=events, next_cursor=None)

    @app.get("/v1/audit", response_model=AuditPage, responses={403: {"model": Problem}})
    def namespace_audit(
        key: Key,
        cursor: Annotated[
            str | None, Query(pattern=r"^[0-9]{1,20}-[0-9]{1,20}$", description="A stream id.")
        ] = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 200,
    ) -> AuditPage:
        """Admin keys: every audit event of the namespace, oldest first (as `handoff audit
        export` writes them), a page at a time."""
        require_admin(key)
        entries = list(store.audit_entries(after=cursor, limit=limit + 1))
        shown = entries[:limit]
        events = []
        for entry in shown:
            if not entry.raw:
                continue
            event = AuditEvent.from_json(entry.raw)
            events.append(
                AuditEventOut(
                    id=entry.id,
                    time=event.at,
                    event=event.event,
                    actor=event.actor,
                    handoff_id=event.handoff_id,
                    detail=event.detail,
                )
            )
        more = len(entries) > limit
        return AuditPage(events=events, next_cursor=shown[-1].id if more and shown else None)

    @app.post("/v1/handoffs/{handoff_id}/cancel", response_model=HandoffOut)
    def cancel_handoff(handoff_id: str, key: Key, body: CancelHandoff | None = None) -> HandoffOut:
        """Withdraw a pending handoff; the run is resumed with ``cancelled``."""
        visible(handoff_id, key)
        reason = body.reason if body else None
        handoff = store.cancel(handoff_id, cancelled_by=f"api:{key.name}", reason=reason)
        return HandoffOut.of(handoff)

    @app.post(
        "/v1/handoffs/{handoff_id}/decision",
        response_model=HandoffOut,
        responses={
            403: {"model": Problem, "description": "Not an admin key."},
            409: {"model": Problem, "description": "Already decided (names who decided)."},
        },
    )
    def decide_handoff(handoff_id: str, body: DecideHandoff, key: Key) -> HandoffOut:
        """Decide a pending handoff (admin keys), exactly once as in Slack."""
        require_admin(key)
        current = store.get(handoff_id)
        if body.edited_args is not None:
            _check_edited_args(current, body.edited_args)
        via = f"api:{key.name}"
        attributes = {
            "handoff.id": handoff_id,
            "handoff.run_id": current.run_id,
            "handoff.via": via,
        }
        with span("handoff.decide", current.trace_context, attributes, refusals=(HandoffError,)):
            handoff = store.decide(
                handoff_id,
                body.outcome,
                decided_by=body.by,
                via=via,
                comment=body.comment,
                answer=body.answer if current.request_type is not RequestType.CORRECTION else None,
                corrected_draft=(
                    body.answer if current.request_type is RequestType.CORRECTION else None
                ),
                answer_data=body.answer_data,
                edited_args=body.edited_args,
                respect_claim=False,
            )
        return HandoffOut.of(handoff)

    return app


def _request_of(
    body: CreateHandoff,
    key: ApiKey,
    idempotency_header: str | None,
    config: ApiConfig,
    trace_context: dict[str, str] | None = None,
) -> HandoffRequest:
    """The store's request for ``body``, or a 422/403 saying what is wrong."""
    misplaced = body.misplaced_fields()
    if misplaced:
        raise ApiProblem(
            422,
            f"fields of another request type than {body.request_type.value}: "
            f"{', '.join(misplaced)}",
            errors=[
                {"field": name, "message": f"not a field of a {body.request_type.value}"}
                for name in misplaced
            ],
        )
    try:
        payload = body.payload()
    except (ValueError, ValidationError) as exc:
        field_name, _, message = str(exc).partition(": ")
        raise ApiProblem(
            422, str(exc), errors=[{"field": field_name, "message": message or str(exc)}]
        ) from None
    # A key kept to one channel posts there when the request names none (a permission
    # prompt, a HumanLayer call without a Slack channel, cannot name one).
    channel = body.channel or (key.channels[0] if len(key.channels) == 1 else None)
    if not key.may_post_in(channel):
        raise ApiProblem(
            403,
            f"key {key.name!r} may create handoffs only in {', '.join(key.channels)}",
            errors=[{"field": "channel", "message": "not one of the key's channels"}],
        )
    callback = None
    if body.callback is not None:
        try:
            check_url(body.callback.url, allowed_hosts=config.webhook_allowed_hosts)
        except UnsafeUrl as exc:
            raise ApiProblem(
                422, str(exc), errors=[{"field": "callback.url", "message": str(exc)}]
            ) from None
        callback = Callback(url=body.callback.url)
    idem = idempotency_header or body.idempotency_key
    try:
        return HandoffRequest.model_validate(
            {
                "run_id": body.run_id,
                "thread_id": body.thread_id,
                "request_type": body.request_type,
                "context": body.context,
                "payload": payload,
                "channel": channel,
                "reviewers": body.reviewers,
                "requester": body.requester,
                "idempotency_key": f"{key.name}/{idem}" if idem else None,
                "expires_in_seconds": body.expires_in_seconds,
                "metadata": body.metadata,
                "api_key": key.name,
                "callback": callback,
                "trace_context": trace_context,
            }
        )
    except ValidationError as exc:
        errors = []
        for e in exc.errors():
            message = str(e["msg"]).removeprefix("Value error, ")
            field_name = ".".join(str(p) for p in e["loc"])
            if not field_name:  # a check of the whole request names the field itself
                field_name, _, rest = message.partition(": ")
                message = rest or message
            errors.append({"field": field_name or "body", "message": message})
        fields = ", ".join(e["field"] for e in errors)
        raise ApiProblem(422, f"the request is not valid: {fields}", errors=errors) from None


CLAIM_SECONDS = 3600
"""How long a claim on an idempotency key's body record lasts before its create makes it
permanent: longer than any request takes."""


@dataclass(frozen=True)
class _BodyClaim:
    """This request's claim on an idempotency key's body record (``{ns}:idembody:<key>``):
    the digest of its body and a token of its own, so that a resent claim (its reply lost)
    is known as this request's, not another's."""

    where: str
    digest: str
    token: str
    claimed: bool
    """Whether this request wrote the record (False: an earlier request with the same body
    did)."""

    @property
    def value(self) -> str:
        return f"{self.digest} {self.token}"


def _claim_idempotency(store: HandoffStore, scoped_key: str, body: CreateHandoff) -> _BodyClaim:
    """Remember the body first used with an idempotency key; 409 for another body.

    The store's idempotency returns the first handoff for a key whatever the request; the
    API promises more (the same key with a different body is an error), so it keeps a
    digest of the canonical JSON (RFC 8785) of the first body under the key, for as long as
    the key names a handoff: the purge deletes it with the key (records written before 0.2
    expire after the retention period and a day).
    """
    # Lone surrogates are stored as U+FFFD (the request's own validator does the same), and
    # no canonical form takes them.
    dumped = well_formed(body.model_dump(mode="json", exclude={"idempotency_key"}))
    digest = hashlib.sha256(canonical_json(dumped)).hexdigest()
    claim = _BodyClaim(store.keys.idempotency_body(scoped_key), digest, secrets.token_hex(8), True)
    redis: Redis = store.redis
    for _ in range(3):
        # For as long as a request may take: one that dies before creating leaves the key
        # free again after that. A create makes the record permanent (_keep_idempotency).
        if redis.set(claim.where, claim.value, nx=True, ex=CLAIM_SECONDS):
            return claim
        first = redis.get(claim.where)
        if first is None:
            continue  # released just now by a first request that failed: claim it again
        first_digest, _, first_token = as_text(first).partition(" ")
        if first_token == claim.token:
            return claim  # this request's own claim, its reply lost and the SET resent
        if first_digest != digest:
            raise ApiProblem(
                409,
                "this Idempotency-Key was used with another body; use a new key for a new request",
            )
        return replace(claim, claimed=False)
    raise ApiProblem(409, "this Idempotency-Key is in use by a request under way; retry")


def _release_idempotency(store: HandoffStore, scoped_key: str, claim: _BodyClaim) -> None:
    """Forget a body record this request claimed for a create that then failed, unless the
    store did create a handoff under the key after all (another request's: the record is
    then that request's body's, as a twin with the same body wrote it)."""
    if store.created_under(scoped_key) is None:
        _drop_claim(store, claim)


def _created_before_claim(store: HandoffStore, claim: _BodyClaim, handoff: Handoff) -> bool:
    """Whether ``handoff`` (under the key) was made before this request claimed the key's
    body record: by the server's clock, from how much of the claim's TTL is left (its expiry
    less its TTL is when it was set, to the millisecond; a few milliseconds' margin)."""
    with store.redis.pipeline(transaction=False) as pipe:
        pipe.pttl(claim.where)
        pipe.time()
        left_ms, (seconds, micros) = pipe.execute()
    if left_ms == -1:
        return False  # made permanent by a create under the key that found it: a twin's
    if left_ms < 0:
        return True  # gone: nothing to vouch for this body
    claimed_at_ms = int(seconds) * 1000 + int(micros) // 1000 - (CLAIM_SECONDS * 1000 - left_ms)
    return handoff.created_at.timestamp() * 1000 < claimed_at_ms - 5


def _drop_claim(store: HandoffStore, claim: _BodyClaim) -> None:
    """Delete the key's body record if it is still this request's claim (a conflict, or a
    key found taken without a record: the handoff under it is not this request's)."""
    if store.redis.get(claim.where) == claim.value.encode():
        store.redis.delete(claim.where)


def _keep_idempotency(store: HandoffStore, claim: _BodyClaim) -> None:
    """The key names a handoff now: its body record is there (a first request that failed
    may have released it while this one, with the same body, was creating), for as long as
    the key (the purge deletes it; one written before 0.2 loses its TTL here too)."""
    with store.redis.pipeline(transaction=False) as pipe:
        pipe.set(claim.where, claim.value, nx=True)
        pipe.persist(claim.where)
        pipe.execute()


def _check_edited_args(handoff: Handoff, edited: dict[str, Any]) -> None:
    action = getattr(handoff.payload, "action", None)
    if action is None:
        raise ApiProblem(
            422,
            "edited_args are for approvals",
            errors=[{"field": "edited_args", "message": "only an approval has args"}],
        )
    if action.args_schema:
        problems = [
            {
                "field": "edited_args" + "".join(f".{p}" for p in error.path),
                "message": error.message,
            }
            for error in argument_errors(action.args_schema, edited)
        ]
        if problems:
            raise ApiProblem(422, "edited_args do not fit the action's schema", errors=problems)
