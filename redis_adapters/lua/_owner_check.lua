if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return {-1}
end
