-- set_override: give the account a temporary limit (support grants an extra stream), or clear it,
-- and log the change with who and why (a removal that finds none in force changes nothing and
-- logs nothing). Mirrors AccountState::set_override in model/account.rs.
-- KEYS: account, the account's audit list
-- ARGV: ttl, keep (2 TTL), default plan, default limit, override limit (0 = clear), duration (ms),
--       account id, actor, reason, entries kept per account, audit retention (ms), the
--       history's bounds ('<entries kept>:<retention ms>')
-- Returns {override limit, override end} ({0, 0} when cleared), and the entry logged, if any, for
-- the fleet list. The change (with its actor) and the leases forgotten that ended unstopped go
-- into the account's history.
local ttl = tonumber(ARGV[1])
local now = now_ms()
local v, h, recs, _, reaped = scan(KEYS[1], now, ttl)
h = h or fresh_header(ARGV[3], ARGV[4])
local before, had, had_ends = limit_of(h, now), 0, h.ovr_ends
if h.ovr_ends > now then had = h.ovr_limit end
h.ovr_limit = tonumber(ARGV[5])
h.ovr_ends = 0
if h.ovr_limit > 0 then h.ovr_ends = now + tonumber(ARGV[6]) end
local history = history_of(KEYS[1], now, ARGV[12])
save(KEYS[1], v, h, recs, {}, nil, ARGV[2], now)
history.reaped(v, reaped)
if h.ovr_limit > 0 then
  history.push(6, char(h.ovr_limit) .. pack('>I6', h.ovr_ends) .. ARGV[8])
elseif had > 0 then
  history.push(7, char(had) .. pack('>I6', had_ends) .. ARGV[8])
end
local entry
if h.ovr_limit > 0 then
  entry = { kind = 'limit_granted', limit_from = before, limit_to = h.ovr_limit, limit_until = h.ovr_ends }
elseif had > 0 then
  entry = { kind = 'limit_removed', limit_from = had, limit_to = h.limit, limit_until = had_ends }
end
if entry then
  entry.at, entry.account_id, entry.actor, entry.reason = now, ARGV[7], ARGV[8], ARGV[9]
  local logged = cjson.encode(entry)
  push_audit(KEYS[2], logged, ARGV[10], ARGV[11])
  return { h.ovr_limit, h.ovr_ends, logged }
end
return { h.ovr_limit, h.ovr_ends }
