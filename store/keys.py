"""The Redis key layout.

Every key of a deployment starts with ``{<namespace>}:``. The braces are a Redis Cluster
hash tag, so all keys of a namespace live in one slot: the Lua scripts can then touch a
handoff, its audit trail and the shared indexes in one atomic step, on a single server or
on a cluster. To spread load over several shards, run several namespaces.

=====================================  ======  ===============================================
key                                    type    contents
=====================================  ======  ===============================================
``{ns}:h:<id>``                        hash    the handoff's short fields: status, decision,
                                               delivery and resume progress, message refs,
                                               its policy's name (kept a listpack: below)
``{ns}:hb:<id>``                       string  the handoff's body: an approval's args
                                               digest, its pending index keys (JSON, each
                                               without ``{ns}:pending``; left out when the
                                               request names them all), the request JSON,
                                               a line each, then its audit events, one per
                                               line, oldest first (``BODY_FIELDS``)
``{ns}:policies``                      hash    SHA-1 -> a task policy's JSON (attempts,
                                               timeouts, timers), stored once for every
                                               handoff naming it
``{ns}:audit:<id>``                    list    the audit events of a handoff written before
                                               0.2 (JSON), oldest first; read and added to
``{ns}:audit``                         stream  every audit event of the namespace (field
                                               ``e``), or, while its handoff is pending,
                                               where it is in the trail (``p``, ``i``)
``{ns}:idemkeys:<n>``                  hash    idempotency key -> the handoff id created
                                               under it, a lookup hash (below; before 0.3:
                                               one hash ``{ns}:idem``; before
                                               0.2: ``{ns}:idem:<key>``, a string each;
                                               both still read)
``{ns}:idembody:<key>``                string  the HTTP API's digest of the body first
                                               sent with an idempotency key (expires)
``{ns}:pending``                       zset    all pending ids, written before 0.2 (each is
                                               in its type's index too; drains as they close)
``{ns}:pending:channel:<channel>``     zset    pending ids routed to a channel
``{ns}:runs:<n>``                      hash    run id -> the pending id of a run that
                                               has one, or ``*``: see its set below (a
                                               lookup hash; every run before 0.3 had a set)
``{ns}:pending:run:<run_id>``          zset    pending ids of an agent run with two or
                                               more (read through ``HandoffStore``'s
                                               ``index_range``/``index_size``)
``{ns}:pending:reviewer:<user>``       zset    pending ids a reviewer (user or group) may decide
``{ns}:pending:type:<request_type>``   zset    pending ids of one request type (score 0,
                                               ordered by id = age); the four together are
                                               every pending handoff
``{ns}:pending:key:<api key name>``    zset    pending ids an HTTP API key created
``{ns}:ix:<l>:<n>:<kind>:<name>``      zset    more of ``{ns}:pending:<kind>:<name>``'s
                                               ids, once it grew to level ``l`` (below)
``{ns}:deadlines:<n>``                 zset    pending id -> expiry time (ms), in bucket
                                               ``deadline_bucket(id)`` (before 0.3: one
                                               set ``{ns}:deadlines``, still swept)
``{ns}:outbox``                        zset    ``<task>:<id>`` -> when due (ms); tasks are
                                               ``deliver``, ``resume`` and ``notify``
``{ns}:failed``                        zset    ``<task>:<id>`` that used up its attempts
``{ns}:job:<task>:<id>``               string  id of the RQ job last dispatched for a task
                                               (expires)
``{ns}:msglinks:<n>``                  hash    ``<channel>:<ts>`` of a posted Slack
                                               message -> its handoff id, a lookup hash
                                               (before
                                               0.3: one hash ``{ns}:msgs``; before 0.2:
                                               ``{ns}:msg:<channel>:<ts>``; still read)
``{ns}:event:<event_id>``              string  Slack event already handled (expires)
``{ns}:op:<operation id>``             string  what a script call did, for its resend after
                                               a lost reply (expires after 2 minutes)
``{ns}:budget:<name>``                 string  when the next call of a rate-limited API may
                                               be made (ms; expires)
``{ns}:budget:<name>:held``            zset    holder -> the call kept for it (ms; expires)
``{ns}:retention``                     zset    decided id -> when it may be purged (ms)
``{ns}:wake``                          list    at most one token; wakes the dispatcher
``{ns}:levels``                        hash    lookup kind or ``pending:<kind>:<name>`` ->
                                               its current level (below)
``{ns}:decided:<id>``                  pubsub  status published when the handoff is decided
``{ns}:apikey:<sha256>``               string  an API key's record (JSON), by its key's hash
``{ns}:apikeys``                       hash    API key name -> its key's hash
``{ns}:apicreates:<name>:<minute>``    zset    creates by a key in one minute, a member
                                               each (expires)
``{ns}:metrics``                       hash    store-wide counters for /metrics (see
                                               ``store.metrics``): created, closed and
                                               given-up counts, the decision-time histogram
=====================================  ======  ===============================================

A handoff is a hash and a string so that the hash read and written on every step stays
small. Redis keeps a hash as a listpack (a few bytes per field) while every value is at most
``hash-max-listpack-value`` bytes (64 by default) and as a hashtable (about 60 bytes more
per field) once one is longer; the request JSON alone is hundreds of bytes. So the long
values live in the body, one string (a hash of them would be a hashtable again), and the
policy, the same JSON for most handoffs, is stored once in ``{ns}:policies`` and named by
``@<sha1>``. Its own audit trail is the body's last field, one event per line as a JSON
array (``[at, actor, event, detail]``, its id left out: the key says it), and while it is
pending the namespace's stream only points at the trail's events (``p`` and ``i``: its id
and the event's place), which the readers follow. Trails written before this (0.2.0) are
lists of event objects at ``{ns}:audit:<id>``, which such a handoff keeps adding to.
Handoffs written before this layout (0.1.0) hold ``request``, ``indexes``, ``args_digest``
and the policy's JSON in ``{ns}:h:<id>`` itself, and their trails name them; the scripts
read either shape
(``store.scripts``: ``body_get``, ``policy_json``) and move a field to the body when they
rewrite it (``tests/test_storage_layout.py``).

Since 0.3 a waiting handoff keeps nothing twice, to fit in about 2 KB (``bench/memory.py``):
the body leaves out what the request or the hash says (index keys the request names, the
'created' event's detail, the idempotency key, an expiry of whole milliseconds, an empty
metadata) and keeps an approval's digest from creation in 128 bits; the hash keeps no route
or resume flag (the request says both), names its policy by 8 hex digits, and drops a
finished attempt's start. Idempotency keys, message links, deadlines and the index of each
run with one pending handoff are fields of small bucket hashes or sets (a listpack each, a
few tens of bytes an entry, where one big hash or set spends about 100 and a set of its own
per run about 180). The lookup hashes (``idemkeys``, ``msglinks``, ``runs``) come in levels
so that they stay about full at any size: level ``l`` has ``2**l`` hashes, numbered from
``2**l`` (``KeySpace.lookup_bucket``); a field is added to the current level's hash by
``bucket_of`` its name and never moves; when that hash reaches ``defaults.LOOKUP_GROW_AT``
fields the kind's level in ``{ns}:levels`` goes up by one; a lookup reads the levels newest
first (``lookup_find`` in ``store.scripts``; ``HandoffStore.looked_up``). A pending index
other than a run's grows alike, so that its sorted sets stay listpacks (one of more than 128
entries is a skip list, about 100 bytes an entry instead of 30): its own key up to
``LOOKUP_GROW_AT`` ids, then ``defaults.INDEX_FANOUT`` sets, then 64 (``{ns}:ix:...``);
readers merge them in one script (``HandoffStore.index_range``, ``index_sizes``). Handoffs
written by 0.2 are read, decided, expired and purged as they are
(``tests/test_storage_compact.py``).

Handoff hashes have no TTL: a pending handoff never disappears on its own, and a decided
one is removed only by the retention sweep once its resume has finished. The sweep removes
its message links with it (every message its ``message_refs`` name: the message, escalation
copies, messages it moved from), so no reply in one of their threads finds a handoff that
is gone.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass

from store import defaults

BODY_FIELDS = ("args_digest", "indexes", "request", "trail")
"""The handoff body's fields, in their order in ``{ns}:hb:<id>``, each ended by a newline but
the last (compact JSON and a digest never hold one); an absent one is empty. The trail, last,
holds the handoff's audit events one per line (``trail_lines``); a body with none ends
after the request."""


def body_fields(body: bytes | None) -> dict[str, bytes]:
    """The fields of a handoff's body as stored (``BODY_FIELDS``), the empty ones left out."""
    if not body:
        return {}
    parts = body.split(b"\n", len(BODY_FIELDS) - 1)
    return {name: part for name, part in zip(BODY_FIELDS, parts, strict=False) if part}


def body_string(fields: dict[str, bytes]) -> bytes:
    """A handoff body from its fields, as the store's scripts write it (``body_fields``
    reads it back); for tools and tests that write one by hand."""
    parts = [fields.get(name, b"") for name in BODY_FIELDS]
    if not parts[-1]:
        parts.pop()  # no trail: the body ends after the request
    return b"\n".join(parts)


CREATED_END = b'"created"]'
"""How the line of a ``created`` event stored without its detail ends (see ``trail_lines``)."""


def trail_lines(body: bytes | None) -> list[bytes]:
    """The audit events a handoff's body holds (its ``trail``), oldest first.

    Its first, ``created``, is stored without its detail, which is the request's run and
    type (``CREATE`` in ``store.scripts``): put back here, as ``TRAIL_EVENTS`` puts it back
    for the stream's readers."""
    fields = body_fields(body)
    trail = fields.get("trail")
    if not trail:
        return []
    lines = trail.split(b"\n")
    request = fields.get("request")
    if request and lines[0].endswith(CREATED_END):
        stored = json.loads(request)
        detail = {"run_id": stored.get("run_id"), "request_type": stored.get("request_type")}
        lines[0] = lines[0][:-1] + b"," + json.dumps(detail).encode() + b"]"
    return lines


def bucket_of(name: str, buckets: int) -> int:
    """Which of ``buckets`` keys holds ``name``: the first 32 bits of the SHA-1 of its UTF-8
    bytes, modulo the count. The scripts work it out the same way (``bucket_of`` in
    ``store.scripts``)."""
    return int(hashlib.sha1(name.encode()).hexdigest()[:8], 16) % buckets


LOOKUP_KINDS = ("idemkeys", "msglinks", "runs")
"""What the lookup hashes hold (``KeySpace.lookup_bucket``): idempotency key -> handoff id,
``<channel>:<ts>`` of a posted Slack message -> handoff id, run id -> its one pending
handoff's id (or ``*``)."""


@dataclass(frozen=True)
class KeySpace:
    """Names of every key in one namespace."""

    namespace: str = defaults.NAMESPACE

    def __post_init__(self) -> None:
        if not self.namespace or any(c in self.namespace for c in "{}: "):
            raise ValueError(
                f"namespace {self.namespace!r} must be non-empty, without braces, colons or spaces"
            )

    # The names used on every store call are built once per key space.
    @functools.cached_property
    def prefix(self) -> str:
        """The common prefix, including the hash tag and the trailing colon."""
        return "{" + self.namespace + "}:"

    def handoff(self, handoff_id: str) -> str:
        """The handoff's hash."""
        return f"{self.prefix}h:{handoff_id}"

    def handoff_body(self, handoff_id: str) -> str:
        """The handoff's long fields (request, index keys, args digest); see above."""
        return f"{self.prefix}hb:{handoff_id}"

    @functools.cached_property
    def policies(self) -> str:
        """Task policies' JSON by SHA-1, each stored once."""
        return f"{self.prefix}policies"

    def audit(self, handoff_id: str) -> str:
        """The handoff's own audit list."""
        return f"{self.prefix}audit:{handoff_id}"

    @functools.cached_property
    def global_audit(self) -> str:
        """The namespace-wide audit stream."""
        return f"{self.prefix}audit"

    def lookup_bucket(self, kind: str, name: str, level: int) -> str:
        """The hash of ``level`` that would hold ``name`` of a lookup ``kind``
        (``LOOKUP_KINDS``; ``defaults.LOOKUP_FIRST_LEVEL``): level ``l`` has ``2**l``
        hashes, numbered on from ``2**l`` so that no two levels share one. Which level holds
        a name is for the scripts to find (``HandoffStore.looked_up``)."""
        buckets = 2**level
        return f"{self.prefix}{kind}:{buckets + bucket_of(name, buckets)}"

    @functools.cached_property
    def lookup_levels(self) -> str:
        """The lookup kinds' current levels (a hash; a kind absent is at the first)."""
        return f"{self.prefix}levels"

    @functools.cached_property
    def idempotency_ids_before(self) -> str:
        """Idempotency keys -> the handoff id created under each, in one hash for the
        namespace, as they were kept before the ``idemkeys`` lookup hashes (still read)."""
        return f"{self.prefix}idem"

    def idempotency_body(self, key: str) -> str:
        """The digest of the body the HTTP API first took with an idempotency key (a
        different body under the key is refused). Before, it was kept at
        ``idempotency(key) + ":body"``, a name the key ``<key>:body`` read as its own."""
        return f"{self.prefix}idembody:{key}"

    def idempotency(self, key: str) -> str:
        """Where the id created under an idempotency key was remembered before the
        ``idemkeys`` lookup hashes (still read); the HTTP API keeps the key's body digest
        at this name and ``:body``."""
        return f"{self.prefix}idem:{key}"

    @functools.cached_property
    def pending(self) -> str:
        """All pending handoffs written before 0.2 (each in its type's index too, which is
        what readers read; ``HandoffStore.type_indexes``)."""
        return f"{self.prefix}pending"

    def pending_by_channel(self, channel: str) -> str:
        """Pending handoffs routed to ``channel``."""
        return f"{self.prefix}pending:channel:{channel}"

    def pending_by_run(self, run_id: str) -> str:
        """Pending handoffs of one agent run: the name by which the store and its scripts
        know a run's index, which holds them in a ``runs`` lookup field while there is one and
        in a sorted set of this name from two on."""
        return f"{self.prefix}pending:run:{run_id}"

    def pending_by_reviewer(self, reviewer: str) -> str:
        """Pending handoffs a reviewer (user or user group id) may decide."""
        return f"{self.prefix}pending:reviewer:{reviewer}"

    def pending_by_type(self, request_type: str) -> str:
        """Pending handoffs of one request type."""
        return f"{self.prefix}pending:type:{request_type}"

    def pending_by_key(self, key_name: str) -> str:
        """Pending handoffs created by one HTTP API key."""
        return f"{self.prefix}pending:key:{key_name}"

    @functools.cached_property
    def deadlines(self) -> str:
        """Expiry times of pending handoffs, as they were kept before ``deadline_bucket``
        (still swept); the sweep's script names it."""
        return f"{self.prefix}deadlines"

    def deadline_bucket(self, handoff_id: str) -> str:
        """The sorted set holding a pending handoff's expiry time (one of
        ``defaults.DEADLINE_BUCKETS``, by ``bucket_of``; the scripts work it out alike)."""
        return f"{self.prefix}deadlines:{bucket_of(handoff_id, defaults.DEADLINE_BUCKETS)}"

    @functools.cached_property
    def outbox(self) -> str:
        """Deliveries and resumes waiting to be dispatched to RQ."""
        return f"{self.prefix}outbox"

    @functools.cached_property
    def failed(self) -> str:
        """Deliveries and resumes that used up their attempts."""
        return f"{self.prefix}failed"

    @functools.cached_property
    def retention(self) -> str:
        """Decided handoffs waiting for the retention sweep."""
        return f"{self.prefix}retention"

    @functools.cached_property
    def wake(self) -> str:
        """The dispatcher's wake-up list."""
        return f"{self.prefix}wake"

    def dispatched_job(self, task: str, handoff_id: str) -> str:
        """The RQ job last dispatched for a task (``deliver``, ``resume``...) of a handoff."""
        return f"{self.prefix}job:{task}:{handoff_id}"

    @functools.cached_property
    def message_links_before(self) -> str:
        """``<channel>:<ts>`` of each posted Slack message -> the handoff it shows, in one
        hash for the namespace, as they were kept before the ``msglinks`` lookup hashes (still
        read)."""
        return f"{self.prefix}msgs"

    def message_link(self, channel: str, ts: str) -> str:
        """Which handoff a posted Slack message belonged to, before the ``msglinks`` lookups
        (still read)."""
        return f"{self.prefix}msg:{channel}:{ts}"

    def seen_event(self, event_id: str) -> str:
        """Marker of a Slack event already handled (Slack retries events)."""
        return f"{self.prefix}event:{event_id}"

    def budget(self, name: str) -> str:
        """A budget of calls to a rate-limited API, shared by the deployment's processes."""
        return f"{self.prefix}budget:{name}"

    def budget_reservations(self, name: str) -> str:
        """The calls of a budget kept for those waiting their turn."""
        return f"{self.prefix}budget:{name}:held"

    def decided_channel(self, handoff_id: str) -> str:
        """The pub/sub channel on which a decision is announced."""
        return f"{self.prefix}decided:{handoff_id}"

    def api_key(self, digest: str) -> str:
        """An API key's record, found by the SHA-256 of the key (the key is never stored)."""
        return f"{self.prefix}apikey:{digest}"

    @functools.cached_property
    def api_key_names(self) -> str:
        """API key names -> the hash of each key."""
        return f"{self.prefix}apikeys"

    @functools.cached_property
    def metrics(self) -> str:
        """Store-wide counters read by the metrics collectors (``store.metrics``)."""
        return f"{self.prefix}metrics"

    def api_rate(self, name: str, minute: int) -> str:
        """The handoffs the key ``name`` created in one minute (since the epoch), a member each
        (before 0.2: ``{ns}:apirate:<name>:<minute>``, a count, which expired in two minutes)."""
        return f"{self.prefix}apicreates:{name}:{minute}"


def stored_index_keys(keys: KeySpace, stored: bytes | str) -> list[str]:
    """A handoff's pending index keys from its body's ``indexes``: each stored without the
    ``{ns}:pending`` prefix they share (one written before is a whole key). Not a method of
    ``KeySpace``, whose methods each name a key."""
    return [key if key.startswith("{") else keys.pending + key for key in json.loads(stored)]


def run_of_index(keys: KeySpace, key: str) -> str | None:
    """The run whose pending index ``key`` is (``KeySpace.pending_by_run``), or None for
    another index. Not a method of ``KeySpace``, whose methods each name a key."""
    prefix = keys.pending_by_run("")
    return key[len(prefix) :] if key.startswith(prefix) else None
