-- force_stop: revoke a stream so its heartbeats are told to stop, and log who stopped it.
-- KEYS: account, the account's audit list
-- ARGV: ttl, keep (2 TTL), device, nonce, account id, stream id, actor, reason,
--       entries kept per account, audit retention (ms), the history's bounds ('<entries
--       kept>:<retention ms>')
-- Returns {1, entry} stopped (the entry for the fleet list), {2} already stopped, {0} unknown.
-- The stop (with its actor) and the leases forgotten that ended unstopped go into the account's
-- history.
local ttl = tonumber(ARGV[1])
local now = now_ms()
local v, h, recs, _, reaped = scan(KEYS[1], now, ttl)
local i = v and find_device(v, recs, ARGV[3])
if not i then return { 0 } end
if recs[i + 2] == REVOKED or nonce_at(v, recs[i]) ~= ARGV[4] then return { 2 } end
local meta = meta_at(v, recs, i)
local history = history_of(KEYS[1], now, ARGV[11])
local edits = { [i] = tombstone(v, recs, i, REVOKED, now + tonumber(ARGV[2])) }
end_lease(KEYS[1], v, recs, i)
save(KEYS[1], v, h, recs, edits, nil, ARGV[2], now)
history.reaped(v, reaped)
history.push(3, history.device(v, recs[i]) .. ARGV[7])
local entry = cjson.encode({ at = now, kind = 'force_stop', account_id = ARGV[5], stream_id = ARGV[6],
  device_id = ARGV[3], device_meta = meta, actor = ARGV[7], reason = ARGV[8] })
push_audit(KEYS[2], entry, ARGV[9], ARGV[10])
return { 1, entry }
