-- GET the URL given to wrk, unchanged (list_1k, list_1k_skiptotal, list_100k, list_100k_skiptotal, ceiling).
dofile(os.getenv("BENCH_LUA_DIR") .. "/common.lua")
