#!/usr/bin/env bash
# hetring local: start, a crash tolerated while a quorum runs and the others stopped below it,
# --respawn and its limit, signal forwarding and no orphans. The launcher's decisions in every
# case are tested with scripted nodes by app.launch (tests/app/test_launch.c); this script checks
# them through the real command and real nodes. Faults strike when a node is ready, before any
# ring exists, so what the nodes do about a lost peer (elastic training) does not change them.
# Every node gets its own unique config path so that pgrep finds exactly this test's children.
set -u
HR=$1
. "$(dirname "$0")/../harness.sh"
on_exit='pkill -KILL -f "$tmp/" 2>/dev/null'
conf=$tmp/c.ini
{ printf '[cluster]\nsecurity = none\nrejoin_timeout = 1\n[train]\niterations = 1\n'
  for i in 0 1 2 3; do printf '[node.%d]\nhost = 127.0.0.1\nport = %d\n' $i $((base+i)); done; } > "$conf"
children() { pgrep -f "run --conf $conf" | tr '\n' ' '; }
wait_gone() { # wait_gone SECONDS: until no child is left
    for _ in $(seq 1 $(( $1 * 10 ))); do [ -z "$(children)" ] && return 0; sleep 0.1; done
    return 1
}
wait_count() { # wait_count N SECONDS
    for _ in $(seq 1 $(( $2 * 10 ))); do [ "$(children | wc -w)" -ge "$1" ] && return 0; sleep 0.1; done
    return 1
}

# 1. prefixes: every node reports ready, each line carries its node
out=$(timeout 60 "$HR" local --conf "$conf" 2>&1); rc=$?
[ $rc = 0 ] || fail "local exited $rc: $out"
for i in 0 1 2 3; do echo "$out" | grep -q "^node$i | .*ready" || fail "no prefixed ready line from node $i"; done

# 2. SIGTERM to the launcher reaches every child and leaves no orphan
HETRING_FAULT='hang:*:60' "$HR" local --conf "$conf" --grace 2 >"$tmp/out2" 2>&1 &
lp=$!
wait_count 4 20 || fail "children did not start: $(children)"
echo "children before SIGTERM: $(children)"
kill -TERM $lp
timeout 30 tail --pid=$lp -f /dev/null
wait $lp; rc=$?
# `hetring local --help` and launch.h: an interrupted run exits 1 (not 128+15, not 2)
[ "$rc" = 1 ] || fail "interrupted local exited $rc, expected 1: $(cat "$tmp/out2")"
grep -q "received SIGTERM: stopping 4 node(s)" "$tmp/out2" || fail "the interruption was not reported: $(cat "$tmp/out2")"
wait_gone 10 || fail "orphans after SIGTERM: $(children)"

# 3. one child crashes: 3 of 4 still run (the quorum of 4 nodes is 3), so the others go on;
# a second crash leaves 2, below the quorum: the others (hanging, so they cannot give up by
# themselves) are stopped after rejoin_timeout (1 s) and the grace (2 s); exit 1
HETRING_FAULT='hang:0:60,hang:1:60,crash:2,hang:3:2,crash:3' timeout 60 "$HR" local --conf "$conf" --grace 2 >"$tmp/out3" 2>&1
rc=$?
[ $rc = 1 ] || fail "crash: local exited $rc, expected 1"
grep -q "node 2 was killed by SIGKILL; 3 of 4 nodes still running (quorum 3)$" "$tmp/out3" ||
    fail "the first crash was not tolerated: $(cat "$tmp/out3")"
grep -q "node 3 was killed by SIGKILL; 2 of 4 nodes still running, below the quorum of 3; they wait 1.0 s (rejoin_timeout) for it, then give up or are stopped" "$tmp/out3" &&
    grep -q "2 node(s) still running without a quorum; stopping them" "$tmp/out3" ||
    fail "the quorum loss was not reported: $(cat "$tmp/out3")"
grep -q "fewer than 3 node(s) (the quorum) were left running; the others gave up or were stopped" "$tmp/out3" ||
    fail "no closing message for the quorum loss: $(cat "$tmp/out3")"
wait_gone 10 || fail "orphans after a crash: $(children)"
# the quorum is the config's: with [cluster] min_nodes = 4 one crash stops the others
HETRING_FAULT='hang:0:60,hang:1:60,crash:2,hang:3:60' timeout 60 "$HR" local --conf "$conf" --grace 2 \
    --set cluster.min_nodes=4 >"$tmp/out3b" 2>&1
rc=$?
[ $rc = 1 ] && grep -q "node 2 was killed by SIGKILL; 3 of 4 nodes still running, below the quorum of 4; they wait" "$tmp/out3b" ||
    fail "min_nodes = 4: exit $rc, $(cat "$tmp/out3b")"
wait_gone 10 || fail "orphans after a crash with min_nodes = 4: $(children)"

# 4. --respawn: a node that crashes whenever it starts is restarted 5 times, then stays down
# while the others (a quorum) go on; SIGTERM to the launcher then reaches every node
HETRING_FAULT='hang:0:60,hang:1:60,crash:2,hang:3:60' "$HR" local --conf "$conf" --grace 2 --respawn 0.2 >"$tmp/out5" 2>&1 &
lp=$!
for _ in $(seq 1 300); do grep -q "it stays down" "$tmp/out5" && break; sleep 0.1; done
grep -q "node 2 was restarted 5 time(s), the most allowed; it stays down" "$tmp/out5" ||
    fail "--respawn: no limit after 5 restarts: $(cat "$tmp/out5")"
[ "$(grep -c "respawning node 2 in 0.2 s$" "$tmp/out5")" = 5 ] &&
    [ "$(grep -c "node 2 restarted (pid [0-9]*)$" "$tmp/out5")" = 5 ] ||
    fail "--respawn: expected 5 respawning and 5 restarted lines: $(cat "$tmp/out5")"
[ "$(grep -c "node2 | .*test fault: crashing once ready" "$tmp/out5")" = 6 ] ||
    fail "--respawn: node 2 should have started 6 times: $(cat "$tmp/out5")"
[ "$(children | wc -w)" = 3 ] || fail "--respawn: the 3 others should still run: $(children)"
kill -TERM $lp
timeout 30 tail --pid=$lp -f /dev/null
wait $lp; rc=$?
[ "$rc" = 1 ] || fail "--respawn: interrupted local exited $rc, expected 1"
grep -q "received SIGTERM: stopping 3 node(s)" "$tmp/out5" || fail "--respawn: no SIGTERM line: $(cat "$tmp/out5")"
wait_gone 10 || fail "orphans after --respawn: $(children)"

# 5. the options and the exit rule are documented; a bad delay is a usage error
"$HR" local --help > "$tmp/help" 2>&1
grep -q -- "--respawn S" "$tmp/help" && grep -q "at most 5 times per node" "$tmp/help" &&
    grep -q "a quorum" "$tmp/help" && grep -q "Exit status: 0 when the last process of every node exited 0" "$tmp/help" ||
    fail "local --help does not document --respawn, the quorum and the exit rule: $(cat "$tmp/help")"
"$HR" local --conf "$conf" --respawn -1 > "$tmp/bad" 2>&1; rc=$?
[ $rc = 2 ] && grep -q "respawn '-1' (expected seconds in \[0, 3600\])" "$tmp/bad" ||
    fail "--respawn -1: exit $rc: $(cat "$tmp/bad")"

# 6. SIGKILL of the launcher itself: the children die with it
HETRING_FAULT='hang:*:60' "$HR" local --conf "$conf" >"$tmp/out4" 2>&1 &
lp=$!
wait_count 4 20 || fail "children did not start (6)"
kill -KILL $lp
wait $lp 2>/dev/null
wait_gone 10 || fail "orphans after SIGKILL of the launcher: $(children)"

# 7. the demo of elastic training: node 2 kills itself at iteration 300 while the others train;
# the 3 survivors are a quorum and go on, --respawn starts node 2 again, it rejoins with the
# state, and every node finishes: a node restarted that then exits 0 counts, exit status 0
train=$tmp/train.ini
{ printf '[cluster]\nsecurity = none\ntimeout = 1\nrejoin_timeout = 30\n'
  printf '[train]\nlayers = 784,32,10\nsamples = 4096\nglobal_batch = 64\niterations = 3000\n'
  for i in 0 1 2 3; do printf '[node.%d]\nhost = 127.0.0.1\nport = %d\n' $i $((base+4+i)); done; } > "$train"
# (while node 2 is away the others sleep 10 ms a step, a test fault: on an idle machine they
# finished the 2700 steps left in 1.3 s, before node 2's second process was up)
HETRING_FAULT='crash:2:300,sleep_short:*:0.01' timeout 90 "$HR" local --conf "$train" --grace 2 --respawn 0.5 -- --quiet >"$tmp/out7" 2>&1
rc=$?
[ $rc = 0 ] || fail "demo: local --respawn exited $rc, expected 0: $(tail -5 "$tmp/out7")"
for line in "node 2 was killed by SIGKILL; 3 of 4 nodes still running (quorum 3)" \
    "respawning node 2 in 0.5 s" "node 2 restarted (pid" "node 2 rejoined at iteration"; do
    grep -qF "$line" "$tmp/out7" || fail "demo: no line with '$line': $(grep -v '^node[0-9] |' "$tmp/out7" | tail -5)"
done
grep -h "node 2 was killed\|respawning\|restarted\|rejoined" "$tmp/out7" | head -4
pgrep -f "run --conf $train" > /dev/null && fail "demo: nodes left running"


# 8. a starting node waits for its peers up to connect_timeout, whatever rejoin_timeout says:
# node 1 starts 2 s after node 0, with rejoin_timeout = 1 (a loaded machine once took 1.3 s to
# start four nodes, and the first of them gave up after rejoin_timeout); node 0's start (BLAS
# choice, data, model) may take 10 s on a loaded machine before it waits
late=$tmp/late.ini
{ printf '[cluster]\nsecurity = none\nrejoin_timeout = 1\nconnect_timeout = 20\n[train]\niterations = 2\n'
  for i in 0 1; do printf '[node.%d]\nhost = 127.0.0.1\nport = %d\n' $i $((base+6+i)); done; } > "$late"
timeout 60 "$HR" run --conf "$late" --node 0 --quiet > "$tmp/late0" 2>&1 &
p0=$!
wait_for_line "$tmp/late0" "waiting for node 1" 25 || fail "late start: node 0 never waited for node 1"
sleep 2 # the scenario: node 1 starts twice rejoin_timeout after node 0 began waiting
timeout 30 "$HR" run --conf "$late" --node 1 --quiet > "$tmp/late1" 2>&1 || fail "late start: node 1 exited $?: $(cat "$tmp/late1")"
wait $p0 || fail "late start: node 0 exited $? instead of waiting connect_timeout: $(cat "$tmp/late0")"

# 9. a node whose configuration fails it at start (its key file is missing) exits 2 before the
# cluster formed: the launcher stops the other at once rather than let it wait its
# rejoin_timeout (60 s) for a quorum, names the node, and exits 2 as for a refused
# configuration; with a quorum left (3 nodes) too
"$HR" keygen --out "$tmp/k0.key" > "$tmp/pub0" && "$HR" keygen --out "$tmp/k1.key" > "$tmp/pub1" &&
    "$HR" keygen --out "$tmp/k2.key" > "$tmp/pub2" || fail "keygen failed"
bad=$tmp/bad.ini
for n in 2 3; do
    { printf '[cluster]\nsecurity = encrypt\nkey_file = %s/k{id}.key\nrejoin_timeout = 60\n' "$tmp"
      printf '[train]\niterations = 2\n'
      for ((i = 0; i < n; i++)); do
          printf '[node.%d]\nhost = 127.0.0.1\nport = %d\npubkey = %s\n' $i $((base + i)) "$(cat "$tmp/pub$i")"
      done; } > "$bad"
    mv "$tmp/k1.key" "$tmp/k1.gone"
    timeout 50 "$HR" local --conf "$bad" --grace 2 > "$tmp/out9" 2>&1; rc=$?
    mv "$tmp/k1.gone" "$tmp/k1.key"
    [ $rc = 2 ] || fail "$n nodes, node 1 without its key: local exited $rc, expected 2: $(tail -5 "$tmp/out9")"
    grep -q "node 1 exited with status 2 before the cluster formed (its error is above); stopping the others" "$tmp/out9" ||
        fail "$n nodes: no line naming node 1's start-up failure: $(tail -5 "$tmp/out9")"
    grep -q "node1 | .*k1.key: cannot open key file" "$tmp/out9" || fail "$n nodes: node 1's error is not shown"
    grep "before the cluster formed\|ended with" "$tmp/out9"
    pgrep -f "run --conf $bad" > /dev/null && fail "$n nodes: nodes left running"
done
# and with every key in place, the same cluster trains and every node exits 0
timeout 60 "$HR" local --conf "$bad" --grace 2 > "$tmp/out9b" 2>&1 || fail "keys in place: local exited $?: $(tail -5 "$tmp/out9b")"

echo "$fails failure(s)"
[ "$fails" = 0 ]
