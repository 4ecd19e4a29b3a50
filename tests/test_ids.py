"""Handoff ids: ``ho_`` + a ULID, safe for RQ and LangGraph, sorted by creation time."""

from __future__ import annotations

import re
import time

from hypothesis import given
from hypothesis import strategies as st

from store.ids import HANDOFF_ID_PREFIX, is_handoff_id, new_handoff_id

RQ_JOB_ID = re.compile(r"^[A-Za-z0-9_-]+$")
HEX_32 = re.compile(r"^[0-9a-f]{32}$", re.IGNORECASE)
MAX_ULID_MS = 2**48 - 1


def test_id_is_prefixed_ulid_of_fixed_length() -> None:
    handoff_id = new_handoff_id()

    assert handoff_id.startswith(HANDOFF_ID_PREFIX)
    assert len(handoff_id) == len("ho_") + 26
    assert is_handoff_id(handoff_id)


def test_ids_are_never_32_hex_chars_so_langgraph_cannot_mistake_them_for_interrupt_ids() -> None:
    for _ in range(2000):
        handoff_id = new_handoff_id()
        assert not HEX_32.match(handoff_id)
        assert not HEX_32.match(handoff_id.removeprefix(HANDOFF_ID_PREFIX))


def test_ids_are_valid_rq_job_ids() -> None:
    for _ in range(2000):
        assert RQ_JOB_ID.match(new_handoff_id())


def test_ids_are_unique() -> None:
    ids = {new_handoff_id() for _ in range(10_000)}

    assert len(ids) == 10_000


@given(
    first_ms=st.integers(min_value=0, max_value=MAX_ULID_MS - 1),
    gap_ms=st.integers(min_value=1, max_value=10_000),
)
def test_an_id_from_a_later_millisecond_always_sorts_after(first_ms: int, gap_ms: int) -> None:
    later_ms = min(first_ms + gap_ms, MAX_ULID_MS)

    assert new_handoff_id(first_ms) < new_handoff_id(later_ms)


def test_ids_created_over_time_sort_in_creation_order() -> None:
    ids = []
    for _ in range(20):
        ids.append(new_handoff_id())
        time.sleep(0.002)

    assert sorted(ids) == ids


def test_is_handoff_id_rejects_other_shapes() -> None:
    valid = new_handoff_id()

    assert not is_handoff_id(valid.removeprefix(HANDOFF_ID_PREFIX))
    assert not is_handoff_id(valid.lower())
    assert not is_handoff_id(valid + "0")
    assert not is_handoff_id(valid[:-1])
    assert not is_handoff_id("ho_" + "U" * 26)  # Crockford base32 has no U
    assert not is_handoff_id("")


@given(at_ms=st.integers(min_value=0, max_value=MAX_ULID_MS))
def test_an_id_spells_its_millisecond_in_its_first_ten_digits(at_ms: int) -> None:
    digits = new_handoff_id(at_ms).removeprefix(HANDOFF_ID_PREFIX)

    value = 0
    for digit in digits:
        value = value * 32 + "0123456789ABCDEFGHJKMNPQRSTVWXYZ".index(digit)

    assert value >> 80 == at_ms
    assert digits[:10] == new_handoff_id(at_ms)[3:13]
