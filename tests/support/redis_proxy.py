"""A TCP proxy in front of the test Redis that loses replies on purpose.

Each client connection gets one to Redis. The proxy reads one command at a time from the
client (RESP arrays, as redis-py sends them), forwards it, reads Redis's whole reply and
passes it back: unless the command is the one to lose, in which case the command has run
in Redis and the proxy closes the client's connection instead of answering. The client
sees a connection error after its command committed: the lost reply of a real network.

Example::

    with LosingProxy(redis_url) as proxy:
        proxy.lose_reply(script=scripts.DECIDE)          # the next DECIDE's reply
        store = StoreSettings(redis_url=proxy.url).open_store()
"""

from __future__ import annotations

import contextlib
import hashlib
import socket
import threading
from collections.abc import Callable
from types import TracebackType
from typing import BinaryIO, Self
from urllib.parse import urlparse

Command = list[bytes]

# RESP3 types that carry a count of elements (maps and attributes count pairs).
_AGGREGATES = {b"*": 1, b"~": 1, b">": 1, b"%": 2, b"|": 2}
_BLOBS = {b"$", b"=", b"!"}


def _read_line(stream: BinaryIO) -> bytes:
    line = stream.readline()
    if not line.endswith(b"\r\n"):
        raise EOFError
    return line


def read_command(stream: BinaryIO) -> tuple[Command, bytes]:
    """One command from a client: its parts and its bytes as sent."""
    header = _read_line(stream)
    if not header.startswith(b"*"):
        raise ValueError(f"not a RESP array: {header!r}")
    raw = [header]
    parts = []
    for _ in range(int(header[1:])):
        size_line = _read_line(stream)
        body = stream.read(int(size_line[1:]) + 2)
        raw += [size_line, body]
        parts.append(body[:-2])
    return parts, b"".join(raw)


def read_reply(stream: BinaryIO) -> bytes:
    """One whole reply from Redis, as it was sent."""
    line = _read_line(stream)
    kind, rest = line[:1], line[1:-2]
    if kind in _BLOBS:
        size = int(rest)
        return line if size < 0 else line + stream.read(size + 2)
    if kind in _AGGREGATES:
        count = int(rest)
        parts = [line]
        for _ in range(max(count, 0) * _AGGREGATES[kind]):
            parts.append(read_reply(stream))
        return b"".join(parts)
    return line  # + - : _ , # ( : one line


def script_sha(text: str) -> bytes:
    """The SHA1 that EVALSHA names a script by."""
    return hashlib.sha1(text.encode()).hexdigest().encode()


class LosingProxy:
    """A proxy to ``redis_url``'s server that loses the replies it is told to (``url`` is
    the same database through the proxy)."""

    def __init__(self, redis_url: str) -> None:
        target = urlparse(redis_url)
        self._target = (target.hostname or "127.0.0.1", target.port or 6379)
        self._listener = socket.create_server(("127.0.0.1", 0))
        port = self._listener.getsockname()[1]
        self.url = target._replace(netloc=f"127.0.0.1:{port}").geturl()
        self._lock = threading.Lock()
        self._rules: list[list[Callable[[Command], bool] | int]] = []
        self.lost: list[Command] = []
        """The commands whose replies were lost, in order."""
        self.seen: list[Command] = []
        """Every command forwarded, in order."""
        self._sockets: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def lose_reply(
        self,
        *,
        script: str | None = None,
        command: str | None = None,
        nth: int = 1,
        times: int = 1,
    ) -> None:
        """Lose the reply of the ``nth`` next call of ``script`` (EVALSHA of its text) or of
        ``command`` (a command name), and of the ``times - 1`` calls after it."""
        if script is not None:
            sha = script_sha(script)

            def matches(parts: Command) -> bool:
                return parts[0].upper() == b"EVALSHA" and parts[1] == sha

        elif command is not None:
            name = command.upper().encode()

            def matches(parts: Command) -> bool:
                return parts[0].upper() == name

        else:
            raise ValueError("give script or command")
        with self._lock:
            self._rules.append([matches, nth, times])

    def _should_lose(self, parts: Command, reply: bytes) -> bool:
        with self._lock:
            self.seen.append(parts)
            if reply.startswith(b"-"):
                return False  # an error (NOSCRIPT, say) changed nothing: not the one to lose
            for rule in self._rules:
                matches, skip, left = rule
                assert callable(matches) and isinstance(skip, int) and isinstance(left, int)
                if left <= 0 or not matches(parts):
                    continue
                if skip > 1:
                    rule[1] = skip - 1
                    continue
                rule[2] = left - 1
                self.lost.append(parts)
                return True
        return False

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(self._target)
        except OSError:
            client.close()
            return
        with self._lock:
            self._sockets += [client, upstream]
        from_client, from_redis = client.makefile("rb"), upstream.makefile("rb")
        try:
            while True:
                parts, raw = read_command(from_client)
                upstream.sendall(raw)
                if parts[0].upper() in (b"SUBSCRIBE", b"PSUBSCRIBE", b"SSUBSCRIBE"):
                    self._pipe(client, upstream, from_redis)
                    return
                reply = read_reply(from_redis)
                if self._should_lose(parts, reply):
                    return  # the command ran; its reply never arrives
                client.sendall(reply)
        except (EOFError, OSError, ValueError):
            return
        finally:
            for sock in (client, upstream):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()

    def _pipe(self, client: socket.socket, upstream: socket.socket, from_redis: BinaryIO) -> None:
        """Pub/sub: messages come without commands, so bytes just flow both ways."""

        def down() -> None:
            try:
                while chunk := from_redis.read1(65536):  # type: ignore[attr-defined]
                    client.sendall(chunk)
            except OSError:
                pass

        threading.Thread(target=down, daemon=True).start()
        while chunk := client.recv(65536):
            upstream.sendall(chunk)

    def close(self) -> None:
        """Stop accepting and cut every connection."""
        self._closed = True
        self._listener.close()
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
