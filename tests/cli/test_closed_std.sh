#!/usr/bin/env bash
# A node started with its standard input, output or error closed (hetring run 2>&-, as some
# supervisors start programs): no file or socket it opens takes descriptor 0, 1 or 2, where a
# log line or a progress line would land in a checkpoint or a ring link; it trains with the
# others, and a closed standard output still fails a command that writes to it.
set -u
HR=$1
. "$(dirname "$0")/../harness.sh"
on_exit='pkill -KILL -f "$tmp/" 2>/dev/null'

# conf FILE N ITERATIONS: nodes 0..N-1 on base+i, each with its checkpoint $tmp/ck.ID
conf() {
    { printf '[cluster]\nname = std\nsecurity = none\n[train]\nmodel = mlp\nlayers = 784,16,10\n'
      printf 'dataset = synthetic\nsamples = 1000\nglobal_batch = 32\niterations = %d\n' "$3"
      printf 'checkpoint = %s/ck.{id}\ncheckpoint_interval = 50\n' "$tmp"
      for ((i = 0; i < $2; i++)); do printf '[node.%d]\nhost = 127.0.0.1\nport = %d\n' $i $((base + i)); done
    } > "$1"
}

# 1. a cluster whose node 0 has no standard error and node 1 no standard output either
conf "$tmp/c.ini" 3 300
"$HR" run --conf "$tmp/c.ini" --node 0 > "$tmp/out.0" 2>&- & p0=$!
"$HR" run --conf "$tmp/c.ini" --node 1 >&- 2>&- & p1=$!
"$HR" run --conf "$tmp/c.ini" --node 2 > "$tmp/out.2" 2>&1 & p2=$!
child_rec $p0 $p1 $p2
for p in $p0 $p1 $p2; do
    for _ in $(seq 600); do child_runs $p || break; sleep 0.1; done # 60 s at most
    child_signal KILL $p && fail "a node still ran after 60 s"
done
wait $p0; rc0=$?
wait $p1; rc1=$?
wait $p2; rc2=$?
[ "$rc0$rc1$rc2" = 000 ] || fail "closed standard error: nodes exited $rc0 $rc1 $rc2: $(tail -2 "$tmp/out.2")"
grep -q "ring: ring formed: view epoch 1, rank 2 of 3," "$tmp/out.2" ||
    fail "node 2 trained without nodes 0 and 1: $(grep "ring formed" "$tmp/out.2")"
grep -q "^iter 300/300 " "$tmp/out.0" || fail "node 0 did not finish: $(tail -1 "$tmp/out.0")"
[ "$rc0$rc1$rc2" = 000 ] && echo "ok: nodes with standard error (and output) closed trained with the others"

# 2. what holds descriptors 0, 1 and 2 of a node started with all three closed: nothing it opened
rm -f "$tmp"/ck.*
conf "$tmp/one.ini" 1 100000000
"$HR" run --conf "$tmp/one.ini" --metrics "$tmp/m1" <&- >&- 2>&- & p=$!
child_rec $p
wait_for_line "$tmp/m1" '^\{"iter":60,' 60 # a checkpoint written, its file closed again
held=0
for fd in 0 1 2; do
    at=$(readlink "/proc/$p/fd/$fd" 2>/dev/null) || at=closed
    [ "$at" = / ] && held=$((held + 1)) || fail "descriptor $fd of a node started with it closed is $at"
done
child_signal KILL $p
wait $p 2>/dev/null
[ $held = 3 ] && echo "ok: descriptors 0, 1 and 2 held, none taken by a file or socket"

# 3. a closed standard output still fails a command that writes to it, saying so
msg=$("$HR" config --conf "$tmp/one.ini" 2>&1 >&-); rc=$?
[ $rc = 1 ] && [ "$msg" = "hetring: cannot write standard output (Bad file descriptor)" ] ||
    fail "config >&-: exited $rc: '$msg'"

[ "$fails" = 0 ]
