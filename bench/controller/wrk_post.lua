-- wrk script for bench/controller/run.py: POST one JSON body per line of $BENCH_BODIES to
-- $BENCH_PATH with the bearer token $BENCH_TOKEN, cycling through them (20,000 node names);
-- prints one JSON line with the counts and latency percentiles (microseconds).
local token = os.getenv("BENCH_TOKEN")
local path = os.getenv("BENCH_PATH") or "/v1/reports"
local file = os.getenv("BENCH_BODIES")
local reqs = {}
local n = 0
local i = 0

init = function(args)
  local hdr = {["Authorization"] = "Bearer " .. token, ["Content-Type"] = "application/json"}
  for line in io.lines(file) do
    reqs[n] = wrk.format("POST", path, hdr, line)
    n = n + 1
  end
  i = math.random(0, n - 1)
end

request = function()
  i = (i + 1) % n
  return reqs[i]
end

done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('{"requests": %d, "duration_us": %d, "non2xx": %d, "errors": %d, ' ..
    '"p50_us": %d, "p90_us": %d, "p99_us": %d, "max_us": %d}\n',
    summary.requests, summary.duration, e.status, e.connect + e.read + e.write + e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max))
end
