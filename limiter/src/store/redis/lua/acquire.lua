-- acquire: reap, replace the caller's own earlier lease, stop a take-over target, count, admit.
-- ARGV: ttl, revocation, plan ('' = keep the account's), limit, default plan, default limit,
--       device, nonce, type, meta, profile, title, replace device ('' = none), replace nonce
-- Returns {1, limit, active_count, expires_at} or {0, limit, active fields...}.
local ttl, revocation = tonumber(ARGV[1]), tonumber(ARGV[2])
local device, nonce = ARGV[7], ARGV[8]
local now = now_ms()
local plan, limit, recs = load(KEYS[1], now, ttl)
if ARGV[3] ~= '' then
  plan, limit = ARGV[3], tonumber(ARGV[4])
elseif not plan then
  plan, limit = ARGV[5], tonumber(ARGV[6])
end

local kept = {}
for _, r in ipairs(recs) do
  if r.device ~= device then
    if r.device == ARGV[13] and r.nonce == ARGV[14] and r.state == LIVE then
      entomb(r, REVOKED, now, revocation)
    end
    kept[#kept + 1] = r
  end
end

local active = active_count(kept, now)
if active >= limit then
  return push_active({ 0, limit }, kept, now)
end
local expires = now + ttl
kept[#kept + 1] = { state = LIVE, dtype = tonumber(ARGV[9]), nonce = nonce, ends = expires,
  started = now, device = device, meta = ARGV[10], profile = ARGV[11], title = ARGV[12] }
save(KEYS[1], plan, limit, kept, ttl)
return { 1, limit, active + 1, expires }
