-- batch: POST /api/batch with 50 small creates of posts (the create scenario's bodies), in one
-- transaction. req/s counts batches; records/s is 50 times that.
dofile(os.getenv("BENCH_LUA_DIR") .. "/common.lua")
local owners = bench_lines("BENCH_OWNERS")
local headers = { ["Content-Type"] = "application/json" }
local per_batch = 50
function init(args)
  bench_seed()
end
function request()
  local items = {}
  for i = 1, per_batch do
    items[i] = string.format('{"method":"POST","url":"%s","body":%s}', BENCH_RECORDS, bench_create_body(owners))
  end
  return wrk.format("POST", "/api/batch", headers, '{"requests":[' .. table.concat(items, ",") .. ']}')
end
