#!/usr/bin/env bash
# Two nodes whose train.bucket_bytes differ (one all-reduces two buckets, the other the whole
# buffer at once) must both stop with an error, not hang or train on mixed-up sums, and the
# error must say that the nodes disagree on the size of the all-reduce.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
write_conf "$tmp/c.ini" 2 10 <<'EOF'
[train]
layers = 784,32,10
samples = 1024
eval_samples = 64
global_batch = 64
iterations = 20
[controller]
policy = static
EOF

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
finish
