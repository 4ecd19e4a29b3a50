"""Where a worker may send a webhook: the guard against server-side request forgery.

A callback URL comes from an API caller, and the worker that POSTs to it sits inside the
deployment's network, next to Redis and cloud metadata services. So a URL is refused unless
it is ``https`` and every address its host resolves to is a public one (not loopback,
private, link-local — cloud metadata at 169.254.169.254 among them —, multicast, reserved or
unspecified, nor an IPv4 address wrapped in IPv6). ``HANDOFF_WEBHOOK_ALLOWED_HOSTS`` names
hosts exempt from both rules (a receiver on the same machine or network, and the tests).

The check runs when the handoff is created (a clear 422) and again before each send (DNS can
change), and the send then connects to the very address that was checked (``pinned_url``),
so a name that resolves to a public address for the check and to 127.0.0.1 for the connection
(DNS rebinding) reaches nothing.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

Resolver = Callable[[str, int], Iterable[str]]


class UnsafeUrl(ValueError):
    """A callback URL the worker will not call; the message says why and what to do."""


def resolve_all(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to (IPv4 and IPv6)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise UnsafeUrl(f"callback host {host!r} does not resolve ({exc})") from None
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


_EMBEDDING_IPV4 = (
    ipaddress.ip_network("64:ff9b::/96"),  # NAT64, well-known prefix (RFC 6052)
    ipaddress.ip_network("64:ff9b:1::/48"),  # NAT64, local use (RFC 8215)
    ipaddress.ip_network("::/96"),  # IPv4-compatible (deprecated, still routed by some)
    ipaddress.ip_network("::ffff:0:0:0/96"),  # IPv4-translated (SIIT, RFC 2765)
)
"""IPv6 ranges whose last 32 bits are an IPv4 address a gateway may forward to: the
IPv4 address decides (``64:ff9b::a9fe:a9fe`` is 169.254.169.254 behind a NAT64)."""


def _public(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address):
        mapped = ip.ipv4_mapped or ip.sixtofour
        if mapped is not None:
            return _public(str(mapped))
        if ip.teredo is not None or ip.is_site_local:
            return False
        if any(ip in network for network in _EMBEDDING_IPV4):
            return _public(str(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)))
    return ip.is_global and not ip.is_multicast


@dataclass(frozen=True)
class CheckedUrl:
    """A URL that passed the check, and the address to connect to."""

    url: str
    host: str
    address: str | None
    """The checked address to connect to; None for an allowed host (resolved as usual)."""

    def pinned_url(self) -> str:
        """The URL with its host replaced by the checked address (send ``Host`` and the TLS
        server name as ``host``)."""
        if self.address is None:
            return self.url
        parts = urlsplit(self.url)
        literal = f"[{self.address}]" if ":" in self.address else self.address
        netloc = literal + (f":{parts.port}" if parts.port else "")
        return urlunsplit(parts._replace(netloc=netloc))


def check_url(
    url: str, *, allowed_hosts: frozenset[str] = frozenset(), resolve: Resolver = resolve_all
) -> CheckedUrl:
    """Check a callback URL; raises ``UnsafeUrl`` saying why it is refused."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise UnsafeUrl(f"callback url is not a URL ({exc})") from None
    host = (parts.hostname or "").lower().rstrip(".")
    if parts.scheme not in ("https", "http") or not host:
        raise UnsafeUrl("callback url must be an https:// URL with a host")
    if parts.username is not None or parts.password is not None:
        raise UnsafeUrl(
            "callback url must not carry a user name or password (webhooks are signed "
            "with the key's webhook secret instead)"
        )
    if host in allowed_hosts:
        return CheckedUrl(url=url, host=host, address=None)
    if parts.scheme != "https":
        raise UnsafeUrl(
            f"callback url must use https (http only for hosts in "
            f"HANDOFF_WEBHOOK_ALLOWED_HOSTS, which {host!r} is not)"
        )
    addresses = list(resolve(host, port or 443))
    if not addresses:
        raise UnsafeUrl(f"callback host {host!r} does not resolve")
    for address in addresses:
        if not _public(address):
            raise UnsafeUrl(
                f"callback host {host!r} resolves to {address}, a loopback, private, "
                "link-local or reserved address; webhooks go to public addresses only "
                "(list the host in HANDOFF_WEBHOOK_ALLOWED_HOSTS to allow it)"
            )
    return CheckedUrl(url=url, host=host, address=addresses[0])


def parse_allowed_hosts(value: str) -> frozenset[str]:
    """``HANDOFF_WEBHOOK_ALLOWED_HOSTS`` as a set of lower-case host names or addresses."""
    return frozenset(
        part.strip().lower().strip("[]").rstrip(".") for part in value.split(",") if part.strip()
    )
