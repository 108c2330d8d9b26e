-- The request body limit for a body whose size is not announced (chunked, or HTTP/2 without
-- Content-Length): HAProxy routes only such requests to a route's bc_<route> backend, whose
-- filter this is (a filter on every request costs about a third of HAProxy's throughput).
-- It counts the bytes as they pass (the body still streams to the app) and, past the limit,
-- fails the request: HAProxy answers 400, which the config turns into the 413 page.
AppDeckBodyLimit = {}
AppDeckBodyLimit.id = "appdeck body limit"
AppDeckBodyLimit.flags = filter.FLT_CFG_FL_HTX
AppDeckBodyLimit.__index = AppDeckBodyLimit

function AppDeckBodyLimit:new()
  return setmetatable({ seen = 0, limit = self.limit }, AppDeckBodyLimit)
end

function AppDeckBodyLimit:start_analyze(txn, chn)
  if not chn:is_resp() then
    filter.register_data_filter(self, chn)
  end
end

function AppDeckBodyLimit:http_payload(txn, msg)
  local n = msg:input()
  self.seen = self.seen + n
  if self.seen > self.limit then
    txn:set_var("txn.too_big", "413")
    error("the request body is over the limit")
  end
  msg:forward(n)
end

core.register_filter("appdeck_body_limit", AppDeckBodyLimit, function(f, args)
  f.limit = tonumber(args[1])
  return f
end)
