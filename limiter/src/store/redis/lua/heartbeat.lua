-- heartbeat, for what the native renewal (PEXPIRE of the lease key) could not renew: renew a
-- live lease whose key went missing; tell a replaced or revoked stream to stop; take a lost or
-- expired lease back when the account has room, or while the account is learning.
-- ARGV: ttl, keep (2 TTL), the stream's plan and limit (for an account the store lost), device,
--       nonce, the history's bounds ('<entries kept>:<retention ms>', read only for an entry),
--       for an account whose home just moved here 'learning' (absent otherwise)
-- Returns {1, expires} renewed, {2, expires} re-registered, {3} expired, {4} revoked. A
-- revocation told and the leases forgotten that ended unstopped go into the account's history.
-- Learning, a lost or expired lease is taken back even on a full account: the new home holds
-- none of the account's leases yet, and its live streams must not be refused for that.
local learning = ARGV[8]
if learning ~= nil and learning ~= 'learning' then error('screenlimit: bad argument learning') end
local ttl = tonumber(ARGV[1])
local now = now_ms()
local v, h, recs, _, reaped = scan(KEYS[1], now, ttl)
local i = v and find_device(v, recs, ARGV[5])
local ends = now + ttl
if i then
  local state = recs[i + 2]
  if state == REVOKED or nonce_at(v, recs[i]) ~= ARGV[6] then
    -- A player heartbeats on until it hears this: its late heartbeats repeat no entry.
    local told = char(#ARGV[5]) .. ARGV[5]
    local newest = redis.pcall('LRANGE', 'sl:history:' .. sub(KEYS[1], 4), 0, 0)[1]
    if not (newest and byte(newest, 1) == 1 and byte(newest, 2) == 4 and sub(newest, 9) == told) then
      history_of(KEYS[1], now, ARGV[7]).push(4, told)
    end
    return { 4 }
  end
  if state == RELEASED then return { 3 } end
  if recs[i + 3] > now then
    local history = reaped and history_of(KEYS[1], now, ARGV[7])
    save(KEYS[1], v, h, recs, { [i] = restamp(v, recs, i, LIVE, ends) }, nil, ARGV[2], now)
    start_lease(KEYS[1], ARGV[6], ends, now, ARGV[2])
    if history then history.reaped(v, reaped) end
    return { 1, ends }
  end
end
h = h or fresh_header(ARGV[3], ARGV[4])
if not learning and active_count(recs, now) >= limit_of(h, now) then return { 3 } end
local history = reaped and history_of(KEYS[1], now, ARGV[7])
if i then
  save(KEYS[1], v, h, recs, { [i] = restamp(v, recs, i, LIVE, ends) }, nil, ARGV[2], now)
else
  save(KEYS[1], v, h, recs, {}, new_record(ends, now, ARGV[6], ARGV[5], '\0'), ARGV[2], now)
end
start_lease(KEYS[1], ARGV[6], ends, now, ARGV[2])
if history then history.reaped(v, reaped) end
return { 2, ends }
