#!/usr/bin/env bash
# What a closed terminal (SIGHUP) and a closed output (SIGPIPE: `| head`) do to `hetring run`: a
# node leaves as on SIGTERM, with its checkpoint and no temporary file left, the others going on
# without it. SIGTERM and SIGINT are tested by cli.run_messages.
set -u
HR=$1
. "$(dirname "$0")/../harness.sh"
on_exit='pkill -KILL -f "$tmp/" 2>/dev/null'

# conf FILE N ITERATIONS: nodes 0..N-1 on base+i, each with its checkpoint $tmp/ck.ID
conf() {
    { printf '[cluster]\nname = sig\nsecurity = none\n[train]\nmodel = mlp\nlayers = 784,16,10\n'
      printf 'dataset = synthetic\nsamples = 1000\nglobal_batch = 32\niterations = %d\n' "$3"
      printf 'checkpoint = %s/ck.{id}\n' "$tmp"
      for ((i = 0; i < $2; i++)); do printf '[node.%d]\nhost = 127.0.0.1\nport = %d\n' $i $((base + i)); done
    } > "$1"
}
# no_tmp ID: node ID left no temporary checkpoint file behind
no_tmp() { ! ls "$tmp"/ck."$1".tmp.* > /dev/null 2>&1 || fail "node $1 left $(ls "$tmp"/ck."$1".tmp.*)"; }

# 1. SIGHUP to a node of a cluster: it leaves with its checkpoint, exit 0; the others go on
conf "$tmp/c.ini" 3 1000000
for i in 0 1 2; do
    "$HR" run --conf "$tmp/c.ini" --node $i --quiet --metrics "$tmp/m.$i" > "$tmp/out.$i" 2>&1 &
    pid[$i]=$!
    child_rec $!
done
wait_for_line "$tmp/m.1" '^\{"iter":3,' 60
child_signal HUP "${pid[1]}"
wait "${pid[1]}"; rc=$?
[ $rc = 0 ] || fail "SIGHUP: node 1 exited $rc: $(tail -3 "$tmp/out.1")"
grep -q "train: node 1 left the cluster at iteration [0-9]* on SIGHUP (its terminal closed)$" "$tmp/out.1" ||
    fail "SIGHUP: node 1 did not say it left: $(tail -3 "$tmp/out.1")"
[ -s "$tmp/ck.1" ] || fail "SIGHUP: node 1 wrote no checkpoint"
no_tmp 1
wait_for_line "$tmp/out.0" "ring: node 1 left at iteration [0-9]*; view 2: nodes 0,2" 30 &&
    echo "ok: SIGHUP: $(grep -o "node 1 left at iteration [0-9]*; view 2: nodes 0,2" "$tmp/out.0")"
child_signal TERM "${pid[0]}" "${pid[2]}"
wait "${pid[0]}" "${pid[2]}"

# 2. `hetring run | head -1`: once head has exited, the node stops at its next boundary with its
# checkpoint and exits 1, saying its output cannot be written, instead of dying by SIGPIPE
rm -f "$tmp"/ck.*
conf "$tmp/one.ini" 1 200000
( timeout 60 "$HR" run --conf "$tmp/one.ini" 2> "$tmp/p.err"; echo $? > "$tmp/p.rc" ) | head -1 > "$tmp/p.out"
rc=$(cat "$tmp/p.rc")
[ "$rc" = 1 ] || fail "| head -1: exited $rc: $(tail -3 "$tmp/p.err")"
grep -q "train: stopping at iteration [0-9]* on SIGPIPE (its output's reader is gone); checkpoint written to $tmp/ck.0$" "$tmp/p.err" ||
    fail "| head -1: no stop said: $(tail -3 "$tmp/p.err")"
grep -q "^hetring: cannot write standard output" "$tmp/p.err" ||
    fail "| head -1: the output's failure was not said: $(tail -3 "$tmp/p.err")"
[ -s "$tmp/ck.0" ] || fail "| head -1: no checkpoint written"
no_tmp 0
[ "$rc" = 1 ] && echo "ok: | head -1: $(head -c 60 "$tmp/p.out")... then exit 1, $(grep -o "stopping at iteration [0-9]*" "$tmp/p.err")"

[ "$fails" = 0 ]
