-- list: the account's plan and its unexpired leases; reads only.
-- ARGV: ttl, default plan, default limit. Returns {plan, limit, active fields...}.
local ttl = tonumber(ARGV[1])
local now = now_ms()
local plan, limit, recs = load(KEYS[1], now, ttl)
if not plan then plan, limit = ARGV[2], tonumber(ARGV[3]) end
return push_active({ plan, limit }, recs, now)
