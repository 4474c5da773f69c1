#!/usr/bin/env bash
# Two nodes whose train.bucket_bytes differ (one would all-reduce two buckets, the other the
# whole buffer at once, or choose by itself with the default, auto) must both stop with an
# error, not hang or train on mixed-up sums, and
# the error must name the key: the election compares the configurations (ring_config.agree)
# before any all-reduce runs.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
write_conf "$tmp/c.ini" 2 10 <<EOF
$(mlp_train 784,32,10 1024 64 20)
[controller]
policy = static
EOF

# node 0 (rank 0, which logs its bucket count) cuts two buckets, node 1 has auto
timeout 60 "$HR" run --conf "$tmp/c.ini" --node 0 --quiet --set train.bucket_bytes=1024 \
  > "$tmp/n0.log" 2>&1 &
p0=$!
timeout 60 "$HR" run --conf "$tmp/c.ini" --node 1 --quiet > "$tmp/n1.log" 2>&1 &
p1=$!
wait $p0; rc0=$?
wait $p1; rc1=$?
echo "exit status: node 0 $rc0, node 1 $rc1"
[ $rc0 = 2 ] || fail "node 0 exited $rc0, expected 2 (a configuration error): $(tail -3 "$tmp/n0.log")"
[ $rc1 = 2 ] || fail "node 1 exited $rc1, expected 2 (a configuration error): $(tail -3 "$tmp/n1.log")"
n=$(cat "$tmp/n0.log" "$tmp/n1.log" | grep -c "has \[train\] bucket_bytes = ")
echo "$n line(s) name bucket_bytes"
grep -h "bucket_bytes" "$tmp/n0.log" "$tmp/n1.log" | head -2
[ "$n" -ge 2 ] || fail "no clear error on both nodes: $(tail -3 "$tmp/n0.log") / $(tail -3 "$tmp/n1.log")"
finish
