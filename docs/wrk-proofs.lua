-- wrk script: random inclusion proofs against a 10,000,000-entry log named "bench".
--   wrk -t2 -c32 -d20s -s docs/wrk-proofs.lua http://127.0.0.1:8080
-- Load the log first with: go run ./cmd/auditd-bench proofs -events 10000000 -data-dir DIR
-- (then run `auditd serve --data-dir DIR`). Change size to your log's size.
local size = 10000000
math.randomseed(os.time())
request = function()
  return wrk.format("GET", "/v1/logs/bench/proof/inclusion?index=" .. math.random(0, size - 1) .. "&size=" .. size)
end
