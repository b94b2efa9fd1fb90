-- sign_in: POST /api/collections/users/auth-with-password with the right password, cycling
-- through the users' emails in BENCH_EMAILS (one per line); BENCH_PASSWORD is their password.
dofile(os.getenv("BENCH_LUA_DIR") .. "/common.lua")
local emails = bench_lines("BENCH_EMAILS")
local password = os.getenv("BENCH_PASSWORD")
local n = 0
function init(args)
  n = ((tid or 0) * 17) % #emails
end
function request()
  n = n + 1
  local body = string.format('{"identity":"%s","password":"%s"}', emails[(n % #emails) + 1], password)
  return wrk.format("POST", "/api/collections/users/auth-with-password",
    { ["Content-Type"] = "application/json" }, body)
end
