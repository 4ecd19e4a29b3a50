"""Break-it checks of the compact layout (``store.keys``, 0.3) against what 0.2 wrote: what a
purge, an expiry or a read must still do when a handoff's lookups, deadlines or trail are
kept in both the new and the old places."""

from __future__ import annotations

import time

import pytest
from redis import Redis

from store.exceptions import HandoffNotFound
from store.models import TaskKind
from store.repository import HandoffStore, StoreConfig, TaskPolicy
from tests.test_storage_compact import CHANNEL, TS, write_previous_shape


def test_a_message_link_kept_in_both_its_bucket_and_the_old_hash_goes_with_the_purge(
    redis: Redis, fast_tasks: TaskPolicy
) -> None:
    """A 0.2 handoff's message was linked in ``{ns}:msgs``; after the upgrade the same message
    is linked again, in its bucket (a delivery or escalation attempt that finds the post an
    attempt before it made, its answer lost, links it again: ``worker.jobs``). The purge
    must remove the link from both places, not stop at the first."""
    store = HandoffStore(redis, StoreConfig(tasks=fast_tasks, retention_seconds=0))
    handoff_id = write_previous_shape(redis, store, fast_tasks, "run-both-links")
    store.link_message(handoff_id, CHANNEL, TS)  # linked again by 0.3, same message
    link = f"{CHANNEL}:{TS}"
    assert redis.hget(store.keys.message_links(link), link) == handoff_id.encode()
    assert redis.hget(store.keys.message_links_before, link) == handoff_id.encode()

    store.cancel(handoff_id, cancelled_by="U0ADMIN01", resume=False)
    time.sleep(0.01)
    assert store.purge_decided() == 1
    with pytest.raises(HandoffNotFound):
        store.get(handoff_id)

    assert store.handoff_for_message(CHANNEL, TS) is None
    assert redis.hget(store.keys.message_links(link), link) is None
    assert redis.hget(store.keys.message_links_before, link) is None
