-- wrk script for bench/coordinator_bench.py: POST /api/v1/assignments with the
-- bodies in the file given after "--" (one JSON object per line), each thread
-- starting at another offset; prints one JSON summary line at the end.
local counter = 0
local threads = {}

function setup(thread)
   thread:set("offset", counter * 997)
   counter = counter + 1
   table.insert(threads, thread)
end

local requests_list = {}
local i = 0

function init(args)
   local f = assert(io.open(args[1], "r"))
   for line in f:lines() do
      if #line > 0 then
         requests_list[#requests_list + 1] = wrk.format(
            "POST", "/api/v1/assignments", {["Content-Type"] = "application/json"}, line)
      end
   end
   f:close()
   i = offset or 0
end

function request()
   i = i + 7
   return requests_list[(i % #requests_list) + 1]
end

function done(summary, latency, requests)
   local e = summary.errors
   io.write(string.format(
      '{"requests": %d, "duration_us": %d, "p50_us": %d, "p95_us": %d, "p99_us": %d, ' ..
      '"max_us": %d, "err_connect": %d, "err_read": %d, "err_write": %d, ' ..
      '"err_status": %d, "err_timeout": %d}\n',
      summary.requests, summary.duration, latency:percentile(50), latency:percentile(95),
      latency:percentile(99), latency.max, e.connect, e.read, e.write, e.status, e.timeout))
end
