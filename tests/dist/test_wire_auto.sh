#!/usr/bin/env bash
# [cluster] wire = auto on a three-node loopback cluster (the MLP 784-512-512-10: 2.7 MB of
# gradient, 54x fewer floats at rank 4). Loopback is fast, so wire_auto_gbit = 1e6 stands in
# for a slow link: whatever the machine's load, the measured bus bandwidth is below it, and
# auto must take powersgd once the view's float32 all-reduce is measured: rank 0 says so with
# the figures it chose from, the gradient path goes from float32 (whole or tree) to powersgd
# within the view, every node ends with the same parameters (I4) and records every
# iteration once (I8), and the loss falls. Then a model with nothing to compress (784-16-10
# at powersgd_rank = 64, which halves no matrix) stays float32 with the same wire_auto_gbit,
# and says why. The rule itself is trainer.overlap's table. And a skipped powersgd step before a
# view change leaves no NaN residual behind.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ITERS=40
B=64
write_conf "$tmp/c.ini" 3 20 <<EOF
wire = auto
wire_auto_gbit = 1000000
$(mlp_train 784,512,512,10 2048 "$B" "$ITERS")
hash_interval = 1
[controller]
policy = static
EOF

run_nodes auto --set train.bucket_bytes=0 # chosen again for the wire alone
grep -h "wire = auto\|gradient path" "$tmp/auto.0.log" | cut -c1-240
grep -q "train: wire = auto: powersgd; the all-reduce of 2.68 MB took" "$tmp/auto.0.log" ||
  fail "auto did not say it took powersgd"
paths=$(grep -ho "gradient path: [a-z]*" "$tmp/auto.0.log" | tr '\n' ' ')
case "$paths" in
  "gradient path: whole gradient path: powersgd " | "gradient path: tree gradient path: powersgd ") ;;
  *) fail "the paths were '$paths', expected float32 then powersgd" ;;
esac
hashes=$(for id in 0 1 2; do grep -ho '"param_hash":"[0-9a-f]*"' "$tmp/auto.m$id" | tail -1; done | sort -u | wc -l)
[ "$hashes" = 1 ] || fail "the nodes end with $hashes different parameter hashes"
records_exactly_once "nodes 0 1 2" "$tmp"/auto.m0 "$tmp"/auto.m1 "$tmp"/auto.m2
first=$(grep -o '^{"iter":0,[^}]*"loss":[0-9.e-]*' "$tmp/auto.m0" | grep -o '[0-9.e-]*$')
last=$(grep -o '^{"iter":39,[^}]*"loss":[0-9.e-]*' "$tmp/auto.m0" | grep -o '[0-9.e-]*$')
echo "loss: iteration 0 $first, iteration 39 $last"
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < 0.8 * a) }' || fail "the loss did not fall"

# a skipped powersgd step (node 1's gradient NaN at iteration 10, nonfinite = skip) whose
# boundary is a view change (node 2 leaves after it): the new view's first step is float32 and
# must not take the skipped step's dropped part (NaN) as its residual, which made every later
# step NaN and skipped
HETRING_FAULT=nan_grad:1:10,leave:2:10 run_nodes skipleave --set train.bucket_bytes=0 \
  --set train.nonfinite=skip --set train.iterations=20
grep -q "gradient path: powersgd" "$tmp/skipleave.0.log" || fail "skipleave: powersgd never chosen"
grep -q "node 2 left at iteration 11" "$tmp/skipleave.0.log" || fail "skipleave: node 2 did not leave at 11"
for id in 0 1; do
  got=$(grep '"skipped":1' "$tmp/skipleave.m$id" | grep -o '^{"iter":[0-9]*' | grep -o '[0-9]*$' | tr '\n' ' ')
  echo "skipleave: node $id skipped iterations: $got"
  [ "$got" = "10 " ] || fail "skipleave: node $id skipped '$got', expected '10 '"
done
hashes=$(for id in 0 1; do grep -ho '"param_hash":"[0-9a-f]*"' "$tmp/skipleave.m$id" | tail -1; done | sort -u | wc -l)
[ "$hashes" = 1 ] || fail "skipleave: nodes 0 and 1 end with $hashes different parameter hashes"

run_nodes none --set train.layers=784,16,10 --set cluster.powersgd_rank=64
grep -q "wire = auto: float32; powersgd would send" "$tmp/none.0.log" ||
  fail "with nothing to compress auto does not say it keeps float32: $(grep -h 'wire = auto' "$tmp/none.0.log")"
grep -q "gradient path: powersgd" "$tmp/none.0.log" && fail "auto took powersgd with nothing to compress"
finish
