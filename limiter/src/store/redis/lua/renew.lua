-- renew: the common heartbeat, for a batch of streams, each on its own account key. A live lease
-- of the device with the same nonce gets a new end, by patching its six bytes in place; any other
-- case (no key, an older layout, an expired, released, revoked or replaced lease) is answered 0,
-- its key only kept for 2 TTLs more, and the limiter sends that stream through the full heartbeat
-- script (common.lua + heartbeat.lua), whose answer for a renewable lease is the same as this one.
-- Self-contained on purpose: no prelude to build, and one TIME for the whole batch.
-- KEYS: the accounts. ARGV: ttl, keep (2 TTL), then device and nonce for each key in order.
-- Returns the new lease end for each key, or 0.
local byte, find, pack = string.byte, string.find, struct.pack
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local ttl, keep = tonumber(ARGV[1]), tonumber(ARGV[2])
local out = {}
for k = 1, #KEYS do
  out[k] = 0
  -- Reading the key also extends it to 2 TTLs: never shorter than any record needs, and an
  -- override that lasts longer is restored below. A renewal then patches six bytes in place.
  local v = redis.call('GETEX', KEYS[k], 'PX', keep)
  if v and byte(v, 1) == 2 then
    local o = 5 + byte(v, 3) -- the override's end
    local a, b, c, d, e, f = byte(v, o, o + 5)
    local override_left = ((((a * 256 + b) * 256 + c) * 256 + d) * 256 + e) * 256 + f - now
    if override_left > keep then redis.call('PEXPIRE', KEYS[k], override_left) end
    local device, nonce, n = ARGV[1 + 2 * k], ARGV[2 + 2 * k], #v
    local p = o + 6 -- the first record
    while p <= n do
      local len = byte(v, p + 29)
      if len == #device and find(v, device, p + 30, true) == p + 30 then
        if byte(v, p) == 0 and find(v, nonce, p + 13, true) == p + 13 then -- live, same nonce
          a, b, c, d, e, f = byte(v, p + 1, p + 6)
          if ((((a * 256 + b) * 256 + c) * 256 + d) * 256 + e) * 256 + f > now then
            out[k] = now + ttl
            redis.call('SETRANGE', KEYS[k], p, pack('>I6', out[k])) -- offset p: 0-based
          end
        end
        break
      end
      local q = p + 30 + len
      p = q + byte(v, q) + 1
    end
  end
end
return out
