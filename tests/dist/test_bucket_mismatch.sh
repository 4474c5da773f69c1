#!/usr/bin/env bash
# Two nodes whose train.bucket_bytes differ (one all-reduces two buckets, the other the whole
# buffer at once) must both stop with an error, not hang or train on mixed-up sums, and the
# error must say that the nodes disagree on the size of the all-reduce.
set -u
HR=$1
fails=0
fail() { echo "FAIL: $*"; fails=$((fails+1)); }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
base=$((10000 + RANDOM % 22000)) # below the ephemeral range (32768+)
{ printf '[cluster]\nsecurity = none\nconnect_timeout = 20\ntimeout = 10\n'
  printf '[train]\nlayers = 784,32,10\nsamples = 1024\neval_samples = 64\nglobal_batch = 64\n'
  printf 'iterations = 20\n[controller]\npolicy = static\n'
  for i in 0 1; do printf '[node.%d]\nhost = 127.0.0.1\nport = %d\n' $i $((base+i)); done; } > "$tmp/c.ini"

# node 0 (rank 0, which logs its bucket count) cuts two buckets, node 1 none
timeout 60 "$HR" run --conf "$tmp/c.ini" --node 0 --quiet --set train.bucket_bytes=1024 \
  > "$tmp/n0.log" 2>&1 &
p0=$!
timeout 60 "$HR" run --conf "$tmp/c.ini" --node 1 --quiet > "$tmp/n1.log" 2>&1 &
p1=$!
wait $p0; rc0=$?
wait $p1; rc1=$?
echo "exit status: node 0 $rc0, node 1 $rc1"
[ $rc0 = 1 ] || fail "node 0 exited $rc0, expected 1: $(tail -3 "$tmp/n0.log")"
[ $rc1 = 1 ] || fail "node 1 exited $rc1, expected 1: $(tail -3 "$tmp/n1.log")"
grep -q "gradients in 2 buckets" "$tmp/n0.log" || fail "node 0 did not use buckets: $(tail -3 "$tmp/n0.log")"
n=$(cat "$tmp/n0.log" "$tmp/n1.log" | grep -c "nodes disagree on the size of this all-reduce")
echo "$n line(s) say the nodes disagree on the size of the all-reduce"
grep -h "disagree" "$tmp/n0.log" "$tmp/n1.log" | head -2
[ "$n" -ge 1 ] || fail "no clear error: $(tail -3 "$tmp/n0.log") / $(tail -3 "$tmp/n1.log")"
echo "$fails failure(s)"
[ "$fails" = 0 ]
