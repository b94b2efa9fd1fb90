-- view: GET /api/collections/posts/records/<id>, cycling through the ids in BENCH_IDS;
-- each wrk thread starts at a different offset.
dofile(os.getenv("BENCH_LUA_DIR") .. "/common.lua")
local ids = bench_lines("BENCH_IDS")
local n = 0
function init(args)
  n = ((tid or 0) * 7919) % #ids
end
function request()
  n = n + 1
  return wrk.format("GET", BENCH_RECORDS .. "/" .. ids[(n % #ids) + 1])
end
