-- screenlimit: the few helpers the fast paths (<op>_fast.lua) share: small functions instead of
-- common.lua's prelude, so a fast path stays cheap to enter. Every script starts with this file,
-- so the general code uses them too. Layout as in common.lua; these read version-2 values only.

-- The store's clock in ms.
local function clock()
  local t = redis.call('TIME')
  return t[1] * 1000 + math.floor(t[2] / 1000)
end

-- How long an account key lives after a write (ms), from `keep`, the 2 TTLs a tombstone is
-- remembered: three times that. Heartbeats renew leases without touching the account key; its
-- long life lets a lease key carry the account key's end (`start_lease`), which the limiter reads
-- back with each native renewal and renews through a script only when that end comes near.
local function key_life(keep)
  return 3 * tonumber(keep)
end

-- The key read and extended to its life (`key_life(keep)`): its value (nil when there is no key,
-- false when it is not version 2), the start of its first record and the override's time left
-- (ms, negative when none). An override that outlasts that life gets its own lifetime back.
local function read_extending(key, keep, now)
  local life = key_life(keep)
  local v = redis.call('GETEX', key, 'PX', life)
  if not v then return nil end
  if string.byte(v, 1) ~= 2 then return false end
  local o = 5 + string.byte(v, 3) -- the override's end
  local a, b, c, d, e, f = string.byte(v, o, o + 5)
  local override_left = ((((a * 256 + b) * 256 + c) * 256 + d) * 256 + e) * 256 + f - now
  if override_left > life then redis.call('PEXPIRE', key, override_left) end
  return v, o + 6, override_left
end

-- The position of the device's record in `v` (records from `p` on) when it is a live lease
-- with this nonce, and that lease's end; nil otherwise.
local function live_lease(v, p, device, nonce)
  local byte, find, n = string.byte, string.find, #v
  while p <= n do
    local len = byte(v, p + 29)
    if len == #device and find(v, device, p + 30, true) == p + 30 then
      if byte(v, p) ~= 0 or find(v, nonce, p + 13, true) ~= p + 13 then return nil end
      local a, b, c, d, e, f = byte(v, p + 1, p + 6)
      return p, ((((a * 256 + b) * 256 + c) * 256 + d) * 256 + e) * 256 + f
    end
    local q = p + 30 + len
    p = q + byte(v, q) + 1
  end
  return nil
end

-- The device caps of `plan` (6 bytes, one per device type code, 0 = no cap) from `book`: entries
-- of name length, name, caps, one per configured plan that has caps; '' when it has none.
local function caps_of(book, plan)
  local p, n = 1, #book
  while p <= n do
    local len = string.byte(book, p)
    if string.sub(book, p + 1, p + len) == plan then return string.sub(book, p + len + 1, p + len + 6) end
    p = p + len + 7
  end
  return ''
end

-- The key whose life is a live lease's life: the account key and the first 8 bytes of the
-- stream's nonce. A heartbeat extends it natively (GETEX ... PX), without a script and without
-- touching the record, so a live record's stored end may lag behind; stops and revocations
-- delete it. Its value is the time until which the account key surely lives.
local function lease_key(account_key, nonce)
  return account_key .. string.sub(nonce, 1, 8)
end

-- Starts (or restarts) the life of the live lease with this nonce, to end at `ends`, written at
-- `now`: the account key, just written, lives at least `key_life(keep)` more.
local function start_lease(account_key, nonce, ends, now, keep)
  redis.call('SET', lease_key(account_key, nonce), now + key_life(keep), 'PXAT', ends)
end

-- A live record's end as its lease key says: the key's expiry (PEXPIRETIME, -2 when the key is
-- gone) when that is later than the stored end. While the stored end is ahead the lease is live
-- (its key lives at least as long), so the scripts ask only once it has passed, and listings.
local function lease_end(account_key, nonce, stored)
  local t = redis.call('PEXPIRETIME', lease_key(account_key, nonce))
  if t > stored then return t end
  return stored
end
