"""Default values for the store and the jobs, each in one place."""

NAMESPACE = "ho"
"""Key namespace; every key of a deployment starts with ``{NAMESPACE}:`` (one hash tag)."""

QUEUE_NAME = "handoff"
"""The one RQ queue for delivery and resume jobs (one queue keeps BLMOVE dequeues atomic)."""

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
