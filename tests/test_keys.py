"""The key layout: one Redis Cluster hash slot per namespace, and safe namespace names."""

from __future__ import annotations

import functools
import inspect

import pytest
from redis import Redis

from store.keys import KeySpace
from store.models import HandoffRequest, QuestionPayload, RequestType, Status, TaskKind
from store.repository import HandoffStore, StoreConfig, TaskPolicy


def crc16_xmodem(data: bytes) -> int:
    """CRC16-CCITT (XMODEM), the checksum Redis Cluster uses for key slots."""
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc


def cluster_slot(key: str) -> int:
    """The hash slot of ``key``, honouring ``{...}`` hash tags as Redis Cluster does."""
    raw = key.encode()
    start = raw.find(b"{")
    if start != -1:
        end = raw.find(b"}", start + 1)
        if end > start + 1:
            raw = raw[start + 1 : end]
    return crc16_xmodem(raw) % 16384


def every_key(keys: KeySpace, sample: str) -> dict[str, str]:
    """Every key name a ``KeySpace`` can produce, per-item keys built from ``sample``."""
    names = {}
    for name, member in inspect.getmembers(type(keys)):
        if name.startswith("_"):
            continue
        if isinstance(member, property | functools.cached_property):
            names[name] = getattr(keys, name)
        elif inspect.isfunction(member):
            method = getattr(keys, name)
            parameters = inspect.signature(method).parameters.values()
            # A number where a method takes one (a lookup hash's level), else the sample.
            arguments = [7 if p.annotation in (int, "int") else sample for p in parameters]
            names[name] = method(*arguments)
    return names


def test_slot_function_matches_redis_reference_values() -> None:
    assert crc16_xmodem(b"123456789") == 0x31C3
    assert cluster_slot("foo") == 12182
    assert cluster_slot("{user1000}.following") == cluster_slot("user1000")
    assert cluster_slot("{}foo") == crc16_xmodem(b"{}foo") % 16384


@pytest.mark.parametrize("namespace", ["ho", "tenant-7", "prod_eu"])
@pytest.mark.parametrize("sample", ["ho_01JDZ3Q6T5N9W2V8K4M7R1X0BC", "C{0}1", "a}b{c:d", ""])
def test_every_key_of_a_namespace_is_in_the_same_cluster_slot(namespace: str, sample: str) -> None:
    keys = KeySpace(namespace)
    names = every_key(keys, sample)

    assert len(names) >= 16  # every key kind of the layout was produced
    expected = cluster_slot("{" + namespace + "}")
    for name, key in names.items():
        assert key.startswith("{" + namespace + "}:"), name
        assert cluster_slot(key) == expected, name


def test_different_namespaces_get_different_prefixes() -> None:
    assert KeySpace("a").handoff("x") != KeySpace("b").handoff("x")
    assert KeySpace("a").prefix == "{a}:"


@pytest.mark.parametrize("namespace", ["", "a{b", "a}b", "{ho}", "a:b", "a b"])
def test_namespaces_that_would_break_the_hash_tag_are_rejected(namespace: str) -> None:
    with pytest.raises(ValueError, match="namespace"):
        KeySpace(namespace)


def test_a_store_with_an_invalid_namespace_cannot_be_built(redis: Redis) -> None:
    with pytest.raises(ValueError, match="namespace"):
        HandoffStore(redis, StoreConfig(namespace="bad:ns"))


def test_a_whole_lifecycle_writes_only_keys_of_its_namespace_slot(redis: Redis) -> None:
    tasks = TaskPolicy(resume_timeout_seconds=5, backoff_seconds=0.01, lease_grace_seconds=0)
    store = HandoffStore(redis, StoreConfig(namespace="tenant-7", tasks=tasks))
    request = HandoffRequest(
        run_id="run-1",
        thread_id="t-1",
        request_type=RequestType.QUESTION,
        payload=QuestionPayload(question="Which customer?"),
        channel="C01",
        reviewers=["U01", "S01"],
        resume_target="tests.support.resume_targets:record",
        idempotency_key="idem-1",
        expires_in_seconds=60,
    )
    handoff = store.create(request, handoff_id="ho_01JDZ3Q6T5N9W2V8K4M7R1X0BC").handoff
    store.record_audit(handoff.id, "viewed_full", actor="U1")
    store.claim_due(limit=10, visibility_seconds=1)
    store.decide(handoff.id, Status.ANSWERED, decided_by="U1", answer="ACME")
    start = store.begin_task(handoff.id, TaskKind.RESUME, run_token="job-1")
    store.finish_task(handoff.id, TaskKind.RESUME, attempt=start.attempt, error="boom")

    written = [key.decode() for key in redis.scan_iter()]
    assert len(written) >= 7  # hash, audit list and stream, idem, outbox, retention, wake
    expected = cluster_slot("{tenant-7}")
    for key in written:
        assert key.startswith("{tenant-7}:"), key
        assert cluster_slot(key) == expected, key
