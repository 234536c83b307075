-- force_stop: revoke a stream so its heartbeats are told to stop.
-- ARGV: ttl, revocation, device, nonce. Returns 1 stopped, 2 already stopped, 0 unknown.
local ttl, revocation = tonumber(ARGV[1]), tonumber(ARGV[2])
local now = now_ms()
local plan, limit, recs = load(KEYS[1], now, ttl)
local i = find_device(recs, ARGV[3])
if not i then return 0 end
if recs[i].nonce ~= ARGV[4] or recs[i].state == REVOKED then return 2 end
entomb(recs[i], REVOKED, now, revocation)
save(KEYS[1], plan, limit, recs, ttl)
return 1
