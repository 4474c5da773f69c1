#!/usr/bin/env bash
# test_harness_standins.sh: tests/harness.sh's stops of the stand-ins and scripts a test
# started signal those and no other process that got one of their pids since (pids are reused:
# a SIGKILL to a recorded pid at a test's end could hit another process of the machine):
#   - standin_kill kills a stand-in that runs (recorded by `rec`), not a process that holds the
#     pid of one that ended (a record whose start time is not the process's);
#   - proc_alive: true for the stand-in until it is killed, false for that other process;
#   - signal_script signals its script, and not a process that is not this shell's child;
#   - the EXIT trap of a script that sources tests/harness.sh SIGKILLs the children it recorded
#     (child_rec) that still run, with the command of one that leads a process group (timeout's),
#     not a process that holds the pid of a child that ended; child_rec records no process that
#     is not the shell's child, and child_signal signals none it did not record;
#   - bench/script_args.sh's script_stop stops the runs of script_pids that still run (added
#     by script_add), not a process that holds the pid of a run that ended, nor one that
#     script_add did not record.
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

# child_rec, child_signal and the EXIT trap's child_kill_all, in a script of their own: a child,
# a child under timeout (its command in timeout's group), and the record of a child that ended
# whose pid the other process took
cat > "$tmp/children.sh" << 'EOS'
HR=unused
. "$1/tests/harness.sh"
out=$2 other=$3 ended_start=$4 orphan=$5
sleep 300 &
child_rec $!
echo "child $! ${child_start[$!]:-}" > "$out"
timeout 300 sh -c "$standin_rec"'; rec $$ > "$1"; exec sleep 300' - "$out.cmd" &
child_rec $!
echo "timeout $! ${child_start[$!]:-}" >> "$out"
for _ in $(seq 100); do [ -s "$out.cmd" ] && break; sleep 0.05; done
child_rec "$orphan"
child_signal KILL "$orphan" && echo "signalled the orphan" >> "$out"
echo "recorded ${#child_start[@]}" >> "$out"
child_start[$other]=$ended_start
exit 3
EOS
bash "$tmp/children.sh" "$SRC" "$tmp/children" "$other" "$ended_start" "$orphan"
rc=$?
[ $rc = 3 ] || fail "the script of children exited $rc, not 3"
grep -q "signalled the orphan" "$tmp/children" && fail "child_signal signalled $orphan, which it did not record"
grep -q "^recorded 2$" "$tmp/children" || fail "child_rec recorded other than its two children: $(cat "$tmp/children")"
while read -r what p start; do
    case $what in child | timeout) ;; *) continue ;; esac
    [ -n "$start" ] || { fail "child_rec did not record the $what $p"; continue; }
    proc_ends "$p" "$start" || fail "the EXIT trap left the $what $p running"
done < "$tmp/children"
read -r p start < "$tmp/children.cmd"
proc_ends "$p" "$start" || fail "the EXIT trap left timeout's command $p running"
proc_alive "$orphan" "$orphan_start" || fail "child_rec or the EXIT trap signalled $orphan, not a child"
proc_alive "$other" "$other_start" || fail "the EXIT trap killed $other, which took the pid of a child that ended"

# script_stop: a run that still runs; a run that ended, its pid taken by the other process; a pid
# put in script_pids without script_add (the orphan's)
cat > "$tmp/runs.sh" << 'EOS'
. "$1/bench/script_args.sh"
out=$2 other=$3 ended_start=$4 orphan=$5
sleep 300 &
script_add $!
echo "run $! ${child_start[$!]:-}" > "$out"
script_add "$other"
child_start[$other]=$ended_start
script_pids+=("$orphan")
script_stop
wait "${script_pids[0]:-$(cut -d' ' -f2 "$out")}" 2> /dev/null
echo "status $?" >> "$out"
EOS
bash "$tmp/runs.sh" "$SRC" "$tmp/runs" "$other" "$ended_start" "$orphan"
read -r _ p start < "$tmp/runs"
[ -n "$start" ] || fail "script_add did not record the run $p"
grep -q "^status 143$" "$tmp/runs" || fail "script_stop: the run did not end by SIGTERM: $(cat "$tmp/runs")"
proc_alive "$other" "$other_start" || fail "script_stop signalled $other, which took the pid of a run that ended"
proc_alive "$orphan" "$orphan_start" || fail "script_stop signalled $orphan, which script_add did not record"
[ "$fails" = 0 ]
