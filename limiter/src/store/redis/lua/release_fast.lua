-- release, fast path: a graceful stop of a live lease of this device and nonce marks its record
-- released, remembered until 2 TTLs from now, by patching its state and end in place (its details
-- stay until the record is forgotten; nothing reads a tombstone's details). The key is extended to
-- 2 TTLs as it is read (an override that lasts longer is restored). Anything else falls through
-- to the general code after common.lua, which gives the same answer. Runs after fast.lua.
do
  local now = clock()
  local v, first = read_extending(KEYS[1], ARGV[2], now)
  if v then
    local p, ends = live_lease(v, first, ARGV[3], ARGV[4])
    -- Still remembered (a lease past its end is, for one more TTL): released.
    if p and ends + ARGV[1] > now then
      redis.call('SETRANGE', KEYS[1], p - 1, string.char(2) .. struct.pack('>I6', now + ARGV[2]))
      redis.call('DEL', lease_key(KEYS[1], ARGV[4]))
      return 1
    end
  end
end
