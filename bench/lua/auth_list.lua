-- list_auth_rule: GET /api/collections/private_posts/records (listRule "owner = @request.auth.id")
-- as one of several users, cycling through the bearer tokens in BENCH_TOKENS (one per line).
dofile(os.getenv("BENCH_LUA_DIR") .. "/common.lua")
local tokens = bench_lines("BENCH_TOKENS")
local n = 0
function init(args)
  n = (tid or 0) % #tokens
end
function request()
  n = n + 1
  return wrk.format("GET", "/api/collections/private_posts/records",
    { ["Authorization"] = tokens[(n % #tokens) + 1] })
end
