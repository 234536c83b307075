-- list: the account's plan, the limit in force, its override and its unexpired leases; reads only.
-- ARGV: ttl, default plan, default limit.
-- Returns {plan, limit in force, override limit, override end, plan limit, active raw records...}.
local ttl = tonumber(ARGV[1])
local now = now_ms()
local v, h, recs = scan(KEYS[1], now, ttl)
if not h then return { ARGV[2], tonumber(ARGV[3]), 0, 0, tonumber(ARGV[3]) } end
if h.ovr_ends <= now then h.ovr_limit, h.ovr_ends = 0, 0 end
return push_active({ h.plan, limit_of(h, now), h.ovr_limit, h.ovr_ends, h.limit }, KEYS[1], v, recs,
  now, {})
