#!/usr/bin/env bash
# hetring local: start, failure propagation, signal forwarding and no orphans.
# Every node gets its own unique config path so that pgrep finds exactly this test's children.
set -u
HR=$1
fails=0
fail() { echo "FAIL: $*"; fails=$((fails+1)); }
tmp=$(mktemp -d); trap 'pkill -KILL -f "$tmp/" 2>/dev/null; rm -rf "$tmp"' EXIT
conf=$tmp/c.ini
base=$((10000 + RANDOM % 22000)) # below the ephemeral range (32768+)
{ printf '[cluster]\nsecurity = none\n[train]\niterations = 1\n'
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

# 3. one child crashes: the launcher stops the others and exits 1
HETRING_FAULT='hang:0:60,hang:1:60,hang:3:60,crash:2' timeout 60 "$HR" local --conf "$conf" --grace 2 >"$tmp/out3" 2>&1
rc=$?
[ $rc = 1 ] || fail "crash: local exited $rc, expected 1"
grep -q "node 2 was killed by SIGKILL" "$tmp/out3" || fail "crash not reported: $(cat "$tmp/out3")"
wait_gone 10 || fail "orphans after a crash: $(children)"

# 4. SIGKILL of the launcher itself: the children die with it
HETRING_FAULT='hang:*:60' "$HR" local --conf "$conf" >"$tmp/out4" 2>&1 &
lp=$!
wait_count 4 20 || fail "children did not start (4)"
kill -KILL $lp
wait $lp 2>/dev/null
wait_gone 10 || fail "orphans after SIGKILL of the launcher: $(children)"

echo "$fails failure(s)"
[ "$fails" = 0 ]
