-- wrong_sign_in: the attackers of list_during_wrong_sign_ins. POST auth-with-password with a
-- wrong password, cycling through the users' emails in BENCH_EMAILS; counts the answers by
-- status and prints them (a WRKSTATUS line) before the usual WRKJSON summary.
dofile(os.getenv("BENCH_LUA_DIR") .. "/common.lua")
local emails = bench_lines("BENCH_EMAILS")
local summary_line = done
local all = {}
local count_thread = setup
function setup(thread)
  count_thread(thread)
  all[#all + 1] = thread
end
local n = 0
function init(args)
  n = ((tid or 0) * 17) % #emails
end
function request()
  n = n + 1
  local body = string.format('{"identity":"%s","password":"not-the-password-%d"}', emails[(n % #emails) + 1], n)
  return wrk.format("POST", "/api/collections/users/auth-with-password",
    { ["Content-Type"] = "application/json" }, body)
end
s429, s400, sother = 0, 0, 0
function response(status, headers, body)
  if status == 429 then
    s429 = s429 + 1
  elseif status == 400 then
    s400 = s400 + 1
  else
    sother = sother + 1
  end
end
function done(summary, latency, requests)
  local a, b, c = 0, 0, 0
  for _, t in ipairs(all) do
    a = a + t:get("s429")
    b = b + t:get("s400")
    c = c + t:get("sother")
  end
  io.write(string.format('WRKSTATUS {"s429":%d,"s400":%d,"other":%d}\n', a, b, c))
  summary_line(summary, latency, requests)
end
