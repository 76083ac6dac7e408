/**
 * The scripts of incarnations (the streams a session opens), except recording events
 * (record-events.ts).
 *
 * The record is a hash (sessionId, owner, kind, state, head, base, attach, pending; and, once
 * set, unjournaled, pump, pumpUntil, tailUntil, held, clientSeq, holderSpan) and its positions a list of the upstream
 * ids of positions base..head, index = seq - base, '' standing for null (position 0, and events
 * the gateway made: an empty upstream id is no id). The journal (J1) is a third key, a hash
 * (journal.ts) holding the bytes of the positions journaled; it exists once a batch carried
 * payloads. `unjournaled` is the highest position recorded without its bytes: the journal can be
 * read after it only.
 * The keys always get the same TTL in the same script, so they live and die together; a record
 * whose positions list does not hold head - base + 1 entries (one key evicted without the other)
 * counts as not recorded, because its positions can no longer be trusted; a journal that does not
 * hold them either counts as none.
 *
 * Every script that reads or writes an incarnation has KEYS: incarnation, positions, journal, and
 * where it needs the session's record, session.
 */

import type { Cluster, Redis } from 'ioredis';
import { INCARNATIONS_LISTED } from '../../types.js';
import { JOURNAL_LUA } from './journal.js';
import { manyCallsLua } from './many.js';
import { TOUCH_SESSION_FUNCTION_LUA } from './session.js';

/** Lua shared by the incarnation scripts. */
export const INCARNATION_LUA_PRELUDE = `
local function recorded(head, base)
  return head ~= nil and base ~= nil and redis.call('LLEN', KEYS[2]) == head - base + 1
end
-- The journal (journal.ts) holds every position up to the head after the record's unjournaled.
local function journalIntact(head)
  return tonumber(redis.call('HGET', KEYS[3], 'h')) == head
end
-- The first position whose bytes the journal can give (head + 1: none).
local function journalFrom(head, base, unjournaled)
  if head == 0 then return 1 end
  if not journalIntact(head) then return head + 1 end
  return math.max(base, 1, (tonumber(unjournaled) or 0) + 1)
end
`;

/**
 * Lua shared by the scripts that write an incarnation: keeps the session's index of incarnations
 * (a sorted set in the session's slot, scored by creation time, for inspectSession) alive at least
 * `ttlMs`, never shortening it. Its members are the incarnations' record keys: the id is read from
 * the key (an argument more would move every argument of recordEvents).
 */
export const INCARNATION_INDEX_LUA = `
local function keepIndex(indexKey, ttlMs)
  if redis.call('PTTL', indexKey) < tonumber(ttlMs) then redis.call('PEXPIRE', indexKey, ttlMs) end
end
`;

/**
 * Lua shared by the scripts that create an incarnation (KEYS[1], KEYS[2]), so that both create it
 * alike: open, head 0, attach 1, position 0 with no upstream id, listed in the session's index
 * (which keeps the newest INCARNATIONS_LISTED). A positions list left without its record (an
 * eviction) is dropped first.
 */
export const CREATE_INCARNATION_LUA = `${INCARNATION_INDEX_LUA}
local function create(indexKey, sessionId, owner, kind, pending, ttlMs)
  redis.call('DEL', KEYS[2], KEYS[3])
  redis.call('HSET', KEYS[1], 'sessionId', sessionId, 'owner', owner, 'kind', kind, 'state', 'open',
    'head', 0, 'base', 0, 'attach', 1, 'pending', pending)
  redis.call('RPUSH', KEYS[2], '')
  redis.call('PEXPIRE', KEYS[1], ttlMs)
  redis.call('PEXPIRE', KEYS[2], ttlMs)
  local t = redis.call('TIME')
  redis.call('ZADD', indexKey, t[1] * 1000 + math.floor(t[2] / 1000), KEYS[1])
  redis.call('ZREMRANGEBYRANK', indexKey, 0, -${INCARNATIONS_LISTED + 1})
  keepIndex(indexKey, ttlMs)
end
`;

/**
 * Creates an incarnation, and makes it the session's current GET when asked and the session
 * exists, noting 'superseded' to the one it replaces; refuses an id that is recorded already.
 * KEYS: incarnation, positions, journal, session, the session's index of incarnations.
 * ARGV: incarnationId, sessionId, owner, kind, pending (JSON), supersede ('1' or '0'), ttlMs,
 * the session's note channel prefix, pump instance ('' none), pumpUntil.
 */
const OPEN_INCARNATION_LUA = `${CREATE_INCARNATION_LUA}
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
create(KEYS[5], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[7])
if ARGV[9] ~= '' then redis.call('HSET', KEYS[1], 'pump', ARGV[9], 'pumpUntil', ARGV[10]) end
if ARGV[6] == '1' and redis.call('EXISTS', KEYS[4]) == 1 then
  local previous = redis.call('HGET', KEYS[4], 'getInc')
  redis.call('HSET', KEYS[4], 'getInc', ARGV[1])
  if previous and previous ~= ARGV[1] then redis.call('SPUBLISH', ARGV[8] .. previous, 'superseded') end
end
return 1
`;

/**
 * Lua shared by the scripts that read an incarnation's record: its fields in toIncarnation()'s
 * order (the journal's state reduced to journaled '1' or '0'), or false when not recorded.
 */
const RECORD_FUNCTION_LUA = `${INCARNATION_LUA_PRELUDE}
local function readRecord()
  local m = redis.call('HMGET', KEYS[1], 'sessionId', 'owner', 'kind', 'state', 'head', 'base', 'attach', 'pending',
    'pump', 'pumpUntil', 'tailUntil', 'unjournaled', 'held', 'clientSeq', 'holderSpan')
  local head, base = tonumber(m[5]), tonumber(m[6])
  if not recorded(head, base) then return false end
  local from = journalFrom(head, base, m[12])
  m[9], m[10], m[11] = m[9] or '', m[10] or '0', m[11] or '0'
  m[12] = from <= math.max(base, 1) and '1' or '0'
  m[13], m[14], m[15] = m[13] or '0', m[14] or '0', m[15] or ''
  return m, head, base, from
end
`;

/**
 * Lua shared by the scripts that read an incarnation (KEYS: incarnation, positions, journal,
 * session): the record, the session's current GET, and the upstream ids of positions
 * afterSeq..head when afterSeq is recorded (none otherwise), as toView() parses them; false when
 * not recorded.
 */
const READ_INCARNATION_FUNCTION_LUA = `${RECORD_FUNCTION_LUA}
local function readIncarnation(afterSeq)
  local m, head, base = readRecord()
  if not m then return false end
  local seq = tonumber(afterSeq)
  local ids = {}
  if seq >= base and seq <= head then ids = redis.call('LRANGE', KEYS[2], seq - base, -1) end
  return { m, redis.call('HGET', KEYS[4], 'getInc'), ids }
end
`;

/**
 * Bumps attach, extending the TTL, and returns it with the incarnation read after the bump;
 * false when not recorded. KEYS: incarnation, positions, journal, session. ARGV: ttlMs, afterSeq.
 */
const ATTACH_INCARNATION_LUA = `${READ_INCARNATION_FUNCTION_LUA}
local m = redis.call('HMGET', KEYS[1], 'head', 'base')
if not recorded(tonumber(m[1]), tonumber(m[2])) then return false end
local attach = redis.call('HINCRBY', KEYS[1], 'attach', 1)
redis.call('PEXPIRE', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[2], ARGV[1])
redis.call('PEXPIRE', KEYS[3], ARGV[1])
return { attach, readIncarnation(ARGV[2]) }
`;

/**
 * The record and the journal's bytes of positions afterSeq + 1 on, at most limit of them, when
 * afterSeq + 1 is journaled (none otherwise): { fields, first position, payloads }; false when
 * not recorded. KEYS: incarnation, positions, journal. ARGV: afterSeq, limit.
 */
const READ_JOURNAL_BODY_LUA = `
local m, head, base, from = readRecord()
if not m then return false end
local first = tonumber(ARGV[1]) + 1
local last = math.min(head, first + tonumber(ARGV[2]) - 1)
if first < from or first > last then return { m, first, {} } end
local js = jstate()
local _, payloads = jwalk(js, joffset(js, first), last - first + 1, true)
return { m, first, payloads }
`;
const READ_JOURNAL_LUA = `${RECORD_FUNCTION_LUA}${JOURNAL_LUA}${READ_JOURNAL_BODY_LUA}`;
/** The journal reads of many tails in one round trip (many.ts): three keys each. */
const READ_JOURNAL_MANY_LUA = manyCallsLua(`${RECORD_FUNCTION_LUA}${JOURNAL_LUA}`, READ_JOURNAL_BODY_LUA, 3);

/** readIncarnation() (false when not recorded). KEYS: incarnation, positions, journal, session. ARGV: afterSeq. */
const READ_INCARNATION_LUA = `${READ_INCARNATION_FUNCTION_LUA}
return readIncarnation(ARGV[1])
`;

/**
 * touchSession() of the session, then readIncarnation(); each part false when there is nothing.
 * KEYS: incarnation, positions, journal, session. ARGV: idleTtlMs, afterSeq.
 */
const TOUCH_AND_READ_LUA = `${TOUCH_SESSION_FUNCTION_LUA}${READ_INCARNATION_FUNCTION_LUA}
return { touchSession(KEYS[4], ARGV[1]), readIncarnation(ARGV[2]) }
`;

/**
 * Marks a recorded incarnation closed (or diverged: never closed again), leaving its TTL, and
 * notes it. KEYS: incarnation. ARGV: note channel, state.
 */
const CLOSE_INCARNATION_LUA = `
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if redis.call('HGET', KEYS[1], 'state') ~= 'diverged' then redis.call('HSET', KEYS[1], 'state', ARGV[2]) end
redis.call('SPUBLISH', ARGV[1], 'closed')
return 1
`;

/** Extends the keys of an incarnation (nothing if it is not recorded). KEYS: incarnation, positions, journal. ARGV: ttlMs. */
const TOUCH_INCARNATION_LUA = `
redis.call('PEXPIRE', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[2], ARGV[1])
redis.call('PEXPIRE', KEYS[3], ARGV[1])
return 0
`;

/** Raises tailUntil to ARGV[1] (ms since the epoch) of a recorded incarnation; never lowers it. KEYS: incarnation. */
const TOUCH_TAIL_LUA = `
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if (tonumber(redis.call('HGET', KEYS[1], 'tailUntil')) or 0) < tonumber(ARGV[1]) then
  redis.call('HSET', KEYS[1], 'tailUntil', ARGV[1])
end
return 1
`;

/** Clears the pump lease, and held, when instance ARGV[1] holds it. KEYS: incarnation. */
const RELEASE_PUMP_LUA = `
if redis.call('HGET', KEYS[1], 'pump') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'pump', '', 'pumpUntil', 0, 'held', '0')
return 1
`;

/**
 * Sets held ('1' or '0', ARGV[2]) and, when ARGV[3] is not '', clientSeq, and when ARGV[4] is not
 * '', holderSpan, when instance ARGV[1] holds the pump's lease. KEYS: incarnation.
 */
const SET_HELD_LUA = `
if redis.call('HGET', KEYS[1], 'pump') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'held', ARGV[2])
if ARGV[3] ~= '' then redis.call('HSET', KEYS[1], 'clientSeq', ARGV[3]) end
if ARGV[4] ~= '' then redis.call('HSET', KEYS[1], 'holderSpan', ARGV[4]) end
return 1
`;

/**
 * Ends a tail lease: tailUntil no later than ARGV[1] (now), clientSeq at least ARGV[2], of a
 * recorded incarnation. KEYS: incarnation.
 */
const END_TAIL_LUA = `
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local now = tonumber(ARGV[1])
if (tonumber(redis.call('HGET', KEYS[1], 'tailUntil')) or 0) > now then redis.call('HSET', KEYS[1], 'tailUntil', now) end
if (tonumber(redis.call('HGET', KEYS[1], 'clientSeq')) or 0) < tonumber(ARGV[2]) then
  redis.call('HSET', KEYS[1], 'clientSeq', ARGV[2])
end
return 1
`;

/**
 * Asks the pump of the session's current GET incarnation to let it go if it is held: 'asked'
 * (noted 'release'), 'tailed' (a client tails it: not asked) or 'none' (no current GET open with a
 * pump's lease running); 'moved' when ARGV[2] is no longer the session's current GET (the caller
 * reads it again). The caller reads the id from the session's record first, so that every key the
 * script touches is in KEYS (a user whose keys are restricted could not touch one built here).
 * KEYS: session, incarnation. ARGV: now (ms since the epoch), incarnationId, its note channel.
 */
const RELEASE_HELD_GET_LUA = `
if redis.call('HGET', KEYS[1], 'getInc') ~= ARGV[2] then return 'moved' end
local now = tonumber(ARGV[1])
local m = redis.call('HMGET', KEYS[2], 'state', 'pump', 'pumpUntil', 'tailUntil')
if m[1] ~= 'open' or not m[2] or m[2] == '' or (tonumber(m[3]) or 0) <= now then return 'none' end
if (tonumber(m[4]) or 0) > now then return 'tailed' end
redis.call('SPUBLISH', ARGV[3], 'release')
return 'asked'
`;

/**
 * What inspectSession reads first: the session's fields (toRecord's order, untouched; false when
 * none), its current GET, and the newest incarnation record keys of its index. KEYS: session,
 * index. ARGV: limit.
 */
const SESSION_INCARNATIONS_LUA = `
local f = redis.call('HMGET', KEYS[1], 'sessionId', 'owner', 'ownerEpoch', 'state', 'createdAt', 'endpoint', 'principal')
local session = false
if f[1] then session = f end
local newest = {}
if tonumber(ARGV[1]) > 0 then newest = redis.call('ZREVRANGE', KEYS[2], 0, tonumber(ARGV[1]) - 1) end
return { session, redis.call('HGET', KEYS[1], 'getInc'), newest }
`;

/** An incarnation's keys: record, positions, journal. */
type IncKeys = [incKey: string, posKey: string, jnlKey: string];

export interface IncarnationScripts {
  gwOpenIncarnation(
    ...args: [...IncKeys, session: string, index: string,
      incarnationId: string, sessionId: string, owner: string, kind: string, pending: string, supersede: '1' | '0', ttlMs: number, channelPrefix: string,
      pump: string, pumpUntil: number]
  ): Promise<number>;
  gwAttachIncarnation(...args: [...IncKeys, session: string, ttlMs: number, afterSeq: number]): Promise<unknown>;
  gwReadIncarnation(...args: [...IncKeys, session: string, afterSeq: number]): Promise<unknown>;
  gwTouchAndRead(...args: [...IncKeys, session: string, idleTtlMs: number, afterSeq: number]): Promise<unknown>;
  gwReadJournal(...args: [...IncKeys, afterSeq: number, limit: number]): Promise<unknown>;
  /** manyCallsArgs() of the reads: three keys each. */
  gwReadJournalMany(...args: (string | number | Buffer)[]): Promise<unknown>;
  gwSessionIncarnations(session: string, index: string, limit: number): Promise<unknown>;
  gwCloseIncarnation(incKey: string, channel: string, state: string): Promise<number>;
  gwTouchIncarnation(...args: [...IncKeys, ttlMs: number]): Promise<number>;
  gwTouchTail(incKey: string, until: number): Promise<number>;
  gwReleasePump(incKey: string, instanceId: string): Promise<number>;
  gwSetHeld(incKey: string, instanceId: string, held: '1' | '0', clientSeq: string, holderSpan: string): Promise<number>;
  gwEndTail(incKey: string, now: number, clientSeq: number): Promise<number>;
  gwReleaseHeldGet(session: string, incKey: string, now: number, incarnationId: string, channel: string): Promise<string>;
}

export function defineIncarnationScripts(client: Redis | Cluster): void {
  client.defineCommand('gwOpenIncarnation', { numberOfKeys: 5, lua: OPEN_INCARNATION_LUA });
  client.defineCommand('gwSessionIncarnations', { numberOfKeys: 2, lua: SESSION_INCARNATIONS_LUA });
  client.defineCommand('gwAttachIncarnation', { numberOfKeys: 4, lua: ATTACH_INCARNATION_LUA });
  client.defineCommand('gwReadIncarnation', { numberOfKeys: 4, lua: READ_INCARNATION_LUA });
  client.defineCommand('gwTouchAndRead', { numberOfKeys: 4, lua: TOUCH_AND_READ_LUA });
  client.defineCommand('gwReadJournal', { numberOfKeys: 3, lua: READ_JOURNAL_LUA });
  client.defineCommand('gwReadJournalMany', { lua: READ_JOURNAL_MANY_LUA });
  client.defineCommand('gwCloseIncarnation', { numberOfKeys: 1, lua: CLOSE_INCARNATION_LUA });
  client.defineCommand('gwTouchIncarnation', { numberOfKeys: 3, lua: TOUCH_INCARNATION_LUA });
  client.defineCommand('gwTouchTail', { numberOfKeys: 1, lua: TOUCH_TAIL_LUA });
  client.defineCommand('gwReleasePump', { numberOfKeys: 1, lua: RELEASE_PUMP_LUA });
  client.defineCommand('gwSetHeld', { numberOfKeys: 1, lua: SET_HELD_LUA });
  client.defineCommand('gwEndTail', { numberOfKeys: 1, lua: END_TAIL_LUA });
  client.defineCommand('gwReleaseHeldGet', { numberOfKeys: 2, lua: RELEASE_HELD_GET_LUA });
}

/** Anything but a safe integer is below every base: a position that is not recorded. */
export function seqArgument(afterSeq: number): number {
  return Number.isSafeInteger(afterSeq) ? afterSeq : -1;
}
