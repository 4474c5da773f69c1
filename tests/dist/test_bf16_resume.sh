#!/usr/bin/env bash
# The bf16 wire's error-feedback residual in checkpoints ([cluster] wire = bf16, DESIGN.md's
# bf16 path): three nodes, static batches (B/N each: the split is the same in every run).
#  1. the reference: 120 iterations in one run;
#  2. the same job cut in two: 60 iterations, every node writing its checkpoint at the end
#     (which records its residual, with its id) to its own file ({id} in the path), then the three resumed from their own
#     checkpoints up to 120. Every node says it took its residual up again, and the three end
#     with the reference's parameters, bit for bit: an iteration after the cut that lacked a
#     node's residual would have sent another gradient;
#     The same 60 iterations with node 1's view failing after its all-reduce of iteration 30
#     (the others applied it, node 1 takes their state) end there too: node 1's residual is
#     that step's, not the one its share already carried;
#  3. node 1 resumes from node 0's checkpoint (a copy: disks not shared): it must not take up
#     node 0's residual (node 0's roundings dropped it, and node 0 takes it up itself), and says
#     so; a float32 run resumed from a checkpoint with a residual says it has no use for it.
#  4. the three nodes share one file (no {id} in [train] checkpoint): each warns at start, and
#     resumed, one of them (the last writer) takes its residual up, the other two none;
#  5. the nodes write a checkpoint every 10 iterations and all crash (SIGKILL) at iteration 25;
#     started again, the cluster resumes at 20 and each node takes its residual of iteration 20
#     up again (nothing after it was applied); then node 2 alone crashes at 25 while the others
#     go on: restarted from its checkpoint of 20, it joins a cluster past 20, which applied
#     the step that held that residual, and it must not take it up (it would count twice)
# With WIRE=powersgd the same for the low-rank wire, whose checkpoints also hold Q (replicated:
# every node takes it up, whoever wrote it); without Q the resumed job would start Q from the
# seed and end elsewhere than the uninterrupted one.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
WIRE=${WIRE:-bf16}
write_conf "$tmp/c.ini" 3 20 <<EOF
wire = $WIRE
$(mlp_train 784,64,10 2048 48 120)
seed = 11
hash_interval = 1
[controller]
policy = static
EOF

# run NAME ITERS [ARGS...]: the three nodes to the end, each with checkpoint $tmp/NAME.ID.ckpt
# ({id} in [train] checkpoint becomes the node's id)
run() {
  local name=$1 iters=$2
  shift 2
  run_nodes "$name" --set train.iterations="$iters" --set train.checkpoint="$tmp/$name.{id}.ckpt" "$@"
}
# hash NAME ID: node ID's last parameter hash in run NAME
hash() { grep -ho '"param_hash":"[0-9a-f]*"' "$tmp/$1.m$2" | tail -1; }

run ref 120
grep -q "gradient path: $WIRE" "$tmp/ref.0.log" || fail "the reference does not send $WIRE: $(grep -h 'gradient path' "$tmp/ref.0.log")"
ref=$(hash ref 0)
echo "reference, 120 iterations in one run: $ref"

run cut 60
for id in 0 1 2; do
  cp "$tmp/cut.$id.ckpt" "$tmp/res.$id.ckpt"
  cp "$tmp/cut.$id.ckpt" "$tmp/keep.$id.ckpt"
done

# node 1's view fails once its all-reduce of iteration 30 is in (test fault fail_view): nodes 0
# and 2 applied the step, with node 1's share and the residual that share carried, and node 1
# takes their state at 31. Its residual is then what that step's roundings dropped, as in the
# run without the fault, not the one its share already carried (that would count it twice), so
# with bf16 the run ends on the 60-iteration run's parameters, bit for bit (powersgd starts Q
# again at the new view: only the replicas' agreement)
HETRING_FAULT=fail_view:1:30 run fv 60
grep -q "test fault: the view failed" "$tmp/fv.1.log" || fail "fail_view: the fault did not fire"
echo "60 iterations without the fault: $(hash cut 0)"
for id in 0 1 2; do
  h=$(hash fv $id)
  echo "view failed after node 1's all-reduce of 30, node $id: $h"
  if [ "$WIRE" = bf16 ]; then
    [ -n "$h" ] && [ "$h" = "$(hash cut 0)" ] ||
      fail "fail_view: node $id ends with other parameters than the run without the fault ($h, $(hash cut 0))"
  else
    [ -n "$h" ] && [ "$h" = "$(hash fv 0)" ] || fail "fail_view: node $id ends with other parameters than node 0"
  fi
done
run res 120
for id in 0 1 2; do
  grep -h "resumed from checkpoint\|error-feedback residual" "$tmp/res.$id.log" | cut -c1-160
  grep -q "resumed from checkpoint .* at iteration 60" "$tmp/res.$id.log" || fail "node $id did not resume at iteration 60"
  grep -q "resumed this node's error-feedback residual from the checkpoint" "$tmp/res.$id.log" ||
    fail "node $id did not take its residual up again"
  if [ "$WIRE" = powersgd ]; then
    grep -q "resumed the powersgd Q from the checkpoint" "$tmp/res.$id.log" || fail "node $id did not take Q up"
  fi
  h=$(hash res $id)
  echo "cut at 60 and resumed, node $id: $h"
  [ -n "$h" ] && [ "$h" = "$ref" ] || fail "node $id ends with other parameters than the uninterrupted run ($h, $ref)"
done

# node 1 starts from node 0's checkpoint: not node 1's residual
cp "$tmp/keep.0.ckpt" "$tmp/other.0.ckpt"
cp "$tmp/keep.0.ckpt" "$tmp/other.1.ckpt"
cp "$tmp/keep.2.ckpt" "$tmp/other.2.ckpt"
run other 70
grep -h "error-feedback residual" "$tmp/other.1.log" | cut -c1-160
grep -q "the checkpoint's error-feedback residual is node 0's, not this node's: starting without one" "$tmp/other.1.log" ||
  fail "node 1 took up node 0's residual, or did not say it left it"
grep -q "resumed this node's error-feedback residual" "$tmp/other.1.log" && fail "node 1 took up a residual"
grep -q "resumed this node's error-feedback residual" "$tmp/other.0.log" || fail "node 0 did not take its own residual up"
if [ "$WIRE" = powersgd ]; then # Q is the same in every node's checkpoint: node 1 takes node 0's
  grep -q "resumed the powersgd Q from the checkpoint" "$tmp/other.1.log" || fail "node 1 did not take Q up"
fi

# periodic checkpoints, then a crash of every node at iteration 25: the cluster resumes at 20,
# and every node takes its residual of 20 up again
pids=()
for id in 0 1 2; do
  HETRING_FAULT='crash:*:25' timeout 120 "$HR" run --conf "$tmp/c.ini" --node $id --quiet \
    --set train.iterations=40 --set train.checkpoint="$tmp/per.$id.ckpt" \
    --set train.checkpoint_interval=10 --metrics "$tmp/per.m$id" > "$tmp/per.$id.log" 2>&1 &
  pids[$id]=$!
done
for id in 0 1 2; do
  wait "${pids[$id]}"
  rc=$?
  [ "$rc" = 137 ] || fail "periodic: node $id exited $rc, expected to crash (137): $(tail -2 "$tmp/per.$id.log")"
done
run per 40 --set train.checkpoint_interval=10
for id in 0 1 2; do
  grep -h "resumed from checkpoint\|error-feedback residual\|powersgd Q" "$tmp/per.$id.log" | cut -c1-200
  grep -q "resumed from checkpoint .* at iteration 20" "$tmp/per.$id.log" || fail "periodic: node $id did not resume at iteration 20"
  grep -q "resumed this node's error-feedback residual" "$tmp/per.$id.log" ||
    fail "periodic: node $id did not take its residual of iteration 20 up again"
done

# node 2 alone crashes at 25 (its checkpoint of 20 holds its residual) and is started again
# while nodes 0 and 1 go on (slowed, so that they are still running): it joins past 20
pids=()
for id in 0 1 2; do
  f=sleep:*:0.05
  [ $id = 2 ] && f=$f,crash:2:25
  HETRING_FAULT=$f timeout 120 "$HR" run --conf "$tmp/c.ini" --node $id --quiet \
    --set train.iterations=80 --set train.checkpoint="$tmp/one.$id.ckpt" \
    --set train.checkpoint_interval=10 --metrics "$tmp/one.m$id" > "$tmp/one.$id.log" 2>&1 &
  pids[$id]=$!
done
wait "${pids[2]}"
HETRING_FAULT=sleep:*:0.05 timeout 120 "$HR" run --conf "$tmp/c.ini" --node 2 --quiet \
  --set train.iterations=80 --set train.checkpoint="$tmp/one.2.ckpt" \
  --set train.checkpoint_interval=10 --metrics "$tmp/one.m2b" > "$tmp/one.2b.log" 2>&1 &
pids[3]=$!
for k in 0 1 3; do wait "${pids[$k]}" || fail "one crash: a node failed (wait $k)"; done
grep -h "resumed from checkpoint\|error-feedback residual\|powersgd Q\|not taken up" "$tmp/one.2b.log" | cut -c1-240
grep -q "resumed from checkpoint .* at iteration 20" "$tmp/one.2b.log" || fail "one crash: node 2 did not resume at 20"
grep -q "the cluster is at iteration [0-9]*, past the checkpoint's 20: .* so it is not taken up" "$tmp/one.2b.log" ||
  fail "one crash: node 2 did not say it leaves the residual of iteration 20"
grep -q "resumed this node's error-feedback residual" "$tmp/one.2b.log" &&
  fail "one crash: node 2 took up a residual that its first life sent after iteration 20"
hashes=$(for f in one.m0 one.m1 one.m2b; do grep -ho '"param_hash":"[0-9a-f]*"' "$tmp/$f" | tail -1; done | sort -u | wc -l)
[ "$hashes" = 1 ] || fail "one crash: the nodes end with $hashes parameter hashes"

# one file for the three nodes of this host (no {id}): each says at start that it keeps one
# node's residual alone; resumed from it, exactly one node takes its residual up again and the
# other two say that it is another node's and start without one (nothing counted twice)
run_nodes shared --set train.iterations=30 --set train.checkpoint="$tmp/shared.ckpt"
for id in 0 1 2; do
  grep -q "checkpoint = .*/shared.ckpt has no {id}, and the other nodes on this machine (host 127.0.0.1) write that file too" \
    "$tmp/shared.$id.log" || fail "shared file: node $id did not warn: $(grep -h 'has no {id}' "$tmp/shared.$id.log")"
done
run_nodes shared2 --set train.iterations=35 --set train.checkpoint="$tmp/shared.ckpt"
took=$(grep -l "resumed this node's error-feedback residual" "$tmp"/shared2.?.log | wc -l)
others=$(grep -l "error-feedback residual is node [0-9]*'s, not this node's: starting without one" "$tmp"/shared2.?.log | wc -l)
echo "shared file, resumed: $took node(s) took their residual up, $others started without one"
[ "$took" = 1 ] && [ "$others" = 2 ] || fail "shared file: $took node(s) took a residual up, $others left another's (expected 1 and 2)"

# a float32 run has no use for it
cp "$tmp/keep.0.ckpt" "$tmp/f32.0.ckpt"
cp "$tmp/keep.1.ckpt" "$tmp/f32.1.ckpt"
cp "$tmp/keep.2.ckpt" "$tmp/f32.2.ckpt"
run f32 65 --set cluster.wire=fp32
grep -q "the checkpoint holds an error-feedback residual; \[cluster\] wire = fp32 has no use for it" "$tmp/f32.0.log" ||
  fail "a float32 run does not say it leaves the residual: $(grep -h residual "$tmp/f32.0.log")"
if [ "$WIRE" = powersgd ]; then
  grep -q "the checkpoint holds a powersgd Q; \[cluster\] wire = fp32 has no use for it" "$tmp/f32.0.log" ||
    fail "a float32 run does not say it leaves Q"
fi
finish
