-- Shared by every bench/ wrk script: per-thread ids, file loading, URL encoding, and the done() hook
-- that prints one machine-readable summary line (bench.py parses the line starting with WRKJSON).
-- Files are passed by environment variables set by bench.py (BENCH_IDS, BENCH_TOKENS, BENCH_OWNERS).

local threads = 0
function setup(thread)
  thread:set("tid", threads) -- becomes the global `tid` inside that thread's Lua state
  threads = threads + 1
end

-- Deterministic per-thread random sequence: both servers get the same requests. BENCH_SEED_SALT
-- (bench.py sets it for the 1,000,000-row scenarios' warm-ups) gives another sequence, so the
-- measured run does not replay requests a response cache already holds from the warm-up.
function bench_seed()
  math.randomseed(1000 + 7919 * (tid or 0) + (tonumber(os.getenv("BENCH_SEED_SALT") or "") or 0))
end

function bench_lines(var)
  local path = os.getenv(var)
  assert(path and #path > 0, var .. " is not set")
  local out = {}
  for line in io.lines(path) do
    if #line > 0 then out[#out + 1] = line end
  end
  assert(#out > 0, path .. " is empty")
  return out
end

function bench_urlencode(s)
  return (s:gsub("[^%w%-%._~]", function(c) return string.format("%%%02X", string.byte(c)) end))
end

BENCH_WORDS = {
  "lorem", "ipsum", "dolor", "sit", "amet", "consectetur", "adipiscing", "elit", "sed", "do", "eiusmod",
  "tempor", "incididunt", "ut", "labore", "et", "dolore", "magna", "aliqua", "enim", "ad", "minim",
  "veniam", "quis", "nostrud", "exercitation", "ullamco", "laboris", "nisi", "aliquip", "ex", "ea",
  "commodo", "consequat", "duis", "aute", "irure", "in", "reprehenderit", "voluptate", "velit", "esse",
  "cillum", "fugiat", "nulla", "pariatur", "excepteur", "sint", "occaecat", "cupidatat", "non",
  "proident", "sunt", "culpa", "qui", "officia", "deserunt", "mollit", "anim", "id", "est",
}

BENCH_RECORDS = "/api/collections/posts/records"

-- A small new post (about 200 bytes of JSON) owned by one of `owners`.
function bench_create_body(owners)
  local w1 = BENCH_WORDS[math.random(#BENCH_WORDS)]
  local w2 = BENCH_WORDS[math.random(#BENCH_WORDS)]
  return string.format(
    '{"title":"bench %s %s","body":"Written by the wrk create scenario: %s %s %s.","published":%s,"views":%d,"owner":"%s"}',
    w1, w2, w1, w2, BENCH_WORDS[math.random(#BENCH_WORDS)], math.random() < 0.5 and "true" or "false",
    math.random(0, 999), owners[math.random(#owners)])
end

function done(summary, latency, requests)
  local e = summary.errors
  local secs = summary.duration / 1e6
  io.write(string.format(
    'WRKJSON {"requests":%d,"duration_s":%.3f,"bytes":%d,' ..
    '"lat_mean_ms":%.3f,"lat_p50_ms":%.3f,"lat_p90_ms":%.3f,"lat_p95_ms":%.3f,"lat_p99_ms":%.3f,"lat_max_ms":%.3f,' ..
    '"err_connect":%d,"err_read":%d,"err_write":%d,"err_timeout":%d,"err_status":%d}\n',
    summary.requests, secs, summary.bytes,
    latency.mean / 1000, latency:percentile(50) / 1000, latency:percentile(90) / 1000,
    latency:percentile(95) / 1000, latency:percentile(99) / 1000, latency.max / 1000,
    e.connect, e.read, e.write, e.timeout, e.status))
end
