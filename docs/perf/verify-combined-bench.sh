#!/bin/bash
# interleaved old/new auditd-bench verify, 1M events / 100k keys
cd "${1:-.}"  # holds d1m, bench-old (ab9df0a), bench-new
PG="postgres://postgres@127.0.0.1:5432/test?sslmode=disable&search_path=h1"
for round in 1 2 3; do
  for bin in old new; do
    for mode in local remote; do
      for drift in "" "-drift"; do
        args=""
        [ $mode = local ] && args="-local"
        echo "=== round $round bin $bin mode $mode drift '$drift' $(cat /proc/loadavg)"
        ./bench-$bin verify -data-dir d1m -pg "$PG" -runs 3 $args $drift 2>&1 | grep -E "verify: run|median" | sed -E 's/requests: .*//'
      done
    done
  done
done
echo ALLDONE
