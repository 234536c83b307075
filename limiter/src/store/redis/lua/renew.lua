-- renew: the common heartbeat, for a batch of streams, each on its own account key. A live lease
-- of the device with the same nonce gets a new end, by patching its six bytes in place; any other
-- case (no key, an older layout, an expired, released, revoked or replaced lease) is answered 0,
-- its key only kept for 2 TTLs more, and the limiter sends that stream through the full heartbeat
-- script (common.lua + heartbeat.lua), whose answer for a renewable lease is the same as this one.
-- Runs after fast.lua only: no prelude to build, and one clock read for the whole batch.
-- KEYS: the accounts. ARGV: ttl, keep (2 TTL), then device and nonce for each key in order.
-- Returns the new lease end for each key, or 0.
local ttl, keep = tonumber(ARGV[1]), ARGV[2]
local now, out = clock(), {}
for k = 1, #KEYS do
  out[k] = 0
  local v, first = read_extending(KEYS[k], keep, now)
  if v then
    local p, ends = live_lease(v, first, ARGV[1 + 2 * k], ARGV[2 + 2 * k])
    if p and ends > now then
      out[k] = now + ttl
      redis.call('SETRANGE', KEYS[k], p, struct.pack('>I6', out[k])) -- offset p: 0-based
    end
  end
end
return out
