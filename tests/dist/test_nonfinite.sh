#!/usr/bin/env bash
# [train] nonfinite: a node's share turns NaN (test fault nan_grad:NODE:ITER, or its loss,
# nan_loss), or every share is finite and their sum overflows (big_grad). With error (the
# default) every node stops at that iteration naming it and the culprit, and no node records it
# (nothing was trained on NaN); with skip the run ends, every node records each iteration once,
# the skipped ones with "skipped":1, the replicas end equal, and a skipped step changed nothing:
# 6 iterations skipping the last end on the bits of the clean 5. A node alone does the same
# with its own sums (a learning rate that diverges); a diverged run that skips stops at the
# [train] nonfinite_limit-th step in a row not finite (10 alone; 3 on three nodes, every node
# at the same iteration), and goes on to its end with nonfinite_limit = 0.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ITERS=12 B=60
write_conf "$tmp/c.ini" 3 20 <<EOF
$(mlp_train 784,16,10 2048 "$B" "$ITERS")
hash_interval = 1
[controller]
policy = static
EOF

# records NAME ID: node ID's iteration records as "iter:skipped" lines
records() { grep -o '^{"iter":[0-9]*\|"skipped":[01]' "$tmp/$1-$2.jsonl" 2>/dev/null | paste -d' ' - - |
  sed 's/{"iter":\([0-9]*\) "skipped":\([01]\)/\1:\2/'; }

# run_nodes NAME FAULT [ENV...]: each node started on its own with HETRING_FAULT=FAULT, so every
# one must reach the verdict by itself; exit codes in $tmp/NAME.rc.ID, output in NAME.log.ID
run_nodes() {
  local name=$1 fault=$2 pids=() i
  shift 2
  for i in 0 1 2; do
    env HETRING_FAULT="$fault" "$@" timeout 60 "$HR" run --conf "$tmp/c.ini" --node $i \
      --metrics "$tmp/$name-$i.jsonl" > "$tmp/$name.log.$i" 2>&1 &
    pids+=($!)
  done
  for i in 0 1 2; do wait "${pids[$i]}"; echo $? > "$tmp/$name.rc.$i"; done
}

# stopped NAME ITER PATTERN: every node exited 1 with a line matching PATTERN (grep -E) and
# recorded iterations 0..ITER-1 only, each with a finite loss
stopped() {
  local i rc last
  for i in 0 1 2; do
    rc=$(cat "$tmp/$1.rc.$i")
    [ "$rc" = 1 ] || fail "$1: node $i exited $rc, expected 1: $(tail -3 "$tmp/$1.log.$i")"
    grep -qE "$3" "$tmp/$1.log.$i" ||
      fail "$1: node $i did not say '$3': $(grep -i 'finite\|error' "$tmp/$1.log.$i" | tail -3)"
    last=$(records "$1" $i | tail -1 | cut -d: -f1)
    [ "${last:--1}" = $(($2 - 1)) ] || fail "$1: node $i's last record is ${last:-none}, expected $(($2 - 1))"
    ! grep -q '"loss":null' "$tmp/$1-$i.jsonl" || fail "$1: node $i recorded a loss that is not finite"
  done
  echo "$1: 3 nodes stopped after iteration $(($2 - 1)) saying '$3'"
}

# error: node 1's gradient at iteration 5, node 2's loss at iteration 7, and finite shares
# whose sum overflows at iteration 3
run_nodes grad nan_grad:1:5
stopped grad 5 "iteration 5: the global gradient is not finite .*before the all-reduce: node 1 \(gradient\); stopping every node"
run_nodes loss nan_loss:2:7
stopped loss 7 "iteration 7: the global loss is not finite .*before the all-reduce: node 2 \(loss\); stopping every node"
run_nodes sum 'big_grad:*:3'
stopped sum 3 "iteration 3: the global gradient is not finite .*before the all-reduce: none \(every share was finite: their sum overflowed\)"

# skip: the run ends; the steps of iterations 5 (node 1's gradient) and 8 (node 2's loss)
# skipped on every node, each iteration recorded once, the replicas equal
run_nodes skip nan_grad:1:5,nan_loss:2:8 HETRING_TRAIN_NONFINITE=skip
hashes=""
for i in 0 1 2; do
  rc=$(cat "$tmp/skip.rc.$i")
  [ "$rc" = 0 ] || fail "skip: node $i exited $rc: $(tail -3 "$tmp/skip.log.$i")"
  got=$(records skip $i | grep ':1$' | cut -d: -f1 | tr '\n' ' ')
  [ "$got" = "5 8 " ] || fail "skip: node $i skipped iterations '$got', expected '5 8 '"
  for p in "iteration 5: .*node 1 \(gradient\); the step is skipped.*1 step\(s\) skipped" \
           "iteration 8: .*node 2 \(loss\); the step is skipped.*2 step\(s\) skipped"; do
    grep -qE "$p" "$tmp/skip.log.$i" || fail "skip: node $i did not say '$p'"
  done
  records_exactly_once "skip node $i" "$tmp/skip-$i.jsonl"
  v=$(grep -c '"event":"view"' "$tmp/skip-$i.jsonl")
  [ "$v" = 1 ] || fail "skip: node $i installed $v views, expected 1 (a skip is no view change)"
  hashes+=$(grep -o '"param_hash":"[0-9a-f]*"' "$tmp/skip-$i.jsonl")$'\n'
done
n=$(printf '%s' "$hashes" | sort -u | grep -c .)
[ "$n" = 1 ] || fail "skip: the replicas end with $n parameter hashes: $hashes"
echo "skip: iterations 5 and 8 skipped on 3 nodes, each iteration recorded once, one end hash"

# a skipped step changes nothing: 6 iterations skipping the last end where 5 clean ones do
# (policy = static: the same splits, so the same sums)
run_nodes six nan_grad:0:5 HETRING_TRAIN_NONFINITE=skip HETRING_TRAIN_ITERATIONS=6
run_nodes five "" HETRING_TRAIN_ITERATIONS=5
for name in six five; do
  for i in 0 1 2; do
    [ "$(cat "$tmp/$name.rc.$i")" = 0 ] || fail "$name: node $i exited $(cat "$tmp/$name.rc.$i")"
  done
done
h6=$(grep -ho '"param_hash":"[0-9a-f]*"' "$tmp"/six-?.jsonl | sort -u)
h5=$(grep -ho '"param_hash":"[0-9a-f]*"' "$tmp"/five-?.jsonl | sort -u)
echo "skipped last step: $h6; clean 5 iterations: $h5"
[ -n "$h5" ] && [ "$h6" = "$h5" ] || fail "the skipped step changed the parameters: $h6 against $h5"

# one node alone: a learning rate that overflows the loss within a few iterations
cat > "$tmp/one.ini" <<EOF
[cluster]
security = none
[train]
model = linreg
dataset = synthetic-regression
samples = 2048
eval_samples = 64
global_batch = 64
iterations = 30
lr = 100
momentum = 0
[node.0]
host = 127.0.0.1
port = $base
EOF
timeout 60 "$HR" run --conf "$tmp/one.ini" --node 0 --metrics "$tmp/one-0.jsonl" > "$tmp/one.log" 2>&1
rc=$?
[ "$rc" = 1 ] || fail "alone: exited $rc, expected 1: $(tail -3 "$tmp/one.log")"
stop=$(grep -oE 'iteration [0-9]+: the (gradient|loss|gradient and loss) (is|are) not finite' "$tmp/one.log" |
  head -1 | cut -d' ' -f2 | tr -d :)
last=$(records one 0 | tail -1 | cut -d: -f1)
echo "alone: stopped at iteration ${stop:-none}, last record ${last:-none}"
[ -n "$stop" ] && [ "${last:--1}" = $((stop - 1)) ] || fail "alone: stopped at '${stop}', last record '${last}'"
! grep -q '"loss":null' "$tmp/one-0.jsonl" || fail "alone: recorded a loss that is not finite"
# skip without a limit (nonfinite_limit = 0): every step left is skipped, and the run ends
timeout 60 "$HR" run --conf "$tmp/one.ini" --node 0 --set train.nonfinite=skip \
  --set train.nonfinite_limit=0 \
  --metrics "$tmp/onesk-0.jsonl" --summary "$tmp/onesk.json" > "$tmp/onesk.log" 2>&1
rc=$?
[ "$rc" = 0 ] || fail "alone, skip: exited $rc: $(tail -3 "$tmp/onesk.log")"
n=$(records onesk 0 | grep -c ':1$')
s=$(grep -o '"skipped_steps": [0-9]*' "$tmp/onesk.json" | grep -o '[0-9]*$')
first=$(records onesk 0 | grep ':1$' | head -1 | cut -d: -f1)
echo "alone, skip, no limit: $n records skipped from iteration ${first:-none}, summary skipped_steps ${s:-none}"
[ "$n" -gt 0 ] && [ "${s:-}" = "$n" ] && [ "${first:-}" = "$stop" ] ||
  fail "alone, skip: $n skipped records, summary ${s:-none}, first ${first:-none} (expected $stop)"
[ "$(records onesk 0 | wc -l)" = 30 ] || fail "alone, skip: $(records onesk 0 | wc -l) records, expected 30"

# skip with the default nonfinite_limit, 10: the diverged run records the 9 skipped steps
# from $stop on, then stops at the tenth in a row, naming it, and exits 1
[ "$stop" -le 20 ] || fail "alone: diverged at $stop, too late for 10 steps in a row within 30"
timeout 60 "$HR" run --conf "$tmp/one.ini" --node 0 --set train.nonfinite=skip \
  --metrics "$tmp/onelim-0.jsonl" > "$tmp/onelim.log" 2>&1
rc=$?
[ "$rc" = 1 ] || fail "alone, skip, limit 10: exited $rc, expected 1: $(tail -3 "$tmp/onelim.log")"
at=$((stop + 9))
grep -qE "iteration $at: the (gradient|loss|gradient and loss) (is|are) not finite \(NaN or inf\), 10 steps in a row; stopping before its update \(\[train\] nonfinite = skip, nonfinite_limit = 10" \
  "$tmp/onelim.log" || fail "alone, skip, limit 10: no stop at $at: $(grep -i 'not finite' "$tmp/onelim.log" | tail -2)"
n=$(records onelim 0 | grep -c ':1$')
last=$(records onelim 0 | tail -1 | cut -d: -f1)
echo "alone, skip, limit 10: $n records skipped, the last record $last, stopped at $at"
[ "$n" = 9 ] && [ "$last" = $((at - 1)) ] ||
  fail "alone, skip, limit 10: $n skipped records, last $last (expected 9 and $((at - 1)))"

# the same divergence on three nodes with nonfinite_limit = 3: every node skips the same two
# steps in a row (the verdict is the summed gradient's, the same bytes on every node) and every
# node stops at the third, naming it: no node goes on alone
write_conf "$tmp/div.ini" 3 20 <<EOF
[train]
model = linreg
dataset = synthetic-regression
samples = 2048
eval_samples = 64
global_batch = 64
iterations = 30
lr = 100
momentum = 0
nonfinite = skip
nonfinite_limit = 3
[controller]
policy = static
EOF
pids=()
for i in 0 1 2; do
  timeout 60 "$HR" run --conf "$tmp/div.ini" --node $i --metrics "$tmp/div-$i.jsonl" > "$tmp/div.log.$i" 2>&1 &
  pids+=($!)
done
ats=""
for i in 0 1 2; do
  wait "${pids[$i]}"
  rc=$?
  [ "$rc" = 1 ] || fail "cluster, limit 3: node $i exited $rc, expected 1: $(tail -3 "$tmp/div.log.$i")"
  first=$(records div $i | grep ':1$' | head -1 | cut -d: -f1)
  n=$(records div $i | grep -c ':1$')
  last=$(records div $i | tail -1 | cut -d: -f1)
  at=$((${first:-0} + 2))
  grep -qE "iteration $at: the global .* not finite .*stopping every node: 3 steps in a row in this view were not finite \(\[train\] nonfinite = skip, nonfinite_limit = 3\)" \
    "$tmp/div.log.$i" || fail "cluster, limit 3: node $i did not stop at $at: $(grep -i 'not finite' "$tmp/div.log.$i" | tail -2)"
  [ "$n" = 2 ] && [ "$last" = $((at - 1)) ] ||
    fail "cluster, limit 3: node $i has $n skipped records, the last $last (expected 2 and $((at - 1)))"
  ats+="$at "
done
echo "cluster, limit 3: the nodes stopped at iterations $ats"
[ "$(echo $ats | tr ' ' '\n' | sort -u | wc -l)" = 1 ] || fail "cluster, limit 3: the nodes stopped at $ats"
finish
