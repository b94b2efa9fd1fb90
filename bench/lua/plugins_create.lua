-- plugins create: POST /api/collections/posts/records with {"title":"Hello World <n>"} only; the
-- slugger plugin (when loaded) makes the slug. Titles are unique per run (BENCH_NONCE), thread and request.
dofile(os.getenv("BENCH_LUA_DIR") .. "/common.lua")
local headers = { ["Content-Type"] = "application/json" }
local nonce = os.getenv("BENCH_NONCE") or "0"
local n = 0
function request()
  n = n + 1
  return wrk.format("POST", BENCH_RECORDS, headers,
    string.format('{"title":"Hello World %s %d %d"}', nonce, tid or 0, n))
end
