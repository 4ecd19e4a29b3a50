"""Approvals and questions for plain Python agents, no framework needed.

``@require_approval`` guards a tool function (sync or async): each call is shown to a
reviewer with its arguments by name (positional ones too) and runs only once approved,
with the reviewer's edits applied. The wrapper keeps the function's name, signature,
annotations and docstring, so a framework that builds a tool schema from it (LangChain's
``@tool``, the OpenAI Agents SDK's ``function_tool``, pydantic) sees the original.

``ask_human(question)`` asks a person and returns the answer; ``question_tool()`` makes a
tool function of it for a framework.

Both work two ways:

- **Blocking** (the default): the call waits for the decision (pushed over Redis, no
  polling). A rejection raises ``ApprovalRejected`` / ``QuestionDeclined`` or returns a
  message, as configured; the tool's own exceptions always propagate unchanged. A wait that
  times out cancels the handoff (a late approval must not look like it ran anything) and
  raises ``DecisionTimeout``.
- **Durable**: ``tool.submit(...)`` / ``ask_human(..., resume="module:function")`` create
  the handoff and return it at once; a worker runs the approved call (or your resume
  target) once, when it is decided, even weeks later.

Example::

    handoffs = Handoffs.from_env()

    @require_approval(handoffs=handoffs, reviewers=["U0ALICE"], on_reject="message")
    def issue_refund(order_id: str, amount_usd: int) -> str:
        \"\"\"Refund part of an order.\"\"\"
        return payments.refund(order_id, amount_usd, idempotency_key=current_handoff().id)

    with handoff_run("run-42"):
        issue_refund("A-1001", 30)              # blocks until a person decides
        issue_refund.submit("A-1002", 10)       # returns the pending handoff at once
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import logging
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Literal, ParamSpec, Protocol, TypeVar, Unpack, cast, overload

from pydantic import BaseModel, Field, TypeAdapter

from store.approved_action import check_approved_action
from store.exceptions import AlreadyDecided, HandoffError
from store.models import Handoff, Status
from worker.adapters.pauses import (
    HandoffOptions,
    RequestDefaults,
    decision_note,
    edited_args,
    load_object,
    option_names,
    proposed_action,
)
from worker.client import Handoffs, RequestOptions, reject_unknown_options
from worker.resume_targets import ResumeTargetRefused

logger = logging.getLogger(__name__)

APPROVED_CALL_TARGET = "worker.adapters.decorators:run_approved_call"
"""The resume target of handoffs created by ``submit`` on a ``@require_approval`` tool."""

METADATA_KEY = "require_approval"
"""Where in a handoff's metadata ``submit`` keeps the call the worker makes."""

OnRefusal = Literal["raise", "message"] | Callable[[Handoff], Any]
"""What a refused call does: raise, return a message for the model, or return what the
callable makes of the decided handoff."""

HandoffsSource = Handoffs | Callable[[], Handoffs] | None
"""A client, a function making one (called once), or None for ``Handoffs.from_env()``."""

P = ParamSpec("P")
R = TypeVar("R")

# Parameters shown to nobody and never editable (bound methods).
_ALWAYS_HIDDEN = frozenset({"self", "cls"})


class ApprovalRejected(HandoffError):
    """The call was not approved: rejected, expired or cancelled. ``handoff`` tells who
    decided what and why."""

    def __init__(self, handoff: Handoff, message: str) -> None:
        super().__init__(message)
        self.handoff = handoff


class QuestionDeclined(HandoffError):
    """The question got no answer: rejected, expired or cancelled."""

    def __init__(self, handoff: Handoff, message: str) -> None:
        super().__init__(message)
        self.handoff = handoff


class DecisionTimeout(HandoffError, TimeoutError):
    """Nobody decided within the wait's timeout; the handoff was cancelled."""

    def __init__(self, handoff: Handoff, timeout: float | None) -> None:
        super().__init__(
            f"handoff {handoff.id} was not decided within {timeout} s and was cancelled"
        )
        self.handoff = handoff


class ApprovalGuarded(Protocol[P, R]):
    """A function wrapped by ``require_approval``: call it (blocking), or ``submit`` it."""

    __wrapped__: Callable[P, R]

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R: ...

    def submit(self, *args: P.args, **kwargs: P.kwargs) -> Handoff:
        """Request approval and return the pending handoff; a worker makes the call."""
        ...


class ApprovedCall(BaseModel):
    """What the worker needs to make a submitted call, kept in ``metadata``."""

    function: str
    hidden: dict[str, Any] = Field(default_factory=dict)
    then: str | None = None


_run: ContextVar[tuple[str, str] | None] = ContextVar("slack_handoff_run", default=None)
_current: ContextVar[Handoff | None] = ContextVar("slack_handoff_current", default=None)


@contextmanager
def handoff_run(run_id: str, thread_id: str | None = None) -> Iterator[None]:
    """Make ``run_id`` (and ``thread_id``, default: the run id) the run of every approval
    and question asked in this block that names none itself."""
    token = _run.set((run_id, thread_id or run_id))
    try:
        yield
    finally:
        _run.reset(token)


def current_handoff() -> Handoff | None:
    """Inside an approved call: the approval's handoff. Its id is a stable idempotency key
    for the call's side effects (a durable call retried after a crash gets the same)."""
    return _current.get()


class ApprovalOptions(HandoffOptions, total=False):
    """Options of ``require_approval`` (besides those of every handoff)."""

    handoffs: HandoffsSource
    """The client (default: ``Handoffs.from_env()``, made on first use)."""
    action: str | None
    """What the reviewer sees as the action (default: the function's name)."""
    description: str | None
    """Default: the first paragraph of the function's docstring."""
    run_id: str | None
    """Default: from ``handoff_run(...)``, else a new run id."""
    thread_id: str | None
    """Default: from ``handoff_run(...)``, else the run id."""
    timeout: float | None
    """Longest blocking wait in seconds (default None: until decided or expired)."""
    on_reject: OnRefusal
    """``"raise"`` (default: ``ApprovalRejected``), ``"message"`` (return a sentence for
    the model), or a callable given the decided handoff whose result is returned."""
    hide: Sequence[str]
    """Parameters not shown to (nor editable by) the reviewer; ``self`` and ``cls`` are
    always hidden."""
    then: str | None
    """For ``submit``: a ``"module:function"`` the worker calls as ``fn(handoff, result)``
    after the approved call (``result`` is None when refused)."""


@overload
def require_approval(func: Callable[P, R], /) -> ApprovalGuarded[P, R]: ...


@overload
def require_approval(
    func: None = None, /, **options: Unpack[ApprovalOptions]
) -> Callable[[Callable[P, R]], ApprovalGuarded[P, R]]: ...


def require_approval(
    func: Callable[P, R] | None = None, /, **options: Unpack[ApprovalOptions]
) -> ApprovalGuarded[P, R] | Callable[[Callable[P, R]], ApprovalGuarded[P, R]]:
    """Run the decorated function only once a person approves the call.

    Use it bare (``@require_approval``) or with ``ApprovalOptions``
    (``@require_approval(reviewers=["U0ALICE"], on_reject="message")``).
    """
    reject_unknown_options("require_approval", options, option_names(ApprovalOptions))
    action, description = options.get("action"), options.get("description")
    run_id, thread_id = options.get("run_id"), options.get("thread_id")
    timeout, then = options.get("timeout"), options.get("then")
    on_reject: OnRefusal = options.get("on_reject", "raise")
    hide = options.get("hide", ())
    defaults = RequestDefaults.build(**_handoff_options(options))
    client = _ClientSource(options.get("handoffs"))

    def decorate(fn: Callable[P, R]) -> ApprovalGuarded[P, R]:
        signature = inspect.signature(fn)
        hidden = _ALWAYS_HIDDEN.union(hide) & set(signature.parameters)
        name = action or fn.__name__
        about = description if description is not None else _first_paragraph(fn.__doc__)
        schema = _args_schema(fn, signature, hidden)
        is_async = inspect.iscoroutinefunction(fn)

        def request(
            bound: inspect.BoundArguments, *, durable: bool
        ) -> tuple[Handoffs, Handoff, dict[str, Any]]:
            shown = _shown(bound, hidden)
            run, thread = _run_ids(run_id, thread_id)
            metadata: dict[str, Any] = {}
            resume = None
            if durable:
                if then:
                    load_object(then)  # fail now, not in a worker days later
                # The worker gets the arguments from the handoff, so they must be JSON
                # values themselves (not the repr shown for other objects).
                _json_only(
                    {k: v for k, v in bound.arguments.items() if k not in hidden}, "arguments"
                )
                kept = {k: v for k, v in bound.arguments.items() if k in hidden}
                call = ApprovedCall(
                    function=_importable_path(fn),
                    hidden=_json_only(kept, "hidden arguments"),
                    then=then,
                )
                metadata[METADATA_KEY] = call.model_dump(mode="json")
                resume = APPROVED_CALL_TARGET
            options = _options(defaults, resume=resume, metadata=metadata)
            handoffs = client.get()
            handoff = handoffs.request_approval(
                run_id=run,
                thread_id=thread,
                action=name,
                args=shown,
                args_schema=schema,
                description=about,
                **options,
            )
            return handoffs, handoff, shown

        def decided_call(
            decided: Handoff, bound: inspect.BoundArguments, shown: dict[str, Any]
        ) -> inspect.BoundArguments | None:
            if decided.status is not Status.APPROVED:
                return None
            # What runs here is what this call showed, with the reviewers' edits: it must be
            # what they approved (the stored request may have been changed meanwhile).
            edits = decided.resume_data.edited_args if decided.resume_data else None
            check_approved_action(decided, {**shown, **(edits or {})})
            _apply_edits(bound, shown, decided)
            return bound

        def refuse(decided: Handoff) -> Any:
            return _refusal(decided, on_reject, f"{name} was not run", ApprovalRejected)

        if is_async:

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                bound = _bind(signature, args, kwargs)
                handoffs, handoff, shown = await asyncio.to_thread(request, bound, durable=False)
                decided = await asyncio.to_thread(_wait, handoffs, handoff, timeout)
                call = decided_call(decided, bound, shown)
                if call is None:
                    return refuse(decided)
                token = _current.set(decided)
                try:
                    return await cast(Any, fn)(*call.args, **call.kwargs)
                finally:
                    _current.reset(token)

            wrapper: Any = async_wrapper
        else:

            @functools.wraps(fn)
            def sync_wrapper(*args: Any, **kwargs: Any) -> Any:
                bound = _bind(signature, args, kwargs)
                handoffs, handoff, shown = request(bound, durable=False)
                decided = _wait(handoffs, handoff, timeout)
                call = decided_call(decided, bound, shown)
                if call is None:
                    return refuse(decided)
                token = _current.set(decided)
                try:
                    return fn(*call.args, **call.kwargs)
                finally:
                    _current.reset(token)

            wrapper = sync_wrapper

        def submit(*args: Any, **kwargs: Any) -> Handoff:
            """Request approval and return the pending handoff at once; when it is approved,
            a worker makes the call (with the reviewer's edits), once."""
            return request(_bind(signature, args, kwargs), durable=True)[1]

        wrapper.submit = submit
        return wrapper

    return decorate(func) if func is not None else decorate


def run_approved_call(handoff: Handoff, *, attempt: int = 1) -> None:
    """Resume target of ``submit``: make the approved call with the reviewer's edits, then
    call the ``then`` target (if any) with the handoff and the call's result."""
    call = ApprovedCall.model_validate(handoff.metadata[METADATA_KEY])
    guarded = load_object(call.function)
    fn = getattr(guarded, "__wrapped__", guarded)
    result = None
    if handoff.status is Status.APPROVED:
        values = edited_args(handoff) or dict(proposed_action(handoff).args)
        check_approved_action(handoff, values)  # what runs is what was approved
        values.update(call.hidden)
        bound = _bound_from(inspect.signature(fn), values)
        logger.info(
            "running approved call %s (attempt %d)",
            call.function,
            attempt,
            extra={"handoff_id": handoff.id, "run_id": handoff.run_id},
        )
        token = _current.set(handoff)
        try:
            result = fn(*bound.args, **bound.kwargs)
            if inspect.isawaitable(result):
                result = asyncio.run(_await(result))
        finally:
            _current.reset(token)
    if call.then:
        load_object(call.then)(handoff, result)


# -- questions --------------------------------------------------------------------------


class QuestionOptions(HandoffOptions, total=False):
    """Options of ``ask_human`` (besides those of every handoff)."""

    handoffs: HandoffsSource
    """The client (default: ``Handoffs.from_env()``)."""
    run_id: str | None
    """Default: from ``handoff_run(...)``, else a new run id."""
    thread_id: str | None
    """Default: from ``handoff_run(...)``, else the run id."""
    timeout: float | None
    """Longest blocking wait in seconds (default None: until answered or expired)."""
    on_decline: OnRefusal
    """``"raise"`` (default: ``QuestionDeclined``), ``"message"``, or a callable given the
    decided handoff whose result is returned."""
    metadata: dict[str, Any]
    """Kept with the handoff and handed back to the resume target."""


@overload
def ask_human(
    question: str,
    *,
    choices: Sequence[str] | None = None,
    resume: None = None,
    **options: Unpack[QuestionOptions],
) -> str: ...


@overload
def ask_human(
    question: str,
    *,
    choices: Sequence[str] | None = None,
    resume: str,
    **options: Unpack[QuestionOptions],
) -> Handoff: ...


def ask_human(
    question: str,
    *,
    choices: Sequence[str] | None = None,
    resume: str | None = None,
    **options: Unpack[QuestionOptions],
) -> str | Handoff:
    """Ask a person ``question`` (optionally offering ``choices``).

    Blocking (no ``resume``): returns the answer. No answer (rejected, expired,
    cancelled) raises ``QuestionDeclined``, or per ``on_decline`` returns a message or the
    callable's result; ``timeout`` as in ``require_approval``.

    Durable (``resume="module:function"``): returns the pending handoff at once; the
    worker calls that target with the answered handoff (``handoff.resume_data.answer``).
    """
    reject_unknown_options("ask_human", options, option_names(QuestionOptions))
    defaults = RequestDefaults.build(**_handoff_options(options))
    client = _ClientSource(options.get("handoffs")).get()
    run, thread = _run_ids(options.get("run_id"), options.get("thread_id"))
    request = _options(defaults, resume=resume, metadata=options.get("metadata") or {})
    handoff = client.ask(
        run_id=run,
        thread_id=thread,
        question=question,
        choices=list(choices) if choices else None,
        **request,
    )
    if resume:
        return handoff
    decided = _wait(client, handoff, options.get("timeout"))
    if decided.status is Status.ANSWERED and decided.resume_data and decided.resume_data.answer:
        return decided.resume_data.answer
    on_decline = options.get("on_decline", "raise")
    answer = _refusal(decided, on_decline, "the question was not answered", QuestionDeclined)
    return cast(str, answer)


def question_tool(
    *, name: str = "ask_human", **options: Unpack[QuestionOptions]
) -> Callable[..., str]:
    """A blocking ``ask_human`` with a tool's signature ``(question: str, choices:
    list[str] | None = None) -> str``, for frameworks that build tools from functions. By
    default an unanswered question returns a message for the model instead of raising."""
    reject_unknown_options("question_tool", options, option_names(QuestionOptions))
    RequestDefaults.build(**_handoff_options(options))  # bad ids now, not at the first call
    source = _ClientSource(options.get("handoffs"))
    settings: QuestionOptions = {"on_decline": "message", **options, "handoffs": source.get}

    def tool(question: str, choices: list[str] | None = None) -> str:
        return ask_human(question, choices=choices, **settings)

    tool.__name__ = tool.__qualname__ = name
    tool.__doc__ = (
        "Ask a person a clarifying question when you cannot continue without their answer.\n\n"
        "Args:\n"
        "    question: The question, in one or two sentences.\n"
        "    choices: Answers to offer, or None for a free-form answer.\n"
    )
    return tool


# -- helpers ----------------------------------------------------------------------------


class _ClientSource:
    """Resolves a ``HandoffsSource`` once, on first use."""

    def __init__(self, source: HandoffsSource) -> None:
        self._source = source
        self._client: Handoffs | None = source if isinstance(source, Handoffs) else None

    def get(self) -> Handoffs:
        if self._client is None:
            source = self._source
            self._client = source() if callable(source) else Handoffs.from_env()
        return self._client


def _handoff_options(options: HandoffOptions) -> HandoffOptions:
    """Only the options every handoff takes, out of a larger set."""
    names = HandoffOptions.__annotations__
    return cast(HandoffOptions, {k: v for k, v in options.items() if k in names})


def _run_ids(run_id: str | None, thread_id: str | None) -> tuple[str, str]:
    if run_id:
        return run_id, thread_id or run_id
    scoped = _run.get()
    if scoped is not None:
        return scoped[0], thread_id or scoped[1]
    fresh = f"run-{uuid.uuid4().hex[:12]}"
    return fresh, thread_id or fresh


def _options(
    defaults: RequestDefaults, *, resume: str | None, metadata: dict[str, Any]
) -> RequestOptions:
    options: RequestOptions = {
        "channel": defaults.channel,
        "reviewers": defaults.reviewers,
        "resume": resume,
        "agent_name": defaults.agent_name,
        "requester": defaults.requester,
        "metadata": metadata,
    }
    if defaults.context:
        options["context"] = defaults.context
    if defaults.expires_in_seconds is not None:
        options["expires_in"] = defaults.expires_in_seconds
    return options


def _wait(handoffs: Handoffs, handoff: Handoff, timeout: float | None) -> Handoff:
    try:
        return handoffs.wait(handoff.id, timeout=timeout)
    except TimeoutError:
        try:
            handoffs.cancel(handoff.id, reason="the agent stopped waiting", resume=False)
        except AlreadyDecided:
            return handoffs.get(handoff.id)  # decided in the last instant: that counts
        raise DecisionTimeout(handoff, timeout) from None


def _refusal(decided: Handoff, on_refusal: OnRefusal, what: str, error: type[Exception]) -> Any:
    note = decision_note(decided)
    who = decided.resume_data.decided_by if decided.resume_data else None
    if decided.status is Status.REJECTED:
        message = f"Not done: {what}; rejected by {who}" + (f": {note}" if note else ".")
    else:
        message = f"Not done: {what}. {note}" if note else f"Not done: {what}."
    if on_refusal == "message":
        return message
    if callable(on_refusal):
        return on_refusal(decided)
    raise error(decided, message)


def _bind(
    signature: inspect.Signature, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> inspect.BoundArguments:
    bound = signature.bind(*args, **kwargs)  # a wrong call fails here, before any handoff
    bound.apply_defaults()
    return bound


def _shown(bound: inspect.BoundArguments, hidden: set[str] | frozenset[str]) -> dict[str, Any]:
    """Arguments by name, as the reviewer sees them (values JSON cannot hold shown as
    their ``repr``; they are kept as they were unless the reviewer changes them)."""
    shown: dict[str, Any] = {}
    for name, value in bound.arguments.items():
        if name in hidden:
            continue
        kind = bound.signature.parameters[name].kind
        plain = list(value) if kind is inspect.Parameter.VAR_POSITIONAL else value
        try:
            json.dumps(plain)
        except (TypeError, ValueError):
            plain = repr(value)
        shown[name] = plain
    return shown


def _apply_edits(bound: inspect.BoundArguments, shown: dict[str, Any], decided: Handoff) -> None:
    edited = decided.resume_data.edited_args if decided.resume_data else None
    for name, value in (edited or {}).items():
        if name not in shown:
            logger.warning("ignoring an edit of %r, which the reviewer was not shown", name)
            continue
        if value == shown[name]:
            continue  # unchanged: keep the original object (it may not be JSON)
        kind = bound.signature.parameters[name].kind
        bound.arguments[name] = tuple(value) if kind is inspect.Parameter.VAR_POSITIONAL else value


def _bound_from(signature: inspect.Signature, values: dict[str, Any]) -> inspect.BoundArguments:
    arguments = {}
    for name, parameter in signature.parameters.items():
        if name in values:
            value = values[name]
            is_star = parameter.kind is inspect.Parameter.VAR_POSITIONAL
            arguments[name] = tuple(value) if is_star else value
    bound = inspect.BoundArguments(signature, arguments)
    bound.apply_defaults()
    return bound


def _args_schema(
    fn: Callable[..., Any], signature: inspect.Signature, hidden: set[str] | frozenset[str]
) -> dict[str, Any] | None:
    """JSON schema of the shown arguments, for the reviewer's edit form; None when the
    signature has ``*args``/``**kwargs`` or types JSON schema cannot describe."""
    variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    if any(p.kind in variadic for p in signature.parameters.values()):
        return None
    try:
        schema = TypeAdapter(cast(Any, fn)).json_schema()
    except Exception:  # unresolvable annotations, arbitrary types: edit without a schema
        return None
    if schema.get("type") != "object" or not isinstance(schema.get("properties"), dict):
        return None
    for name in hidden:
        schema["properties"].pop(name, None)
    if "required" in schema:
        schema["required"] = [n for n in schema["required"] if n not in hidden]
    return schema


def _json_only(values: dict[str, Any], what: str) -> dict[str, Any]:
    try:
        json.dumps(values)
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"submit() stores the call for a worker, so its {what} must be JSON values: {exc}"
        ) from None
    return values


def _importable_path(fn: Callable[..., Any]) -> str:
    """``"module:qualname"`` of a decorated function, checked to lead back to it (the
    worker imports it to make the approved call)."""
    path = f"{fn.__module__}:{fn.__qualname__}"
    try:
        found = load_object(path)
    except ResumeTargetRefused:
        raise  # its module is not in HANDOFF_RESUME_MODULES: the worker would refuse it too
    except ValueError:
        found = None
    if getattr(found, "__wrapped__", found) is not fn:
        raise TypeError(
            f"submit() needs {fn.__qualname__} importable as {path!r} (a module-level "
            "function) so that a worker can make the approved call; call it blocking instead"
        )
    return path


def _first_paragraph(doc: str | None) -> str | None:
    if not doc:
        return None
    return inspect.cleandoc(doc).split("\n\n", 1)[0].strip() or None


async def _await(awaitable: Any) -> Any:
    return await awaitable


__all__ = [
    "APPROVED_CALL_TARGET",
    "ApprovalGuarded",
    "ApprovalOptions",
    "ApprovalRejected",
    "DecisionTimeout",
    "QuestionDeclined",
    "QuestionOptions",
    "ask_human",
    "current_handoff",
    "handoff_run",
    "question_tool",
    "require_approval",
    "run_approved_call",
]
