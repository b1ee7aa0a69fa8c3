#!/bin/bash
# Interleaved rounds: old remote, new remote, new remote warm cache, new local; then with one drifted key.
cd /tmp/h2bulk
PG='postgres://postgres@127.0.0.1:5432/test?sslmode=disable&search_path=h2bulk'
run() { # label cmd...
  local label=$1; shift
  local line
  line=$(/usr/bin/time -f "proc %e wall %U user %S sys" "$@" 2>&1 | grep -E "run 1:|^proc " | sed -E 's/requests: .*//' | tr '\n' ' ')
  echo "$label | $line" >> results.txt
}
rm -rf cache; ./bin/bench-new verify -data-dir d1m -pg "$PG" -runs 1 -cache-dir cache > warmup.log 2>&1
du -sb cache > cache-size.txt; find cache -name '*.bundle' | wc -l >> cache-size.txt
echo "start $(date -u)" >> results.txt
for round in 1 2 3; do
  run "r$round old-remote" ./bin/bench-old verify -data-dir d1m -pg "$PG" -runs 1
  run "r$round new-remote" ./bin/bench-new verify -data-dir d1m -pg "$PG" -runs 1
  run "r$round new-warm" ./bin/bench-new verify -data-dir d1m -pg "$PG" -runs 1 -cache-dir cache
  run "r$round local" ./bin/bench-new verify -data-dir d1m -pg "$PG" -runs 1 -local
done
for round in 1 2 3; do
  run "r$round drift-new-remote" ./bin/bench-new verify -data-dir d1m -pg "$PG" -runs 1 -drift
  run "r$round drift-new-warm" ./bin/bench-new verify -data-dir d1m -pg "$PG" -runs 1 -cache-dir cache -drift
  run "r$round drift-local" ./bin/bench-new verify -data-dir d1m -pg "$PG" -runs 1 -local -drift
  run "r$round drift-new-jsonpages" ./bin/bench-new verify -data-dir d1m -pg "$PG" -runs 1 -drift -json-pages
done
echo "end $(date -u)" >> results.txt
