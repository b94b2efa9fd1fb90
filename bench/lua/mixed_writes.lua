-- mixed_1m_w5, mixed_1m_w20, mixed_1m_w20_indexed, mixed_1m_w20_filtered: BENCH_WRITE_PCT% creates
-- (the realistic case: every write invalidates cached lists); the reads are half the SDK's list
-- (BENCH_LIST_QUERY, by default sort=-created, with its total), half a view by id (ids from
-- BENCH_IDS).
dofile(os.getenv("BENCH_LUA_DIR") .. "/common.lua")
local ids = bench_lines("BENCH_IDS")
local owners = bench_lines("BENCH_OWNERS")
local writes = tonumber(os.getenv("BENCH_WRITE_PCT") or "")
assert(writes and writes >= 0 and writes <= 100, "BENCH_WRITE_PCT is not a percentage")
writes = writes / 100
local list = BENCH_RECORDS .. (os.getenv("BENCH_LIST_QUERY") or "?sort=-created")
local headers = { ["Content-Type"] = "application/json" }
function init(args)
  bench_seed()
end
function request()
  local r = math.random()
  if r < writes then
    return wrk.format("POST", BENCH_RECORDS, headers, bench_create_body(owners))
  elseif r < writes + (1 - writes) / 2 then
    return wrk.format("GET", list)
  end
  return wrk.format("GET", BENCH_RECORDS .. "/" .. ids[math.random(#ids)])
end
