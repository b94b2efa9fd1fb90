-- upload: POST a multipart create carrying one file of BENCH_UPLOAD_BYTES bytes (default 1 MiB)
-- to the URL given to wrk. The body is built once; every request sends the same bytes.
dofile(os.getenv("BENCH_LUA_DIR") .. "/common.lua")
local size = tonumber(os.getenv("BENCH_UPLOAD_BYTES") or "1048576")
local boundary = "----ferrobase-bench-upload"
local chunk = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-_"
local payload = string.rep(chunk, math.floor(size / #chunk)) .. string.sub(chunk, 1, size % #chunk)
wrk.method = "POST"
wrk.headers["Content-Type"] = "multipart/form-data; boundary=" .. boundary
wrk.body = "--" .. boundary .. "\r\n"
  .. "Content-Disposition: form-data; name=\"f\"; filename=\"upload.bin\"\r\n"
  .. "Content-Type: application/octet-stream\r\n\r\n"
  .. payload .. "\r\n--" .. boundary .. "--\r\n"

