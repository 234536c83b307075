-- heartbeat, fast path: renew a live lease of this device and nonce by patching the six bytes
-- of its end in place. It runs before the shared prelude, so the common renewal pays neither
-- for the prelude's helpers nor for indexing records it does not touch; anything else (no key,
-- an older layout, an expired, released, revoked or replaced lease) falls through to the general
-- code after common.lua, which gives the same answer for this case.
do
  local byte, find = string.byte, string.find
  local t = redis.call('TIME')
  local now = t[1] * 1000 + math.floor(t[2] / 1000)
  local v = redis.call('GET', KEYS[1])
  if v and byte(v, 1) == 2 then
    local device, n = ARGV[5], #v
    local p = 11 + byte(v, 3) -- the first record, after a version-2 header
    while p <= n do
      local len = byte(v, p + 29)
      if len == #device and find(v, device, p + 30, true) == p + 30 then
        if byte(v, p) == 0 and find(v, ARGV[6], p + 13, true) == p + 13 then -- live, same nonce
          local a, b, c, d, e, f = byte(v, p + 1, p + 6)
          if ((((a * 256 + b) * 256 + c) * 256 + d) * 256 + e) * 256 + f > now then
            local ends, keep = now + ARGV[1], ARGV[2]
            local o = 5 + byte(v, 3) -- the override's end
            a, b, c, d, e, f = byte(v, o, o + 5)
            local override_left = ((((a * 256 + b) * 256 + c) * 256 + d) * 256 + e) * 256 + f - now
            if override_left > tonumber(keep) then keep = override_left end
            redis.call('SET', KEYS[1], string.sub(v, 1, p) .. struct.pack('>I6', ends)
              .. string.sub(v, p + 7), 'PX', keep)
            return { 1, ends }
          end
        end
        break
      end
      local q = p + 30 + len
      p = q + byte(v, q) + 1
    end
  end
end
