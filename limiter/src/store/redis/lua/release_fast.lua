-- release, fast path: a graceful stop of a live lease of this device and nonce marks its record
-- released, remembered until 2 TTLs from now, by patching its state and end in place (its details
-- stay until the record is forgotten; nothing reads a tombstone's details). The key is extended to
-- 2 TTLs as it is read (an override that lasts longer is restored). Anything else falls through
-- to the general code after common.lua, which gives the same answer.
do
  local byte, find = string.byte, string.find
  local t = redis.call('TIME')
  local now = t[1] * 1000 + math.floor(t[2] / 1000)
  local v = redis.call('GETEX', KEYS[1], 'PX', ARGV[2])
  if v and byte(v, 1) == 2 then
    local o = 5 + byte(v, 3) -- the override's end
    local a, b, c, d, e, f = byte(v, o, o + 5)
    local override_left = ((((a * 256 + b) * 256 + c) * 256 + d) * 256 + e) * 256 + f - now
    if override_left > tonumber(ARGV[2]) then redis.call('PEXPIRE', KEYS[1], override_left) end
    local device, n = ARGV[3], #v
    local p = o + 6 -- the first record
    while p <= n do
      local len = byte(v, p + 29)
      if len == #device and find(v, device, p + 30, true) == p + 30 then
        if byte(v, p) == 0 and find(v, ARGV[4], p + 13, true) == p + 13 then -- live, same nonce
          a, b, c, d, e, f = byte(v, p + 1, p + 6)
          -- Still remembered (a lease past its end is, for one more TTL): released.
          if ((((a * 256 + b) * 256 + c) * 256 + d) * 256 + e) * 256 + f + ARGV[1] > now then
            redis.call('SETRANGE', KEYS[1], p - 1, string.char(2) .. struct.pack('>I6', now + ARGV[2]))
            return 1
          end
        end
        break
      end
      local q = p + 30 + len
      p = q + byte(v, q) + 1
    end
  end
end
