-- filter_sort: a filtered and sorted list whose filter values change on every request:
--   GET /api/collections/posts/records?filter=(views > N && title ~ 'word')&sort=-views
-- N uniform in 0..999, word from the seed vocabulary (titles are "Post i: word word").
dofile(os.getenv("BENCH_LUA_DIR") .. "/common.lua")
function init(args)
  bench_seed()
end
function request()
  local f = string.format("views > %d && title ~ '%s'", math.random(0, 999), BENCH_WORDS[math.random(#BENCH_WORDS)])
  return wrk.format("GET", BENCH_RECORDS .. "?filter=" .. bench_urlencode(f) .. "&sort=-views")
end
