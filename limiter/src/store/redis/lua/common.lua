-- screenlimit: shared prelude of every lease script (the scripts are this file + one operation).
-- One STRING per account, KEYS[1] = "sl:{<account_id>}", so an operation is GET + SET at most.
--   header: >B version, B plan limit, B+bytes plan name
--   record: >B state, B device type, c16 nonce, I6 ends (ms), I6 started (ms),
--           then B+bytes each: device id, device meta, profile id, title id
-- A live record's `ends` is its lease expiry; it is remembered one TTL past it so a late
-- heartbeat can tell "expired" from "revoked". Revoked and released records are tombstones
-- whose `ends` is the time to forget them. Rules mirror limiter/src/model.rs.
local LIVE, REVOKED, RELEASED = 0, 1, 2
local HEADER = '>BBBc0'
local RECORD = '>BBc16I6I6Bc0Bc0Bc0Bc0'

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function forget_at(r, ttl)
  if r.state == LIVE then return r.ends + ttl end
  return r.ends
end

-- Reads the account and drops what is past remembering. Returns plan, limit (nil if none), records.
local function load(key, now, ttl)
  local raw = redis.call('GET', key)
  if not raw then return nil, nil, {} end
  local _, limit, plan, pos = struct.unpack(HEADER, raw)
  local recs, n = {}, #raw
  while pos <= n do
    local r = {}
    r.state, r.dtype, r.nonce, r.ends, r.started, r.device, r.meta, r.profile, r.title, pos =
      struct.unpack(RECORD, raw, pos)
    if forget_at(r, ttl) > now then recs[#recs + 1] = r end
  end
  return plan, limit, recs
end

local function save(key, plan, limit, recs, ttl)
  local parts, keep = { struct.pack(HEADER, 1, limit, #plan, plan) }, 0
  for _, r in ipairs(recs) do
    parts[#parts + 1] = struct.pack(RECORD, r.state, r.dtype, r.nonce, r.ends, r.started,
      #r.device, r.device, #r.meta, r.meta, #r.profile, r.profile, #r.title, r.title)
    local f = forget_at(r, ttl)
    if f > keep then keep = f end
  end
  if keep == 0 then
    redis.call('DEL', key)
  else
    redis.call('SET', key, table.concat(parts), 'PXAT', keep)
  end
end

local function is_active(r, now)
  return r.state == LIVE and r.ends > now
end

local function active_count(recs, now)
  local n = 0
  for _, r in ipairs(recs) do
    if is_active(r, now) then n = n + 1 end
  end
  return n
end

local function entomb(r, state, now, revocation)
  r.state, r.ends = state, now + revocation
  r.dtype, r.meta, r.profile, r.title = 5, '', '', ''
end

local function find_device(recs, device)
  for i, r in ipairs(recs) do
    if r.device == device then return i end
  end
  return nil
end

-- Appends the active leases to `out` as flat fields: device, type, meta, profile, title,
-- nonce, started, expires.
local function push_active(out, recs, now)
  for _, r in ipairs(recs) do
    if is_active(r, now) then
      out[#out + 1] = r.device
      out[#out + 1] = r.dtype
      out[#out + 1] = r.meta
      out[#out + 1] = r.profile
      out[#out + 1] = r.title
      out[#out + 1] = r.nonce
      out[#out + 1] = r.started
      out[#out + 1] = r.ends
    end
  end
  return out
end
