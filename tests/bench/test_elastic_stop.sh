#!/usr/bin/env bash
# test_elastic_stop.sh HETRING: SIGINT or SIGTERM stops a running `hetring bench elastic` as it
# stops bench hetero (test_bench_stop.sh):
#   SIGINT in the second faulted run: exit 130 within 20 s, the first run's row in the table and
#          in --json, "stopped by SIGINT after 1 of 3 runs", no node process left
#   SIGTERM in the reference run: exit 143, "stopped by SIGTERM after 0 of 3 runs", none left
# (it died by the signal, with no report, and its nodes went only by their death signal).
# Loopback only; every wait is bounded.
set -u
HR=$1
. "$(dirname "$0")/../harness.sh" # the bench's nodes take base.. (--port)
bench=

# the node processes below the bench (hetring run ... --metrics)
nodes_of() { pgrep -P "$1" -f ' run --conf ' | tr '\n' ' '; }
wait_for() {
    local end=$((SECONDS + $1)); shift
    until "$@"; do [ $SECONDS -ge $end ] && return 1; sleep 0.1; done
}
four_nodes() { [ "$(nodes_of "$bench" | wc -w)" -ge 4 ]; }
# stop SIG NAME: record the nodes, signal the bench, wait for it (30 s at most): rc, took, left
stop() {
    local before=$SECONDS pids p
    pids=$(nodes_of "$bench")
    [ -n "$pids" ] || fail "$2: no node running before the signal"
    child_signal "$1" "$bench"
    wait_for 30 eval '! child_runs $bench' || { fail "$2: still running 30 s after SIG$1"; child_signal KILL "$bench"; }
    wait "$bench"; rc=$?
    took=$((SECONDS - before))
    left=
    for p in $pids; do [ -e /proc/$p/cmdline ] && left="$left $p"; done
    bench=
}
run_bench() {
    "$HR" bench elastic --port "$base" --out "$tmp/$1" --json "$tmp/$1.json" --runs 3 --iters 200 \
        --kill 2@40 --rejoin-after 1 --deadline 60 > "$tmp/$1.out" 2> "$tmp/$1.err" &
    bench=$!
    child_rec $bench
}

# SIGINT in the second faulted run
run_bench int
wait_for 120 grep -q '^run 2/3' "$tmp/int.out" || fail "int: the first run did not finish in 120 s"
wait_for 30 four_nodes || fail "int: no cluster of the second run running"
stop INT int
[ $rc = 130 ] || fail "int: exit $rc, expected 130"
[ $took -le 20 ] || fail "int: took $took s to stop"
grep -Eq '^1 +[0-9]' "$tmp/int.out" || fail "int: the first run's row is not in the table"
grep -q '^2 ' "$tmp/int.out" && fail "int: a row for the stopped run"
grep -q '^bench elastic: stopped by SIGINT after 1 of 3 runs (0 failed)' "$tmp/int.out" ||
    fail "int: no 'stopped by SIGINT after 1 of 3 runs' line"
[ "$(grep -c '"event"' "$tmp/int.json" 2>/dev/null)" = 1 ] || fail "int: --json does not hold the one run completed"
[ -z "$left" ] || fail "int: node processes left running:$left"
cat "$tmp/int.out"

# SIGTERM in the reference run
run_bench term
wait_for 30 four_nodes || fail "term: no cluster running"
stop TERM term
[ $rc = 143 ] || fail "term: exit $rc, expected 143"
[ $took -le 20 ] || fail "term: took $took s to stop"
grep -q '^bench elastic: stopped by SIGTERM after 0 of 3 runs' "$tmp/term.out" ||
    fail "term: no 'stopped by SIGTERM after 0 of 3 runs' line: $(cat "$tmp/term.out")"
[ -z "$left" ] || fail "term: node processes left running:$left"

echo "$fails failure(s)"
[ "$fails" = 0 ]
