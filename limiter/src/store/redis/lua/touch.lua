-- touch: renew the account key's life for a live lease whose lease key says that life runs out
-- within two TTLs (the native renewal has just renewed the lease itself), and write the new end
-- into the lease key. Four calls instead of the full heartbeat script. Runs after fast.lua.
-- KEYS: account, lease key. ARGV: keep (2 TTL).
-- Returns 1, or 0 when the account key is gone (the full heartbeat script then answers).
redis.call('PEXPIRE', KEYS[1], key_life(ARGV[1]), 'GT')
local account_until = redis.call('PEXPIRETIME', KEYS[1])
if account_until < 0 then return 0 end
redis.call('SET', KEYS[2], account_until, 'XX', 'KEEPTTL')
return 1
