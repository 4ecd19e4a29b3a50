"""Lua scripts: every state change of a handoff is one of these, run atomically in Redis.

Each script receives the namespace prefix (``{ns}:``) as ARGV[1] and derives the names of
the shared keys from it. That is safe on Redis Cluster because every key of a namespace
carries the same hash tag (see ``store.keys``). KEYS[1] is always the key the script is
about, so clients and cluster proxies route it correctly.

Every script is idempotent: redis-py resends a script whose reply was lost (the store's
clients retry on connection errors, ``store.settings.redis_retry``), and a second run must
report what the first did rather than do it again. Scripts that a state check cannot tell
apart from a new call take an operation id (``op``), fresh for each call and the same on
its resends: a run remembers what it did under ``{ns}:op:<id>`` for a short while
(``remember``) and a resend finds it there (``replayed``). Times come from the
server's clock (``TIME``) so that leases and deadlines never depend on client clocks.
"""

from store import defaults

LEVELS_PRELUDE = (
    """
local P = ARGV[1]
"""
    + f"local LOOKUP_FIRST_LEVEL = {defaults.LOOKUP_FIRST_LEVEL}\n"
    + f"local LOOKUP_GROW_AT = {defaults.LOOKUP_GROW_AT}\n"
    + f"local LOOKUP_LAST_LEVEL = {defaults.LOOKUP_LAST_LEVEL}\n"
    + f"local DEADLINE_BUCKETS = {defaults.DEADLINE_BUCKETS}\n"
    + f"local INDEX_FANOUT = {defaults.INDEX_FANOUT}\n"
    + f"local INDEX_LAST_LEVEL = {defaults.INDEX_LAST_LEVEL}\n"
    + """
-- Which of ``buckets`` keys holds ``name`` (store.keys.bucket_of works it out the same
-- way: the first 32 bits of its SHA-1, exact in a Lua number).
local function bucket_of(name, buckets)
  return tonumber(string.sub(redis.sha1hex(name), 1, 8), 16) % buckets
end

-- The lookup hashes (store.keys, KeySpace.lookup_bucket): idempotency keys ('idemkeys'),
-- message links ('msglinks') and runs with one pending handoff ('runs') are fields of
-- small hashes in levels, 2^l hashes at level l, numbered from 2^l. A field is added at
-- its kind's current level and never moves; the level goes up once the hash just added to
-- holds LOOKUP_GROW_AT fields, so every hash stays a listpack and about full.
local function lookup_level(kind)
  return tonumber(redis.call('HGET', P .. 'levels', kind)) or LOOKUP_FIRST_LEVEL
end

local function lookup_bucket(kind, name, level)
  local buckets = 2 ^ level
  return P .. kind .. ':' .. string.format('%d', buckets + bucket_of(name, buckets))
end

-- The hash holding ``name`` of ``kind`` and its value, newest level first; nil if none.
local function lookup_find(kind, name)
  for level = lookup_level(kind), LOOKUP_FIRST_LEVEL, -1 do
    local key = lookup_bucket(kind, name, level)
    local value = redis.call('HGET', key, name)
    if value then return key, value end
  end
  return nil, nil
end

local function lookup_get(kind, name)
  local _, value = lookup_find(kind, name)
  return value
end

-- Set ``name`` of ``kind`` to ``value``: where it is, else at the current level.
local function lookup_set(kind, name, value)
  local key = lookup_find(kind, name)
  if key then
    redis.call('HSET', key, name, value)
    return
  end
  local level = lookup_level(kind)
  key = lookup_bucket(kind, name, level)
  redis.call('HSET', key, name, value)
  if level < LOOKUP_LAST_LEVEL and redis.call('HLEN', key) >= LOOKUP_GROW_AT then
    redis.call('HSET', P .. 'levels', kind, level + 1)
  end
end

-- Remove ``name`` of ``kind`` where it is, if it says ``value`` (any value without one);
-- true when removed.
local function lookup_remove(kind, name, value)
  local key, held = lookup_find(kind, name)
  if not key or (value and held ~= value) then return false end
  redis.call('HDEL', key, name)
  return true
end

-- The sorted set holding a pending handoff's deadline (store.keys.deadline_bucket).
local function deadline_key(id)
  return P .. 'deadlines:' .. bucket_of(id, DEADLINE_BUCKETS)
end

-- A pending index: a sorted set (score 0, ordered by id), except a run's while the run has
-- one pending handoff: a 'runs' lookup field names it, and the run's set (the index's key)
-- exists from the second one on, the field then saying '*'. A run's set written before
-- (0.2) without a field is used as it is. HandoffStore.index_range and index_size read
-- both.
local function run_of(key)
  local prefix = P .. 'pending:run:'
  if string.sub(key, 1, #prefix) ~= prefix then return nil end
  return string.sub(key, #prefix + 1)
end

-- Any other index ({ns}:pending:<kind>:<name>: a type's, a channel's, a reviewer's, an API
-- key's) grows in levels, as the lookup hashes do, so that its sets stay listpacks (a
-- sorted set of more than 128 entries is a skip list, about 100 bytes an entry instead of
-- about 30): level 0 is the index's own key; level l has INDEX_FANOUT^l sets
-- ({ns}:ix:<l>:<n>:<kind>:<name>, by bucket_of the id). An id is added at the index's
-- current level ({ns}:levels, field pending:<kind>:<name>) and never moves; the level goes
-- up once the set just added to holds LOOKUP_GROW_AT. Readers merge every set
-- (index_sets; INDEX_RANGE, INDEX_COUNTS), at most 1 + 8 + 64 of them.
local INDEX_PREFIX = P .. 'pending:'

-- Whether an index grows in levels: not a run's, nor the one index of before 0.2.
local function leveled(key)
  return string.sub(key, 1, #INDEX_PREFIX) == INDEX_PREFIX and not run_of(key)
end

local function index_level(key)
  if not leveled(key) then return 0 end
  return tonumber(redis.call('HGET', P .. 'levels', string.sub(key, #P + 1))) or 0
end

local function index_set(key, level, n)
  if level == 0 then return key end
  return P .. 'ix:' .. level .. ':' .. n .. ':' .. string.sub(key, #INDEX_PREFIX + 1)
end

local function index_set_of(key, id, level)
  if level == 0 then return key end
  return index_set(key, level, bucket_of(id, INDEX_FANOUT ^ level))
end

-- Every set of an index, its own key first.
local function index_sets(key)
  local sets = {key}
  for level = 1, index_level(key) do
    for n = 0, INDEX_FANOUT ^ level - 1 do sets[#sets + 1] = index_set(key, level, n) end
  end
  return sets
end

-- How many ids an index's sets hold (a run's field is for the caller to count).
local function index_size(key)
  local size = 0
  for _, set in ipairs(index_sets(key)) do size = size + redis.call('ZCARD', set) end
  return size
end

local function index_add(key, id)
  local run = run_of(key)
  if not run then
    local level = index_level(key)
    for older = 0, level - 1 do
      if redis.call('ZSCORE', index_set_of(key, id, older), id) then return end
    end
    local set = index_set_of(key, id, level)
    redis.call('ZADD', set, 0, id)
    if leveled(key) and level < INDEX_LAST_LEVEL
        and redis.call('ZCARD', set) >= LOOKUP_GROW_AT then
      redis.call('HSET', P .. 'levels', string.sub(key, #P + 1), level + 1)
    end
    return
  end
  local held = lookup_get('runs', run)
  if held == id then return end
  if not held and redis.call('EXISTS', key) == 0 then
    lookup_set('runs', run, id)
    return
  end
  if held and held ~= '*' then redis.call('ZADD', key, 0, held) end
  redis.call('ZADD', key, 0, id)
  if held ~= '*' then lookup_set('runs', run, '*') end
end

local function index_remove(key, id)
  local run = run_of(key)
  if not run then
    for level = index_level(key), 0, -1 do
      if redis.call('ZREM', index_set_of(key, id, level), id) == 1 then return end
    end
    return
  end
  local held = lookup_get('runs', run)
  if held == id then
    lookup_remove('runs', run)
    return
  end
  redis.call('ZREM', key, id)
  if held == '*' and redis.call('EXISTS', key) == 0 then lookup_remove('runs', run) end
end

-- Where an idempotency key or a message link is found: its lookup hash, else the one hash
-- of the namespace they were kept in before the lookups. The key of its own each had before
-- that is looked at by the callers, which know its name.
local function looked_up(kind, before, name)
  return lookup_get(kind, name) or redis.call('HGET', P .. before, name)
end

-- Remove a lookup that still names ``id``, wherever it is (both places: a message linked
-- before the lookups may be linked again by an attempt that finds it); true when one was
-- removed.
local function unlink(kind, before, name, id)
  local removed = lookup_remove(kind, name, id)
  if redis.call('HGET', P .. before, name) == id then
    redis.call('HDEL', P .. before, name)
    removed = true
  end
  return removed
end

"""
)
"""The start of every script: the prefix, and the lookup hashes and pending indexes in levels
(``store.keys``). The reads of lookups and indexes (``LOOK_UP``, ``INDEX_RANGE``,
``INDEX_COUNTS``, ``STORE_FIGURES``) start with this alone: Redis runs a script's whole text on
each call, and the rest of ``PRELUDE`` (about 40 KB of function definitions) cost such a read
about 20 us of the server's time, ten times the read."""

PRELUDE = (
    LEVELS_PRELUDE
    + f"local MAX_VOTES = {defaults.MAX_VOTES}\n"
    + f"local DECISION_BUCKETS = {{{', '.join(map(str, defaults.DECISION_SECONDS_BUCKETS))}}}\n"
    + """
local EVENTS = {
  deliver = {started = 'delivery_started', ok = 'delivered', retry = 'delivery_attempt_failed',
             failed = 'delivery_failed', retry_requested = 'delivery_retry_requested',
             deferred = 'delivery_deferred'},
  resume = {started = 'resume_started', ok = 'resumed', retry = 'resume_attempt_failed',
            failed = 'resume_failed', retry_requested = 'resume_retry_requested',
            deferred = 'resume_deferred'},
  notify = {started = 'update_started', ok = 'message_updated', retry = 'update_attempt_failed',
            failed = 'update_failed', retry_requested = 'update_retry_requested',
            deferred = 'update_deferred'},
  remind = {started = 'reminder_started', ok = 'reminded', retry = 'reminder_attempt_failed',
            failed = 'reminder_failed', retry_requested = 'reminder_retry_requested',
            deferred = 'reminder_deferred'},
  escalate = {started = 'escalation_started', ok = 'escalated',
              retry = 'escalation_attempt_failed', failed = 'escalation_failed',
              retry_requested = 'escalation_retry_requested',
              deferred = 'escalation_deferred'},
}

-- Timers that only make sense while a handoff is pending.
local PENDING_ONLY = {'remind', 'escalate'}

-- The storage layout (see store.keys): a handoff's hash keeps only short fields, so that
-- Redis keeps it as a compact listpack (which it does while every value is at most
-- hash-max-listpack-value bytes, 64 by default; one longer value turns the whole hash into
-- a hashtable, about twice the memory). The long ones are the handoff's body
-- ({ns}:hb:<id>), one string (a string costs a few bytes beyond its text; a hash of them,
-- a hashtable, about 300 more): the approved arguments' digest, the pending index keys
-- (JSON), the request JSON and the handoff's audit trail, in BODY_FIELDS order, each ended
-- by a newline but the last (compact JSON and a digest never hold one). The trail, last, is
-- its events one per line (see audit); a body without events ends after the request.
-- Handoffs written before kept the first three in the hash itself: reads look there first
-- (body_get), and a write moves the field to the body (body_set), so both shapes are read,
-- decided and resumed alike; their trails stay in a list of their own (audit).
local BODY_FIELDS = {'args_digest', 'indexes', 'request', 'trail'}
local NEWLINE = string.char(10)

local function body_key(hkey)
  return P .. 'hb:' .. string.sub(hkey, #P + 3)
end

-- The body's fields by name (an empty one is left out), or an empty table for none.
local function body_fields(hkey)
  local body = redis.call('GET', body_key(hkey))
  local fields = {}
  if not body then return fields end
  local from = 1
  for i, name in ipairs(BODY_FIELDS) do
    local upto = #body
    if i < #BODY_FIELDS then upto = (string.find(body, NEWLINE, from, true) or (#body + 1)) - 1 end
    if upto >= from then fields[name] = string.sub(body, from, upto) end
    from = upto + 2
  end
  return fields
end

-- SET (APPEND only for a repeated click on a long body, see audit): an appended string
-- keeps up to as much room again as it holds; KEEPTTL: a purged handoff's body may be kept
-- a while for its trail (PURGE_DECIDED).
local function write_body(hkey, fields)
  local parts = {}
  for i, name in ipairs(BODY_FIELDS) do parts[i] = fields[name] or '' end
  if parts[#parts] == '' then parts[#parts] = nil end
  redis.call('SET', body_key(hkey), table.concat(parts, NEWLINE), 'KEEPTTL')
end

-- A long field: the hash's (a handoff written before the body), else the body's; false
-- for none, as HGET answers.
local function body_get(hkey, name)
  return redis.call('HGET', hkey, name) or body_fields(hkey)[name] or false
end

local function body_set(hkey, name, value)
  redis.call('HDEL', hkey, name)
  local fields = body_fields(hkey)
  fields[name] = value
  write_body(hkey, fields)
end

-- A handoff's pending index keys all start with '{ns}:pending': the body keeps each without
-- it (a key written before starts with '{' and is kept whole). From the callers' list of
-- keys (decoded) to the stored JSON, and back to keys.
local function stored_indexes(keys)
  local short = {}
  local prefix = P .. 'pending'
  for i, key in ipairs(keys) do
    if string.sub(key, 1, #prefix) == prefix then key = string.sub(key, #prefix + 1) end
    short[i] = key
  end
  if #short == 0 then return '[]' end
  return cjson.encode(short)
end

local function index_keys(stored)
  local keys = {}
  for i, key in ipairs(cjson.decode(stored or '[]')) do
    if string.sub(key, 1, 1) == '{' then keys[i] = key else keys[i] = P .. 'pending' .. key end
  end
  return keys
end

-- The pending index keys a request names (HandoffStore._pending_indexes builds the same
-- list; a test holds the two together): its run's and its type's, its channel's, each
-- reviewer's once, its API key's.
local function request_index_keys(r)
  local keys = {P .. 'pending:run:' .. r.run_id, P .. 'pending:type:' .. r.request_type}
  if type(r.channel) == 'string' and r.channel ~= '' then
    keys[#keys + 1] = P .. 'pending:channel:' .. r.channel
  end
  local seen = {}
  if type(r.reviewers) == 'table' then
    for _, reviewer in ipairs(r.reviewers) do
      if not seen[reviewer] then
        seen[reviewer] = true
        keys[#keys + 1] = P .. 'pending:reviewer:' .. reviewer
      end
    end
  end
  if type(r.api_key) == 'string' and r.api_key ~= '' then
    keys[#keys + 1] = P .. 'pending:key:' .. r.api_key
  end
  return keys
end

-- The longest request (JSON bytes) whose index keys, route and resume flag CREATE leaves
-- out (working them out decodes the request; see CREATE).
local DERIVED_INDEXES_UP_TO = 4096

-- The request as stored (the body's, or the hash's before the body), decoded at most once
-- per handoff per script run; an empty table for none. ``json``: the stored request
-- when the caller has it.
local REQUESTS = {}
local function request_of(hkey, json)
  local r = REQUESTS[hkey]
  if r then return r end
  json = json or body_get(hkey, 'request')
  r = json and cjson.decode(json) or {}
  REQUESTS[hkey] = r
  return r
end

-- Whether deciding the handoff resumes its run: the hash's 'has_resume' (written before
-- 0.3), else the request's resume target or callback (HandoffStore.create says the same).
local function resumes(hkey, stored)
  if stored then return stored == '1' end
  local r = request_of(hkey)
  return (type(r.resume_target) == 'string' and r.resume_target ~= '')
      or type(r.callback) == 'table'
end

-- Where the request asks to be posted ('' for the default channel): the hash's 'route'
-- (written before 0.3), else the request's channel.
local function request_route(hkey, stored)
  if stored then return stored end
  local channel = request_of(hkey).channel
  if type(channel) == 'string' then return channel end
  return ''
end

-- A pending handoff's index keys: as stored (in its hash, written before the body, or its
-- body), else the ones its request names (CREATE leaves those out).
local function pending_index_keys(hkey, stored, fields)
  if not stored then
    fields = fields or body_fields(hkey)
    stored = fields.indexes
    if not stored then
      if not fields.request then return {} end
      return request_index_keys(request_of(hkey, fields.request))
    end
  end
  return index_keys(stored)
end

-- A handoff's task policy (attempts, timeouts, backoff, timers) is one JSON object, the
-- same for most handoffs of a deployment: it is kept once, in {ns}:policies (SHA-1 of the
-- JSON -> the JSON), and the hash's 'policy' field names it ('@' and the SHA-1). Handoffs
-- written before hold the JSON itself, which starts with '{'.
local function policy_json(stored)
  if stored and string.sub(stored, 1, 1) == '@' then
    return redis.call('HGET', P .. 'policies', string.sub(stored, 2)) or '{}'
  end
  return stored or '{}'
end

-- The policy's JSON stored once; what the hash's 'policy' field holds to name it.
-- Named by the first 8 hex digits of the SHA-1 (32 bytes less of every handoff's hash; a
-- deployment has a handful of policies); another JSON already under that name (about one
-- chance in 2^32 a pair) gets the whole digest. Readers take whatever follows '@'
-- (handoffs written before name all 40).
local function intern_policy(json)
  local digest = redis.sha1hex(json)
  local short = string.sub(digest, 1, 8)
  if redis.call('HSETNX', P .. 'policies', short, json) == 1
      or redis.call('HGET', P .. 'policies', short) == json then
    return '@' .. short
  end
  redis.call('HSETNX', P .. 'policies', digest, json)
  return '@' .. digest
end

-- Decoded at most once per handoff per script run.
local POLICIES = {}
local function policy_of(hkey, stored)
  local t = POLICIES[hkey]
  if not t then
    t = cjson.decode(policy_json(stored))
    POLICIES[hkey] = t
  end
  return t
end

local function policy(hkey)
  local t = POLICIES[hkey]
  if t then return t end
  return policy_of(hkey, redis.call('HGET', hkey, 'policy'))
end

local function max_attempts(hkey, k)
  local t = policy(hkey)
  if k == 'resume' then return tonumber(t.resume_max) end
  return tonumber(t.deliver_max)
end

local function timeout_ms(hkey, k)
  local t = policy(hkey)
  if k == 'resume' then return tonumber(t.resume_timeout_ms) end
  return tonumber(t.deliver_timeout_ms)
end

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Events people can repeat at will (a refused click, another "View full"): once a handoff's
-- own trail holds this many events, it stops taking them (the audit stream still gets each
-- one), so nobody can grow a trail without bound. Every other event is always kept.
local REPEATABLE = {denied = true, viewed_full = true}
local TRAIL_KEEPS_REPEATS_UP_TO = 200
-- A body at least this long takes a repeatable event by APPEND (see audit): a shorter one
-- is rewritten whole, which keeps it tight in memory and costs the disk little.
local APPEND_REPEATS_FROM = 4096

-- The handoff's own trail leaves out its id, which its key says (AuditEvent.from_json puts
-- it back): one copy less per event of every waiting handoff. Older trails hold it. It is
-- the last field of the handoff's body, one event per line, each a JSON array [at, actor,
-- event, detail]: no key, list or field names of its own per handoff (about 270 bytes less
-- per waiting handoff than a list of objects). A handoff whose trail is a list already
-- (written before), or that has no body (written before the body, or purged), keeps
-- adding to the list {ns}:audit:<id>, as objects.
--
-- While the handoff is pending, the stream's entry only points at the trail's copy
-- ('p' the id, 'i' its place in the trail), which the readers follow (HandoffStore.
-- audit_pages): each event of a waiting handoff is kept once. Such an entry is older than the
-- decision, so the stream trims it (retention after it was added) before the purge removes
-- the trail (retention after the decision; PURGE_DECIDED keeps a trail its pointers may still
-- name). Events after the decision go into the stream whole ('e'), as every event did
-- before: they may outlive the handoff there.
--
-- ``new_body``: the fields of a body not written yet (CREATE's), written here with the event,
-- so that a creation writes its body once, not twice.
local function audit(id, event, actor, at, detail, new_body)
  local trail = P .. 'audit:' .. id
  local hkey = P .. 'h:' .. id
  local kept = nil
  local body = new_body
  if not body then body = redis.call('EXISTS', trail) == 0 and body_fields(hkey) or nil end
  if body and body.request then
    local held = 0
    if body.trail then
      held = 1
      for _ in string.gmatch(body.trail, NEWLINE) do held = held + 1 end
    end
    if not REPEATABLE[event] or held < TRAIL_KEEPS_REPEATS_UP_TO then
      local line = cjson.encode({at, actor, event, detail})
      if REPEATABLE[event] and redis.call('STRLEN', body_key(hkey)) >= APPEND_REPEATS_FROM then
        -- A click anyone who sees the message may repeat, on a long body: APPEND writes (to
        -- the append-only file and the replicas) this line, where SET would write the whole
        -- body, a request of up to 64 KiB, every time. The body ends with the request or
        -- the last event, so the line goes after a newline. The room APPEND may leave spare
        -- (up to as much again, once the allocation's own is used up) goes at the next SET.
        redis.call('APPEND', body_key(hkey), NEWLINE .. line)
      else
        body.trail = body.trail and (body.trail .. NEWLINE .. line) or line
        write_body(hkey, body)
      end
      kept = held + 1
    end
  elseif not REPEATABLE[event] or redis.call('LLEN', trail) < TRAIL_KEEPS_REPEATS_UP_TO then
    kept = redis.call('RPUSH', trail, cjson.encode({event = event, actor = actor, at = at,
                                                    detail = detail}))
  end
  if kept and redis.call('HGET', hkey, 'status') == 'pending' then
    redis.call('XADD', P .. 'audit', '*', 'p', id, 'i', kept - 1)
  else
    redis.call('XADD', P .. 'audit', '*', 'e', cjson.encode({event = event, handoff_id = id,
                                                            actor = actor, at = at,
                                                            detail = detail}))
  end
end

-- Whether the digest an approval was read with (``sha256:<hex>``) is the one stored: whole
-- (a voter's edit, a handoff written before 0.3), or, as CREATE stores it, its first 128
-- bits without the prefix (store.canonical.stored_digest).
-- Only a whole digest (the prefix and 64 lowercase hex digits) is compared with the 128 bits.
local DIGEST_PREFIX = 'sha256:'
local function digest_matches(stored, seen)
  if string.sub(stored, 1, #DIGEST_PREFIX) == DIGEST_PREFIX then return stored == seen end
  return #stored == 32 and #seen == #DIGEST_PREFIX + 64
      and string.sub(seen, 1, #DIGEST_PREFIX) == DIGEST_PREFIX
      and not string.find(seen, '[^0-9a-f]', #DIGEST_PREFIX + 1)
      and string.sub(seen, #DIGEST_PREFIX + 1, #DIGEST_PREFIX + #stored) == stored
end

-- The 'created' event is stored without its detail, the request's run and type (see
-- CREATE): put back here, as store.keys.trail_lines does, for the lines that leave Redis.
local CREATED_END = '"created"]'
-- The request's run and type. CREATE stores the request as HandoffRequest dumps it: its run
-- and thread ids, then its type, first. Only that head is decoded (a request may be 64 KiB,
-- and an audit page names hundreds of trails: decoding each whole held the server for
-- hundreds of milliseconds). A ',"request_type":"' outside that head cannot come first (a
-- quote inside a JSON string is escaped), and one nested deeper leaves the head unclosed,
-- which fails to decode: then, or for another order, the whole request is decoded.
local function run_and_type(request)
  local _, upto = string.find(request, ',"request_type":"[^"]*"')
  if upto then
    local ok, head = pcall(cjson.decode, string.sub(request, 1, upto) .. '}')
    if ok and type(head) == 'table' and type(head.run_id) == 'string'
        and type(head.request_type) == 'string' then
      return head
    end
  end
  return cjson.decode(request)
end

local function with_created_detail(line, request)
  if not line or not request or string.sub(line, -#CREATED_END) ~= CREATED_END then
    return line
  end
  local r = run_and_type(request)
  return string.sub(line, 1, -2) .. ',' .. cjson.encode({run_id = r.run_id,
                                                         request_type = r.request_type}) .. ']'
end

-- Where a task's current attempt posts ('?' for a handoff stored before routes were kept):
-- a delivery's is kept (BEGIN_TASK) only when it is not the request's own route.
local function attempt_route(hkey, k)
  local route = redis.call('HGET', hkey, k .. '_route')
  if not route and k == 'deliver' then
    route = request_route(hkey, redis.call('HGET', hkey, 'route'))
  end
  return route or '?'
end

-- A resent call (same operation id) answers what the first run did; see the module text.
-- Long enough for redis-py's resends and a reconnect, short enough to cost no memory.
local OP_MEMORY_MS = 120000

local function replayed(op)
  if op == nil or op == '' then return nil end
  local saved = redis.call('GET', P .. 'op:' .. op)
  if saved then return cjson.decode(saved) end
  return nil
end

local function remember(op, reply, ttl_ms)
  if op ~= nil and op ~= '' then
    redis.call('SET', P .. 'op:' .. op, cjson.encode(reply), 'PX', ttl_ms or OP_MEMORY_MS)
  end
  return reply
end

local function wake()
  redis.call('LPUSH', P .. 'wake', '1')
  redis.call('LTRIM', P .. 'wake', 0, 0)
end

-- Queue a task for the dispatcher with a fresh round of attempts. A task that is running
-- is only marked dirty: it is queued again when the running attempt finishes, so two
-- attempts never overlap and the last one always sees the latest state. This adds the
-- hash fields to ``set`` and the outbox entry to ``outbox`` (score, member), for the caller
-- to write with one HSET and one ZADD; ``state`` and ``attempt`` are the task's as read.
local function plan_task(set, outbox, id, k, at, state, attempt, max)
  if state == 'running' then
    table.insert(set, k .. '_dirty'); table.insert(set, '1')
    return
  end
  table.insert(set, k .. '_state'); table.insert(set, 'queued')
  table.insert(set, k .. '_limit'); table.insert(set, tonumber(attempt or 0) + max)
  table.insert(set, k .. '_deferred'); table.insert(set, 0)
  table.insert(set, k .. '_failures'); table.insert(set, 0)
  table.insert(outbox, at); table.insert(outbox, k .. ':' .. id)
end

local function write_plan(hkey, set, outbox)
  if #set > 0 then redis.call('HSET', hkey, unpack(set)) end
  if #outbox > 0 then
    redis.call('ZADD', P .. 'outbox', unpack(outbox))
    wake()
  end
end

local function queue_task(hkey, id, k, at)
  local f = redis.call('HMGET', hkey, k .. '_state', k .. '_attempt')
  local set, outbox = {}, {}
  plan_task(set, outbox, id, k, at, f[1], f[2], max_attempts(hkey, k))
  write_plan(hkey, set, outbox)
end

-- What closing a handoff reads, in one HMGET: closing is the hot path of every decision,
-- and each call from Lua costs about as much as a small command.
local CLOSE_FIELDS = {'status', 'decision', 'decided_at', 'claimed_by', 'request_type',
                      'expires_at', 'version', 'indexes', 'has_resume', 'policy',
                      'remind_state', 'escalate_state', 'resume_state', 'resume_attempt',
                      'notify_state', 'notify_attempt', 'votes', 'created_at'}

local function read_fields(hkey, names)
  local values = redis.call('HMGET', hkey, unpack(names))
  local f = {}
  for i, name in ipairs(names) do f[name] = values[i] end
  return f
end

-- A handoff as one JSON document, the one form in which handoffs leave Redis (the
-- client validates it as a Handoff in one pass). The stored request comes first; the hash
-- fields written after it win, as the last of duplicate keys does when pydantic parses
-- JSON: so a reassigned channel or reviewer list and the policy's escalation target
-- override the request's. Unset optional fields are left out (or null) and read as their
-- defaults. Times are epoch-millisecond strings, which pydantic reads as UTC datetimes.
local DOC_TIMES = {{'expires_at', 'expires_at'}, {'claimed_at', 'claimed_at'},
                   {'escalated_at', 'escalated_at'}}
local DOC_TEXTS = {{'redelivered_from', 'redelivered_from'}, {'claimed_by', 'claimed_by'},
                   {'channel', 'channel_override'}, {'idempotency_key', 'idem_key'},
                   {'reminders_sent', 'remind_done'}}
local DOC_JSON = {{'reviewers', 'reviewers_override'}, {'message_refs', 'message_refs'},
                  {'votes', 'votes'}, {'proposed_args', 'proposed_args'}}
local DOC_TASKS = {{'delivery', 'deliver'}, {'resume', 'resume'}, {'notify', 'notify'}}

local function is_set(value)
  return value ~= nil and value ~= false and value ~= '' and value ~= '0'
end

-- A JSON object without its closing brace, to append fields to.
local function open_object(json)
  return string.sub(json, 1, string.match(json, '^.*()}') - 1)
end

local function task_progress(f, k)
  local state = f[k .. '_state']
  local task = {state = (state and state ~= '') and state or 'none'}
  if is_set(f[k .. '_attempt']) then task.attempt = f[k .. '_attempt'] end
  if is_set(f[k .. '_limit']) then task.max_attempts = f[k .. '_limit'] end
  if f[k .. '_error'] and f[k .. '_error'] ~= '' then task.last_error = f[k .. '_error'] end
  if is_set(f[k .. '_done_at']) then task.completed_at = f[k .. '_done_at'] end
  return task
end

-- The document of the handoff in ``hkey``, or false when there is none.
local function handoff_document(hkey, id)
  local flat = redis.call('HGETALL', hkey)
  if #flat == 0 then return false end
  local f = {}
  for i = 1, #flat, 2 do f[flat[i]] = flat[i + 1] end
  -- What the hash says besides the request, encoded in one go.
  local state = {id = id, status = f.status, created_at = f.created_at,
                 version = is_set(f.version) and f.version or '0',
                 escalate_to = cjson.null}
  if is_set(f.decided_at) then state.decided_at = f.decided_at end
  for _, pair in ipairs(DOC_TIMES) do
    if is_set(f[pair[2]]) then state[pair[1]] = f[pair[2]] end
  end
  for _, pair in ipairs(DOC_TEXTS) do
    local value = f[pair[2]]
    if value and value ~= '' then state[pair[1]] = value end
  end
  local escalate_to = policy_of(hkey, f.policy).escalate_to
  if type(escalate_to) == 'string' and escalate_to ~= '' then state.escalate_to = escalate_to end
  for _, pair in ipairs(DOC_TASKS) do state[pair[1]] = task_progress(f, pair[2]) end
  local encoded = cjson.encode(state)
  local request = f.request or body_fields(hkey).request
  local parts = {open_object(request), ',', string.sub(encoded, 2, -2)}
  -- Fields stored as JSON already go in as they are.
  if f.decision and f.decision ~= '' then
    local decided_at = state.decided_at and cjson.encode(state.decided_at) or 'null'
    table.insert(parts, ',"resume_data":')
    table.insert(parts, open_object(f.decision))
    table.insert(parts, ',"decided_at":' .. decided_at .. '}')
  end
  for _, pair in ipairs(DOC_JSON) do
    local value = f[pair[2]]
    if value and value ~= '' then
      table.insert(parts, ',"' .. pair[1] .. '":')
      table.insert(parts, value)
    end
  end
  table.insert(parts, '}')
  return table.concat(parts)
end

-- Store-wide counters for /metrics (store.metrics), in one hash: a closing by request type,
-- status and where it was decided (``via``: a class such as slack, api, expiry), and for a
-- decision (not a policy's) the time it took, in the histogram's bucket and its sum.
local function count_closed(f, status, via, event, at)
  local t = f.request_type or 'unknown'
  local m = P .. 'metrics'
  redis.call('HINCRBY', m, 'closed:' .. t .. ':' .. status .. ':' .. via, 1)
  if event ~= 'decided' or via == 'policy' then return end
  local ms = math.max(at - tonumber(f.created_at or at), 0)
  local le = '+Inf'
  for _, bound in ipairs(DECISION_BUCKETS) do
    if ms <= bound * 1000 then le = tostring(bound); break end
  end
  redis.call('HINCRBY', m, 'decision:' .. t .. ':' .. le, 1)
  redis.call('HINCRBY', m, 'decision_ms:' .. t, ms)
end

-- Move a pending handoff to a final status: the decision, its audit event, the index
-- updates and the resume (outbox entry) commit together. ``f`` holds CLOSE_FIELDS as read
-- in this script run; the hash gets one HSET and the outbox one ZADD.
local function close_pending(id, hkey, f, status, decision, actor, event, at, retention_ms,
                             resume, via)
  local t = policy_of(hkey, f.policy)
  local version = tonumber(f.version or 0) + 1
  -- The votes a quorum had (expired, cancelled... with some votes cast) go with the
  -- decision; a decision made by a vote carries them already (decide_by_vote).
  if f.votes and f.votes ~= '' and not f.votes_included then
    decision = open_object(decision) .. ',"votes":' .. f.votes .. '}'
  end
  local set = {'status', status, 'decision', decision, 'decided_at', at, 'version', version}
  local outbox = {}
  for _, key in ipairs(pending_index_keys(hkey, f.indexes)) do
    index_remove(key, id)
  end
  redis.call('ZREM', deadline_key(id), id)
  redis.call('ZREM', P .. 'deadlines', id)  -- set before the buckets
  local timers = {}
  for _, k in ipairs(PENDING_ONLY) do
    local state = f[k .. '_state']
    -- An escalation whose copy may have landed unanswered still runs, to find that copy
    -- (BEGIN_TASK lets it); every other timer ends with the decision.
    if state and state ~= 'none'
        and not (k == 'escalate' and redis.call('HEXISTS', hkey, 'escalate_unans') == 1) then
      table.insert(timers, k .. ':' .. id)
      if state ~= 'running' then
        table.insert(set, k .. '_state'); table.insert(set, 'none')
      end
    end
  end
  if #timers > 0 then redis.call('ZREM', P .. 'outbox', unpack(timers)) end
  if resume and resumes(hkey, f.has_resume) then
    plan_task(set, outbox, id, 'resume', at, f.resume_state, f.resume_attempt,
              tonumber(t.resume_max))
  end
  -- One millisecond later, so the dispatcher enqueues the resume first: the agent's run
  -- waits on it, while the message update can follow.
  plan_task(set, outbox, id, 'notify', at + 1, f.notify_state, f.notify_attempt,
            tonumber(t.deliver_max))
  write_plan(hkey, set, outbox)
  redis.call('ZADD', P .. 'retention', at + retention_ms, id)
  audit(id, event, actor, at, {status = status})
  count_closed(f, status, via or 'other', event, at)
  redis.call('PUBLISH', P .. 'decided:' .. id, status)
  return version
end

-- Expiry fails closed: the run resumes with 'expired', decided by nobody.
local function expire_pending(id, hkey, f, at, retention_ms)
  local decision = cjson.encode({decision_id = 'expiry-' .. id, outcome = 'expired',
                                 decided_by = 'system', via = 'expiry'})
  close_pending(id, hkey, f, 'expired', decision, 'system', 'expired', at, retention_ms, true,
                'expiry')
  return decision
end

-- A delivery that failed for good fails closed as well: a pending handoff is closed
-- 'undeliverable', decided by nobody, with the error as the decision's comment, and its run
-- resumes with that. Past its deadline it expires instead. True when it closed the handoff.
local function close_undeliverable(id, hkey, at, reason, retention_ms)
  local f = read_fields(hkey, CLOSE_FIELDS)
  if f.status ~= 'pending' then return false end
  -- Posted before (a reassignment's new post is what failed): its message still shows it,
  -- with its buttons, so it stays pending there; the failed delivery waits for an admin.
  local ok, refs = pcall(cjson.decode, redis.call('HGET', hkey, 'message_refs') or '{}')
  if ok and type(refs) == 'table' and type(refs.ts) == 'string' and refs.ts ~= '' then
    return false
  end
  local expires_at = tonumber(f.expires_at or 0)
  if expires_at > 0 and at >= expires_at then
    expire_pending(id, hkey, f, at, retention_ms)
    return true
  end
  local decision = cjson.encode({decision_id = 'undeliverable-' .. id,
                                 outcome = 'undeliverable', decided_by = 'system',
                                 via = 'delivery', comment = reason})
  close_pending(id, hkey, f, 'undeliverable', decision, 'system', 'undeliverable', at,
                retention_ms, true, 'delivery')
  return true
end

-- When a post of a task may have reached Slack with its answer lost: an attempt whose call
-- went unanswered, or whose worker was lost, between ``from`` and ``to`` (microseconds, by
-- the server's clock, as strings: Lua numbers print fourteen digits). ``read`` is how far a
-- look-up cut short got (a Slack message ts: the part of the window beyond it was read),
-- ``found`` the ts of posts of ours it saw there, ``route`` where the attempt posted (a
-- delivery's channel as routed: its request's or a reassignment's; '' the default channel;
-- '?' unknown). Kept as one JSON field, ``<task>_unans``; the next attempt looks there (and
-- only there) before posting again. Resume tasks post nothing.
local function unanswered_of(hkey, k)
  local raw = redis.call('HGET', hkey, k .. '_unans')
  if not raw then return nil end
  local ok, w = pcall(cjson.decode, raw)
  if ok and type(w) == 'table' then return w end
  return nil
end

local function forget_unanswered(hkey, k)
  redis.call('HDEL', hkey, k .. '_unans')
end

local function keep_unanswered(hkey, k, from, to, read, found, route)
  if not from or not to or from > to then return forget_unanswered(hkey, k) end
  if type(found) ~= 'table' then found = {} end
  local kept = {}
  for _, ts in ipairs(found) do
    if type(ts) == 'string' and string.match(ts, '^%d+%.%d+$') then table.insert(kept, ts) end
  end
  redis.call('HSET', hkey, k .. '_unans', cjson.encode({
    from = string.format('%d', from), to = string.format('%d', to),
    read = type(read) == 'string' and string.match(read, '^%d+%.%d+$') and read or '',
    found = kept, route = type(route) == 'string' and route or '?'}))
end

-- A task's message references, merged into the handoff's: the fields it names replace
-- the stored ones, but ``copies`` (messages besides the primary one) are merged by ts, so two
-- tasks running at once (a reassignment's delivery and an escalation) never drop each
-- other's messages, whatever they read at their start.
local function merge_refs(hkey, value)
  local merged = cjson.decode(redis.call('HGET', hkey, 'message_refs') or '{}')
  for rk, rv in pairs(cjson.decode(value)) do
    if rk == 'copies' and type(rv) == 'table' and type(merged.copies) == 'table' then
      local at = {}
      for i, copy in ipairs(merged.copies) do
        if type(copy) == 'table' and copy.ts then at[copy.ts] = i end
      end
      for _, copy in ipairs(rv) do
        local i = type(copy) == 'table' and copy.ts and at[copy.ts]
        if i then
          merged.copies[i] = copy
        else
          table.insert(merged.copies, copy)
          if type(copy) == 'table' and copy.ts then at[copy.ts] = #merged.copies end
        end
      end
    else
      merged[rk] = rv
    end
  end
  redis.call('HSET', hkey, 'message_refs', cjson.encode(merged))
end

-- An attempt's report (FINISH_TASK): '' says nothing, 'none' nothing is unaccounted for,
-- else a JSON window as above with ``to`` null for "until now" and ``route`` null for this
-- attempt's own route.
local function note_unanswered(hkey, k, verdict, now)
  if k == 'resume' or verdict == nil or verdict == '' then return end
  if verdict == 'none' then return forget_unanswered(hkey, k) end
  local ok, v = pcall(cjson.decode, verdict)
  if not ok or type(v) ~= 'table' then return end
  local to = now * 1000
  if v.to ~= nil and v.to ~= cjson.null then to = tonumber(v.to) end
  local route = v.route
  if type(route) ~= 'string' then route = attempt_route(hkey, k) end
  keep_unanswered(hkey, k, tonumber(v.from), to, v.read, v.found, route)
end

-- A task that is out of attempts, or failed for good (``permanent``). Work asked for while
-- its last attempt ran (``_dirty``: a reassignment, a decision to show) was not done by
-- that attempt: it gets a fresh round instead of being dropped. Otherwise the task is
-- failed, and a failed delivery closes its pending handoff 'undeliverable' in the same
-- step. Returns what became of the task: 'retrying', 'undeliverable' or 'failed'.
local function give_up(id, hkey, k, at, attempt, err, permanent, retention_ms)
  local member = k .. ':' .. id
  redis.call('HSET', hkey, k .. '_state', 'failed', k .. '_error', err, k .. '_lease', 0)
  if redis.call('HGET', hkey, k .. '_dirty') == '1' then
    audit(id, EVENTS[k].retry, 'worker', at, {attempt = attempt, error = err, requeued = true})
    queue_task(hkey, id, k, at)
    return 'retrying'
  end
  redis.call('ZREM', P .. 'outbox', member)
  redis.call('ZADD', P .. 'failed', at, member)
  redis.call('HINCRBY', P .. 'metrics', 'gave_up:' .. k, 1)
  audit(id, EVENTS[k].failed, 'worker', at, {attempt = attempt, error = err,
                                             permanent = permanent})
  if k == 'deliver' and retention_ms and close_undeliverable(id, hkey, at, err, retention_ms) then
    return 'undeliverable'
  end
  return 'failed'
end

-- A vote on an approval that needs a quorum (its 'quorum' field: {"n": approvals needed,
-- "r": rejections needed, "requester": who asked, never counted}). Votes are kept in the
-- 'votes' field as a JSON list of {by, outcome, at, decision_id, comment, args, cleared};
-- a voter's edited arguments are kept as a JSON *string* ('args'), and the latest proposal
-- in 'proposed_args' as the JSON the voter sent: cjson would round numbers it re-encodes
-- (to 14 digits), and arguments are passed on exactly. An approval with edited arguments
-- clears the approvals before it (they were for other arguments). Returns {'decided',
-- document} for the vote that reaches the quorum, {'vote', document} for one that does not,
-- {'requester'} or {'voted', earlier outcome} for a vote that cannot count.
local function decide_by_vote(id, hkey, f, q, outcome, decision_json, actor, edited, now,
                              retention_ms, resume, via)
  local d = cjson.decode(decision_json)
  local votes = {}
  if f.votes and f.votes ~= '' then votes = cjson.decode(f.votes) end
  for _, v in ipairs(votes) do
    -- Our own call, resent after its reply was lost: it was counted.
    if v.decision_id == d.decision_id then return {'vote', handoff_document(hkey, id)} end
  end
  -- People are compared as Slack compares ids: regardless of case.
  local who = string.upper(actor)
  if q.requester and q.requester ~= '' and who == string.upper(q.requester) then
    return {'requester'}
  end
  for _, v in ipairs(votes) do
    if string.upper(v.by) == who and not v.cleared then return {'voted', v.outcome} end
  end
  -- Edits clear votes, and a cleared voter may vote again: bounded, so two voters editing
  -- in turn cannot grow the handoff (and each script run over it) without end.
  if #votes >= MAX_VOTES then return {'full', tostring(#votes)} end
  local vote = {by = actor, outcome = outcome, at = now, decision_id = d.decision_id,
                via = d.via}
  if type(d.comment) == 'string' then vote.comment = d.comment end
  local set = {}
  if outcome == 'approved' and edited ~= '' then
    for _, v in ipairs(votes) do
      -- A cleared vote keeps who, when and how, not the arguments it was for: only the
      -- proposal up for approval holds them.
      if v.outcome == 'approved' then v.cleared = true; v.args = nil end
    end
    vote.args = edited
    table.insert(set, 'proposed_args'); table.insert(set, edited)
    if type(d.action_digest) == 'string' then body_set(hkey, 'args_digest', d.action_digest) end
  end
  table.insert(votes, vote)
  local approvals, rejections, approvers = 0, 0, {}
  for _, v in ipairs(votes) do
    if not v.cleared then
      if v.outcome == 'approved' then
        approvals = approvals + 1
        table.insert(approvers, v.by)
      else
        rejections = rejections + 1
      end
    end
  end
  local encoded = cjson.encode(votes)
  table.insert(set, 'votes'); table.insert(set, encoded)
  local final = (outcome == 'approved' and approvals >= tonumber(q.n))
      or (outcome == 'rejected' and rejections >= tonumber(q.r))
  if not final then
    table.insert(set, 'version'); table.insert(set, tonumber(f.version or 0) + 1)
    redis.call('HSET', hkey, unpack(set))
    -- The message shows the count: updated on every vote.
    queue_task(hkey, id, 'notify', now)
    audit(id, 'voted', actor, now, {outcome = outcome, approvals = approvals,
                                     rejections = rejections, cleared = vote.args ~= nil,
                                     via = d.via})
    return {'vote', handoff_document(hkey, id)}
  end
  redis.call('HSET', hkey, unpack(set))
  -- The decision: the deciding voter's, with every vote, the approvers, and the arguments
  -- approved (the latest proposal, spliced in as sent).
  d.edited_args = nil
  if outcome == 'approved' then d.approvers = approvers end
  local closing = open_object(cjson.encode(d)) .. ',"votes":' .. encoded
  local proposed = edited ~= '' and edited or redis.call('HGET', hkey, 'proposed_args')
  if outcome == 'approved' and proposed and proposed ~= '' then
    closing = closing .. ',"edited_args":' .. proposed
  end
  f.votes_included = true
  close_pending(id, hkey, f, outcome, closing .. '}', actor, 'decided', now, retention_ms,
                resume, via)
  return {'decided', handoff_document(hkey, id)}
end
"""
)

# KEYS[1] handoff hash.
# ARGV: prefix, id, request json (as the body keeps it), idempotency key or '', expires in ms
#       or 0, index keys json, request type, task settings json, actor, quorum json ('' for
#       none: one decision decides), an approval's action digest as the body keeps it ('' for
#       other requests; store.canonical.stored_digest).
CREATE = (
    PRELUDE
    + """
local id, hkey, idem = ARGV[2], KEYS[1], ARGV[4]
local stored = redis.call('HMGET', hkey, 'created_at', 'expires_at')
-- A fresh id (every call but a resend) has no hash yet, so no request to compare; but an
-- id purged early keeps its body a while for its trail (PURGE_DECIDED): a resend arriving
-- then must not store it again.
local stored_request = false
if stored[1] then
  stored_request = body_get(hkey, 'request')
elseif redis.call('EXISTS', body_key(hkey)) == 1 then
  return {0, id}
end
-- The same id with the same request: this call, resent after its reply was lost (ids are
-- fresh per call). It answers what the first run did: created.
if stored_request == ARGV[3] then return {1, id, stored[1], stored[2] or '0'} end
if idem ~= '' then
  -- In its bucket (or the namespace's one hash, before the buckets); one created before
  -- that, under a key of its own. The HTTP API kept a key's body digest (64 hex digits,
  -- never a handoff id) at '{ns}:idem:<key>:body' (until it expires): what key
  -- '<key>:body' finds there names no handoff.
  local existing = looked_up('idemkeys', 'idem', idem)
  if not existing then
    existing = redis.call('GET', P .. 'idem:' .. idem)
    if existing and #existing == 64 and not string.find(existing, '[^0-9a-f]') then
      existing = false
    end
  end
  if existing then return {0, existing} end
end
if stored_request then return {0, id} end
local now = now_ms()
local expires_at = 0
if tonumber(ARGV[5]) > 0 then expires_at = now + tonumber(ARGV[5]) end
local t = cjson.decode(ARGV[8])
-- Task fields not written here read as state 'none' and attempt 0. Whether its run is
-- resumed and where it is posted are the request's (resumes, request_route): handoffs
-- written before 0.3, and long requests (DERIVED_INDEXES_UP_TO: the readers would decode
-- them), keep them in 'has_resume' and 'route'.
redis.call('HSET', hkey, 'status', 'pending', 'request_type', ARGV[7],
  'created_at', now, 'expires_at', expires_at, 'version', 1,
  'policy', intern_policy(ARGV[8]), 'deliver_state', 'queued', 'deliver_limit', t.deliver_max)
if idem ~= '' then redis.call('HSET', hkey, 'idem_key', idem) end
if #ARGV[3] > DERIVED_INDEXES_UP_TO then
  request_of(hkey, ARGV[3])  -- decoded once, for both
  redis.call('HSET', hkey, 'has_resume', resumes(hkey, nil) and '1' or '0',
             'route', request_route(hkey, nil))
end
POLICIES[hkey] = t
-- The long fields go to the body (see body_key), written with the 'created' event below.
-- Index keys the request names (all of them, unless a routing rule changed some) are left
-- out: the readers work them out from the request (pending_index_keys). An approval's
-- arguments digest is the first 128 bits of it (digest_matches).
local indexes = cjson.decode(ARGV[6])
local body = {request = ARGV[3]}
if (ARGV[11] or '') ~= '' then body.args_digest = ARGV[11] end
local listed = stored_indexes(indexes)
-- Only a short request's are left out: working them out decodes the request, in every
-- decision, expiry and reassignment (about 2 ms of the server's time for 64 KiB of JSON),
-- where a long one's list costs a fraction of a percent of its body. The same for its
-- route and resume flag (above).
if #ARGV[3] > DERIVED_INDEXES_UP_TO
    or listed ~= stored_indexes(request_index_keys(request_of(hkey, ARGV[3]))) then
  body.indexes = listed
end
if (ARGV[10] or '') ~= '' then redis.call('HSET', hkey, 'quorum', ARGV[10]) end
if idem ~= '' then lookup_set('idemkeys', idem, id) end
for _, key in ipairs(indexes) do index_add(key, id) end
if expires_at > 0 then redis.call('ZADD', deadline_key(id), expires_at, id) end
redis.call('ZADD', P .. 'outbox', now, 'deliver:' .. id)
wake()
if t.remind_after_ms > 0 and t.max_reminders > 0 then
  queue_task(hkey, id, 'remind', now + t.remind_after_ms)
end
if t.escalate_after_ms > 0 and t.escalate_to ~= '' then
  queue_task(hkey, id, 'escalate', now + t.escalate_after_ms)
end
-- The event's detail (the run and the request type) is the request's: readers put it back
-- (created_detail), so a waiting handoff does not keep it twice.
audit(id, 'created', ARGV[9], now, nil, body)
redis.call('HINCRBY', P .. 'metrics', 'created:' .. ARGV[7], 1)
return {1, id, now, expires_at}
"""
)

# KEYS[1] handoff hash.
# ARGV: prefix, id, new status, decision json, actor, retention ms, claimer an escalation
#       needs ('' for none), audit event name, resume the run (1/0), request types this
#       decision fits (space separated), reply mode, who must hold the claim of a claimed
#       escalation ('' for nobody: an admin, or a cancel or expiry), the edited arguments'
#       JSON ('' for none; what a vote on a quorum keeps), the digest of the arguments an
#       approval was read with ('' for no check), where it was decided (the class of its
#       ``via``, ``store.metrics.via_class``: a label of the store's counters).
DECIDE = (
    PRELUDE
    + """
local id, hkey = ARGV[2], KEYS[1]
local f = read_fields(hkey, CLOSE_FIELDS)
-- Every handoff hash has a status: none means no handoff.
if not f.status then return {'missing'} end
if f.status ~= 'pending' then return {'already', f.status, f.decision or '', f.decided_at or ''} end
local now = now_ms()
local expires_at = tonumber(f.expires_at or 0)
if expires_at > 0 and now >= expires_at and ARGV[3] ~= 'expired' then
  -- Past its deadline a handoff is expired, even before a sweeper gets to it: a late
  -- decision never wins over the deadline.
  local decision = expire_pending(id, hkey, f, now, tonumber(ARGV[6]))
  return {'already', 'expired', decision, tostring(now)}
end
if not string.find(' ' .. ARGV[10] .. ' ', ' ' .. f.request_type .. ' ', 1, true) then
  return {'invalid', f.request_type}
end
if f.request_type == 'escalation' and ARGV[7] ~= '' and f.claimed_by ~= ARGV[7] then
  return {'claim', f.claimed_by or ''}
end
-- Once claimed, an escalation is the claimer's: nobody else sends it back either.
if f.request_type == 'escalation' and (ARGV[12] or '') ~= '' and f.claimed_by
    and f.claimed_by ~= '' and f.claimed_by ~= ARGV[12] then
  return {'claim', f.claimed_by}
end
-- An approval read with arguments a voter's edit has replaced since is refused: what the
-- person approved is not what is up for approval.
if (ARGV[14] or '') ~= '' then
  local current = body_get(hkey, 'args_digest')
  if current and not digest_matches(current, ARGV[14]) then return {'changed'} end
end
-- A person's decision on an approval that needs a quorum is a vote (an operator's cancel
-- or expiry closes it at once, as any handoff).
if ARGV[8] == 'decided' and f.request_type == 'approval' then
  local quorum = redis.call('HGET', hkey, 'quorum')
  if quorum then
    return decide_by_vote(id, hkey, f, cjson.decode(quorum), ARGV[3], ARGV[4], ARGV[5],
                          ARGV[13] or '', now, tonumber(ARGV[6]), ARGV[9] == '1', ARGV[15])
  end
end
local version = close_pending(id, hkey, f, ARGV[3], ARGV[4], ARGV[5], ARGV[8], now,
                              tonumber(ARGV[6]), ARGV[9] == '1', ARGV[15])
if ARGV[11] == '0' then return {'ok', now, version} end
return {'ok', handoff_document(hkey, id)}
"""
)

# KEYS[1] handoff hash.  ARGV: prefix, id, actor, take over another's claim (1/0).
CLAIM = (
    PRELUDE
    + """
local id, hkey, actor = ARGV[2], KEYS[1], ARGV[3]
if redis.call('EXISTS', hkey) == 0 then return {'missing'} end
local h = redis.call('HMGET', hkey, 'status', 'decision', 'decided_at', 'claimed_by',
                     'request_type')
if h[5] ~= 'escalation' then return {'not_escalation', h[5]} end
if h[1] ~= 'pending' then return {'already', h[1], h[2] or '', h[3] or ''} end
if h[4] == actor then return {'ok'} end
if h[4] and h[4] ~= '' and ARGV[4] ~= '1' then return {'claimed', h[4]} end
local now = now_ms()
redis.call('HSET', hkey, 'claimed_by', actor, 'claimed_at', now)
redis.call('HINCRBY', hkey, 'version', 1)
queue_task(hkey, id, 'notify', now)
audit(id, 'claimed', actor, now, {previous = h[4] or ''})
return {'ok'}
"""
)

# KEYS[1] handoff hash.  ARGV: prefix, id, task kind, run token, retention ms (for a
# delivery out of attempts, which closes its handoff 'undeliverable').
# Starts an attempt under a lease; the attempt number is the fencing token. Returns
# {'run', attempt, document, started at ms, the unanswered window (JSON, '' for none; see
# unanswered_of)}, or {reason}.
BEGIN_TASK = (
    PRELUDE
    + """
local id, hkey, k, token = ARGV[2], KEYS[1], ARGV[3], ARGV[4]
if redis.call('EXISTS', hkey) == 0 then return {'missing'} end
local f = redis.call('HMGET', hkey, k .. '_state', k .. '_attempt', k .. '_limit',
                     k .. '_lease', k .. '_token', k .. '_started')
local state = f[1] or 'none'
if state == 'completed' or state == 'failed' or state == 'none' then return {state} end
local now = now_ms()
local member = k .. ':' .. id
local function started(attempt, at)
  return {'run', attempt, handoff_document(hkey, id), at,
          redis.call('HGET', hkey, k .. '_unans') or ''}
end
if (k == 'remind' or k == 'escalate') and redis.call('HGET', hkey, 'status') ~= 'pending'
    and not (k == 'escalate' and unanswered_of(hkey, k)) then
  -- Timers end with the decision; an escalation whose copy may have landed unanswered
  -- runs once more, to find that copy and have it show the outcome.
  redis.call('HSET', hkey, k .. '_state', 'none')
  redis.call('ZREM', P .. 'outbox', member)
  return {'none'}
end
if state == 'running' and tonumber(f[4] or 0) > now then
  if f[5] == token then return started(tonumber(f[2]), tonumber(f[6] or now)) end
  return {'busy'}
end
if state == 'running' and k ~= 'resume' then
  -- The last attempt never reported (its worker was lost): whatever it posted, it posted
  -- between its start and its lease's end, and nobody heard the answer. Merged with an
  -- earlier window, the whole is to be read again.
  local from = tonumber(f[6] or 0)
  if from == 0 then from = now end
  local to = math.max(math.min(tonumber(f[4] or now), now), from)
  from, to = from * 1000, to * 1000
  local route = attempt_route(hkey, k)
  local was = unanswered_of(hkey, k)
  local found = {}
  if was and was.route ~= route then
    -- An earlier window in another channel (before a reassignment) is older: kept.
    from, to, route, found = tonumber(was.from), tonumber(was.to), was.route, was.found
  elseif was then
    from, to, found = math.min(from, tonumber(was.from)), math.max(to, tonumber(was.to)), was.found
  end
  keep_unanswered(hkey, k, from, to, '', found, route)
end
if k == 'deliver' then
  -- Where this attempt posts: a reassignment's channel, else the request's ('' the default
  -- channel).
  local r = redis.call('HMGET', hkey, 'channel_override', 'route')
  local own = request_route(hkey, r[2])
  local route = own
  if r[1] and r[1] ~= '' then route = r[1] end
  -- Kept only when it is not the request's own (attempt_route reads that for none).
  if route == own then
    redis.call('HDEL', hkey, 'deliver_route')
  else
    redis.call('HSET', hkey, 'deliver_route', route)
  end
end
local attempt = tonumber(f[2] or 0) + 1
if attempt > tonumber(f[3] or 0) then
  local reason = 'attempt ' .. (f[2] or 0)
    .. ' never finished (worker lost?) and no attempts remain'
  local outcome = give_up(id, hkey, k, now, tonumber(f[2] or 0), reason, false,
                          tonumber(ARGV[5]))
  if outcome == 'retrying' then return {'busy'} end
  return {'failed'}
end
local lease = now + timeout_ms(hkey, k) + tonumber(policy(hkey).lease_grace_ms)
redis.call('HSET', hkey, k .. '_state', 'running', k .. '_attempt', attempt, k .. '_lease', lease,
           k .. '_token', token, k .. '_dirty', '0', k .. '_started', now)
redis.call('HINCRBY', hkey, 'version', 1)
-- If this attempt dies, the dispatcher finds the entry again once the lease has lapsed.
redis.call('ZADD', P .. 'outbox', lease, member)
audit(id, EVENTS[k].started, 'worker', now, {attempt = attempt})
return started(attempt, now)
"""
)

# KEYS[1] handoff hash.
# ARGV: prefix, id, task kind, attempt, succeeded (1/0), error text, extra hash fields json,
#       failed for good, no use retrying (1/0), retention ms (for a delivery that gives up),
#       unanswered verdict (see note_unanswered; '' leaves it), put off for ms (0: not; Slack
#       asked to wait: the attempt is not counted, up to the most deferrals), most deferrals,
#       operation id.
FINISH_TASK = (
    PRELUDE
    + """
local id, hkey, k, op = ARGV[2], KEYS[1], ARGV[3], ARGV[13]
local saved = replayed(op)
if saved then return saved end
local f = redis.call('HMGET', hkey, k .. '_state', k .. '_attempt', k .. '_limit')
if f[1] ~= 'running' or f[2] ~= ARGV[4] then return {'stale', f[1] or '', f[2] or ''} end
local now = now_ms()
local member = k .. ':' .. id
local attempt = tonumber(ARGV[4])
note_unanswered(hkey, k, ARGV[10], now)
if ARGV[5] == '1' then
  redis.call('HSET', hkey, k .. '_state', 'completed', k .. '_done_at', now)
  -- What only a running or retried attempt needs goes (a missing one reads as 0, or as no
  -- token; BEGIN_TASK reads '_started' only of a running attempt, and its audit event keeps
  -- the time): a few fields less in every waiting handoff's hash. '_dirty' goes below.
  redis.call('HDEL', hkey, k .. '_lease', k .. '_token', k .. '_deferred', k .. '_failures',
             k .. '_started')
  -- Done: whatever it posted is known now.
  forget_unanswered(hkey, k)
  for field, value in pairs(cjson.decode(ARGV[7])) do
    if field == 'message_refs' then
      merge_refs(hkey, value)
    else
      redis.call('HSET', hkey, field, value)
    end
  end
  redis.call('HINCRBY', hkey, 'version', 1)
  redis.call('ZREM', P .. 'outbox', member)
  audit(id, EVENTS[k].ok, 'worker', now, {attempt = attempt})
  if redis.call('HGET', hkey, k .. '_dirty') == '1' then
    queue_task(hkey, id, k, now)
  end
  redis.call('HDEL', hkey, k .. '_dirty')
  if k == 'remind' then
    local done = redis.call('HINCRBY', hkey, 'remind_done', 1)
    local every = tonumber(policy(hkey).remind_after_ms or 0)
    local repeats = tonumber(policy(hkey).max_reminders or 0)
    if done < repeats and every > 0 and redis.call('HGET', hkey, 'status') == 'pending' then
      queue_task(hkey, id, k, now + every)
    end
  elseif k == 'escalate' or k == 'deliver' then
    if k == 'escalate' then redis.call('HSET', hkey, 'escalated_at', now) end
    if redis.call('HGET', hkey, 'status') ~= 'pending' then
      -- Closed while the message (or the copy) was being posted, or looked for: show the
      -- outcome there too, with a fresh round of the update (which may have spent its
      -- attempts waiting for a message to update).
      redis.call('ZREM', P .. 'failed', 'notify:' .. id)
      queue_task(hkey, id, 'notify', now)
    end
  end
  return remember(op, {'completed'})
end
local put_off = tonumber(ARGV[11]) or 0
if put_off > 0 and ARGV[8] ~= '1' then
  -- Slack asked to wait (a rate limit): nothing failed, so the attempt does not count; past
  -- the most deferrals of a round, each counts as a failed attempt, retried no sooner.
  if redis.call('HINCRBY', hkey, k .. '_deferred', 1) <= tonumber(ARGV[12]) then
    redis.call('HSET', hkey, k .. '_state', 'retrying', k .. '_error', ARGV[6],
               k .. '_lease', 0, k .. '_limit', tonumber(f[3]) + 1)
    redis.call('HINCRBY', hkey, 'version', 1)
    redis.call('ZADD', P .. 'outbox', now + put_off, member)
    audit(id, EVENTS[k].deferred, 'worker', now,
          {attempt = attempt, error = ARGV[6], retry_in_ms = put_off})
    return remember(op, {'deferred', now + put_off})
  end
end
redis.call('HSET', hkey, k .. '_error', ARGV[6], k .. '_lease', 0)
-- Failed after making references (a thread record posted): keep them, merged, so that the
-- next attempt does not make them again.
local failed_refs = cjson.decode(ARGV[7]).message_refs
if failed_refs then merge_refs(hkey, failed_refs) end
redis.call('HINCRBY', hkey, 'version', 1)
if attempt >= tonumber(f[3]) or ARGV[8] == '1' then
  local outcome = give_up(id, hkey, k, now, attempt, ARGV[6], ARGV[8] == '1', tonumber(ARGV[9]))
  if outcome == 'retrying' then return remember(op, {'retrying', now}) end
  return remember(op, {outcome})
end
-- The backoff doubles with the failures of this round, not with the attempt number (which
-- deferrals for rate limits raise too).
local failures = redis.call('HINCRBY', hkey, k .. '_failures', 1)
local delay = math.min(tonumber(policy(hkey).backoff_ms) * 2 ^ (failures - 1),
                       tonumber(policy(hkey).backoff_max_ms))
delay = math.max(delay, put_off)
redis.call('HSET', hkey, k .. '_state', 'retrying')
redis.call('ZADD', P .. 'outbox', now + delay, member)
audit(id, EVENTS[k].retry, 'worker', now,
      {attempt = attempt, error = ARGV[6], retry_in_ms = delay})
return remember(op, {'retrying', now + delay})
"""
)

# KEYS[1] handoff hash.  ARGV: prefix, id, task kind, actor, operation id.
RETRY_TASK = (
    PRELUDE
    + """
local id, hkey, k, op = ARGV[2], KEYS[1], ARGV[3], ARGV[5]
if replayed(op) then return {'ok'} end
if redis.call('EXISTS', hkey) == 0 then return {'missing'} end
local f = redis.call('HMGET', hkey, k .. '_state', k .. '_attempt')
if f[1] ~= 'failed' then return {'not_failed', f[1] or 'none'} end
local now = now_ms()
queue_task(hkey, id, k, now)
redis.call('HINCRBY', hkey, 'version', 1)
redis.call('ZREM', P .. 'failed', k .. ':' .. id)
audit(id, EVENTS[k].retry_requested, ARGV[4], now, {after_attempt = tonumber(f[2])})
return remember(op, {'ok'})
"""
)

# KEYS[1] outbox.  ARGV: prefix, most to take, visibility timeout ms, claim id.
# Returns kind:id members with their job timeout, and hides them for the visibility timeout.
# A resent claim (same claim id) gets the same batch back, so a lost reply hides nothing.
CLAIM_DUE = (
    PRELUDE
    + """
local saved = replayed(ARGV[4])
if saved then return saved end
local now = now_ms()
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
local out = {}
for _, member in ipairs(due) do
  local sep = string.find(member, ':', 1, true)
  local kind, id = string.sub(member, 1, sep - 1), string.sub(member, sep + 1)
  local hkey = P .. 'h:' .. id
  if redis.call('EXISTS', hkey) == 1 then
    local timeout = timeout_ms(hkey, kind)
    redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), member)
    table.insert(out, member)
    table.insert(out, timeout)
  else
    redis.call('ZREM', KEYS[1], member)
  end
end
if #out > 0 then remember(ARGV[4], out, tonumber(ARGV[3])) end
return out
"""
)

# KEYS[1] the deadlines set kept before the buckets.  ARGV: prefix, most to expire, retention
# ms, operation id.
# Reads every bucket (deadline_key) and the set before them, up to the most to expire.
EXPIRE_DUE = (
    PRELUDE
    + """
local saved = replayed(ARGV[4])
if saved then return saved end
local now = now_ms()
local most = tonumber(ARGV[2])
local expired = {}
local sets = {KEYS[1]}
for n = 0, DEADLINE_BUCKETS - 1 do sets[#sets + 1] = P .. 'deadlines:' .. n end
for _, set in ipairs(sets) do
  if #expired >= most then break end
  local due = redis.call('ZRANGEBYSCORE', set, '-inf', now, 'LIMIT', 0, most - #expired)
  for _, id in ipairs(due) do
    -- Only the caller whose ZREM removed the deadline may expire the handoff.
    if redis.call('ZREM', set, id) == 1 then
      local hkey = P .. 'h:' .. id
      local f = read_fields(hkey, CLOSE_FIELDS)
      if f.status == 'pending' then
        expire_pending(id, hkey, f, now, tonumber(ARGV[3]))
        table.insert(expired, id)
      end
    end
  end
end
if #expired > 0 then remember(ARGV[4], expired) end
return expired
"""
)

# KEYS[1] retention.  ARGV: prefix, most to purge, retention ms, recheck ms, operation id.
# A handoff goes once its resume is done (or it has none), or once its resume has been failed
# for the retention period too (nobody retried it: the audit stream keeps the record of its
# decision and failure as long as any other). The audit stream keeps the retention period,
# by the server's clock (stream ids are its times).
PURGE_DECIDED = (
    PRELUDE
    + """
local saved = replayed(ARGV[5])
if saved then return saved[1] end
local now = now_ms()
local retention = tonumber(ARGV[3])
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
local purged = 0
for _, id in ipairs(due) do
  local hkey = P .. 'h:' .. id
  local f = redis.call('HMGET', hkey, 'resume_state', 'idem_key', 'message_refs', 'decided_at')
  local failed_at = f[1] == 'failed' and redis.call('ZSCORE', P .. 'failed', 'resume:' .. id)
  local given_up = failed_at and now - tonumber(failed_at) >= retention
  if f[1] == 'none' or f[1] == 'completed' or not f[1] or given_up then
    if given_up then
      -- The stream has trimmed its decision and failure by now: this event says them.
      local g = redis.call('HMGET', hkey, 'status', 'decision', 'resume_error')
      local okd, decision = pcall(cjson.decode, g[2] or '{}')
      local okr, request = pcall(cjson.decode, body_get(hkey, 'request') or '{}')
      audit(id, 'purged_unresumed', 'system', now, {
        failed_at = tonumber(failed_at), outcome = g[1],
        decided_by = okd and type(decision) == 'table' and decision.decided_by or nil,
        run_id = okr and type(request) == 'table' and request.run_id or nil,
        error = g[3]})
    end
    redis.call('DEL', hkey)
    -- The stream's pointers into the trail (events of the pending handoff, see audit) are
    -- no later than the decision. Past retention after it, the trim at the end of this very
    -- script removes them all: the trail goes now. A handoff purged sooner (its retention
    -- entry due early) keeps its trail (the body's last field, or its list) until the sweep
    -- after the pointers' trim.
    local decided_at = tonumber(f[4] or 0)
    if decided_at + retention < now then
      redis.call('DEL', P .. 'audit:' .. id, body_key(hkey))
    else
      local until_ms = decided_at + retention + tonumber(ARGV[4])
      redis.call('PEXPIREAT', P .. 'audit:' .. id, until_ms)
      redis.call('PEXPIREAT', body_key(hkey), until_ms)
    end
    local idem = f[2]
    if idem and idem ~= '' then
      if unlink('idemkeys', 'idem', idem, id) then
        -- The HTTP API's record of the body first sent with the key goes with the key.
        redis.call('DEL', P .. 'idembody:' .. idem)
      end
      local old = P .. 'idem:' .. idem
      if redis.call('GET', old) == id then redis.call('DEL', old) end
    end
    -- Every message link goes with it: those of the message refs (the message, escalation
    -- copies, messages moved from). Only links that still name this handoff go.
    local links = {}
    local ok, refs = pcall(cjson.decode, f[3] or '{}')
    if ok and type(refs) == 'table' then
      local shown = {refs}
      if type(refs.copies) == 'table' then
        for _, copy in ipairs(refs.copies) do table.insert(shown, copy) end
      end
      for _, m in ipairs(shown) do
        if type(m) == 'table' and type(m.channel) == 'string' and type(m.ts) == 'string' then
          table.insert(links, m.channel .. ':' .. m.ts)
        end
      end
    end
    -- In its bucket (or the namespace's one hash, before the buckets); one linked before
    -- that, under a key of its own.
    for _, link in ipairs(links) do
      unlink('msglinks', 'msgs', link, id)
      local old = P .. 'msg:' .. link
      if redis.call('GET', old) == id then redis.call('DEL', old) end
    end
    redis.call('ZREM', KEYS[1], id)
    for _, k in ipairs({'deliver', 'resume', 'notify', 'remind', 'escalate'}) do
      redis.call('ZREM', P .. 'outbox', k .. ':' .. id)
      redis.call('ZREM', P .. 'failed', k .. ':' .. id)
    end
    purged = purged + 1
  else
    -- A resume still in flight (or failed, awaiting a retry) keeps its handoff.
    redis.call('ZADD', KEYS[1], now + tonumber(ARGV[4]), id)
  end
end
redis.call('XTRIM', P .. 'audit', 'MINID', string.format('%d-0', math.max(now - retention, 0)))
if purged > 0 then remember(ARGV[5], {purged}) end
return purged
"""
)

# KEYS[1] handoff hash.  ARGV: prefix, id, event, actor, detail json, operation id.
RECORD_AUDIT = (
    PRELUDE
    + """
if replayed(ARGV[6]) then return {'ok'} end
if redis.call('EXISTS', KEYS[1]) == 0 then return {'missing'} end
audit(ARGV[2], ARGV[3], ARGV[4], now_ms(), cjson.decode(ARGV[5]))
return remember(ARGV[6], {'ok'})
"""
)

# KEYS[1] the new handoff's hash, KEYS[2] the undeliverable one's.
# ARGV: prefix, new id, old id, actor, the new handoff's channel ('' for the default).
# Links a redelivery (``HandoffStore.redeliver``, after CREATE made the new handoff): the
# first link wins and is audited on the old handoff; a resend or a second redelivery finds
# it made and writes nothing.
LINK_REDELIVERY = (
    PRELUDE
    + """
if redis.call('EXISTS', KEYS[1]) == 0 then return {'missing'} end
if redis.call('HSETNX', KEYS[1], 'redelivered_from', ARGV[3]) == 0 then return {'linked'} end
if redis.call('EXISTS', KEYS[2]) == 1 then
  audit(ARGV[3], 'redelivered', ARGV[4], now_ms(), {handoff_id = ARGV[2], channel = ARGV[5]})
end
return {'ok'}
"""
)

# KEYS: pending indexes (a run's by its set's name).
# ARGV: prefix, low, high (ZRANGE BYLEX bounds; with desc, from low down to high), most ids,
# '1' for descending.
# Up to that many ids of the indexes merged (each once), in id order: every set of each
# (index_sets) read by the bounds, or the one a run's lookup field names if within them.
INDEX_RANGE = (
    LEVELS_PRELUDE
    + """
-- The count goes to ZRANGE as sent: a Lua number past 2^53 would print as 1e+17, which
-- ZRANGE refuses.
local low, high, most, desc = ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5] == '1'
if most <= 0 then return {} end
-- Whether ``id`` is past (``lower``) or before a ZRANGE BYLEX bound: '-', '+', '(x', '[x'.
local function within(id, bound, lower)
  if bound == '-' then return lower end
  if bound == '+' then return not lower end
  local at, open = string.sub(bound, 2), string.sub(bound, 1, 1) == '('
  if lower then return id > at or (not open and id == at) end
  return id < at or (not open and id == at)
end
local lowest, highest = low, high
if desc then lowest, highest = high, low end
local found, seen = {}, {}
local function take(id)
  if not seen[id] then
    seen[id] = true
    found[#found + 1] = id
  end
end
for _, key in ipairs(KEYS) do
  local run = run_of(key)
  local single = run and lookup_get('runs', run)
  local sets = index_sets(key)
  if single and single ~= '*' then
    sets = {}
    if within(single, lowest, true) and within(single, highest, false) then take(single) end
  end
  for _, set in ipairs(sets) do
    local ids
    if desc then
      ids = redis.call('ZRANGE', set, low, high, 'BYLEX', 'REV', 'LIMIT', 0, ARGV[4])
    else
      ids = redis.call('ZRANGE', set, low, high, 'BYLEX', 'LIMIT', 0, ARGV[4])
    end
    for _, id in ipairs(ids) do take(id) end
  end
end
if desc then table.sort(found, function(a, b) return a > b end) else table.sort(found) end
local page = {}
for i = 1, math.min(most, #found) do page[i] = found[i] end
return page
"""
)

# KEYS: pending indexes (as INDEX_RANGE; a run's by its set's name).  ARGV: prefix, an id
# or ''.
# For each index in turn: how many ids it holds, and how many of those sort before the id
# (0 without one): its sets', or the one a run's lookup field names.
INDEX_COUNTS = (
    LEVELS_PRELUDE
    + """
local first = ARGV[2]
local counts = {}
for _, key in ipairs(KEYS) do
  local size, before = 0, 0
  local run = run_of(key)
  local single = run and lookup_get('runs', run)
  if single and single ~= '*' then
    size = 1
    if first ~= '' and single < first then before = 1 end
  else
    for _, set in ipairs(index_sets(key)) do
      size = size + redis.call('ZCARD', set)
      if first ~= '' then before = before + redis.call('ZLEXCOUNT', set, '-', '(' .. first) end
    end
  end
  counts[#counts + 1] = size
  counts[#counts + 1] = before
end
return counts
"""
)

# KEYS[1] the lookup levels ({ns}:levels: names the slot on a cluster).
# ARGV: prefix, kind ('idemkeys', 'msglinks', 'runs'), then names.
# The value of each name (nil where none), from its lookup hash, whatever the level.
LOOK_UP = (
    LEVELS_PRELUDE
    + """
local found = {}
for i = 3, #ARGV do found[i - 2] = lookup_get(ARGV[2], ARGV[i]) or false end
return found
"""
)

# KEYS[1] the lookup levels ({ns}:levels).  ARGV: prefix, '<channel>:<ts>', handoff id.
# Link a posted Slack message to its handoff (its lookup field, where it is or at the level
# it is added to).
LINK_MESSAGE = (
    LEVELS_PRELUDE
    + """
lookup_set('msglinks', ARGV[2], ARGV[3])
return 1
"""
)

# KEYS[1] handoff hash.
# ARGV: prefix, id, actor, channel override or '', reviewers override json or '',
#       new index keys json, operation id, the version the index keys were worked out from.
REASSIGN = (
    PRELUDE
    + """
local id, hkey = ARGV[2], KEYS[1]
if replayed(ARGV[7]) then return {'ok', handoff_document(hkey, id)} end
if redis.call('EXISTS', hkey) == 0 then return {'missing'} end
local h = redis.call('HMGET', hkey, 'status', 'decision', 'decided_at', 'version')
if h[1] ~= 'pending' then return {'already', h[1], h[2] or '', h[3] or ''} end
-- The index keys come from the handoff as the caller read it: another reassignment since
-- would leave it indexed where it does not show (the caller reads it again and retries).
if (ARGV[8] or '') ~= '' and (h[4] or '0') ~= ARGV[8] then return {'changed'} end
local now = now_ms()
for _, key in ipairs(pending_index_keys(hkey, redis.call('HGET', hkey, 'indexes'))) do
  index_remove(key, id)
end
local indexes = cjson.decode(ARGV[6])
for _, key in ipairs(indexes) do index_add(key, id) end
body_set(hkey, 'indexes', stored_indexes(indexes))
if ARGV[4] ~= '' then redis.call('HSET', hkey, 'channel_override', ARGV[4]) end
if ARGV[5] ~= '' then redis.call('HSET', hkey, 'reviewers_override', ARGV[5]) end
redis.call('HINCRBY', hkey, 'version', 1)
-- A fresh delivery posts to the new place and points the old message there.
queue_task(hkey, id, 'deliver', now)
audit(id, 'reassigned', ARGV[3], now, {channel = ARGV[4], reviewers = ARGV[5]})
remember(ARGV[7], {'ok'})
return {'ok', handoff_document(hkey, id)}
"""
)

# KEYS: for each handoff named, its trail list and its body, in that order.
# ARGV: prefix, then for each stream pointer (see audit) the handoff's place among KEYS' pairs
#       (1 for the first) and the event's place in its trail (0 for the first).
# Only reads. The events the pointers name, in their order (nil for one that is gone): a
# list's item, else the line of the body's trail; the bodies stay here (a request may be
# 64 KiB, an event is a line).
TRAIL_EVENTS = (
    PRELUDE
    + """
local lines_of = {}
local out = {}
for n = 2, #ARGV - 1, 2 do
  local owner, place = tonumber(ARGV[n]), tonumber(ARGV[n + 1])
  local event = redis.call('LINDEX', KEYS[2 * owner - 1], place)
  if not event then
    local lines = lines_of[owner]
    if not lines then
      lines = {}
      -- KEYS[2 * owner] is the body of the handoff whose hash body_fields is given.
      local fields = body_fields(P .. 'h:' .. string.sub(KEYS[2 * owner], #P + 4))
      local trail = fields.trail
      if trail then
        local from = 1
        while from <= #trail + 1 do
          local upto = string.find(trail, NEWLINE, from, true) or (#trail + 1)
          lines[#lines + 1] = string.sub(trail, from, upto - 1)
          from = upto + 1
        end
        lines[1] = with_created_detail(lines[1], fields.request)
      end
      lines_of[owner] = lines
    end
    event = lines[place + 1]
  end
  out[#out + 1] = event or false
end
return out
"""
)

# KEYS[1] handoff hash.  ARGV: prefix, id.
# The handoff's document (see handoff_document), or nil when there is no such handoff.
READ = (
    PRELUDE
    + """
return handoff_document(KEYS[1], ARGV[2])
"""
)

# KEYS: handoff hashes.  ARGV: prefix, then the handoffs' ids in the same order.
# Their documents in that order; nil for a handoff that does not exist.
READ_MANY = (
    PRELUDE
    + """
local documents = {}
for i, hkey in ipairs(KEYS) do documents[i] = handoff_document(hkey, ARGV[i + 1]) end
return documents
"""
)

# KEYS[1] the budget (a hash: ``next``, when the next call nobody holds is free, and
# ``last``, when the last call was made; ms); KEYS[2] its reservations (a zset: holder ->
# the call kept for it, ms).
# ARGV: prefix, ms between two calls, hold ms (0: take a call), operation id, holder ('' for
# none).
# A budget of calls to a rate-limited API shared by every process of a deployment, by the
# server's clock. Returns 0 when the call may be made now (and takes it), else the ms to
# wait. Two calls are never closer than the interval, however late their callers come. A
# holder that must wait gets the next free call kept for it (calls are handed out in turn,
# so nobody waits forever behind luckier callers) and comes back for it then. A hold (Slack
# answered 429 all the same, say to another app on the same token) pushes every call back.
TAKE_BUDGET = (
    PRELUDE
    + """
local saved = replayed(ARGV[4])
if saved then return saved[1] end
local now = now_ms()
local b = redis.call('HMGET', KEYS[1], 'next', 'last')
local next_at, last = tonumber(b[1] or 0), tonumber(b[2] or 0)
local interval = tonumber(ARGV[2])
local hold = tonumber(ARGV[3])
local holder = ARGV[5] or ''
local function keep_until(at)
  redis.call('PEXPIRE', KEYS[1], math.max(at - now, 0) + interval + 1000)
end
if hold > 0 then
  -- Slack wants no call before now + hold: neither a free one nor a kept one. The calls kept
  -- for holders move back with it, in the same order and spacing, so that those who waited
  -- longest are still served first.
  local slot = now + hold
  for _, waiting in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
    redis.call('ZADD', KEYS[2], slot, waiting)
    slot = slot + interval
  end
  next_at = slot
  redis.call('HSET', KEYS[1], 'next', next_at, 'last', math.max(last, now + hold - interval))
  keep_until(next_at)
  if slot > now + hold then redis.call('PEXPIRE', KEYS[2], slot - now + 3600000) end
  return 0
end
local function granted()
  redis.call('HSET', KEYS[1], 'last', now, 'next', math.max(next_at, now + interval))
  keep_until(math.max(next_at, now + interval))
  return remember(ARGV[4], {0})[1]
end
local spacing = last + interval - now
if holder ~= '' then
  local kept = redis.call('ZSCORE', KEYS[2], holder)
  if kept then
    kept = tonumber(kept)
    if kept > now then return kept - now end
    if spacing > 0 then return spacing end
    redis.call('ZREM', KEYS[2], holder)
    return granted()
  end
end
if next_at <= now and spacing <= 0 then return granted() end
local free_at = math.max(next_at, last + interval)
if holder == '' then return free_at - now end
redis.call('ZADD', KEYS[2], free_at, holder)
redis.call('HSET', KEYS[1], 'next', free_at + interval)
keep_until(free_at + interval)
-- A holder that never came back (its handoff decided meanwhile) is forgotten in an hour.
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - 3600000)
redis.call('PEXPIRE', KEYS[2], free_at - now + 3600000)
return free_at - now
"""
)

# KEYS[1] the metrics hash, KEYS[2] the outbox, KEYS[3] the failed tasks, KEYS[4...] the
# pending index of each request type.  ARGV: prefix, most failed entries to read.
# Only reads. Returns {the metrics hash (flat), the pending counts (in KEYS' order), outbox
# entries, of which due, when the oldest due one was due ('' for none; ms), now (ms), failed
# tasks, failed tasks by kind (flat) among the first ARGV[2]}.
STORE_FIGURES = (
    LEVELS_PRELUDE
    + """
local now = redis.call('TIME')
now = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local pending = {}
for i = 4, #KEYS do pending[i - 3] = index_size(KEYS[i]) end
local oldest = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'WITHSCORES', 'LIMIT', 0, 1)
local kinds, by_kind = {}, {}
for _, member in ipairs(redis.call('ZRANGE', KEYS[3], 0, tonumber(ARGV[2]) - 1)) do
  local k = string.match(member, '^([^:]+):') or '?'
  if not kinds[k] then kinds[k] = 0; table.insert(by_kind, k) end
  kinds[k] = kinds[k] + 1
end
local flat = {}
for _, k in ipairs(by_kind) do table.insert(flat, k); table.insert(flat, kinds[k]) end
return {redis.call('HGETALL', KEYS[1]), pending, redis.call('ZCARD', KEYS[2]),
        redis.call('ZCOUNT', KEYS[2], '-inf', now), oldest[2] or '', now,
        redis.call('ZCARD', KEYS[3]), flat}
"""
)
