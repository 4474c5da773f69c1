#!/usr/bin/env bash
# [train] nonfinite = skip counts the steps skipped in a row anew at every view change, on
# every member alike, so that every member stops at the same iteration. Four nodes,
# nonfinite_limit = 2, node 0's gradient NaN at iteration 4, node 1's at 5 and node 2's at 6
# (test fault nan_grad), so steps 4, 5 and 6 are not finite, with a view change after 4:
#   leave  node 3 leaves at the boundary after 4 (leave:3:4): 5 is the first step skipped in the
#          view of nodes 0-2, and each of them stops at 6, the second, naming it; node 3 exits 0
#   fail   node 3 fails the view after the all-reduce of 4 (fail_view:3:4): the four elect a
#          new view (node 3 takes the others' state past 4), and every one stops at 6
# A member that carried the count of 4 over the view change would stop at 5, alone or with
# the others. Every node runs under timeout 60, and rejoin_timeout = 20 bounds a node left
# below the quorum by one that stopped early.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ITERS=10 B=48
write_conf "$tmp/c.ini" 4 20 <<EOF
$(mlp_train 784,16,10 2048 "$B" "$ITERS")
nonfinite = skip
nonfinite_limit = 2
[controller]
policy = static
EOF
NAN=nan_grad:0:4,nan_grad:1:5,nan_grad:2:6

# records NAME ID: node ID's iteration records as "iter:skipped" lines
records() { grep -o '^{"iter":[0-9]*\|"skipped":[01]' "$tmp/$1-$2.jsonl" 2>/dev/null | paste -d' ' - - |
  sed 's/{"iter":\([0-9]*\) "skipped":\([01]\)/\1:\2/'; }

# run4 NAME FAULT: nodes 0-3 at once with HETRING_FAULT=FAULT; exit codes in $tmp/NAME.rc.ID,
# output in $tmp/NAME.log.ID, metrics in $tmp/NAME-ID.jsonl
run4() {
  local name=$1 fault=$2 pids=() i
  for i in 0 1 2 3; do
    HETRING_FAULT="$fault" timeout 60 "$HR" run --conf "$tmp/c.ini" --node $i \
      --set cluster.rejoin_timeout=20 --metrics "$tmp/$name-$i.jsonl" > "$tmp/$name.log.$i" 2>&1 &
    pids+=($!)
  done
  for i in 0 1 2 3; do wait "${pids[$i]}"; echo $? > "$tmp/$name.rc.$i"; done
}

# stopped_at_6 NAME IDS...: each node of IDS exited 1 saying it stopped at iteration 6, the
# second step in a row not finite in its view, and recorded iterations up to 5 with 5 skipped
stopped_at_6() {
  local name=$1 i rc last ats=""
  shift
  for i in "$@"; do
    rc=$(cat "$tmp/$name.rc.$i")
    [ "$rc" = 1 ] || fail "$name: node $i exited $rc, expected 1: $(grep -i 'finite\|error\|left' "$tmp/$name.log.$i" | tail -3)"
    grep -qE "iteration 6: the global gradient is not finite .*node 2 \(gradient\); stopping every node: 2 steps in a row in this view were not finite \(\[train\] nonfinite = skip, nonfinite_limit = 2\)" \
      "$tmp/$name.log.$i" ||
      fail "$name: node $i did not stop at iteration 6: $(grep -i 'not finite' "$tmp/$name.log.$i" | tail -2)"
    last=$(records "$name" "$i" | tail -1)
    [ "$last" = 5:1 ] || fail "$name: node $i's last record is '${last:-none}', expected 5 skipped (5:1)"
    ats+="$(grep -m1 -oE 'iteration [0-9]+: the global [a-z ]+ not finite .*stopping every node' "$tmp/$name.log.$i" |
      cut -d' ' -f2 | tr -d :) "
  done
  echo "$name: nodes $* stopped at iterations $ats"
  [ "$(echo $ats | tr ' ' '\n' | sort -u | wc -l)" = 1 ] || fail "$name: the nodes stopped at different iterations: $ats"
}

# leave: node 3 leaves after 4; nodes 0-2 go on in a view of three and stop at 6
run4 leave "$NAN,leave:3:4"
[ "$(cat "$tmp/leave.rc.3")" = 0 ] || fail "leave: node 3 exited $(cat "$tmp/leave.rc.3"), expected 0: $(tail -3 "$tmp/leave.log.3")"
grep -q "node 3 left at iteration 5" "$tmp/leave.log.0" ||
  fail "leave: node 0 did not see node 3 leave at iteration 5: $(grep -i 'left\|view' "$tmp/leave.log.0" | tail -3)"
stopped_at_6 leave 0 1 2
for i in 0 1 2; do
  got=$(records leave $i | grep ':1$' | cut -d: -f1 | tr '\n' ' ')
  [ "$got" = "4 5 " ] || fail "leave: node $i skipped iterations '$got', expected '4 5 '"
done

# fail: node 3 fails the view after the all-reduce of 4; the four elect again and stop at 6
run4 fail "$NAN,fail_view:3:4"
for i in 0 1 2 3; do
  v=$(grep -c '"event":"view"' "$tmp/fail-$i.jsonl" 2>/dev/null)
  [ "${v:-0}" -ge 2 ] || fail "fail: node $i installed ${v:-0} view(s), expected a second one after iteration 4"
done
stopped_at_6 fail 0 1 2 3
finish
