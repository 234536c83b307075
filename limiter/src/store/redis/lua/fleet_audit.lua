-- fleet_audit: adds a logged entry (a support action, a dashboard sign-in event) to a fleet audit
-- list, newest first, capped. With client-side shards each shard keeps its own list, beside the
-- account or user it concerns; on a Redis Cluster there is one list, in its own slot.
-- KEYS: the fleet list. ARGV: the entry (JSON), entries kept.
redis.call('LPUSH', KEYS[1], ARGV[1])
redis.call('LTRIM', KEYS[1], 0, tonumber(ARGV[2]) - 1)
return 1
