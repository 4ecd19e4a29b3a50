"""The client methods that create a handoff, called the same way on ``Handoffs`` and
``AsyncHandoffs``: the option tests run each of them."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

CREATING_METHODS = ["request_approval", "ask", "request_correction", "escalate", "request"]

REQUIRED_ARGUMENTS: dict[str, dict[str, Any]] = {
    "request_approval": {"action": "issue_refund"},
    "ask": {"question": "Which customer?"},
    "request_correction": {"draft": "Dear cust"},
    "escalate": {"summary": "Customer threatens to sue"},
}
"""Per method but ``request``, what it needs besides the run's ids."""


def creating_call(client: Any, method: str, run: Mapping[str, str]) -> Callable[..., Any]:
    """``method`` of ``client`` (sync or async) with its required arguments and the
    ``run`` ids bound; takes the options."""
    if method == "request":
        payload = {"kind": "question", "question": "Which customer?"}
        return functools.partial(client.request, "question", payload, **run)
    return functools.partial(getattr(client, method), **run, **REQUIRED_ARGUMENTS[method])
