"""The HTTP API against hostile input, over real HTTP: fuzzed bodies and query strings
never get a 5xx and, when refused, change nothing in Redis (compared byte for byte); callback
URLs aimed inside the network are refused at creation and never reached at send time."""

from __future__ import annotations

import json
import string
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis import Redis

from bot.api.app import ApiConfig
from store.api_keys import ApiKeys
from tests.support.api_server import serve_api
from worker.client import Handoffs
from worker.outbound import UnsafeUrl, check_url

FIELDS = [
    "request_type", "run_id", "thread_id", "context", "action", "question", "choices",
    "draft", "instructions", "summary", "channel", "reviewers", "requester",
    "expires_in_seconds", "metadata", "callback", "idempotency_key",
]  # fmt: skip


def snapshot(redis: Redis) -> dict[bytes, bytes | None]:
    """Every key of the test database and its serialized value, except the per-minute
    create counters (a valid request counts before it may be refused later)."""
    return {
        key: redis.dump(key)
        for key in sorted(redis.scan_iter(count=1000))
        if b":apicreates:" not in key
    }


@pytest.fixture(scope="module")
def served(redis_url: str) -> Iterator[tuple[httpx.Client, str, Redis]]:
    """The API, a client holding its connection open (thousands of examples) with a key,
    and the Redis it writes to."""
    redis = Redis.from_url(redis_url)
    redis.flushdb()
    store = Handoffs(redis).store
    key = ApiKeys(redis, store.keys).create("fuzz", creates_per_minute=1_000_000).key
    config = ApiConfig(redis_url=redis_url)
    with (
        serve_api(store, config) as url,
        httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}) as client,
    ):
        yield client, key, redis
    redis.flushdb()


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
bodies = (
    st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=10), json_values, max_size=8)
    | json_values
)


@settings(
    max_examples=1400,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(body=bodies)
def test_fuzzed_create_bodies_never_5xx_and_refusals_change_nothing(
    served: tuple[httpx.Client, str, Redis], body: Any
) -> None:
    client, _, redis = served
    before = snapshot(redis)
    answer = client.post(
        "/v1/handoffs",
        content=json.dumps(body).encode(),
        headers={"content-type": "application/json"},
    )
    assert answer.status_code < 500, answer.text
    if answer.status_code >= 400:
        assert answer.headers["content-type"] == "application/problem+json"
        assert snapshot(redis) == before


query_text = st.text(alphabet=string.printable, max_size=20)


@settings(
    max_examples=600,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    params=st.dictionaries(
        st.sampled_from(["wait", "limit", "cursor", "status", "run_id", "channel"]) | query_text,
        query_text,
        max_size=4,
    ),
    handoff_id=query_text,
)
def test_fuzzed_query_strings_never_5xx_and_change_nothing(
    served: tuple[httpx.Client, str, Redis], params: dict[str, str], handoff_id: str
) -> None:
    client, _, redis = served
    before = snapshot(redis)
    listed = client.get("/v1/handoffs", params=params)
    params.pop("wait", None)  # a valid wait would hold the request
    read = client.get(f"/v1/handoffs/{quote(handoff_id, safe='') or 'x'}", params=params)
    for answer in (listed, read):
        assert answer.status_code < 500, answer.text
    assert snapshot(redis) == before


@pytest.mark.parametrize(
    "raw",
    [
        b"{nope",
        b"[" * 5000 + b"]" * 5000,
        b'{"run_id": NaN}',
        b'{"run_id": Infinity}',
        b'{"run_id": "\\ud800"}',
        b'{"context": "a\\u0000b"}',
        b'{"expires_in_seconds": 1e999}',
        b"",
        '{"x": "\xff"}'.encode("latin-1"),
    ],
)
def test_malformed_bodies_are_4xx_problems(
    served: tuple[httpx.Client, str, Redis], raw: bytes
) -> None:
    client, _, redis = served
    before = snapshot(redis)

    answer = client.post("/v1/handoffs", content=raw, headers={"content-type": "application/json"})

    assert 400 <= answer.status_code < 500, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    assert "Traceback" not in answer.text
    assert snapshot(redis) == before


def test_a_chunked_body_over_the_limit_is_413(served: tuple[httpx.Client, str, Redis]) -> None:
    client, _, redis = served
    before = snapshot(redis)

    def chunks() -> Iterator[bytes]:
        yield b'{"request_type": "question", "run_id": "r", "thread_id": "t", "question": "'
        for _ in range(200):
            yield b"x" * 1024
        yield b'"}'

    answer = client.post(
        "/v1/handoffs", content=chunks(), headers={"content-type": "application/json"}
    )

    assert answer.status_code == 413
    assert snapshot(redis) == before


INTERNAL_URLS = [
    "https://127.0.0.1/hook",
    "https://127.1/hook",
    "https://2130706433/hook",
    "https://0x7f000001/hook",
    "https://0177.0.0.1/hook",
    "https://0.0.0.0/hook",
    "https://localhost/hook",
    "https://[::1]/hook",
    "https://[::ffff:127.0.0.1]/hook",
    "https://[::ffff:7f00:1]/hook",
    "https://10.0.0.8/hook",
    "https://172.16.3.4/hook",
    "https://192.168.1.1/hook",
    "https://169.254.169.254/latest/meta-data",
    "https://100.64.0.1/hook",
    "https://[fd00:ec2::254]/hook",
    "https://[fe80::1]/hook",
    "https://[2002:7f00:1::]/hook",
    "https://[64:ff9b::a9fe:a9fe]/hook",
    "https://[64:ff9b::a00:1]/hook",
    "https://[64:ff9b:1::7f00:1]/hook",
    "https://[::7f00:1]/hook",
    "https://[::ffff:0:7f00:1]/hook",
    "https://[fec0::1]/hook",
    "https://224.0.0.1/hook",
    "http://example.com/hook",
    "ftp://example.com/hook",
    "https://user:pw@example.com/hook",
    "https:///hook",
]


@pytest.mark.parametrize("url", INTERNAL_URLS)
def test_callbacks_aimed_inside_are_refused_at_creation(
    served: tuple[httpx.Client, str, Redis], url: str
) -> None:
    client, _, redis = served
    before = snapshot(redis)

    answer = client.post(
        "/v1/handoffs",
        json={
            "request_type": "question",
            "run_id": "r",
            "thread_id": "t",
            "question": "?",
            "callback": {"url": url},
        },
    )

    assert answer.status_code == 422, answer.text
    assert answer.json()["errors"][0]["field"] == "callback.url"
    assert snapshot(redis) == before


def test_a_name_that_resolves_inside_is_refused_and_a_checked_one_is_pinned() -> None:
    def rebinding(host: str, port: int) -> list[str]:
        return {"evil.example": ["93.184.216.34", "127.0.0.1"], "ok.example": ["93.184.216.34"]}[
            host
        ]

    with pytest.raises(UnsafeUrl, match=r"resolves to 127\.0\.0\.1"):
        check_url("https://evil.example/hook", resolve=rebinding)
    checked = check_url("https://ok.example:8443/hook?x=1", resolve=rebinding)
    # The send goes to the address that was checked, not to a second resolution.
    assert checked.pinned_url() == "https://93.184.216.34:8443/hook?x=1"
    assert checked.host == "ok.example"
    v6 = check_url("https://six.example/h", resolve=lambda h, p: ["2606:4700::1111"])
    assert v6.pinned_url() == "https://[2606:4700::1111]/h"


def test_allowed_hosts_are_exempt_and_only_they() -> None:
    allowed = frozenset({"127.0.0.1", "hooks.internal"})

    assert check_url("http://127.0.0.1:9000/h", allowed_hosts=allowed).address is None
    assert check_url("http://hooks.internal/h", allowed_hosts=allowed).address is None
    with pytest.raises(UnsafeUrl):
        check_url("http://127.0.0.2/h", allowed_hosts=allowed)
