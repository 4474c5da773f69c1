#!/usr/bin/env bash
# The run's end is agreed (cluster/hetring.c, end_of_run). Node 1's all-reduce of the last
# iteration completes, then its view fails (test fault fail_view:1:LAST), so nodes 0 and 2
# applied the last step and node 1 did not. Nodes 0 and 2 must not leave at once: node 1 alone
# is below the quorum (2 of 3) and would wait out rejoin_timeout and fail. They recover with it,
# the view takes their state (iteration LAST + 1), and all three end at once, after one view
# change, on the same parameters, each iteration recorded once. The same fault one iteration earlier is an ordinary
# failed step: node 1 takes the state and all go on. And where nodes 1 and 2 die in that
# recovery (test fault crash_xfer, as the state comes), node 0 waits for a quorum to agree the
# end, saying so (training is done, not paused), why (a member may need its state) and how long,
# then ends on its own at rejoin_timeout, its failed barrier named as the run's end.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ITERS=12
B=48
write_conf "$tmp/c.ini" 3 5 <<EOF2
rejoin_timeout = 30
$(mlp_train 784,32,10 2048 "$B" "$ITERS")
hash_interval = 1
[controller]
policy = static
EOF2

for at in $((ITERS - 1)) $((ITERS - 2)); do
  t0=$(date +%s.%N)
  HETRING_FAULT=fail_view:1:$at run_nodes "at$at"
  el=$(awk "BEGIN{printf \"%.1f\", $(date +%s.%N) - $t0}")
  for id in 0 1 2; do
    grep -h "failed\|took\|the state\|done:" "$tmp/at$at.$id.log" | cut -c1-200 | sed "s/^/    /" | tail -3
  done
  hashes=$(for id in 0 1 2; do grep -ho '"param_hash":"[0-9a-f]*"' "$tmp/at$at.m$id" | tail -1; done | sort -u | wc -l)
  echo "fault after iteration $at's all-reduce: 3 nodes done in $el s, $hashes final parameter hash(es)"
  [ "$hashes" = 1 ] || fail "at $at: the nodes end with $hashes different parameter hashes"
  grep -q "test fault: the view failed" "$tmp/at$at.1.log" || fail "at $at: the fault did not fire"
  for id in 0 2; do # one view change: node 1, given the state of the end, agrees on it there
    n=$(grep -c "agreeing on a new view" "$tmp/at$at.$id.log")
    [ "$n" = 1 ] || fail "at $at: node $id agreed on $n new views, expected 1"
  done
  awk "BEGIN{exit !($el < 20)}" || fail "at $at: the run took $el s to end (rejoin_timeout 30 s)"
  records_exactly_once "at $at, nodes 0 1 2" "$tmp/at$at.m0" "$tmp/at$at.m1" "$tmp/at$at.m2"
done

# nodes 1 and 2 die as the recovery's state comes: node 0, done, waits for a quorum to agree the
# end, and says that training is done
sed -i 's/^rejoin_timeout = 30$/rejoin_timeout = 6/' "$tmp/c.ini"
pids=()
for id in 0 1 2; do
  HETRING_FAULT=fail_view:1:$((ITERS - 1)),crash_xfer:1:1,crash_xfer:2:1 timeout 120 "$HR" run \
    --conf "$tmp/c.ini" --node $id --quiet > "$tmp/alone.$id.log" 2>&1 &
  pids[$id]=$!
done
wait "${pids[0]}" || fail "alone: node 0 failed: $(tail -2 "$tmp/alone.0.log")"
wait "${pids[1]}" "${pids[2]}" 2>/dev/null # killed by their fault
grep -h "waiting for a quorum\|not agreed" "$tmp/alone.0.log" | head -2 | cut -c1-200 | sed "s/^/    /"
grep -q "waiting for a quorum of 2 of 3 nodes to agree the run's end: .*; training is done" \
  "$tmp/alone.0.log" || fail "alone: node 0 did not say it waits to agree the end"
! grep -q "training pauses" "$tmp/alone.0.log" || fail "alone: node 0 said training pauses"
grep -q "the run's end: this node's $ITERS iterations are done, but agreeing the end with the others failed; waiting up to rejoin_timeout 6 s .*a member whose last step failed runs it again in that view from this node's state" \
  "$tmp/alone.0.log" || fail "alone: node 0 did not say why it waits to agree the end, and how long"
grep -q "the run's end was not agreed" "$tmp/alone.0.log" ||
  fail "alone: node 0 did not say the end was not agreed"
# the failed barrier is the run's end, not an iteration past the last ("iteration 12 failed")
grep -q "the run's end (agreeing it once all $ITERS iterations are done) failed: " \
  "$tmp/alone.0.log" || fail "alone: node 0 did not say the run's end failed"
! grep -q "iteration $ITERS failed" "$tmp/alone.0.log" ||
  fail "alone: node 0 said iteration $ITERS failed, one past the last"
finish
