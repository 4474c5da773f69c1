#!/usr/bin/env bash
# Nodes whose configurations differ where they must agree (README "Elastic training"): the
# election names the differing key on both sides; a node that differs from the others stops
# at once, while the others train without it when they still make a quorum; keys that are
# local to a node (paths, deadlines, emulation) may differ.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cat > "$tmp/train" <<'EOF2'
[train]
layers = 784,16,10
samples = 4096
eval_samples = 64
global_batch = 48
iterations = 30
[controller]
policy = static
EOF2
write_conf "$tmp/c.ini" 3 5 < "$tmp/train"

# run NAME IDS... with per-node extra arguments in X0, X1, X2: each node on its own
run() {
  local name=$1 id
  shift
  pids=()
  for id in "$@"; do
    local xv="X$id"
    timeout 60 "$HR" run --conf "$tmp/c.ini" --node "$id" --quiet ${!xv:-} \
      > "$tmp/$name.$id.log" 2>&1 &
    pids[$id]=$!
  done
  for id in "$@"; do
    wait "${pids[$id]}"
    rc[$id]=$?
  done
}
declare -a rc pids

# 1. node 2 has another [train] samples: it stops, naming the key; 0 and 1 train on
X2="--set train.samples=3000" run one 0 1 2
echo "samples differ on node 2: exit status ${rc[0]} ${rc[1]} ${rc[2]}"
[ "${rc[2]}" != 0 ] || fail "node 2, whose samples differ, exited 0"
[ "${rc[0]}" = 0 ] && [ "${rc[1]}" = 0 ] || fail "nodes 0 and 1 (a quorum that agrees) did not finish"
grep -h "cannot train" "$tmp/one.2.log" | head -1
grep -q "node [01] has \[train\] samples = 4096, node 2 has 3000" "$tmp/one.2.log" ||
  fail "node 2 did not name the differing key: $(tail -2 "$tmp/one.2.log")"
grep -q "view [0-9]*: nodes 0,1;" "$tmp/one.0.log" || fail "nodes 0 and 1 did not form a view without node 2"

# 2. two nodes of two differ in hash_interval and bucket_bytes: both stop, naming both keys
write_conf "$tmp/c.ini" 2 5 < "$tmp/train"
X0="" X1="--set train.hash_interval=3 --set train.bucket_bytes=1024" run two 0 1
echo "hash_interval and bucket_bytes differ: exit status ${rc[0]} ${rc[1]}"
[ "${rc[0]}" != 0 ] && [ "${rc[1]}" != 0 ] || fail "two nodes that differ did not both stop"
for i in 0 1; do
  grep -q "hash_interval = " "$tmp/two.$i.log" && grep -q "bucket_bytes = " "$tmp/two.$i.log" ||
    fail "node $i did not name hash_interval and bucket_bytes: $(grep -h cannot "$tmp/two.$i.log")"
done

# 3. keys local to a node may differ
X0="--set train.eval_interval=7 --set cluster.timeout=9 --set node.0.slowdown=2" \
  X1="--set train.checkpoint=$tmp/x.ckpt --set node.1.slowdown=1.5" run three 0 1
echo "local keys differ: exit status ${rc[0]} ${rc[1]}"
[ "${rc[0]}" = 0 ] && [ "${rc[1]}" = 0 ] || fail "local keys that differ stopped the run: $(tail -2 "$tmp/three.0.log")"
finish
