-- wrk script for `npm run bench`: a login storm of wrong passwords.
-- Every request comes from a new client address (X-Forwarded-For through a
-- trusted proxy), so the per-address limit never answers instead of the
-- password check. Odd requests name one of the existing users victim-0 ..
-- victim-<V-1> (V = the script's first argument; each is named fewer than 5
-- times, so the per-username backoff does not answer either), even requests
-- a new unknown name. Prints "STORM checked=<401 INVALID_CREDENTIALS> other=<anything else>".
local threads = {}

function setup(thread)
  thread:set("tid", #threads)
  table.insert(threads, thread)
end

function init(args)
  victims = tonumber(args[1]) or 0
  n = 0
  checked = 0
  other = 0
end

function request()
  n = n + 1
  local k = tid * 1000000 + n
  local ip = string.format("10.%d.%d.%d", tid + 1, math.floor(k / 256) % 256, k % 256)
  local username
  if victims > 0 and n % 2 == 1 then
    username = string.format("victim-%d", (math.floor(n / 2) + tid * 37) % victims)
  else
    username = string.format("storm-%d", k)
  end
  local body = string.format('{"username":"%s","password":"wrong-password-123"}', username)
  return wrk.format("POST", "/login", { ["Content-Type"] = "application/json", ["Accept"] = "application/json", ["X-Forwarded-For"] = ip }, body)
end

function response(status, headers, body)
  if status == 401 and string.find(body, "INVALID_CREDENTIALS", 1, true) then
    checked = checked + 1
  else
    other = other + 1
  end
end

function done(summary, latency, requests)
  local c, o = 0, 0
  for _, t in ipairs(threads) do
    c = c + t:get("checked")
    o = o + t:get("other")
  end
  io.write(string.format("STORM checked=%d other=%d\n", c, o))
end
