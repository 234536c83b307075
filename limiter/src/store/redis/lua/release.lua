-- release: a graceful stop frees the slot now and remembers the stream as released.
-- ARGV: ttl, keep (2 TTL), device, nonce, the history's bounds ('<entries kept>:<retention ms>',
--       read only for an entry).
-- Returns 1 released, 0 not held. The leases forgotten that ended unstopped go into the
-- account's history.
local ttl = tonumber(ARGV[1])
local now = now_ms()
local v, h, recs, _, reaped = scan(KEYS[1], now, ttl)
local i = v and find_device(v, recs, ARGV[3])
if not i or recs[i + 2] ~= LIVE or nonce_at(v, recs[i]) ~= ARGV[4] then return 0 end
local history = reaped and history_of(KEYS[1], now, ARGV[5])
local edits = { [i] = tombstone(v, recs, i, RELEASED, now + tonumber(ARGV[2])) }
end_lease(KEYS[1], v, recs, i)
save(KEYS[1], v, h, recs, edits, nil, ARGV[2], now)
if history then history.reaped(v, reaped) end
return 1
