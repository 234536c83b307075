-- acquire: reap, replace the caller's own earlier lease, stop a take-over target, count, admit.
-- ARGV: ttl, keep (2 TTL: tombstone life and key PX), plan ('' = keep the account's), limit,
--       default plan, default limit, device, nonce, details, replace device, replace nonce,
--       the named plan's device caps (6 bytes, one per device type code, 0 = no cap),
--       the plan book's caps when no plan is named (see caps_of in fast.lua), the history's
--       bounds ('<entries kept>:<retention ms>', read only for an entry: `history_of`), and for
--       an account in shadow 'shadow' (checked by acquire_fast.lua, which runs first)
-- Returns {1, limit, active_count, expires_at, plan, plan limit}, in shadow for a play the
-- limits would have refused {2, limit, active_count, expires_at, plan, plan limit, rule, cap}, or
-- {0, limit, rule, cap, plan, plan limit, active raw records...} where rule is 0 (max streams)
-- or 1 + the capped device type. A refusal (in shadow: the refusal it would have been), a
-- take-over and the leases forgotten that ended unstopped go into the account's history
-- (`history_of`).
local ttl = tonumber(ARGV[1])
local now = now_ms()
local v, h, recs, _, reaped = scan(KEYS[1], now, ttl)
h = h or fresh_header(ARGV[5], ARGV[6])
if ARGV[3] ~= '' then h.plan, h.limit = ARGV[3], tonumber(ARGV[4]) end
local limit = limit_of(h, now)

local edits, own = {}, v and find_device(v, recs, ARGV[7])
if own then edits[own] = '' end -- one device, one slot: its earlier lease goes
local target = v and ARGV[10] ~= '' and find_device(v, recs, ARGV[10])
if target and target ~= own and recs[target + 2] == LIVE and nonce_at(v, recs[target]) == ARGV[11] then
  edits[target] = tombstone(v, recs, target, REVOKED, now + tonumber(ARGV[2]))
else
  target = nil
end

local details = ARGV[9]
local kind = 5
if #details > 1 then kind = byte(details, 2) end
-- The caps of the plan the account is held to: the named plan's, else its remembered one's.
local caps = ARGV[12]
if ARGV[3] == '' then caps = caps_of(ARGV[13], h.plan) end
local cap = byte(caps, kind + 1) or 0
local active, same_kind = 0, 0
for i = 1, #recs, 4 do
  if not edits[i] and recs[i + 2] == LIVE and recs[i + 3] > now then
    active = active + 1
    if cap > 0 and type_at(v, recs, i) == kind then same_kind = same_kind + 1 end
  end
end

local rule = -1
if active >= limit then
  rule = 0
elseif cap > 0 and same_kind >= cap then
  rule = 1 + kind
end
-- The refusal's entry in the account's history: the rule as the history names it (the plan's
-- limit 0, a temporary one 1, a cap 2), the limit, the device, the devices holding the slots.
local history = (rule >= 0 or reaped or target) and history_of(KEYS[1], now, ARGV[14])
local refusal
if rule >= 0 then
  local why, at = 2, cap
  if rule == 0 then
    why, at = 0, limit
    if h.ovr_ends > now then why = 1 end
  end
  local held = {}
  for i = 1, #recs, 4 do
    if not edits[i] and recs[i + 2] == LIVE and recs[i + 3] > now then
      held[#held + 1] = history.device(v, recs[i])
    end
  end
  refusal = char(why, at) .. history.play(ARGV[7], details) .. table.concat(held)
end
if refusal and ARGV[15] == nil then
  local out = push_active({ 0, limit, rule, cap, h.plan, h.limit }, KEYS[1], v, recs, now, edits)
  history.push(1, refusal)
  return out
end
-- Granted; in shadow perhaps over a limit, answered with the rule that would have refused it.
local ends = now + ttl
if own then end_lease(KEYS[1], v, recs, own) end
if target then end_lease(KEYS[1], v, recs, target) end
save(KEYS[1], v, h, recs, edits, new_record(ends, now, ARGV[8], ARGV[7], details), ARGV[2], now)
start_lease(KEYS[1], ARGV[8], ends, now, ARGV[2])
if history then
  history.reaped(v, reaped)
  if refusal then history.push(8, refusal) end
  if target then history.push(2, history.play(ARGV[7], details) .. history.device(v, recs[target])) end
end
if refusal then return { 2, limit, active + 1, ends, h.plan, h.limit, rule, cap } end
return { 1, limit, active + 1, ends, h.plan, h.limit }
