-- heartbeat: renew a live lease; tell a replaced or revoked stream to stop; take a lost lease
-- back when the account has room.
-- ARGV: ttl, revocation, default plan, default limit, device, nonce
-- Returns {1, expires} renewed, {2, expires} re-registered, {3} expired, {4} revoked.
local ttl = tonumber(ARGV[1])
local device, nonce = ARGV[5], ARGV[6]
local now = now_ms()
local plan, limit, recs = load(KEYS[1], now, ttl)
local i = find_device(recs, device)
if i then
  local r = recs[i]
  if r.nonce ~= nonce or r.state == REVOKED then return { 4 } end
  if r.state == RELEASED then return { 3 } end
  if r.ends > now then
    r.ends = now + ttl
    save(KEYS[1], plan, limit, recs, ttl)
    return { 1, r.ends }
  end
end
if not plan then plan, limit = ARGV[3], tonumber(ARGV[4]) end
if active_count(recs, now) >= limit then return { 3 } end
local expires = now + ttl
if i then
  recs[i].ends = expires
else
  recs[#recs + 1] = { state = LIVE, dtype = 5, nonce = nonce, ends = expires, started = now,
    device = device, meta = '', profile = '', title = '' }
end
save(KEYS[1], plan, limit, recs, ttl)
return { 2, expires }
