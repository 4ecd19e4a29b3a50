"""The cost of evaluating conditions: a deterministic budget of steps per request.

celpy's interpreter has no limit of its own, and it is slow (some 15 µs a node of the
condition, 300 µs an element of a list a macro walks), so a condition over an agent's list
held a create for seconds (``args.ids.exists(i, i < 0)`` on 21,000 ids: 8.5 s; a list
compared with itself for each of its elements: minutes). The conditions a request meets
are metered instead, together, in steps that do not depend on the machine, so the same
policy on the same request always either finishes or runs out at the same point:

- one step for each node of the condition's tree the interpreter visits;
- ``MACRO_ITERATION_STEPS`` each time a macro (``all``, ``exists``, ``map``...) evaluates
  its body for an element;
- for each function and operator, one step, plus (but for those that take constant time:
  ``size``, indexing, ``&&``...) one per ``WEIGHT_PER_STEP`` elements, keys and characters
  of the values it is given, through nested lists and maps, charged before it runs: a
  concatenation never allocates more than it paid for, and ``x in list`` pays for the list.

A step costs about 15 µs here at worst, so the budget bounds a request's conditions to
about 1.5 s. A condition that runs out (``OutOfBudget``) is refused by the router, never
taken as "no match": see ``store.policies.routing``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import lark

CONDITION_BUDGET = 100_000
"""Steps the conditions of one request may take together (about 1.5 s at worst). A test of
an argument (``args.amount > 500``) takes about 30; a macro over a list about 20-60 an
element: ``args.payments.all(p, p.currency == "EUR" && p.amount < 5000)`` over 1,000
payments (60 KB of arguments) takes 55,000 (tests/test_policies.py measures them)."""

MACRO_ITERATION_STEPS = 10
"""Steps charged each time a macro evaluates its body for one element: binding its variable
copies the condition's variables, about as costly as ten nodes."""

WEIGHT_PER_STEP = 8
"""Elements, keys or characters a function walks per step: comparing a list element by
element costs about 2 µs an element, an eighth of a node."""

_CONSTANT_TIME = frozenset({"_[_]", "size", "type", "_?_:_", "_&&_", "_||_", "!_", "-_"})
"""Functions whose cost does not grow with their arguments' size: one step each."""


class OutOfBudget(BaseException):
    """The evaluation ran out of steps. A ``BaseException``: no ``except Exception`` inside
    the interpreter may turn it into an ordinary evaluation error (a rule that quietly does
    not match)."""


class Meter:
    """The steps an evaluation has left; ``charge`` raises ``OutOfBudget`` past zero."""

    def __init__(self, budget: int = CONDITION_BUDGET) -> None:
        self.budget = budget
        self.left = budget
        self._weights: dict[int, tuple[Any, int]] = {}
        self._functions: dict[str, Callable[..., Any]] | None = None

    @property
    def used(self) -> int:
        """Steps charged so far."""
        return self.budget - self.left

    def charge(self, steps: int) -> None:
        """Take ``steps``; ``OutOfBudget`` when fewer were left."""
        self.left -= steps
        if self.left < 0:
            raise OutOfBudget

    def weight(self, value: Any) -> int:
        """What ``value`` costs to walk: its characters, or its elements, keys and values
        (each weighed), remembered per container for this evaluation."""
        if isinstance(value, str | bytes):
            return len(value)
        if not isinstance(value, list | dict):
            return 0
        known = self._weights.get(id(value))
        if known is not None and known[0] is value:
            return known[1]
        if isinstance(value, dict):
            total = len(value) + sum(self.weight(k) + self.weight(v) for k, v in value.items())
        else:
            total = len(value) + sum(self.weight(item) for item in value)
        # The value is kept with its weight, so its id cannot be reused meanwhile.
        self._weights[id(value)] = (value, total)
        return total

    @property
    def functions(self) -> dict[str, Callable[..., Any]]:
        """celpy's functions and operators, each charging this meter before it runs."""
        if self._functions is None:
            self._functions = _metered_functions(self)
        return self._functions


def _metered_functions(meter: Meter) -> dict[str, Callable[..., Any]]:
    from celpy.evaluation import base_functions

    def constant(function: Callable[..., Any]) -> Callable[..., Any]:
        def charged(*args: Any) -> Any:
            meter.charge(1)
            return function(*args)

        return charged

    def weighed(function: Callable[..., Any]) -> Callable[..., Any]:
        def charged(*args: Any) -> Any:
            meter.charge(1 + sum(meter.weight(arg) for arg in args) // WEIGHT_PER_STEP)
            return function(*args)

        return charged

    return {
        name: (constant if name in _CONSTANT_TIME else weighed)(function)
        for name, function in base_functions.items()
    }


def evaluate_metered(ast: lark.Tree, variables: Mapping[str, Any], *, meter: Meter) -> Any:
    """``ast`` evaluated on ``variables`` (CEL values), charging ``meter``: celpy's result;
    raises its ``CELEvalError``, or ``OutOfBudget``."""
    from celpy.evaluation import Activation

    # No annotations (celpy's environment has protobuf's well-known types, which no
    # condition may name): each macro element copies them, a third of its cost.
    activation = Activation(functions=meter.functions)
    return _metered_evaluator_class()(ast, activation, meter).evaluate(dict(variables))


@functools.cache
def _metered_evaluator_class() -> type:
    """celpy's ``Evaluator`` charging each node it visits and each macro element; built on
    first use, as celpy is imported only by processes that evaluate a condition."""
    from celpy.evaluation import Evaluator

    class MeteredEvaluator(Evaluator):
        def __init__(self, ast: lark.Tree, activation: Any, meter: Meter) -> None:
            super().__init__(ast, activation)
            self.meter = meter

        def sub_evaluator(self, ast: lark.Tree) -> Evaluator:
            # The evaluator of a macro's body: the same meter.
            return MeteredEvaluator(ast, self.activation, self.meter)

        def set_activation(self, values: Any) -> Evaluator:
            self.meter.charge(MACRO_ITERATION_STEPS)
            return super().set_activation(values)

        def visit(self, tree: lark.Tree) -> Any:
            self.meter.charge(1)
            return super().visit(tree)

        def visit_children(self, tree: lark.Tree) -> Any:
            self.meter.charge(len(tree.children))
            return super().visit_children(tree)

    return MeteredEvaluator
