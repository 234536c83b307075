-- screenlimit: the prelude of every lease script (each script is fast.lua, this file and one
-- operation; acquire and release put their fast path, <op>_fast.lua, before this file).
-- Rules mirror limiter/src/model/account.rs; the byte layout mirrors limiter/src/store/redis/record.rs.
--
-- One STRING per account, KEYS[1] = "sl:{<account_id>}": an operation is TIME, GET, SET at most.
--   header: B version (2), B plan limit, B plan length, plan, B override limit, I6 override end
--           (version 1 had no override fields; scripts still read it)
--   record: B state, I6 ends (ms), I6 started (ms), c16 nonce, B device length, device,
--           B details length, details (B type, then B length + bytes of meta, profile, title)
-- Each live record has a lease key (`lease_key` in fast.lua) that expires with the lease:
-- heartbeats extend that key natively, so the record's stored `ends` is a lower bound and the
-- key's expiry is the lease's end once the stored one has passed (`lease_end`). A live record is
-- remembered one TTL past its end, so a late heartbeat can tell "expired" from "revoked"; a
-- tombstone's `ends` is the time to forget it. Stops, revocations and replacements delete the
-- lease key with the state change.
-- Every record is forgotten at most 2 TTLs after the last write; the key lives 6 TTLs after it
-- (`key_life`, so that native renewals seldom need a script), unless a limit override lasts
-- longer: then the key lives until the override ends.
--
-- Cost matters more than elegance here (every play and every heartbeat runs this): scripts keep
-- the value as one string, index records by position in a flat array of numbers, never decode
-- the details (Rust does) and rewrite the value from substrings, so no table or string is made
-- per record beyond the one substring that is copied.
local LIVE, REVOKED, RELEASED = 0, 1, 2
local byte, sub, char, find, pack = string.byte, string.sub, string.char, string.find, struct.pack

local function u48(s, i)
  local a, b, c, d, e, f = byte(s, i, i + 5)
  return ((((a * 256 + b) * 256 + c) * 256 + d) * 256 + e) * 256 + f
end

local function now_ms()
  local t = redis.call('TIME')
  return t[1] * 1000 + math.floor(t[2] / 1000)
end

-- Reads the account. Returns the value (nil when there is no key), the header
-- { plan, limit, ovr_limit, ovr_ends } (nil likewise), the records still worth remembering as a
-- flat array {start, stop, state, ends, ...} (a live record's `ends` read through its lease key),
-- whether any record was forgotten (then the value must be rewritten rather than patched) and,
-- when live ones were (leases that ended unstopped), those as {start, ends, ...}: a script that
-- saves the account records them in its history (`history_of(...).reaped`).
local function scan(key, now, ttl)
  local v = redis.call('GET', key)
  if not v then return nil, nil, {}, false end
  local version, limit, planlen = byte(v, 1, 3)
  local h = { plan = sub(v, 4, 3 + planlen), limit = limit, ovr_limit = 0, ovr_ends = 0 }
  local p = 4 + planlen
  if version >= 2 then
    h.ovr_limit = byte(v, p)
    h.ovr_ends = u48(v, p + 1)
    p = p + 7
  end
  local recs, n, forgot, reaped = {}, #v, false, nil
  while p <= n do
    local state, ends = byte(v, p), u48(v, p + 1)
    local q = p + 30 + byte(v, p + 29)
    local stop = q + byte(v, q)
    local forget = ends
    if state == LIVE then
      -- Past its stored end, a live record asks its lease key (heartbeats extend only that).
      if ends <= now then ends = lease_end(key, sub(v, p + 13, p + 28), ends) end
      forget = ends + ttl
    end
    if forget > now then
      local i = #recs
      recs[i + 1], recs[i + 2], recs[i + 3], recs[i + 4] = p, stop, state, ends
    else
      forgot = true
      if state == LIVE then
        reaped = reaped or {}
        reaped[#reaped + 1], reaped[#reaped + 2] = p, ends
      end
    end
    p = stop + 1
  end
  return v, h, recs, forgot, reaped
end

-- The header a script works with when the account has no key yet.
local function fresh_header(plan, limit)
  return { plan = plan, limit = tonumber(limit), ovr_limit = 0, ovr_ends = 0 }
end

-- The limit in force: an unexpired override replaces the plan's.
local function limit_of(h, now)
  if h.ovr_ends > now then return h.ovr_limit end
  return h.limit
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

local function header(h)
  return char(2, h.limit, #h.plan) .. h.plan .. char(h.ovr_limit) .. pack('>I6', h.ovr_ends)
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
-- `extra` appended; deletes the key when nothing is left to remember.
local function save(key, v, h, recs, edits, extra, keep, now)
  local parts = { header(h) }
  for i = 1, #recs, 4 do
    parts[#parts + 1] = edits[i] or sub(v, recs[i], recs[i + 1])
  end
  if extra then parts[#parts + 1] = extra end
  local override_left = h.ovr_ends - now
  if #parts == 1 and override_left <= 0 then
    redis.call('DEL', key)
    return
  end
  local life = key_life(keep)
  if override_left > life then life = override_left end
  redis.call('SET', key, table.concat(parts), 'PX', life)
end

-- The device type of the record at `i` (5, other, when it has no details).
local function type_at(v, recs, i)
  local d = recs[i] + 30 + byte(v, recs[i] + 29)
  if byte(v, d) == 0 then return 5 end
  return byte(v, d + 1)
end

-- The display name of the record at `i`, '' when it has no details.
local function meta_at(v, recs, i)
  local d = recs[i] + 30 + byte(v, recs[i] + 29)
  if byte(v, d) == 0 then return '' end
  return sub(v, d + 3, d + 2 + byte(v, d + 2))
end

-- Appends the raw active records to `out` (Rust decodes them), each with its lease's current
-- end, leaving out those in `skip`.
local function push_active(out, key, v, recs, now, skip)
  for i = 1, #recs, 4 do
    if not skip[i] and recs[i + 2] == LIVE and recs[i + 3] > now then
      local ends = lease_end(key, nonce_at(v, recs[i]), recs[i + 3])
      out[#out + 1] = restamp(v, recs, i, LIVE, ends)
    end
  end
  return out
end

-- Ends the lease of the record at `i` (a stop, a revocation, a replacement).
local function end_lease(key, v, recs, i)
  if recs[i + 2] == LIVE then redis.call('DEL', lease_key(key, nonce_at(v, recs[i]))) end
end

-- Logs a support action (a JSON entry) in the script that made the change, on the account's list,
-- which shares the account's hash tag: capped and kept `retention` ms past its newest entry. The
-- script returns the entry and the limiter adds it to the fleet list (`fleet_audit.lua`) in a
-- second call: on a Redis Cluster that list lives in another slot, which no script may reach.
local function push_audit(account_list, entry, per_account, retention)
  redis.call('LPUSH', account_list, entry)
  redis.call('LTRIM', account_list, 0, tonumber(per_account) - 1)
  redis.call('PEXPIRE', account_list, retention)
end

-- The account's history (limiter/src/store/redis/history.rs reads it; the byte layout is there):
-- the events support is asked about, newest first, on 'sl:history:{<id>}', named from the account
-- key as lease keys are, so in its slot and carried by no call. Only those events write it, each
-- with `LPUSH`, `LTRIM` to `max` entries and `PEXPIRE` to `retention` ms; a key of another type
-- is left alone (the history is secondary to the decision). The bounds come as the script's last
-- argument, '<max>:<retention ms>' ('50:604800000'), read only here. Made only by a script that
-- has an event to record, since every function a script defines costs each of its calls (and
-- before the script's first write where it can, so that bounds it cannot read write nothing):
--   local history = history_of(KEYS[1], now, bounds)
local function history_of(account_key, now, bounds)
  local max, retention = string.match(bounds, '^(%d+):(%d+)$')
  if not max then error('screenlimit: bad argument history bounds') end
  local list = 'sl:history:' .. sub(account_key, 4)
  local history = {}
  -- Adds an entry: version 1, `kind`, the time, then `body`.
  function history.push(kind, body)
    local pushed = redis.pcall('LPUSH', list, char(1, kind) .. pack('>I6', now) .. body)
    if type(pushed) ~= 'number' then return end
    redis.call('LTRIM', list, 0, tonumber(max) - 1)
    redis.call('PEXPIRE', list, retention)
  end
  -- The device of the record at `p` in `v`: id, type and display name ('other' and none when
  -- the record has no details).
  function history.device(v, p)
    local q = p + 30 + byte(v, p + 29)
    local dlen = byte(v, q)
    if dlen == 0 then return sub(v, p + 29, q - 1) .. '\5\0' end
    local meta = ''
    if dlen > 1 then meta = sub(v, q + 3, math.min(q + 2 + byte(v, q + 2), q + dlen)) end
    return sub(v, p + 29, q - 1) .. char(byte(v, q + 1), #meta) .. meta
  end
  -- The device of a play: its id and its details' type and display name.
  function history.play(device, details)
    local meta = ''
    if #details > 2 then meta = sub(details, 4, 3 + byte(details, 3)) end
    return char(#device) .. device .. char(byte(details, 2) or 5, #meta) .. meta
  end
  -- The leases `scan` forgot that ended unstopped, once the account is saved without them.
  function history.reaped(v, reaped)
    for i = 1, #(reaped or {}), 2 do
      history.push(5, pack('>I6', reaped[i + 1]) .. history.device(v, reaped[i]))
    end
  end
  return history
end
