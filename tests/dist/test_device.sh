#!/usr/bin/env bash
# A GPU node among CPU nodes (DESIGN.md, "The GPU path"), its GPU the host emulation of the test
# hooks (trainer/device.h: separate device buffers, copies and kernels completed late on a worker
# thread, host copies poisoned with NaN while stale).
# usage: test_device.sh HETRING
#   bitwise  3 nodes, static split, hash_interval = 1: node 1 with device = cuda:0 (emulated,
#            each operation 1 ms late) ends with parameters bitwise equal to the same run on
#            three CPU nodes, and every node's final hash is the same (I4 at every iteration);
#            so does a run where nodes 0 and 2 are the GPU nodes
#   eval     the held-out figures of the mixed run are the all-CPU run's
# The emulation computes with the CPU layers, so a missing synchronisation (a parameter hash of
# a stale host copy, a state sent before the device's came back) shows as a NaN or a hash that
# differs, never as a pass.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ITERS=40

# conf FILE GPU-IDS...: 3 nodes, the given ones with device = cuda:0
conf() {
  local f=$1 id
  shift
  write_conf "$f" 3 20 <<EOT
[train]
layers = 784,32,10
samples = 2048
eval_samples = 256
global_batch = 48
iterations = $ITERS
lr = 0.05
momentum = 0.9
weight_decay = 0.0005
hash_interval = 1
[controller]
policy = static
EOT
  for id in "$@"; do sed -i "/^\[node\.$id\]\$/a device = cuda:0" "$f"; done
}

# run NAME FAULTS: the 3 nodes of $tmp/NAME.ini, each with HETRING_FAULT=FAULTS; all exit 0
run() {
  local name=$1 faults=$2 id pids=()
  for id in 0 1 2; do
    HETRING_FAULT=$faults timeout 120 "$HR" run --conf "$tmp/$name.ini" --node $id --quiet \
      --metrics "$tmp/$name-$id.jsonl" --summary "$tmp/$name-$id.json" > "$tmp/$name-$id.log" 2>&1 &
    pids+=($!)
  done
  for id in 0 1 2; do
    wait "${pids[$id]}" || fail "$name: node $id failed: $(tail -3 "$tmp/$name-$id.log")"
  done
}

# end_hash NAME ID: node ID's final parameter hash
end_hash() {
  grep '"event":"end"' "$tmp/$1-$2.jsonl" | grep -o '"param_hash":"[0-9a-f]*"' | cut -d'"' -f4
}

conf "$tmp/cpu.ini"
conf "$tmp/mixed.ini" 1
conf "$tmp/two.ini" 0 2
run cpu ""
run mixed "emu_device:1:1"
run two "emu_device:0:1,emu_device:2:1"
grep -q "cuda:0 is emulated" "$tmp/mixed-1.log" || fail "node 1 did not say its GPU is emulated"
ref=$(end_hash cpu 0)
[ -n "$ref" ] || fail "the all-CPU run wrote no final hash"
echo "all-CPU final hash $ref"
for name in cpu mixed two; do
  for id in 0 1 2; do
    h=$(end_hash $name $id)
    [ "$h" = "$ref" ] || fail "$name: node $id ends with parameters $h, the all-CPU run with $ref"
  done
done
# the held-out loss of the end (rank 0's summary): the same bits on the same parameters
for name in mixed two; do
  a=$(grep -o '"eval_loss":[^,}]*' "$tmp/cpu-0.json") b=$(grep -o '"eval_loss":[^,}]*' "$tmp/$name-0.json")
  [ -n "$a" ] && [ "$a" = "$b" ] || fail "$name: held-out $b, the all-CPU run $a"
done
echo "GPU nodes (emulated) end bitwise where the all-CPU cluster does: $(end_hash mixed 1)"
finish
