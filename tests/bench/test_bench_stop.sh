#!/usr/bin/env bash
# test_bench_stop.sh HETRING: SIGINT or SIGTERM stops a running `hetring bench hetero` whole:
#   SIGINT while the second scenario runs: exit 130 within 20 s, that run cut short, the first
#          scenario's rows on stdout and in report.md, a line saying it stopped, no process of
#          the bench left
#   SIGTERM during the first run: exit 143, "stopped by SIGTERM after 0 of 4 runs", none left
#   SIGINT during the DDP baseline (a fake python3 whose helper ignores SIGTERM): exit 130, the
#          baseline's whole process group gone as the bench exits
# Loopback only; every wait is bounded.
set -u
HR=$1
. "$(dirname "$0")/../harness.sh" # the bench's nodes take base..base+4 (--port)
bench=

# descendants PID: every process below PID (hetring local and its nodes; nodes have their own
# process groups, so only the parent links find them)
descendants() {
    ps -e -o pid=,ppid= | awk -v root="$1" '
        { parent[$1] = $2 }
        END { n = 1; set[root] = 1
              do { added = 0
                   for (p in parent) if (!(p in set) && (parent[p] in set)) { set[p] = 1; added = 1 }
              } while (added)
              for (p in set) if (p != root) print p }'
}
# wait_for SECONDS COMMAND...: poll COMMAND every 0.1 s until it succeeds; 1 on timeout
wait_for() {
    local end=$((SECONDS + $1)); shift
    until "$@"; do [ $SECONDS -ge $end ] && return 1; sleep 0.1; done
}
nodes_running() { [ "$(descendants "$bench" | wc -l)" -ge 5 ]; }  # hetring local + 4 nodes
first_done() { grep -q '^homogeneous   model ' "$tmp/$1.out"; }
# stop SIG NAME: signal the bench, wait for it (30 s at most); sets rc and took (seconds)
stop() {
    local before=$SECONDS
    descendants "$bench" > "$tmp/$2.pids"
    child_signal "$1" "$bench"
    wait_for 30 eval '! child_runs $bench' || { fail "$2: still running 30 s after SIG$1"; child_signal KILL "$bench"; }
    wait "$bench"; rc=$?
    # at once, without forking: the bench reaps its run before it exits, so nothing of it may
    # be alive now (the child's death signal alone would clean up only some moments later)
    alive_after=
    for p in $(<"$tmp/$2.pids"); do [ -e /proc/$p/cmdline ] && alive_after="$alive_after $p"; done
    took=$((SECONDS - before))
    bench=
}
# none_left NAME: no process recorded before the signal is alive (and a hetring one)
none_left() {
    local left=
    for p in $(cat "$tmp/$1.pids"); do
        [ -d /proc/$p ] && grep -q hetring /proc/$p/cmdline 2>/dev/null && left="$left $p:$(tr '\0' ' ' < /proc/$p/cmdline)"
    done
    [ -s "$tmp/$1.pids" ] || fail "$1: no child process was seen before the signal"
    [ -z "$alive_after" ] || fail "$1: processes still alive as the bench exited:$alive_after"
    [ -z "$left" ] || fail "$1: processes left running:$left"
}
run_bench() {
    "$HR" bench hetero --port "$base" --out "$tmp/$1" --iters 400 --batch 64 --layers 784,16,10 \
        --scenarios homogeneous,one-slow --policies model > "$tmp/$1.out" 2> "$tmp/$1.err" &
    bench=$!
    child_rec $bench
}

# SIGINT in the second scenario
run_bench int
wait_for 90 first_done int || fail "int: the first scenario did not finish in 90 s"
wait_for 30 nodes_running || fail "int: no cluster of the second scenario running"
stop INT int
[ $rc = 130 ] || fail "int: exit $rc, expected 130"
[ $took -le 20 ] || fail "int: took $took s to stop"
grep -Eq '^homogeneous   static +[0-9]+ ' "$tmp/int.out" && grep -Eq '^homogeneous   model +[0-9]+ ' "$tmp/int.out" ||
    fail "int: the first scenario's rows are not on stdout"
grep -q '^bench hetero: stopped by SIGINT after 2 of 4 runs (0 failed)' "$tmp/int.out" ||
    fail "int: no 'stopped by SIGINT after 2 of 4 runs' line"
# the run in progress was stopped, not waited for: node 0 recorded fewer than its 400 iterations
m0=$tmp/int/one-slow-static-node0.jsonl
[ ! -f "$m0" ] || [ "$(wc -l < "$m0")" -lt 400 ] ||
    fail "int: the run in progress was not stopped: $m0 holds all $(wc -l < "$m0") iterations"
grep -q 'failed (hetring local exited' "$tmp/int.err" && fail "int: the stopped run was reported as a failure"
grep -q '^| homogeneous | model | [0-9]' "$tmp/int/report.md" && grep -q '^\*\*Stopped by signal 2\*\*' "$tmp/int/report.md" ||
    fail "int: report.md lacks the first scenario or the stop: $(cat "$tmp/int/report.md")"
none_left int
cat "$tmp/int.out"

# SIGTERM in the first run
run_bench term
wait_for 30 nodes_running || fail "term: no cluster running"
stop TERM term
[ $rc = 143 ] || fail "term: exit $rc, expected 143"
[ $took -le 20 ] || fail "term: took $took s to stop"
grep -q '^bench hetero: stopped by SIGTERM after 0 of 4 runs' "$tmp/term.out" || fail "term: no 'stopped by SIGTERM after 0 of 4 runs' line: $(cat "$tmp/term.out")"
none_left term

# SIGINT during the DDP baseline: its whole process group goes, a helper ignoring SIGTERM too
mkdir -p "$tmp/py"
cat > "$tmp/py/python3" <<EOS
#!/bin/sh
case "\$1" in
-c) echo "0.0-fake 3.99.1"; exit 0 ;;
*ddp_baseline.py)
    sh -c '$standin_rec; trap "" TERM; rec \$\$ > "$tmp/py/helper.pid"; exec sleep 300' &
    wait; exit 0 ;;
esac
exit 3
EOS
chmod +x "$tmp/py/python3"
PATH="$tmp/py:$PATH" "$HR" bench hetero --port "$base" --ddp --out "$tmp/ddp" --iters 20 --batch 64 --layers 784,16,10 \
    --scenarios homogeneous --policies model > "$tmp/ddp.out" 2> "$tmp/ddp.err" &
bench=$!
child_rec $bench
on_exit="standin_kill '$tmp/py/helper.pid'"
wait_for 90 test -s "$tmp/py/helper.pid" || fail "ddp: the fake DDP baseline did not start in 90 s"
helper=$(cat "$tmp/py/helper.pid" 2>/dev/null)
stop INT ddp
[ $rc = 130 ] || fail "ddp: exit $rc, expected 130"
[ $took -le 20 ] || fail "ddp: took $took s to stop"
[ -n "$helper" ] && ! proc_alive $helper || fail "ddp: the baseline's helper ${helper% *} outlived the bench"
standin_kill "$tmp/py/helper.pid"
none_left ddp
grep -Eq '^homogeneous   model +[0-9]+ ' "$tmp/ddp.out" && grep -q '^bench hetero: stopped by SIGINT after 2 of 2 runs' "$tmp/ddp.out" ||
    fail "ddp: the runs before the baseline are not reported: $(cat "$tmp/ddp.out")"
grep -q 'ddp-gloo' "$tmp/ddp.out" && fail "ddp: a DDP row from a stopped baseline"

echo "$fails failure(s)"
[ "$fails" = 0 ]
