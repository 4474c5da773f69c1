#!/usr/bin/env bash
# test_bench_smoke.sh HETRING: the bench commands run end to end on tiny sizes and write what
# they promise. Not a timing test: it checks shape and correctness, never speed.
#   bench hetero    2 rounds of one scenario: JSON objects with the documented keys, medians
#                   over 2 runs, CSV per policy, report.md
#   bench allreduce 2 nodes, small sizes: every size correct (#wrong 0), JSON per size
set -u
HR=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

timeout 120 "$HR" bench hetero --out "$tmp/h" --json "$tmp/h.json" --iters 24 --batch 64 \
    --layers 784,16,10 --scenarios homogeneous,one-slow --policies model --repeat 2 > "$tmp/h.out" 2>&1 \
    || { fail "bench hetero exited $?"; cat "$tmp/h.out"; }
[ "$(grep -c '"scenario"' "$tmp/h.json" 2>/dev/null)" = 4 ] || fail "bench hetero: expected 4 JSON objects"
for key in scenario policy samples_per_s speedup_vs_static ideal_speedup rebalance_adjustments oscillation; do
    [ "$(grep -c "\"$key\"" "$tmp/h.json" 2>/dev/null)" = 4 ] || fail "bench hetero: key $key missing"
done
[ "$(grep -c '"runs": 2' "$tmp/h.json" 2>/dev/null)" = 4 ] || fail "bench hetero: not a median of 2 runs"
# the all-reduce and update take time after the slowest node's compute: a positive median
[ "$(grep -c '"sync_ms": [0-9]*\.[0-9]*[1-9]' "$tmp/h.json" 2>/dev/null)" = 4 ] ||
    fail "bench hetero: sync_ms missing or not positive"
grep -q '"ideal_speedup": 3.2500' "$tmp/h.json" || fail "bench hetero: one-slow ideal is not 3.25"
for f in homogeneous-static.csv homogeneous-model.csv one-slow-model.csv report.md; do
    [ -s "$tmp/h/$f" ] || fail "bench hetero: $f not written"
done
grep -q "median of 2 run" "$tmp/h/report.md" || fail "bench hetero: report does not say median of 2"

timeout 120 "$HR" bench allreduce --nodes 2 --min-bytes 4 --max-bytes 64K --iters 5 --rate 1 \
    --json "$tmp/a.json" > "$tmp/a.out" 2>&1 || { fail "bench allreduce exited $?"; cat "$tmp/a.out"; }
[ "$(grep -c '"bytes"' "$tmp/a.json" 2>/dev/null)" = 15 ] || fail "bench allreduce: expected 15 sizes (4 B..64 KiB)"
grep -q '"wrong": [1-9]' "$tmp/a.json" && fail "bench allreduce: a size had wrong results"
grep -q "# Avg bus bandwidth" "$tmp/a.out" || fail "bench allreduce: no average line"

cat "$tmp/h.out"
echo "$fails failure(s)"
[ "$fails" = 0 ]
