-- Stock wrk script: GET /v0/entity?id=k<N> for N uniform in [0, KEYS).
-- Usage: wrk -t T -c C -d D -s scripts/kv/get.lua http://host:port -- KEYS [QUERY]
--   KEYS   how many ids k0..k<KEYS-1> were written before (put.lua, or any client)
--   QUERY  appended to the URL, e.g. "&ack=2&from=3" (default: none)

local counter = 0

function setup(thread)
  thread:set("tid", counter)
  counter = counter + 1
end

function init(args)
  keys = tonumber(args[1] or "0")
  assert(keys > 0, "get.lua needs KEYS > 0 (ids already written)")
  query = args[2] or ""
  math.randomseed(7919 * (tid + 1))
  wrk.method = "GET"
end

function request()
  return wrk.format(nil, "/v0/entity?id=k" .. math.random(0, keys - 1) .. query)
end
