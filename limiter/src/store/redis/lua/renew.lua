-- renew: the common heartbeat, for a batch of streams, each on its own account key. A live lease
-- of the device with the same nonce gets a new end, by patching its six bytes in place; any other
-- case (no key, an older layout, an expired, released, revoked or replaced lease) is left alone
-- and answered 0, and the limiter sends that stream through the full heartbeat script (common.lua
-- + heartbeat.lua), whose answer for a renewable lease is the same as this one.
-- Self-contained on purpose: no prelude to build, and one TIME for the whole batch.
-- KEYS: the accounts. ARGV: ttl, keep (2 TTL), then device and nonce for each key in order.
-- Returns the new lease end for each key, or 0.
local byte, find, sub, pack = string.byte, string.find, string.sub, struct.pack
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local ttl, keep = tonumber(ARGV[1]), tonumber(ARGV[2])
local out = {}
for k = 1, #KEYS do
  out[k] = 0
  local v = redis.call('GET', KEYS[k])
  if v and byte(v, 1) == 2 then
    local device, nonce, n = ARGV[1 + 2 * k], ARGV[2 + 2 * k], #v
    local p = 11 + byte(v, 3) -- the first record, after a version-2 header
    while p <= n do
      local len = byte(v, p + 29)
      if len == #device and find(v, device, p + 30, true) == p + 30 then
        if byte(v, p) == 0 and find(v, nonce, p + 13, true) == p + 13 then -- live, same nonce
          local a, b, c, d, e, f = byte(v, p + 1, p + 6)
          if ((((a * 256 + b) * 256 + c) * 256 + d) * 256 + e) * 256 + f > now then
            local ends, px = now + ttl, keep
            local o = 5 + byte(v, 3) -- the override's end
            a, b, c, d, e, f = byte(v, o, o + 5)
            local override_left = ((((a * 256 + b) * 256 + c) * 256 + d) * 256 + e) * 256 + f - now
            if override_left > px then px = override_left end
            redis.call('SET', KEYS[k], sub(v, 1, p) .. pack('>I6', ends) .. sub(v, p + 7), 'PX', px)
            out[k] = ends
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
