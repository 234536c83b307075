-- heartbeat: renew a live lease; tell a replaced or revoked stream to stop; take a lost lease
-- back when the account has room.
-- ARGV: ttl, keep (2 TTL), default plan, default limit, device, nonce
-- Returns {1, expires} renewed, {2, expires} re-registered, {3} expired, {4} revoked.
local ttl = tonumber(ARGV[1])
local now = now_ms()
local v, plan, limit, recs, forgot = scan(KEYS[1], now, ttl)
local i = v and find_device(v, recs, ARGV[5])
local ends = now + ttl
if i then
  local state = recs[i + 2]
  if state == REVOKED or nonce_at(v, recs[i]) ~= ARGV[6] then return { 4 } end
  if state == RELEASED then return { 3 } end
  if recs[i + 3] > now then
    if forgot then
      save(KEYS[1], v, plan, limit, recs, { [i] = restamp(v, recs, i, LIVE, ends) }, nil, ARGV[2])
    else -- the common case: patch the six bytes of the lease end in place
      local p = recs[i]
      redis.call('SET', KEYS[1], sub(v, 1, p) .. pack('>I6', ends) .. sub(v, p + 7), 'PX', ARGV[2])
    end
    return { 1, ends }
  end
end
if not plan then plan, limit = ARGV[3], tonumber(ARGV[4]) end
if active_count(recs, now) >= limit then return { 3 } end
if i then
  save(KEYS[1], v, plan, limit, recs, { [i] = restamp(v, recs, i, LIVE, ends) }, nil, ARGV[2])
else
  save(KEYS[1], v, plan, limit, recs, {}, new_record(ends, now, ARGV[6], ARGV[5], '\0'), ARGV[2])
end
return { 2, ends }
