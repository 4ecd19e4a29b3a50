"""Conditions of routing rules: CEL expressions (https://cel.dev) over a request, compiled
and checked when the policy is loaded, evaluated on a budget, never with ``eval``.

At load, a condition must name only the variables conditions are given
(``CONDITION_VARIABLES``) and the functions and methods celpy has: a typo
(``action.startswith``, ``arg.amount``) is an error naming it, with a suggestion, not a rule
that silently never matches. A macro nested in another's body (``a.exists(x,
b.exists(...))``) is refused too: it costs the product of two lists an agent chooses.

A condition that cannot be evaluated for a request (a missing argument, a string compared
with a number, a division by zero) does not match: the rule is skipped and the next one is
tried, and ``ConditionResult.problem`` says why (``handoff policy explain`` shows it). A
condition that runs out of its budget of steps (``store.policies.cost``) is
``ConditionResult.too_costly``: the router refuses the request rather than skip the rule.
"""

from __future__ import annotations

import difflib
import functools
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from store.policies.cost import CONDITION_BUDGET, Meter, OutOfBudget, evaluate_metered

if TYPE_CHECKING:
    import celpy
    import lark

logger = logging.getLogger(__name__)

MAX_CONDITION_CHARS = 2000
"""The longest condition a rule may hold: enough for any routing test, short enough that
parsing and evaluating it is cheap."""

CONDITION_VARIABLES = (
    "request_type",
    "action",
    "args",
    "agent",
    "requester",
    "channel",
    "metadata",
    "context",
    "api_key",
)
"""The variables a condition sees (``store.policies.routing.request_variables`` gives
them)."""

TYPE_NAMES = frozenset(
    {"bool", "bytes", "double", "duration", "int", "list", "map", "null_type", "string"}
    | {"timestamp", "type", "uint"}
)
"""Names of CEL types a condition may use as values: ``type(args.n) == int``."""

COMPREHENSIONS = {"all": 2, "exists": 2, "exists_one": 2, "map": 2, "filter": 2, "reduce": 4}
"""celpy's macros over a list, and how many arguments each takes (``min`` takes none)."""

_FUNCTION_MACROS = frozenset({"has", "dyn"})


class ConditionError(ValueError):
    """A condition that is not a CEL expression, or names what conditions do not have; the
    message says where it went wrong."""


@dataclass(frozen=True)
class ConditionResult:
    """What a condition made of a request: whether it ``holds``; else ``problem`` says why
    it could not be evaluated ("" when it evaluated to false), and ``too_costly`` that it
    ran out of budget. ``steps`` is what the evaluation cost (``store.policies.cost``)."""

    holds: bool
    problem: str = ""
    too_costly: bool = False
    steps: int = 0


class Bindings:
    """A request's variables as its rules' conditions read them, converted to CEL values
    once per request and per variable (not once per rule), and only when a condition names
    them; and the ``meter`` of the budget these conditions share."""

    def __init__(self, variables: Mapping[str, Any], *, budget: int = CONDITION_BUDGET) -> None:
        self._json = variables
        self._cel: dict[str, tuple[Any, str]] = {}
        self.meter = Meter(budget)

    def cel(self, name: str) -> tuple[Any, str]:
        """``name``'s CEL value and "", or None and why it has none."""
        if name not in self._cel:
            if name not in self._json:
                self._cel[name] = (None, f"{name} is not given")
            else:
                try:
                    self._cel[name] = (_to_cel(self._json[name]), "")
                except (ValueError, TypeError) as exc:
                    self._cel[name] = (None, f"{name}: {_first_line(exc)}")
        return self._cel[name]


@functools.cache
def _environment() -> celpy.Environment:
    """The one CEL environment, built on first use: building its parser costs about 0.7 s,
    which every process (and every agent importing the client) paid at import while most
    never load a policy with a condition."""
    import celpy

    return celpy.Environment()


class Condition:
    """One compiled, checked CEL expression, e.g. ``Condition("args.amount_usd > 500")``.

    ``evaluate(variables)`` says whether it holds for a request, and if not, why;
    ``matches(variables)`` is True only when it evaluates to ``true``.
    """

    def __init__(self, text: str) -> None:
        if not text.strip():
            raise ConditionError("empty condition; write a CEL expression such as args.n > 1")
        if len(text) > MAX_CONDITION_CHARS:
            raise ConditionError(f"longer than {MAX_CONDITION_CHARS} characters")
        import celpy

        environment = _environment()
        try:
            self._ast = environment.compile(text)
            names = _Names()
            names.check(self._ast)
        except celpy.CELParseError as exc:
            raise ConditionError(f"not a CEL expression: {_first_line(exc)}") from None
        except RecursionError:
            raise ConditionError("nested too deeply") from None
        except ConditionError:
            raise
        except Exception as exc:  # the compiler's other refusals
            raise ConditionError(f"not a CEL expression: {_first_line(exc)}") from None
        self.text = text
        self.variables: frozenset[str] = frozenset(names.variables)
        """The variables the condition reads."""
        self._types = frozenset(names.types)

    def evaluate(self, variables: Bindings | Mapping[str, Any]) -> ConditionResult:
        """What the condition makes of ``variables`` (JSON values, or the ``Bindings`` a
        request's rules share, with their budget); never raises."""
        from celpy import celtypes
        from celpy.evaluation import base_functions

        bindings = variables if isinstance(variables, Bindings) else Bindings(variables)
        values: dict[str, Any] = {}
        for name in sorted(self.variables):
            value, problem = bindings.cel(name)
            if problem:
                return ConditionResult(False, problem=problem)
            values[name] = value
        # Bound as variables, a type's name is the type itself (``type(x) == int``), not
        # the metered function that converts to it.
        values.update({name: base_functions[name] for name in self._types})
        meter = bindings.meter
        before = meter.used
        try:
            result = evaluate_metered(self._ast, values, meter=meter)
        except OutOfBudget:
            logger.info("condition %r ran out of the budget of %d steps", self.text, meter.budget)
            return ConditionResult(False, too_costly=True, steps=meter.used - before)
        except Exception as exc:  # CELEvalError, and anything the interpreter lets out
            logger.debug("condition %r not evaluated: %s", self.text, _first_line(exc))
            return ConditionResult(False, problem=_first_line(exc), steps=meter.used - before)
        steps = meter.used - before
        if not isinstance(result, celtypes.BoolType):
            kind = type(result).__name__.removesuffix("Type").lower()
            return ConditionResult(False, problem=f"gives a {kind}, not a bool", steps=steps)
        return ConditionResult(bool(result), steps=steps)

    def matches(self, variables: Bindings | Mapping[str, Any]) -> bool:
        """Whether the condition holds for ``variables``: False too when it cannot be
        evaluated or runs out of budget (the router tells these apart with ``evaluate``)."""
        return self.evaluate(variables).holds

    def __repr__(self) -> str:
        return f"Condition({self.text!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Condition) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)


class _Names:
    """A walk over a compiled condition that refuses unknown variables, functions and
    methods (suggesting the closest known name) and macros nested in a macro's body, and
    collects the variables and type names it reads."""

    def __init__(self) -> None:
        self.variables: set[str] = set()
        self.types: set[str] = set()

    def check(self, tree: lark.Tree, bound: frozenset[str] = frozenset(), macro: str = "") -> None:
        """Check ``tree`` where ``bound`` are the macro variables in scope, inside the body
        of ``macro`` ("" outside any)."""
        import lark

        kind = tree.data
        children = tree.children
        if kind in ("ident", "dot_ident"):
            self._identifier(str(children[0]), bound)
            return
        if kind == "dot_ident_arg":
            raise ConditionError(f"'.{children[0]}(...)' is not supported; drop the leading '.'")
        if kind == "member_object":
            raise ConditionError("building a message ('Name{field: ...}') is not supported")
        if kind == "ident_arg":
            name = str(children[0])
            if name not in _functions():
                raise ConditionError(f"unknown function {name}(){_suggestion(name, _functions())}")
        elif kind == "member_dot":
            children = children[:1]  # the field's name is no identifier of its own
        elif kind == "member_dot_arg":
            name = str(children[1])
            if name in COMPREHENSIONS or name == "min":
                self._comprehension(tree, name, bound, macro)
                return
            if name not in _methods():
                raise ConditionError(f"unknown method .{name}(){_suggestion(name, _methods())}")
        for child in children:
            if isinstance(child, lark.Tree):
                self.check(child, bound, macro)

    def _identifier(self, name: str, bound: frozenset[str]) -> None:
        if name in bound:
            return
        if name in CONDITION_VARIABLES:
            self.variables.add(name)
        elif name in TYPE_NAMES:
            self.types.add(name)
        else:
            known = [*CONDITION_VARIABLES, *sorted(bound)]
            raise ConditionError(
                f"unknown variable {name!r}{_suggestion(name, known)}; a condition sees "
                + ", ".join(CONDITION_VARIABLES)
            )

    def _comprehension(self, tree: lark.Tree, name: str, bound: frozenset[str], macro: str) -> None:
        if macro:
            raise ConditionError(
                f"{name}() inside the body of {macro}(): a macro nested in another's body "
                "costs the product of both lists' sizes, which an agent's request can make "
                "too costly to evaluate; test each list in a macro of its own (joined with "
                "&& or ||), or have the agent send the figure as an argument"
            )
        target, _, *rest = tree.children
        self.check(target, bound, macro)
        args = rest[0].children if rest and rest[0] is not None else []
        wanted = COMPREHENSIONS.get(name, 0)
        if len(args) != wanted:
            raise ConditionError(f".{name}() takes {wanted} argument(s), not {len(args)}")
        if name == "min":
            return
        if name == "reduce":
            accumulator, item, initial, body = args
            names = [_bare_identifier(accumulator), _bare_identifier(item)]
            self.check(initial, bound, macro)  # evaluated once, before the elements
        else:
            variable, body = args
            names = [_bare_identifier(variable)]
        if not all(names):
            raise ConditionError(f".{name}() takes a variable name first, as in x, x > 0")
        self.check(body, bound | frozenset(n for n in names if n), name)


def _bare_identifier(tree: Any) -> str | None:
    """The name ``tree`` is, when it is nothing but one identifier."""
    while getattr(tree, "data", None) not in (None, "ident"):
        if len(tree.children) != 1:
            return None
        tree = tree.children[0]
    return str(tree.children[0]) if getattr(tree, "data", None) == "ident" else None


@functools.cache
def _celpy_functions() -> frozenset[str]:
    """The names of celpy's functions (its operators, ``_+_``..., are not names)."""
    from celpy.evaluation import base_functions

    return frozenset(name for name in base_functions if name.isidentifier())


def _functions() -> frozenset[str]:
    """The functions a condition may call: celpy's, and the macros has() and dyn()."""
    return _celpy_functions() | _FUNCTION_MACROS


def _methods() -> frozenset[str]:
    """The methods a condition may call: celpy's functions, and its macros over lists."""
    return _celpy_functions() | frozenset(COMPREHENSIONS) | {"min"}


def _suggestion(name: str, known: Iterable[str]) -> str:
    """The hint " (did you mean 'startsWith'?)" naming the known name closest to ``name``,
    or "" when none is close."""
    by_lower = {k.lower(): k for k in known}
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=0.6)
    return f" (did you mean {by_lower[close[0]]!r}?)" if close else ""


_INT64 = range(-(2**63), 2**63)


def _to_cel(value: Any) -> Any:
    """``value`` (JSON) as CEL values, as ``celpy.json_to_cel`` makes them, but with
    integers built directly: its ``IntType(n)`` costs 19 µs, so 21,000 ids took 0.45 s."""
    from celpy import celtypes

    if value is None:
        return None
    if isinstance(value, bool):
        return celtypes.BoolType(value)
    if isinstance(value, int):
        # Out of range, IntType refuses it (ValueError) as json_to_cel does.
        return int.__new__(celtypes.IntType, value) if value in _INT64 else celtypes.IntType(value)
    if isinstance(value, float):
        return celtypes.DoubleType(value)
    if isinstance(value, str):
        return celtypes.StringType(value)
    if isinstance(value, list | tuple):
        return celtypes.ListType([_to_cel(item) for item in value])
    if isinstance(value, dict):
        return celtypes.MapType({_to_cel(key): _to_cel(item) for key, item in value.items()})
    raise TypeError(f"{type(value).__name__} is not a JSON value")


def _first_line(exc: BaseException) -> str:
    text = str(exc.args[0] if exc.args else exc) or type(exc).__name__
    return " ".join(text.split())[:300]
