-- uses: _index
-- KEYS: queue, jobs, counted. ARGV: job key field, job key.
-- How many jobs of the key are alive, whoever queued them (0 for none or a 'dead' mark):
-- another producer's jobs still waiting are counted first (count_waiting). A dead letter's
-- "was it the last job?".
count_waiting(KEYS[1], KEYS[2], KEYS[3], ARGV[1])
return tonumber(redis.call('HGET', KEYS[2], ARGV[2])) or 0
