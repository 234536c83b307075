-- force_stop: revoke a stream so its heartbeats are told to stop, and log who stopped it.
-- KEYS: account, the account's audit list, this shard's fleet audit list
-- ARGV: ttl, revocation, device, nonce, account id, stream id, actor, reason,
--       entries kept per account, entries kept per shard, audit retention (ms)
-- Returns 1 stopped, 2 already stopped, 0 unknown.
local ttl, revocation = tonumber(ARGV[1]), tonumber(ARGV[2])
local now = now_ms()
local plan, limit, recs = load(KEYS[1], now, ttl)
local i = find_device(recs, ARGV[3])
if not i then return 0 end
if recs[i].nonce ~= ARGV[4] or recs[i].state == REVOKED then return 2 end
local meta = recs[i].meta
entomb(recs[i], REVOKED, now, revocation)
save(KEYS[1], plan, limit, recs, ttl)
local entry = cjson.encode({ at = now, account_id = ARGV[5], stream_id = ARGV[6], device_id = ARGV[3],
  device_meta = meta, actor = ARGV[7], reason = ARGV[8] })
redis.call('LPUSH', KEYS[2], entry)
redis.call('LTRIM', KEYS[2], 0, tonumber(ARGV[9]) - 1)
redis.call('PEXPIRE', KEYS[2], ARGV[11])
redis.call('LPUSH', KEYS[3], entry)
redis.call('LTRIM', KEYS[3], 0, tonumber(ARGV[10]) - 1)
return 1
