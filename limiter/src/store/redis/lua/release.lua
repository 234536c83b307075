-- release: a graceful stop frees the slot now and remembers the stream as released.
-- ARGV: ttl, revocation, device, nonce. Returns 1 released, 0 not held.
local ttl, revocation = tonumber(ARGV[1]), tonumber(ARGV[2])
local now = now_ms()
local plan, limit, recs = load(KEYS[1], now, ttl)
local i = find_device(recs, ARGV[3])
if not i or recs[i].nonce ~= ARGV[4] or recs[i].state ~= LIVE then return 0 end
entomb(recs[i], RELEASED, now, revocation)
save(KEYS[1], plan, limit, recs, ttl)
return 1
