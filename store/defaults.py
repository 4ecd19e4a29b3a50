"""Default values for the store and the jobs, each in one place."""

NAMESPACE = "ho"
"""Key namespace; every key of a deployment starts with ``{NAMESPACE}:`` (one hash tag)."""

QUEUE_NAME = "handoff"
"""The RQ queue of resume jobs. Slack work (posts, message updates, reminders, escalations)
has a queue of its own, this name plus ``SLACK_QUEUE_SUFFIX``, so that a resume never waits
behind a Slack call; each worker listens on one queue (BLMOVE dequeues stay atomic)."""

SLACK_QUEUE_SUFFIX = "-slack"
"""Appended to the queue name for the queue of Slack work."""

MAX_PAYLOAD_BYTES = 64 * 1024
"""Largest accepted context + payload, measured as UTF-8 JSON."""

RETENTION_SECONDS = 30 * 24 * 3600
"""How long a decided handoff (and the global audit stream) is kept after its decision."""

RESUME_MAX_ATTEMPTS = 5
"""Attempts at calling a resume target before the resume is marked failed."""

RESUME_TIMEOUT_SECONDS = 300
"""Longest a single resume attempt may run before RQ stops it."""

DELIVERY_MAX_ATTEMPTS = 8
"""Attempts at delivering a handoff to its notifier before delivery is marked failed."""

DELIVERY_TIMEOUT_SECONDS = 60
"""Longest a single delivery attempt may run."""

LEASE_GRACE_SECONDS = 5
"""Extra time past a job's timeout before its lease lapses and another attempt may start."""

MAX_VOTES = 100
"""Votes one handoff keeps (a voter whose vote an edit cleared may vote again): past that, a
vote is refused and an admin decides; bounds the handoff, and each script run over it."""

MAX_DEFERRALS = 100
"""Times a round of a task may be put off because Slack asked to wait (a rate limit) without
spending an attempt; past that, each counts as a failed attempt."""

RETRY_BACKOFF_SECONDS = 2.0
"""First retry delay; each further retry doubles it."""

RETRY_BACKOFF_MAX_SECONDS = 300.0
"""Longest delay between two attempts."""

DISPATCH_TIMEOUT_SECONDS = 300
"""A dispatched job that has not started after this long is dispatched again."""

SWEEP_INTERVAL_SECONDS = 1.0
"""How often the dispatcher looks for due work when nothing wakes it."""

SWEEP_BATCH = 500
"""Most due items the dispatcher takes in one step."""

MAX_REMINDERS = 3
"""Reminders sent at most, when reminders are on."""

REDIS_WAIT_SECONDS = 60.0
"""How long workers and dispatchers wait for an unreachable Redis before the attempt fails."""

DECISION_SECONDS_BUCKETS = (1, 5, 15, 60, 300, 900, 3600, 14400, 86400, 604800)
"""Upper bounds (seconds) of the store's histogram of time from creation to decision
(``handoff_decision_seconds``); a slower decision falls in ``+Inf``."""

FAILED_TASKS_COUNTED = 10_000
"""Entries of the failed-task set a metrics scrape reads to count them by kind (the set is
emptied by retries and the retention sweep); beyond them, its size alone is exact."""

REPLICA_ACK_TIMEOUT_SECONDS = 1.0
"""Longest wait for replicas to confirm a write (``HANDOFF_MIN_REPLICA_ACKS``): well inside
the 3 s Slack waits for an answer, long past a healthy replica's lag (under a millisecond on
a LAN)."""

UNCONFIRMED_START_DEFER_SECONDS = 10.0
"""How long a task's attempt whose start the replicas did not confirm (``HANDOFF_MIN_REPLICA_ACKS``)
is put off, as a deferral that spends no attempt (up to ``MAX_DEFERRALS`` a round): a replica
down for minutes must not use up a delivery's attempts and close its handoff undeliverable."""

LOOKUP_FIRST_LEVEL = 4
"""Idempotency keys, Slack message links and runs with one pending handoff are fields of
small hashes, ``2**level`` of them a level (``store.keys.KeySpace.lookup_bucket``), not of
one big hash or a key each: a hash of up to 128 short fields is a listpack, about 30 to 50
bytes a field, where a big hash's table spends about 100 and a key of its own about 90. The
first level has 16 hashes; the next level is opened when a hash of the current one reaches
``LOOKUP_GROW_AT`` fields, and new fields go there. A field never moves: a lookup reads
each level, newest first (a few microseconds each, inside the scripts). So the hashes stay
listpacks and about full from the first handoff to the millionth, where a fixed count of
hashes is either sparse (a key per field, at a small deployment) or overfull (a hashtable,
at a large one)."""

LOOKUP_GROW_AT = 96
"""Fields of a lookup hash at which its kind's next level is opened: below the 128 fields
up to which Redis keeps a hash a listpack (``hash-max-listpack-entries``, 128 by default),
with room to spare for a server configured a little lower."""

LOOKUP_LAST_LEVEL = 24
"""The deepest level (16 million hashes): past it, fields go on being added to its hashes."""

INDEX_FANOUT = 8
"""A pending index (a type's, a channel's, a reviewer's, an API key's) is one sorted set up to
``LOOKUP_GROW_AT`` entries; then its next ids go to ``INDEX_FANOUT`` sets by the SHA-1 of the
id, then to ``INDEX_FANOUT**2`` (``store.scripts``, ``index_add``): a sorted set of up to 128
entries is a listpack, about 30 bytes an entry, where a bigger one is a skip list of about
100. Readers merge the sets (at most 73, a few microseconds each, in one script)."""

INDEX_LAST_LEVEL = 2
"""The deepest level of a pending index: its 64 sets keep it compact up to about 8,000
pending handoffs; past that they grow into skip lists, as one set would."""

DEADLINE_BUCKETS = 128
"""Pending handoffs' deadlines are spread over this many sorted sets (by the SHA-1 of the
id; ``store.keys.deadline_bucket``), each a listpack while it holds at most 128 (about 40
bytes an entry where one big set spends about 130): compact up to about 16,000 handoffs with
a deadline. The expiry sweep reads each (a few microseconds apiece)."""
