"""Which HTTP requests the stand-in serves: those a program on this machine sent it, not those
another web site's page makes the developer's browser send.

The stand-in has no login: whoever reaches its Web API or its workbench acts as the bot or as
any member of the workspace. It listens on 127.0.0.1, but a page the developer visits while
``handoff dev`` runs reaches 127.0.0.1 too, through their browser, in two ways refused here:

- a cross-site request (a form post, a ``fetch`` in no-cors mode). The browser names the page
  it comes from in ``Origin``; when present, it must be the stand-in's own origin.
- DNS rebinding: the attacker's host name is made to resolve to 127.0.0.1, so that the page's
  requests are same-origin and it can read the answers (the workbench's state, its token). They
  still carry that name in ``Host``, which must be a loopback name (or the one address the
  stand-in was told to listen on).

Programs (slack_sdk in the bot, urllib in the tests) send the Host they connected to and no
Origin, so they are not affected.
"""

from __future__ import annotations

from typing import Protocol
from urllib.parse import urlsplit

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "[::1]"})
"""The names a request to the stand-in may carry in ``Host`` (with any port)."""


class Headers(Protocol):
    """What the guard reads of a request's headers (``http.server``'s ``handler.headers``)."""

    def get(self, name: str, /) -> str | None: ...


def allowed_hosts(listen_host: str) -> frozenset[str]:
    """The host names requests may be addressed to, for a stand-in listening on ``listen_host``.

    The loopback names, and ``listen_host`` as written (``SlackStandIn(host="10.0.0.5")`` is
    reached by that address on purpose, and its ``url`` says so). Only that exact name is
    added: listening on "0.0.0.0" still refuses a request addressed to any other name.
    """
    name = listen_host.strip().lower()
    if ":" in name and not name.startswith("["):
        name = f"[{name}]"  # an IPv6 address, written as Host writes it
    return LOOPBACK_HOSTS | {name} if name else LOOPBACK_HOSTS


def host_name(authority: str) -> str:
    """``authority`` ("name:port", "[v6]:port" or "name") without its port, in lower case."""
    authority = authority.strip().lower()
    if authority.startswith("["):
        end = authority.find("]")
        return authority[: end + 1] if end > 0 else authority
    return authority.partition(":")[0]


def is_own_origin(origin: str, *, hosts: frozenset[str], port: int) -> bool:
    """True if ``origin`` is the stand-in's own: http, one of ``hosts``, the port it listens on.

    "null" (a sandboxed frame, a file:// page) and any other scheme, host or port are foreign.
    """
    parts = urlsplit(origin.strip())
    try:
        origin_port = parts.port or 80
    except ValueError:  # a port that is not a number
        return False
    return (
        parts.scheme == "http"
        and host_name(parts.netloc) in hosts
        and origin_port == port
        and parts.path in ("", "/")
    )


def refusal(headers: Headers, *, hosts: frozenset[str], port: int) -> str | None:
    """Why a request must be refused (for its 403 answer), or None to serve it."""
    host = headers.get("Host")
    if host is None or host_name(host) not in hosts:
        return (
            f"refused: the stand-in answers only requests addressed to {_listed(hosts)} "
            f"(this one said Host: {host}), so that no web page can reach it by another name"
        )
    origin = headers.get("Origin")
    if origin is not None and not is_own_origin(origin, hosts=hosts, port=port):
        return (
            f"refused: a request from the web page at {origin} (only the stand-in's own "
            "pages may use it)"
        )
    return None


def _listed(hosts: frozenset[str]) -> str:
    return ", ".join(sorted(hosts))
