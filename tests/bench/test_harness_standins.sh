#!/usr/bin/env bash
# test_harness_standins.sh: tests/harness.sh's stops of the stand-ins and scripts a test
# started signal those and no other process that got one of their pids since (pids are reused:
# a SIGKILL to a recorded pid at a test's end could hit another process of the machine):
#   - standin_kill kills a stand-in that runs (recorded by `rec`), not a process that holds the
#     pid of one that ended (a record whose start time is not the process's);
#   - proc_alive: true for the stand-in until it is killed, false for that other process;
#   - signal_script signals its script, and not a process that is not this shell's child.
set -u
SRC=$(cd "$(dirname "$0")/../.." && pwd)
HR=unused
. "$SRC/tests/harness.sh"

# the other process of the machine, recorded so that on_exit stops it (it may be killed wrongly)
sh -c "$standin_rec"'; rec $$ > "$1"; exec sleep 300' - "$tmp/other" &
other=$!
# a stand-in that ended; then the other process takes its pid, which its record still names
sh -c "$standin_rec"'; rec $$' > "$tmp/ended"
on_exit="standin_kill '$tmp/other' '$tmp/standin'"
for _ in $(seq 100); do [ -s "$tmp/other" ] && break; sleep 0.05; done
read -r p other_start < "$tmp/other"
read -r _ ended_start < "$tmp/ended"
[ "$p" = "$other" ] && [ -n "$other_start" ] && [ -n "$ended_start" ] ||
    { echo "FAIL: rec recorded '$p $other_start' for $other and '$ended_start' for one that ended"; exit 1; }
# (a start time counts clock ticks: the pid's new process must start a tick later)
for _ in $(seq 100); do
    [ "$ended_start" = "$other_start" ] || break
    sleep 0.05
    sh -c "$standin_rec"'; rec $$' > "$tmp/ended"
    read -r _ ended_start < "$tmp/ended"
done
echo "$other $ended_start" > "$tmp/recorded"

# a stand-in that runs
sh -c "$standin_rec"'; rec $$ > "$1"; exec sleep 300' - "$tmp/standin" &
standin=$!
for _ in $(seq 100); do [ -s "$tmp/standin" ] && break; sleep 0.05; done
read -r p standin_start < "$tmp/standin"
[ "$p" = "$standin" ] || fail "rec recorded '$p' for the stand-in $standin"
proc_alive "$standin" "$standin_start" || fail "proc_alive: the stand-in $standin does not run"
proc_alive "$other" "$ended_start" && fail "proc_alive: $other, a pid reused, is the stand-in that ended"

standin_kill "$tmp/recorded" "$tmp/standin"
wait "$standin"
rc=$?
[ $rc = 137 ] || fail "standin_kill: the stand-in exited $rc, not 137 (SIGKILL)"
proc_alive "$standin" "$standin_start" && fail "proc_alive: the stand-in $standin runs after SIGKILL"
proc_alive "$other" "$other_start" || fail "standin_kill killed $other, which took the pid of a stand-in that ended"

# signal_script: a process that is not this shell's child (the pid of a script that ended, taken
# by another process) gets no signal
(sh -c "$standin_rec"'; rec $$ > "$1"; exec sleep 300' - "$tmp/orphan" &)
for _ in $(seq 100); do [ -s "$tmp/orphan" ] && break; sleep 0.05; done
read -r orphan orphan_start < "$tmp/orphan"
on_exit="$on_exit '$tmp/orphan'"
(signal_script orphan "$orphan" TERM 143 /dev/null) > "$tmp/signal.out" 2>&1
proc_alive "$orphan" "$orphan_start" || fail "signal_script signalled $orphan, not a child of this shell"
# and its own script: SIGTERM, exit 143
bash -c 'trap "exit 143" TERM; while :; do sleep 0.1; done' &
script=$!
signal_script "a script" "$script" TERM 143 /dev/null
[ "$fails" = 0 ]
