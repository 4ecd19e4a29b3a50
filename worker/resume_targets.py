"""Resume targets: the agent functions called with a decided handoff.

A target is named by a dotted path ``"package.module:function"`` so that it can be stored
in Redis and imported by whichever worker runs the resume, possibly weeks later.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import inspect
from collections.abc import Callable
from typing import Any

from store.exceptions import InvalidResumeTarget
from store.models import Handoff

ResumeTarget = Callable[..., Any]

# Optional keyword arguments a target may declare to receive.
_EXTRA_ARGUMENTS = ("attempt", "idempotency_key")


def resolve_target(path: str) -> ResumeTarget:
    """Import and return the callable named by ``"module:function"``.

    Raises ``InvalidResumeTarget`` with the reason when it cannot be imported or called
    with a single handoff argument. Successful look-ups are cached: agents create many
    handoffs with the same target, and importing plus inspecting it each time is slow.
    """
    return _resolve_cached(path)


@functools.lru_cache(maxsize=256)
def _resolve_cached(path: str) -> ResumeTarget:
    module_name, sep, attribute = path.partition(":")
    if not sep or not module_name or not attribute:
        raise InvalidResumeTarget(
            f"resume target {path!r} must look like 'package.module:function'"
        )
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # any import-time error makes the target unusable
        raise InvalidResumeTarget(
            f"resume target {path!r}: cannot import module {module_name!r} ({exc}); "
            "it must be importable by the worker (check PYTHONPATH)"
        ) from exc
    target: Any = module
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise InvalidResumeTarget(
                f"resume target {path!r}: module {module_name!r} has no {attribute!r}"
            ) from None
    if not callable(target):
        raise InvalidResumeTarget(f"resume target {path!r} is not callable")
    try:
        inspect.signature(target).bind(None, **_accepted(target, dict.fromkeys(_EXTRA_ARGUMENTS)))
    except TypeError:
        raise InvalidResumeTarget(
            f"resume target {path!r} must accept the handoff as its one positional argument"
        ) from None
    except ValueError:
        pass  # builtins without a signature: trust them
    return target


def call_target(target: ResumeTarget, handoff: Handoff, *, attempt: int) -> Any:
    """Call ``target(handoff)``, adding ``attempt`` and ``idempotency_key`` (the handoff
    id) as keyword arguments when the target declares them. Coroutines are run to the end.
    """
    extras = dict(zip(_EXTRA_ARGUMENTS, (attempt, handoff.id), strict=True))
    result = target(handoff, **_accepted(target, extras))
    if inspect.isawaitable(result):
        return asyncio.run(_await(result))
    return result


def _accepted(target: ResumeTarget, extras: dict[str, Any]) -> dict[str, Any]:
    try:
        parameters = inspect.signature(target).parameters
    except ValueError:
        return {}
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return extras
    return {name: value for name, value in extras.items() if name in parameters}


async def _await(awaitable: Any) -> Any:
    return await awaitable


__all__ = ["ResumeTarget", "call_target", "resolve_target"]
