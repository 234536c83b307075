-- acquire: reap, replace the caller's own earlier lease, stop a take-over target, count, admit.
-- ARGV: ttl, keep (2 TTL: tombstone life and key PX), plan ('' = keep the account's), limit,
--       default plan, default limit, device, nonce, details, replace device, replace nonce
-- Returns {1, limit, active_count, expires_at} or {0, limit, active raw records...}.
local ttl = tonumber(ARGV[1])
local now = now_ms()
local v, plan, limit, recs = scan(KEYS[1], now, ttl)
if ARGV[3] ~= '' then
  plan, limit = ARGV[3], tonumber(ARGV[4])
elseif not plan then
  plan, limit = ARGV[5], tonumber(ARGV[6])
end

local edits, own = {}, find_device(v, recs, ARGV[7])
if own then edits[own] = '' end -- one device, one slot: its earlier lease goes
local target = ARGV[10] ~= '' and find_device(v, recs, ARGV[10])
if target and target ~= own and recs[target + 2] == LIVE and nonce_at(v, recs[target]) == ARGV[11] then
  edits[target] = tombstone(v, recs, target, REVOKED, now + tonumber(ARGV[2]))
end

local active = 0
for i = 1, #recs, 4 do
  if not edits[i] and recs[i + 2] == LIVE and recs[i + 3] > now then active = active + 1 end
end
if active >= limit then
  local out = { 0, limit }
  for i = 1, #recs, 4 do
    if not edits[i] and recs[i + 2] == LIVE and recs[i + 3] > now then
      out[#out + 1] = sub(v, recs[i], recs[i + 1])
    end
  end
  return out
end
local ends = now + ttl
save(KEYS[1], v, plan, limit, recs, edits, new_record(ends, now, ARGV[8], ARGV[7], ARGV[9]), ARGV[2])
return { 1, limit, active + 1, ends }
