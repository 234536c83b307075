-- acquire, fast path: decide a play on a new account, or on a version-2 account whose plan is
-- unchanged, with no take-over, without the shared prelude and without indexing records. An
-- admission adds one record at the end (dropping the caller's own earlier one, as the general
-- code does); a denial writes only its entry in the account's history. When an admission would
-- also have to forget records past
-- their time, and in every case this path does not take, the general code after common.lua runs;
-- it applies the same rules (model/account.rs), so both give the same answer. Runs after fast.lua.
do
  local byte, find, sub, char, pack = string.byte, string.find, string.sub, string.char, struct.pack
  local now = clock()
  local ttl, device, details, plan = tonumber(ARGV[1]), ARGV[7], ARGV[9], ARGV[3]
  local kind = 5
  if #details > 1 then kind = byte(details, 2) end
  -- In shadow (one more argument), a play the limits would refuse is let through: granted, with
  -- the refusal it would have been in the history (kind 8) and in the answer ({2, ..., rule, cap}).
  local shadow = ARGV[15]
  if shadow ~= nil and shadow ~= 'shadow' then error('screenlimit: bad argument enforcement') end
  local ends = now + ttl
  -- Reading the key also extends its lifetime, so that a write need not set it again.
  local v, first, override_left = read_extending(KEYS[1], ARGV[2], now)
  if v == nil then
    local limit = tonumber(ARGV[4])
    if plan == '' then plan, limit = ARGV[5], tonumber(ARGV[6]) end
    if limit >= 1 then
      redis.call('SET', KEYS[1], char(2, limit, #plan) .. plan .. '\0\0\0\0\0\0\0' .. char(0)
        .. pack('>I6I6', ends, now) .. ARGV[8] .. char(#device) .. device .. details, 'PX',
        key_life(ARGV[2]))
      start_lease(KEYS[1], ARGV[8], ends, now, ARGV[2])
      return { 1, limit, 1, ends, plan, limit }
    end
  elseif v then
    local plan_limit, planlen = byte(v, 2, 3)
    if ARGV[10] == '' and (plan == '' or (planlen == #plan and plan_limit == tonumber(ARGV[4])
          and find(v, plan, 4, true) == 4)) then
      local limit = plan_limit
      if override_left > 0 then limit = byte(v, first - 7) end
      -- The caps of the plan the account is held to: the named plan's, else its remembered one's.
      local caps = ARGV[12]
      if plan == '' then caps = caps_of(ARGV[13], sub(v, 4, 3 + planlen)) end
      local cap = byte(caps, kind + 1) or 0
      -- One pass: count the live leases of other devices (and those of the caller's type when it
      -- is capped), find the caller's own record and notice records past their time.
      local n = #v
      local active, same_kind, own, own_stop, stale, p = 0, 0, nil, nil, false, first
      while p <= n do
        local state = byte(v, p)
        local a, b, c, d, e, f = byte(v, p + 1, p + 6)
        local rec_ends = ((((a * 256 + b) * 256 + c) * 256 + d) * 256 + e) * 256 + f
        local len = byte(v, p + 29)
        local q = p + 30 + len
        local stop = q + byte(v, q)
        local mine = len == #device and find(v, device, p + 30, true) == p + 30
        -- The caller's own record goes whatever its state (below), so only the others count.
        if mine then
        elseif state == 0 then
          -- Past its stored end, a live record asks its lease key (heartbeats extend only that).
          if rec_ends <= now then rec_ends = lease_end(KEYS[1], sub(v, p + 13, p + 28), rec_ends) end
          stale = stale or rec_ends + ttl <= now
        else
          stale = stale or rec_ends <= now
        end
        if mine then
          own, own_stop = p, stop
        elseif state == 0 and rec_ends > now then
          active = active + 1
          if cap > 0 then
            local rec_kind = 5 -- other, when the record has no details
            if byte(v, q) > 0 then rec_kind = byte(v, q + 1) end
            if rec_kind == kind then same_kind = same_kind + 1 end
          end
        end
        p = stop + 1
      end
      local rule = -1
      if active >= limit then
        rule = 0
      elseif cap > 0 and same_kind >= cap then
        rule = 1 + kind
      end
      -- Refused, or in shadow let through below unless records past their time need the general
      -- code: the refusal's entry either way, and the other devices' live records for a refusal,
      -- as the general code lists them.
      if rule >= 0 and not (shadow and stale) then
        local out = { 0, limit, rule, cap, sub(v, 4, 3 + planlen), plan_limit }
        -- The refusal's entry in the account's history, as `history_of` in common.lua writes it
        -- (not run yet here): the rule, the device, and the devices holding the slots; bounded
        -- by the last argument, '<entries kept>:<retention ms>', read only here.
        local max, retention = string.match(ARGV[14], '^(%d+):(%d+)$')
        if not max then error('screenlimit: bad argument history bounds') end
        local why, at = 2, cap
        if rule == 0 then
          why, at = 0, limit
          if override_left > 0 then why = 1 end
        end
        local meta = ''
        if #details > 2 then meta = sub(details, 4, 3 + byte(details, 3)) end
        local entry_kind = 1
        if shadow then entry_kind = 8 end
        local entry = { char(1, entry_kind) .. pack('>I6', now) .. char(why, at, #device) .. device
          .. char(kind, #meta) .. meta }
        p = first
        while p <= n do
          local q = p + 30 + byte(v, p + 29)
          local dlen = byte(v, q)
          local stop = q + dlen
          if p ~= own and byte(v, p) == 0 then
            local a, b, c, d, e, f = byte(v, p + 1, p + 6)
            local rec_ends = ((((a * 256 + b) * 256 + c) * 256 + d) * 256 + e) * 256 + f
            rec_ends = lease_end(KEYS[1], sub(v, p + 13, p + 28), rec_ends)
            if rec_ends > now then
              if not shadow then out[#out + 1] = char(0) .. pack('>I6', rec_ends) .. sub(v, p + 7, stop) end
              local held = '\5\0'
              if dlen > 0 then
                meta = ''
                if dlen > 1 then meta = sub(v, q + 3, math.min(q + 2 + byte(v, q + 2), q + dlen)) end
                held = char(byte(v, q + 1), #meta) .. meta
              end
              entry[#entry + 1] = sub(v, p + 29, q - 1) .. held
            end
          end
          p = stop + 1
        end
        local list = 'sl:history:' .. sub(KEYS[1], 4)
        if type(redis.pcall('LPUSH', list, table.concat(entry))) == 'number' then
          redis.call('LTRIM', list, 0, tonumber(max) - 1)
          redis.call('PEXPIRE', list, retention)
        end
        if not shadow then return out end
      end
      if not stale then
        local plan_name = sub(v, 4, 3 + planlen)
        local record = char(0) .. pack('>I6I6', ends, now) .. ARGV[8] .. char(#device) .. device
          .. details
        -- A rewrite, not APPEND: Redis grows an appended string's allocation greedily (up to
        -- double), which cost 35 B per stream at 1 M streams. The key keeps the lifetime set above.
        if own then
          -- One device, one slot: its earlier lease goes, and with it that lease's key.
          if byte(v, own) == 0 then redis.call('DEL', lease_key(KEYS[1], sub(v, own + 13, own + 28))) end
          v = sub(v, 1, own - 1) .. sub(v, own_stop + 1)
        end
        redis.call('SET', KEYS[1], v .. record, 'KEEPTTL')
        start_lease(KEYS[1], ARGV[8], ends, now, ARGV[2])
        if rule >= 0 then return { 2, limit, active + 1, ends, plan_name, plan_limit, rule, cap } end
        return { 1, limit, active + 1, ends, plan_name, plan_limit }
      end
    end
  end
end
