#!/usr/bin/env bash
# What a closed terminal (SIGHUP) and a closed output (SIGPIPE: `| head`) do to `hetring run` and
# `hetring local`: a node leaves as on SIGTERM, with its checkpoint and no temporary file left,
# the others going on without it; `hetring local` stops every node that way and leaves none
# running, and kills them on a second Ctrl-C. SIGTERM and SIGINT are tested by cli.run_messages
# and cli.local.
set -u
HR=$1 HOOKS=${2:-0} # HOOKS: 1 when HETRING_FAULT works (-DHETRING_TEST_HOOKS=ON)
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
children() { pgrep -f "run --conf $1" | tr '\n' ' '; }
wait_gone() { # wait_gone CONF: until no node of CONF is left, 10 s at most
    for _ in $(seq 100); do [ -z "$(children "$1")" ] && return 0; sleep 0.1; done
    fail "nodes of $1 still run: $(children "$1")"
}

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
# the others' election probing the leaver as it closes is nothing to warn of
grep -q " warn  sec: closed a connection" "$tmp/out.1" &&
    fail "SIGHUP: node 1 warned as it left: $(grep " warn  sec: closed a connection" "$tmp/out.1")"
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

# 3. SIGHUP to `hetring local`: every node gets SIGTERM, leaves with its checkpoint; exit 1
rm -f "$tmp"/ck.*
"$HR" local --conf "$tmp/c.ini" -- --quiet --metrics "$tmp/l.{id}" > "$tmp/l.out" 2>&1 &
lp=$!
child_rec $lp
wait_for_line "$tmp/l.0" '^\{"iter":3,' 60
child_signal HUP $lp
wait $lp; rc=$?
[ $rc = 1 ] || fail "local, SIGHUP: exited $rc: $(tail -3 "$tmp/l.out")"
grep -q "cli: received SIGHUP: stopping 3 node(s)$" "$tmp/l.out" || fail "local, SIGHUP: not said: $(tail -3 "$tmp/l.out")"
for i in 0 1 2; do
    grep -q "^node$i | .*train: node $i left the cluster at iteration [0-9]* on SIGTERM$" "$tmp/l.out" ||
        fail "local, SIGHUP: node $i did not leave: $(grep "^node$i" "$tmp/l.out" | tail -2)"
    [ -s "$tmp/ck.$i" ] || fail "local, SIGHUP: node $i wrote no checkpoint"
    no_tmp $i
done
wait_gone "$tmp/c.ini"
[ $rc = 1 ] && echo "ok: local, SIGHUP: exit 1, $(grep -c "left the cluster" "$tmp/l.out") nodes left"

# 4. `hetring local | head -1`: the nodes are stopped once head has exited; exit 1
( timeout 60 "$HR" local --conf "$tmp/c.ini" 2> "$tmp/h.err"; echo $? > "$tmp/h.rc" ) | head -1 > /dev/null
rc=$(cat "$tmp/h.rc")
[ "$rc" = 1 ] || fail "local | head -1: exited $rc: $(tail -3 "$tmp/h.err")"
grep -q "cli: standard output was closed (its reader exited): stopping 3 node(s)$" "$tmp/h.err" ||
    fail "local | head -1: not said: $(tail -3 "$tmp/h.err")"
wait_gone "$tmp/c.ini"
[ "$rc" = 1 ] && echo "ok: local | head -1: exit 1"

# 5. Ctrl-C twice to `hetring local`, the second 0.7 s after the first, while every iteration
# takes 3 s (HETRING_FAULT sleep): the launcher says it kills the nodes still leaving, and does
if [ "$HOOKS" = 1 ]; then
    HETRING_FAULT='sleep:*:3' "$HR" local --conf "$tmp/c.ini" > "$tmp/k.out" 2>&1 &
    lp=$!
    child_rec $lp
    wait_for_line "$tmp/k.out" "^node0 \| .*train: training mlp" 60
    child_signal INT $lp
    sleep 0.7
    child_signal INT $lp
    wait $lp; rc=$?
    [ $rc = 1 ] || fail "local, Ctrl-C twice: exited $rc: $(tail -3 "$tmp/k.out")"
    grep -q "cli: received SIGINT again: killing the 3 node(s) still leaving, without their checkpoints$" "$tmp/k.out" ||
        fail "local, Ctrl-C twice: not said: $(grep "cli:" "$tmp/k.out" | tail -3)"
    wait_gone "$tmp/c.ini"
    [ $rc = 1 ] && grep -q "received SIGINT again" "$tmp/k.out" &&
        echo "ok: local, Ctrl-C twice: $(grep -o "received SIGINT again.*" "$tmp/k.out")"
fi

[ "$fails" = 0 ]
