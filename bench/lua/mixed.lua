-- mixed_90_10: 45% default list, 45% view by id (ids from BENCH_IDS), 10% create.
dofile(os.getenv("BENCH_LUA_DIR") .. "/common.lua")
local ids = bench_lines("BENCH_IDS")
local owners = bench_lines("BENCH_OWNERS")
local headers = { ["Content-Type"] = "application/json" }
function init(args)
  bench_seed()
end
function request()
  local r = math.random()
  if r < 0.45 then
    return wrk.format("GET", BENCH_RECORDS)
  elseif r < 0.90 then
    return wrk.format("GET", BENCH_RECORDS .. "/" .. ids[math.random(#ids)])
  end
  return wrk.format("POST", BENCH_RECORDS, headers, bench_create_body(owners))
end
