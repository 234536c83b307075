-- set_override: give the account a temporary limit (support grants an extra stream), or clear it.
-- ARGV: ttl, keep (2 TTL), default plan, default limit, override limit (0 = clear), duration (ms)
-- Returns {override limit, override end} ({0, 0} when cleared).
local ttl = tonumber(ARGV[1])
local now = now_ms()
local v, h, recs = scan(KEYS[1], now, ttl)
h = h or fresh_header(ARGV[3], ARGV[4])
h.ovr_limit = tonumber(ARGV[5])
h.ovr_ends = 0
if h.ovr_limit > 0 then h.ovr_ends = now + tonumber(ARGV[6]) end
save(KEYS[1], v, h, recs, {}, nil, ARGV[2], now)
return { h.ovr_limit, h.ovr_ends }
