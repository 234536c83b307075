-- session_event: a dashboard's sign-in event in this shard's audit log; a sign-out also bumps
-- the user's session generation (every session issued under an older one has ended), in the
-- same step. The generation key lives `life` after its last event (longer than any dashboard
-- session), so a reset to 0 after it is gone cannot revive a session. Mirrors
-- MemoryStore::session_event.
-- KEYS: the user's generation key, this shard's fleet audit list
-- ARGV: bump (1 for a sign-out), kind, user, address, reason, entries kept per shard, life (ms)
-- Returns the generation now in force.
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local generation
if ARGV[1] == '1' then
  generation = redis.call('INCR', KEYS[1])
else
  generation = tonumber(redis.call('GET', KEYS[1]) or '0')
end
redis.call('PEXPIRE', KEYS[1], ARGV[7])
local entry = cjson.encode({
  at = now, kind = ARGV[2], account_id = '', actor = ARGV[3], address = ARGV[4], reason = ARGV[5],
})
redis.call('LPUSH', KEYS[2], entry)
redis.call('LTRIM', KEYS[2], 0, tonumber(ARGV[6]) - 1)
return generation
