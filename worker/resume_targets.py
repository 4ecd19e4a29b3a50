"""Resume targets: the agent functions called with a decided handoff.

A target is named by a dotted path ``"package.module:function"`` so that it can be stored
in Redis and imported by whichever worker runs the resume, possibly weeks later.

Whoever can write to Redis can write such a path, so a worker imports only the modules its
own ``HANDOFF_RESUME_MODULES`` lists (read from its environment, never from Redis): a path
outside them is refused before anything is imported (``ResumeTargetRefused``), and its
resume fails at once, without retries; and what the path reaches must be defined in one of
those modules, not merely reached through one (``walk_path``). The adapters' own entry
points (``ALWAYS_ALLOWED``, exactly) are always allowed; they check the paths they import in
turn (``load_object``). Empty, the setting allows any module, as before it existed.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import inspect
from collections.abc import Callable, Sequence
from typing import Any

from store.exceptions import InvalidResumeTarget
from store.models import Handoff
from store.settings import StoreSettings

ResumeTarget = Callable[..., Any]

RESUME_MODULES_SETTING = "HANDOFF_RESUME_MODULES"
ALWAYS_ALLOWED = frozenset(
    {
        "worker.adapters.agent_framework.agents:resume_run",
        "worker.adapters.agent_framework.workflows:resume_workflow",
        "worker.adapters.crewai.flows:resume_flow",
        "worker.adapters.decorators:run_approved_call",
        "worker.adapters.langgraph:resume_thread",
        "worker.adapters.openai_agents:resume_run",
        "worker.adapters.pydantic_ai:resume_run",
        "worker.adapters.temporal:deliver_decision",
    }
)
"""The adapters' resume entry points, exactly: allowed whatever the setting says (they
check the paths they import in turn, ``walk_path``). Nothing else of ``worker.adapters`` is:
``worker.adapters.decorators:inspect.os.system`` names ``os.system`` through it."""


class ResumeTargetRefused(InvalidResumeTarget):
    """A path (a resume target, an adapter's factory or function) whose module is not in
    ``HANDOFF_RESUME_MODULES``: it is never imported, and a resume naming it fails at once."""


_configured: tuple[str, ...] | None = None


def allow_resume_modules(modules: Sequence[str] | None) -> None:
    """Set the modules this process (and the processes it forks) may import resume targets
    and adapter factories from; ``()`` allows any. ``None`` goes back to reading
    ``HANDOFF_RESUME_MODULES`` from the environment at the next check. `handoff worker`
    calls it at start (``worker.runner.run_worker``) with its settings' list."""
    global _configured
    _configured = None if modules is None else tuple(modules)


def allowed_resume_modules() -> tuple[str, ...]:
    """The modules this process allows (empty: any): those given to
    ``allow_resume_modules``, else ``HANDOFF_RESUME_MODULES`` of the environment (and
    ``.env``), read once. So an RQ worker started some other way than `handoff worker`
    keeps to the setting too."""
    global _configured
    if _configured is None:
        _configured = StoreSettings.from_env().store_config().resume_modules
    return _configured


def module_allowed(module: str, allowed: Sequence[str]) -> bool:
    """Whether ``module`` is one of ``allowed`` or lies under one (``a.b`` allows ``a.b``
    and ``a.b.c``, not ``a.bc``); an empty ``allowed`` allows any."""
    if not allowed:
        return True
    return any(module == entry or module.startswith(entry + ".") for entry in allowed)


def check_allowed(
    path: str, allowed: Sequence[str] | None = None, *, what: str = "resume target"
) -> None:
    """Raise ``ResumeTargetRefused`` unless the module of ``path`` (``"module:attribute"``)
    may be imported: it is in ``allowed`` (default: this process's,
    ``allowed_resume_modules``), or ``path`` is one of ``ALWAYS_ALLOWED``. Imports nothing."""
    modules = allowed_resume_modules() if allowed is None else tuple(allowed)
    module = path.partition(":")[0].strip()
    if path.strip() in ALWAYS_ALLOWED or module_allowed(module, modules):
        return
    raise ResumeTargetRefused(
        f"{what} {path} is not in {RESUME_MODULES_SETTING} ({','.join(modules)}); "
        f"nothing of it was imported: add {module or 'its module'} to {RESUME_MODULES_SETTING} "
        "in the environment of the worker (and of the agent) if it is yours"
    )


def walk_path(
    module: Any, path: str, allowed: Sequence[str] | None = None, *, what: str = "resume target"
) -> Any:
    """The object ``path``'s attribute part names in ``module`` (already imported, after
    ``check_allowed``), kept to the allowed modules too: the walk may not pass through
    another module (``steps:os.system`` where ``steps`` imported ``os``), and the object
    reached must be defined in an allowed module (``steps:system`` after ``from os import
    system`` is ``posix.system``). Raises ``AttributeError`` for a missing attribute."""
    modules = allowed_resume_modules() if allowed is None else tuple(allowed)
    target: Any = module
    for part in path.partition(":")[2].split("."):
        target = getattr(target, part)
        if modules and inspect.ismodule(target):
            raise ResumeTargetRefused(
                f"{what} {path} goes through the module {target.__name__}; name the "
                "function in the module that defines it"
            )
    if path.strip() in ALWAYS_ALLOWED or not modules:
        return target
    check_defined_here(target, path, modules, what=what)
    return target


def check_defined_here(
    target: Any, path: str, modules: Sequence[str], *, what: str = "resume target"
) -> None:
    """Raise ``ResumeTargetRefused`` unless ``target`` is a function (or a bound method of
    one) defined in ``modules``, and so is whatever it wraps (``__wrapped__``, which a
    decorator's caller may call instead). A class is refused: calling it runs its
    constructor, which may come from anywhere (a subclass of ``subprocess.Popen``)."""
    seen = 0
    while target is not None and seen < 8:
        function = getattr(target, "__func__", target)  # a bound method's function
        owner = getattr(function, "__module__", None)
        if not inspect.isfunction(function):
            raise ResumeTargetRefused(
                f"{what} {path} is not a function ({type(target).__name__}); name a function "
                "defined in your modules"
            )
        if not isinstance(owner, str) or not module_allowed(owner, modules):
            raise ResumeTargetRefused(
                f"{what} {path} is defined in {owner or 'no module'}, which is not in "
                f"{RESUME_MODULES_SETTING} ({','.join(modules)}); name a function of your "
                "own modules"
            )
        target = getattr(function, "__wrapped__", None)
        seen += 1


# Optional keyword arguments a target may declare to receive.
_EXTRA_ARGUMENTS = ("attempt", "idempotency_key")


def resolve_target(path: str, *, allowed: Sequence[str] | None = None) -> ResumeTarget:
    """Import and return the callable named by ``"module:function"``.

    Raises ``ResumeTargetRefused`` before importing anything when its module is not
    ``allowed`` (default: this process's ``HANDOFF_RESUME_MODULES``, ``check_allowed``),
    and ``InvalidResumeTarget`` with the reason when it cannot be imported or called with a
    single handoff argument. Successful look-ups are cached: agents create many handoffs
    with the same target, and importing plus inspecting it each time is slow.
    """
    check_allowed(path, allowed)
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
    try:
        target = walk_path(module, path)
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


__all__ = [
    "ALWAYS_ALLOWED",
    "RESUME_MODULES_SETTING",
    "ResumeTarget",
    "ResumeTargetRefused",
    "allow_resume_modules",
    "allowed_resume_modules",
    "call_target",
    "check_allowed",
    "module_allowed",
    "resolve_target",
]
