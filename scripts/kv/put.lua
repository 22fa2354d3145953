-- Stock wrk script: PUT /v0/entity?id=k<N> with a 1024-byte body.
-- Usage: wrk -t T -c C -d D -s scripts/kv/put.lua http://host:port -- T [QUERY]
--   T      the same -t as wrk, so threads write disjoint ids
--   QUERY  appended to the URL, e.g. "&ack=2&from=3" (default: none)
-- Thread t writes ids t, t+T, t+2T, ... so after a run every id below
-- (the smallest per-thread count) * T has been written.

local threads = {}
local counter = 0

function setup(thread)
  thread:set("tid", counter)
  counter = counter + 1
  table.insert(threads, thread)
end

function init(args)
  stride = tonumber(args[1] or "1")
  query = args[2] or ""
  n = 0
  -- wrk calls request() once on thread 0's state to check the script
  -- before the run and discards it; start one step back so id 0 is still
  -- sent (a wrk that does not do this writes the harmless id "k-<T>").
  if tid == 0 then n = -1 end
  -- 1 KiB of printable bytes, the same on every thread
  local chars = {}
  for i = 1, 1024 do
    chars[i] = string.char(65 + (i * 7) % 26)
  end
  wrk.method = "PUT"
  wrk.body = table.concat(chars)
end

function request()
  local id = tid + n * stride
  n = n + 1
  return wrk.format(nil, "/v0/entity?id=k" .. id .. query)
end

function done(summary, latency, requests)
  local least
  for _, t in ipairs(threads) do
    local sent = t:get("n")
    if least == nil or sent < least then least = sent end
  end
  io.write(string.format("kv put: requests sent per thread (least) %d\n", least or 0))
end
