-- list: the account's plan and its unexpired leases; reads only.
-- ARGV: ttl, default plan, default limit. Returns {plan, limit, active raw records...}.
local ttl = tonumber(ARGV[1])
local now = now_ms()
local v, plan, limit, recs = scan(KEYS[1], now, ttl)
if not plan then return { ARGV[2], tonumber(ARGV[3]) } end
return push_active({ plan, limit }, v, recs, now)
