-- screenlimit: the prelude of every lease script (each script is this file + one operation).
-- Rules mirror limiter/src/model.rs; the byte layout mirrors limiter/src/store/redis/record.rs.
--
-- One STRING per account, KEYS[1] = "sl:{<account_id>}": an operation is TIME, GET, SET at most.
--   header: B version, B plan limit, B plan length, plan
--   record: B state, I6 ends (ms), I6 started (ms), c16 nonce, B device length, device,
--           B details length, details (B type, then B length + bytes of meta, profile, title)
-- A live record's `ends` is its lease expiry and it is remembered one TTL past it, so a late
-- heartbeat can tell "expired" from "revoked"; a tombstone's `ends` is the time to forget it.
-- Every record is forgotten at most 2 TTLs after the last write, so `SET ... PX 2*TTL` suffices.
--
-- Cost matters more than elegance here (every play and every heartbeat runs this): scripts keep
-- the value as one string, index records by position in a flat array of numbers, never decode
-- the details (Rust does) and rewrite the value from substrings, so no table or string is made
-- per record beyond the one substring that is copied.
local LIVE, REVOKED, RELEASED = 0, 1, 2
local byte, sub, char, find, pack = string.byte, string.sub, string.char, string.find, struct.pack

local function now_ms()
  local t = redis.call('TIME')
  return t[1] * 1000 + math.floor(t[2] / 1000)
end

-- Reads the account. Returns the value, plan, limit (nil, nil when there is no key), the records
-- still worth remembering as a flat array {start, stop, state, ends, ...} and whether any record
-- was forgotten (then the value must be rewritten rather than patched).
local function scan(key, now, ttl)
  local v = redis.call('GET', key)
  if not v then return nil, nil, nil, {}, false end
  local limit, planlen = byte(v, 2, 3)
  local recs, p, n, forgot = {}, 4 + planlen, #v, false
  while p <= n do
    local state, a, b, c, d, e, f = byte(v, p, p + 6)
    local ends = ((((a * 256 + b) * 256 + c) * 256 + d) * 256 + e) * 256 + f
    local q = p + 30 + byte(v, p + 29)
    local stop = q + byte(v, q)
    local forget = ends
    if state == LIVE then forget = ends + ttl end
    if forget > now then
      local i = #recs
      recs[i + 1], recs[i + 2], recs[i + 3], recs[i + 4] = p, stop, state, ends
    else
      forgot = true
    end
    p = stop + 1
  end
  return v, sub(v, 4, 3 + planlen), limit, recs, forgot
end

-- The index in `recs` of the device's record, or nil.
local function find_device(v, recs, device)
  local len = #device
  for i = 1, #recs, 4 do
    local p = recs[i]
    if byte(v, p + 29) == len and find(v, device, p + 30, true) == p + 30 then return i end
  end
  return nil
end

local function nonce_at(v, p)
  return sub(v, p + 13, p + 28)
end

local function active_count(recs, now)
  local n = 0
  for i = 1, #recs, 4 do
    if recs[i + 2] == LIVE and recs[i + 3] > now then n = n + 1 end
  end
  return n
end

local function header(plan, limit)
  return char(1, limit, #plan) .. plan
end

local function new_record(ends, now, nonce, device, details)
  return char(LIVE) .. pack('>I6I6', ends, now) .. nonce .. char(#device) .. device .. details
end

-- The record at `i` with a new state and ends, keeping the rest.
local function restamp(v, recs, i, state, ends)
  return char(state) .. pack('>I6', ends) .. sub(v, recs[i] + 7, recs[i + 1])
end

-- A tombstone: state, forget time, started, nonce and device; the details are dropped.
local function tombstone(v, recs, i, state, forget)
  local p = recs[i]
  return char(state) .. pack('>I6', forget) .. sub(v, p + 7, p + 29 + byte(v, p + 29)) .. '\0'
end

-- Writes header + every kept record, with `edits[i]` (a string) in place of record `i` and
-- `extra` appended; deletes the key when nothing is left.
local function save(key, v, plan, limit, recs, edits, extra, keep_ms)
  local parts = { header(plan, limit) }
  for i = 1, #recs, 4 do
    parts[#parts + 1] = edits[i] or sub(v, recs[i], recs[i + 1])
  end
  if extra then parts[#parts + 1] = extra end
  if #parts == 1 then
    redis.call('DEL', key)
  else
    redis.call('SET', key, table.concat(parts), 'PX', keep_ms)
  end
end

-- The display name of the record at `i`, '' when it has no details.
local function meta_at(v, recs, i)
  local d = recs[i] + 30 + byte(v, recs[i] + 29)
  if byte(v, d) == 0 then return '' end
  return sub(v, d + 3, d + 2 + byte(v, d + 2))
end

-- Appends the raw active records to `out` (Rust decodes them).
local function push_active(out, v, recs, now)
  for i = 1, #recs, 4 do
    if recs[i + 2] == LIVE and recs[i + 3] > now then
      out[#out + 1] = sub(v, recs[i], recs[i + 1])
    end
  end
  return out
end
