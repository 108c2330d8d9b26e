-- The API key a request carries, for HAProxy (appdeck.ingress.haproxy.edge).
--
-- Map converters cannot look at every occurrence of a header, and the gate must refuse a
-- request whose key headers disagree (the app must never see a key other than the one
-- checked), so this one step is Lua; hashing, lookups, expiry and scope stay in the config.
-- The rules are those of appdeck.ingress.keys.presented_key, exactly:
--   X-API-Key: <key>               every occurrence, stripped
--   Authorization: Bearer adk_key_  only a bearer token with the key prefix; any other
--                                   Authorization value is the app's own and is kept
--   two different keys             "ambiguous"
--   none (or an empty X-API-Key)   "missing"
--   longer than MAX or no prefix   "invalid" (never hashed)
-- It sets txn.edge_key_state to one of those or "ok" (then txn.edge_key to the key) and
-- removes the headers that carried a key, so what is forwarded never holds one.
-- Run only for the routes that require a key (the config's condition).

local PREFIX = "adk_key_"
local MAX = 128

local function strip(s)
    return (s:gsub("^%s+", ""):gsub("%s+$", ""))
end

local function bearer(value)
    local v = strip(value)
    local space = v:find(" ", 1, true)
    if space == nil or v:sub(1, space - 1):lower() ~= "bearer" then
        return nil
    end
    local token = strip(v:sub(space + 1))
    if token:sub(1, #PREFIX) ~= PREFIX then
        return nil
    end
    return token
end

core.register_action("appdeck_key", { "http-req" }, function(txn)
    local headers = txn.http:req_get_headers()
    local found, ambiguous = nil, false
    local function see(candidate)
        if found ~= nil and candidate ~= found then
            ambiguous = true
        end
        found = candidate
    end
    for _, value in pairs(headers["x-api-key"] or {}) do
        see(strip(value))
    end
    local kept = {}
    for _, value in pairs(headers["authorization"] or {}) do
        local token = bearer(value)
        if token == nil then
            kept[#kept + 1] = value
        else
            see(token)
        end
    end
    txn.http:req_del_header("x-api-key")
    txn.http:req_del_header("authorization")
    for _, value in ipairs(kept) do
        txn.http:req_add_header("authorization", value)
    end
    local state = "ok"
    if ambiguous then
        state = "ambiguous"
    elseif found == nil or found == "" then
        state = "missing"
    elseif #found > MAX or found:sub(1, #PREFIX) ~= PREFIX then
        state = "invalid"
    else
        txn:set_var("txn.edge_key", found)
    end
    txn:set_var("txn.edge_key_state", state)
end)
