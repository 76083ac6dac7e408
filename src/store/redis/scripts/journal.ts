/**
 * The journal's layout in Redis (CONTRACT.md §8 J1, docs/journal.md "Redis layout"): Lua shared by the
 * record script, which appends to it and trims it, and the scripts that read it.
 *
 * The journal of an incarnation is one hash (KEYS[3]). Its events are one byte stream: for each
 * journaled position, in order, its length as 4 bytes (big-endian) and then its bytes, exactly as
 * the gateway sends a batch (`JournalFrames`, store/journal-frames.ts). The stream is kept in pieces:
 *
 * - slices: fields '0', '1', ...: slice i holds bytes [i * SLICE, (i + 1) * SLICE) of the stream.
 *   SLICE is chosen so that a slice is one allocation of the allocator's 16 KiB class with nothing
 *   left over (a 16,378-byte value, its 5-byte header and its terminating byte): a journal costs
 *   its bytes, not the rounding of each event's allocation to a size class.
 * - fragments: fields 'p1' .. 'p<m>': the bytes after the last whole slice, one field per batch
 *   (appended without copying what is there); once they reach SLICE they are cut into slices.
 * - the table `t` of marks: for some batches (the first, then one at least JOURNAL_MARK_EVENTS
 *   positions or a slice's bytes after the last marked), 16 bytes: the batch's first position and
 *   the offset of its first byte in the stream (two doubles, exact to 2^53), oldest first from byte
 *   `t0` on (the marks before it are dropped, and cut off once they are half of the table). An
 *   event's offset is the nearest mark's plus the frames between them.
 * - `h`: the last position journaled (the journal is intact while it is the record's head),
 *   `e`: the stream's length, `k`: the slices made so far, `z`: the first slice kept, `m`: the
 *   fragments.
 *
 * Positions below the window go by count or bytes in the record script (their positions trimmed
 * exactly, so the window is exact); their bytes are freed a whole slice at a time: a slice goes
 * when every byte in it is before the last mark at or below the window's first position.
 */

/** Bytes per slice: with the sds header (5) and terminator (1), exactly jemalloc's 16 KiB class. */
export const JOURNAL_SLICE_BYTES = 16 * 1024 - 6;

/**
 * A batch starting this many positions (or a slice's bytes) after the last marked one is marked in
 * the table: an offset is found by reading at most that many frames, and the table stays small
 * (copied whole by each record) when batches are of one event.
 */
export const JOURNAL_MARK_EVENTS = 64;

/**
 * Lua: jstate() reads the journal's fields (h nil when there is none); jsave(js) writes them;
 * jappend, jtrim, joffset (a position's frame offset), jwalk (frames from an offset), jbytes
 * (bytes of the stream), jframe (the length at an offset). Every function takes the state and keeps its cache of slices.
 */
export const JOURNAL_LUA = `
local SLICE = ${JOURNAL_SLICE_BYTES}
local MARK_EVENTS = ${JOURNAL_MARK_EVENTS}
local function jstate()
  local f = redis.call('HMGET', KEYS[3], 'h', 'e', 't', 't0', 'z', 'k', 'm')
  return { h = tonumber(f[1]), e = tonumber(f[2]) or 0, t = f[3] or '', t0 = tonumber(f[4]) or 0,
    z = tonumber(f[5]) or 0, k = tonumber(f[6]) or 0, m = tonumber(f[7]) or 0, cache = {} }
end
local function jsave(js)
  redis.call('HSET', KEYS[3], 'h', js.h, 'e', js.e, 't', js.t, 't0', js.t0, 'z', js.z, 'k', js.k, 'm', js.m)
end
local function fragmentNames(m)
  local names = {}
  for i = 1, m do names[i] = 'p' .. i end
  return names
end
-- Slice i, or the fragments when i is k (the bytes after the last whole slice).
local function region(js, i)
  local s = js.cache[i]
  if s == nil then
    if i < js.k then
      s = redis.call('HGET', KEYS[3], tostring(i))
      if not s then error('journal: slice ' .. i .. ' is missing') end
    elseif js.m > 0 then
      s = table.concat(redis.call('HMGET', KEYS[3], unpack(fragmentNames(js.m))))
    else
      s = ''
    end
    js.cache[i] = s
  end
  return s
end
-- Bytes [at, at + len) of the stream; nil when they are not all there.
local function jbytes(js, at, len)
  if at < js.z * SLICE or at + len > js.e then return nil end
  local out = {}
  while len > 0 do
    local i = math.min(math.floor(at / SLICE), js.k)
    local s = region(js, i)
    local from = at - i * SLICE
    local take = math.min(len, #s - from)
    if take <= 0 then return nil end
    out[#out + 1] = string.sub(s, from + 1, from + take)
    at, len = at + take, len - take
  end
  return table.concat(out)
end
-- The length in the frame at offset at.
local function jframe(js, at)
  local header = jbytes(js, at, 4)
  if not header then error('journal: no frame at ' .. at) end
  return (struct.unpack('>I4', header))
end
local function entry(js, j)
  return struct.unpack('>dd', js.t, js.t0 + 16 * j + 1)
end
local function entries(js)
  return (#js.t - js.t0) / 16
end
-- The last mark at or below p (the first when none is): its position and offset; nil without marks.
local function nearestMark(js, p)
  local lo, hi = 0, entries(js) - 1
  if hi < 0 then return nil end
  while lo < hi do
    local mid = math.floor((lo + hi + 1) / 2)
    if entry(js, mid) <= p then lo = mid else hi = mid - 1 end
  end
  return entry(js, lo)
end
-- Walks count frames from offset at: the offset after them, and their bytes when keep. A frame is
-- read from its slice where it lies whole in one, through jbytes where it straddles two.
local function jwalk(js, at, count, keep)
  local out, i, s, base = {}, -1, '', 0
  for c = 1, count do
    local r = math.min(math.floor(at / SLICE), js.k)
    if r ~= i then i, s, base = r, region(js, r), r * SLICE end
    local off = at - base
    local len
    if off + 4 <= #s then len = struct.unpack('>I4', s, off + 1) else len = jframe(js, at) end
    if keep then
      if off + 4 + len <= #s then
        out[c] = string.sub(s, off + 5, off + 4 + len)
      else
        out[c] = jbytes(js, at + 4, len)
        if not out[c] then error('journal: the frame at ' .. at .. ' is cut short') end
      end
    end
    at = at + 4 + len
  end
  return at, out
end
-- The offset of position p's frame (e for the position after the last), p journaled.
local function joffset(js, p)
  if p > js.h then return js.e end
  local q, at = nearestMark(js, p)
  if q == nil or q > p then error('journal: position ' .. p .. ' is not journaled') end
  return (jwalk(js, at, p - q, false))
end
-- An upper bound of the bytes (without frames) of positions p..h, without reading the stream.
local function jbound(js, p)
  local q, at = nearestMark(js, p)
  if q == nil then return 0 end
  return js.e - at - 4 * (js.h - math.max(q, p) + 1)
end
-- Appends a batch: n frames from position first on, total bytes in pieces. Copies through Lua
-- cost about as much per byte as receiving the batch did: pieces cut where the slices end (the
-- first fills the open slice, the next are whole slices, the last is what follows) are stored as
-- they came, and any others are cut so here first; the first is joined with the open slice's
-- fragments.
local function jappend(js, pieces, total, first, n)
  local count = entries(js)
  local mark = count == 0
  if not mark then
    local q, at = entry(js, count - 1)
    mark = first - q >= MARK_EVENTS or js.e - at >= SLICE
  end
  if mark then js.t = js.t .. struct.pack('>dd', first, js.e) end
  local have = js.e - js.k * SLICE
  if have + total < SLICE then
    js.m = js.m + 1
    redis.call('HSET', KEYS[3], 'p' .. js.m, #pieces == 1 and pieces[1] or table.concat(pieces))
  else
    local room = SLICE - have
    local cut = #pieces > 1 and #pieces[1] == room
    for i = 2, #pieces do
      if #pieces[i] > SLICE or (i < #pieces and #pieces[i] ~= SLICE) then cut = false end
    end
    if not cut then
      -- Not cut where this journal's slices end (one piece, or the gateway's guess was wrong):
      -- cut here, the same way.
      local frames = #pieces == 1 and pieces[1] or table.concat(pieces)
      pieces = { string.sub(frames, 1, room) }
      for at = room + 1, #frames, SLICE do pieces[#pieces + 1] = string.sub(frames, at, at + SLICE - 1) end
    end
    local filled = pieces[1]
    if js.m > 0 then
      local names = fragmentNames(js.m)
      local parts = redis.call('HMGET', KEYS[3], unpack(names))
      redis.call('HDEL', KEYS[3], unpack(names))
      parts[#parts + 1] = filled
      filled = table.concat(parts)
    end
    redis.call('HSET', KEYS[3], tostring(js.k), filled)
    js.k = js.k + 1
    js.m = 0
    for i = 2, #pieces do
      if #pieces[i] == SLICE then
        redis.call('HSET', KEYS[3], tostring(js.k), pieces[i])
        js.k = js.k + 1
      elseif #pieces[i] > 0 then
        js.m = 1
        redis.call('HSET', KEYS[3], 'p1', pieces[i])
      end
    end
  end
  js.cache = {}
  js.e = js.e + total
  js.h = first + n - 1
end
-- Frees what no position from p on needs: the marks before p's, and the slices before it.
local function jtrim(js, p)
  local count, j = entries(js), 0
  while j + 1 < count and entry(js, j + 1) <= p do j = j + 1 end
  js.t0 = js.t0 + 16 * j
  if js.t0 * 2 > #js.t then
    js.t = string.sub(js.t, js.t0 + 1)
    js.t0 = 0
  end
  if entries(js) == 0 then return end
  local _, oldest = entry(js, 0)
  local upto = math.min(math.floor(oldest / SLICE), js.k) - 1
  for i = js.z, upto, 1000 do
    local names = {}
    for s = i, math.min(i + 999, upto) do names[#names + 1] = tostring(s) end
    redis.call('HDEL', KEYS[3], unpack(names))
  end
  if upto >= js.z then js.z = upto + 1 end
end
`;
