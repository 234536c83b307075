-- session_event: a dashboard's sign-in event, returned for the fleet audit list (the limiter adds
-- it there with `fleet_audit.lua`: on a Redis Cluster that list lives in another slot); a sign-out
-- also bumps the user's session generation (every session issued under an older one has ended). The generation key lives `life` after its last event (longer than any dashboard
-- session), so a reset to 0 after it is gone cannot revive a session. Mirrors
-- MemoryStore::session_event.
-- A failed sign-in with a window counts against the name for every dashboard replica (the count
-- lives the window after the last failure); a sign-in clears it.
-- KEYS: the user's generation key, the user's failed sign-ins key
-- ARGV: bump (1 for a sign-out), kind, user, address, reason, life (ms), failure window (ms, 0: not
-- counted)
-- Returns {the generation now in force, the entry, the failures now counted}.
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local generation
if ARGV[1] == '1' then
  generation = redis.call('INCR', KEYS[1])
else
  generation = tonumber(redis.call('GET', KEYS[1]) or '0')
end
redis.call('PEXPIRE', KEYS[1], ARGV[6])
local failures
if ARGV[2] == 'sign_in_failed' and ARGV[7] ~= '0' then
  failures = redis.call('INCR', KEYS[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[7])
elseif ARGV[2] == 'sign_in' then
  redis.call('DEL', KEYS[2])
  failures = 0
else
  failures = tonumber(redis.call('GET', KEYS[2]) or '0')
end
local entry = cjson.encode({
  at = now, kind = ARGV[2], account_id = '', actor = ARGV[3], address = ARGV[4], reason = ARGV[5],
})
return { generation, entry, failures }
