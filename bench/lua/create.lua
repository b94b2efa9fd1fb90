-- create: POST /api/collections/posts/records with a small JSON post (owner: a random seeded user).
dofile(os.getenv("BENCH_LUA_DIR") .. "/common.lua")
local owners = bench_lines("BENCH_OWNERS")
local headers = { ["Content-Type"] = "application/json" }
function init(args)
  bench_seed()
end
function request()
  return wrk.format("POST", BENCH_RECORDS, headers, bench_create_body(owners))
end
