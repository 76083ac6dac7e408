/** The script that records a batch of events: the one the gateway runs most, per stream. */

import type { Cluster, Redis } from 'ioredis';
import { CREATE_INCARNATION_LUA, INCARNATION_LUA_PRELUDE } from './incarnation.js';
import { JOURNAL_LUA } from './journal.js';
import { manyCallsLua } from './many.js';

/**
 * Appends a batch when its attachment is current and fromSeq is head + 1, settles the responded
 * requests, trims to maxPositions and extends the TTL (unless ttlMs is 0); first creates the incarnation when asked to
 * create it and it has no record (never superseding: the session key is not among KEYS).
 * J1: journals the events' bytes (journal.ts) after the incarnation's head, trimming the oldest
 * positions until the journal's bytes fit maxBytes, and notes the new head on the incarnation's
 * channel; or, for a batch without payloads, drops the journal (nothing up to its head can be read
 * from it any more). Sets the pump lease when told to.
 * KEYS: incarnation, positions, journal, the session's index of incarnations.
 * ARGV: attach, fromSeq, maxPositions, ttlMs, create ('1' or '0'), then sessionId, owner, kind and
 * pending (JSON) of the incarnation to create ('' each when create is '0'), then k, then k responded
 * ids (each as JSON), then n, then the n upstream ids ('' for null) joined by LF in one argument,
 * then: maxBytes (-1: no bound), pump instance ('' to leave the lease), pumpUntil, note channel,
 * payloads ('1' or '0'), and the n payloads framed (JournalFrames: each its length and its bytes)
 * in one argument, or in several cut where the journal's slices end (journal-cut.ts), which the
 * script appends as they are, without reading them. Answers 'ok <end>' when it journals: the
 * journal's length in bytes after the batch, where the gateway cuts the next one.
 *
 * Every byte that becomes a Lua string costs the script about 1.3 ns (the collector's work grows
 * with what is allocated): frames cut by the gateway are stored without a string cut from them.
 *
 * One argument for all the ids, not one each: a batch holds thousands of events when a replica
 * streams fast, and the client's cost per argument was most of the gateway's cost per event. An SSE
 * id never contains LF (the line ends there), and the script checks that it finds exactly n.
 *
 * Pending ids are compared as the JSON text that JSON.stringify wrote, never decoded: cjson would
 * round large numbers, and 1 and "1" are different ids. The pending array is written by
 * JSON.stringify (no whitespace, strings and numbers only), which is what elements() splits.
 */
const RECORD_BODY_LUA = `
local function elements(json)
  local out, i = {}, 2
  while i < #json do
    local j
    if string.sub(json, i, i) == '"' then
      j = i + 1
      while true do
        j = string.find(json, '["\\\\]', j)
        if string.sub(json, j, j) == '"' then break end
        j = j + 2
      end
    else
      j = (string.find(json, ',', i, true) or #json) - 1
    end
    out[#out + 1] = string.sub(json, i, j)
    i = j + 2
  end
  return out
end

local k = tonumber(ARGV[10])
local n = tonumber(ARGV[11 + k])
local maxBytes, pump, pumpUntil, channel = tonumber(ARGV[13 + k]), ARGV[14 + k], ARGV[15 + k], ARGV[16 + k]
local journaling = ARGV[17 + k] == '1'
local ids = {}
if n > 0 and #ARGV[12 + k] == n - 1 and not string.find(ARGV[12 + k], '[^\\n]') then
  -- Separators only: no event has an upstream id (a replica without an event store).
  for i = 1, n do ids[i] = '' end
elseif n > 0 then
  -- One match an id, each ended by LF (a fifth quicker than finding each LF and cutting before it).
  local found = 0
  for id in string.gmatch(ARGV[12 + k] .. '\\n', '([^\\n]*)\\n') do
    found = found + 1
    ids[found] = id
  end
end
if #ids ~= n then return redis.error_reply('upstream ids: expected ' .. n .. ', found ' .. #ids) end
-- The frames, in one argument or in pieces cut where the journal's slices end (jappend).
local pieces, total = {}, 0
if journaling then
  for i = 18 + k, #ARGV do
    pieces[#pieces + 1] = ARGV[i]
    total = total + #ARGV[i]
  end
end
if journaling and total < 4 * n then return redis.error_reply('payloads: expected ' .. n .. ' frames in ' .. total .. ' bytes') end

if ARGV[5] == '1' and redis.call('EXISTS', KEYS[1]) == 0 then
  create(KEYS[4], ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[4])
end

local m = redis.call('HMGET', KEYS[1], 'state', 'head', 'base', 'attach', 'pending', 'unjournaled')
local head, base = tonumber(m[2]), tonumber(m[3])
if not recorded(head, base) then return 'missing' end
local from = tonumber(ARGV[2])
if m[1] ~= 'open' or tonumber(m[4]) ~= tonumber(ARGV[1]) then return 'stale' end
if from ~= head + 1 then
  -- A retry of a batch that did land (its first attempt timed out on the client) is 'ok'.
  if from < base or from + n - 1 > head then return 'stale' end
  local have = redis.call('LRANGE', KEYS[2], from - base, from - base + n - 1)
  for i = 1, n do
    if have[i] ~= ids[i] then return 'stale' end
  end
  if journaling then
    -- Its bytes must have landed too, and still be readable.
    if from < journalFrom(head, base, m[6]) then return 'stale' end
    local js = jstate()
    local at = joffset(js, from)
    local frames = table.concat(pieces)
    if jbytes(js, at, #frames) ~= frames then return 'stale' end
    -- The same bytes, and they end where position from + n - 1 ends.
    if from + n - 1 < head and joffset(js, from + n) ~= at + #frames then return 'stale' end
  end
  return 'ok'
end

-- In chunks: unpack() of too many values overflows the Lua stack.
local function push(key, values, count)
  for i = 1, count, 1000 do
    redis.call('RPUSH', key, unpack(values, i, math.min(i + 999, count)))
  end
end

local unjournaled, js = tonumber(m[6]) or 0, nil
if journaling then
  js = jstate()
  if js.h ~= head then
    -- The first batch with payloads (or the journal was lost): only what follows can be read.
    redis.call('DEL', KEYS[3])
    js = jstate()
    js.h, unjournaled = head, head
  end
  if n > 0 then jappend(js, pieces, total, head + 1, n) end
elseif n > 0 then
  -- Nothing up to the new head can be read from the journal any more; without it, none can be.
  redis.call('DEL', KEYS[3])
end
push(KEYS[2], ids, n)
head = head + n

local pending = m[5]
if k > 0 then
  local kept = elements(pending)
  -- One response settles one request (a multiset, like the requests themselves).
  for r = 11, 10 + k do
    for p = 1, #kept do
      if kept[p] == ARGV[r] then
        table.remove(kept, p)
        break
      end
    end
  end
  pending = '[' .. table.concat(kept, ',') .. ']'
end

-- The oldest positions go first, for the count and then for the journal's bytes; the head stays.
local drop = math.max(0, head - base + 1 - tonumber(ARGV[3]))
-- Trimmed only while intact: without a journal jstate() has no h, and one behind the head cannot be read.
js = js or jstate()
if js.h == head then
  -- The first position with bytes that stays by count; the bytes from it on, counted exactly only
  -- when a bound above them (from its batch's start, without reading the stream) is over maxBytes.
  local first = math.max(base + drop, unjournaled + 1, 1)
  if maxBytes >= 0 and first <= head and jbound(js, first) > maxBytes then
    local at = joffset(js, first)
    local bytes = js.e - at - 4 * (head - first + 1)
    while bytes > maxBytes and first < head do
      local len = jframe(js, at)
      bytes, at, first = bytes - len, at + 4 + len, first + 1
    end
    drop = math.max(drop, first - base)
  end
  jtrim(js, math.max(base + drop, unjournaled + 1, 1))
  jsave(js)
end
if drop > 0 then
  redis.call('LTRIM', KEYS[2], drop, -1)
  base = base + drop
end
-- One write of the record's fields: a call each costs the script more than the fields do.
if journaling and pump ~= '' then
  redis.call('HSET', KEYS[1], 'head', head, 'base', base, 'pending', pending, 'unjournaled', unjournaled, 'pump', pump, 'pumpUntil', pumpUntil)
elseif journaling then
  redis.call('HSET', KEYS[1], 'head', head, 'base', base, 'pending', pending, 'unjournaled', unjournaled)
elseif pump ~= '' then
  redis.call('HSET', KEYS[1], 'head', head, 'base', base, 'pending', pending, 'pump', pump, 'pumpUntil', pumpUntil)
else
  redis.call('HSET', KEYS[1], 'head', head, 'base', base, 'pending', pending)
end
if tonumber(ARGV[4]) > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
  redis.call('PEXPIRE', KEYS[2], ARGV[4])
  redis.call('PEXPIRE', KEYS[3], ARGV[4])
  keepIndex(KEYS[4], ARGV[4])
end
if journaling and n > 0 then redis.call('SPUBLISH', channel, 'head ' .. head) end
-- Where the journal's bytes now end: where the gateway cuts the next batch's frames.
if journaling then return 'ok ' .. string.format('%d', js.e) end
return 'ok'
`;

const RECORD_EVENTS_LUA = `${INCARNATION_LUA_PRELUDE}${CREATE_INCARNATION_LUA}${JOURNAL_LUA}${RECORD_BODY_LUA}`;

/** The batches of many streams in one round trip (many.ts). KEYS: four per batch. */
const RECORD_MANY_LUA = manyCallsLua(`${INCARNATION_LUA_PRELUDE}${CREATE_INCARNATION_LUA}${JOURNAL_LUA}`, RECORD_BODY_LUA, 4);

export interface RecordEventsScripts {
  gwRecordEvents(incKey: string, posKey: string, jnlKey: string, index: string, ...args: (string | number | Buffer)[]): Promise<string>;
  /** manyCallsArgs() of the batches: four keys each. */
  gwRecordMany(...args: (string | number | Buffer)[]): Promise<unknown>;
}

export function defineRecordEventsScripts(client: Redis | Cluster): void {
  client.defineCommand('gwRecordEvents', { numberOfKeys: 4, lua: RECORD_EVENTS_LUA });
  client.defineCommand('gwRecordMany', { lua: RECORD_MANY_LUA });
}
