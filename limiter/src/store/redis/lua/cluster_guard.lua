-- On a Redis Cluster every script starts here. While its slot migrates, the source node refuses
-- any key it does not hold (one not moved yet, or one the script would create) with a redirection
-- that, inside a script, is an error raised after the writes made so far. So first read a key
-- that never exists, in the script's slot: on a steady slot it is local and costs a lookup; on a
-- migrating one the script stops here, before any write, and the limiter sends it again.
local steady = redis.pcall('GET', KEYS[1] .. '?')
if type(steady) == 'table' and steady.err then
  return redis.error_reply('TRYAGAIN the slot is migrating')
end
