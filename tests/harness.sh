# harness.sh: the setup every multi-process test script shares, sourced once the script has set
# HR (and its other arguments). Gives a failure counter (`fail MSG`; the script ends with
# `[ "$fails" = 0 ]` or dist/lib.sh's `finish`), a temporary directory $tmp removed on exit, and
# `base`, the first of 8 ports claimed for this script (tests/ports.sh). A script that must stop
# something of its own on exit puts the command in `on_exit`, run before $tmp goes; the
# processes it started and recorded (child_rec, below) are SIGKILLed then too. Waits on a
# node's state go through `wait_for_line` (below), never a bare sleep.
set -u
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
. "$(dirname "${BASH_SOURCE[0]}")/ports.sh"
. "$(dirname "${BASH_SOURCE[0]}")/../bench/proc.sh"
on_exit=
tmp=$(mktemp -d)
# keep_tmp: with HR_TEST_KEEP=DIR, a script that failed (a `fail`, or a non-zero exit) leaves
# a copy of $tmp (node logs, metrics, cluster files) in DIR/SCRIPT-PID, for the failure that does
# not repeat. First in every EXIT trap, so that it sees the script's exit status.
keep_tmp() {
    local rc=${1:-$?}
    [ -n "${HR_TEST_KEEP:-}" ] && { [ "$fails" != 0 ] || [ "$rc" != 0 ]; } || return 0
    mkdir -p "$HR_TEST_KEEP" && cp -a "$tmp" "$HR_TEST_KEEP/$(basename "$0" .sh)-$$"
    echo "kept $tmp as $HR_TEST_KEEP/$(basename "$0" .sh)-$$"
}
# harness_exit, the EXIT trap, acts in this script's own shell alone: a child that bash forked
# for `CMD &` and that a signal ends before it execs CMD runs the trap too (bash 5.2), which
# removed $tmp and killed this script's processes under it (signal_script of a script just
# started).
harness_exit() {
    local rc=$?
    [ "$BASHPID" = $$ ] || return $rc
    keep_tmp $rc
    eval "$on_exit"
    child_kill_all
    rm -rf "$tmp"
    port_release
}
trap harness_exit EXIT
port_block || exit 1 # base: 8 ports no other test holds

# wait_for_line FILE REGEX TIMEOUT_S [COUNT]: until FILE holds COUNT (default 1) lines matching
# REGEX (grep -E); past TIMEOUT_S seconds it fails the test (`fail`) and returns 1. The way to
# wait for a node to reach a state it logs, instead of a sleep that guesses how long it takes.
wait_for_line() {
    local f=$1 re=$2 limit=$3 want=${4:-1} end n
    end=$(($(date +%s%N) / 1000000 + ${limit%.*} * 1000))
    while :; do
        n=$(grep -cE -- "$re" "$f" 2>/dev/null)
        [ "${n:-0}" -ge "$want" ] && return 0
        [ $(($(date +%s%N) / 1000000)) -ge $end ] && break
        sleep 0.05
    done
    fail "${f##*/}: $want line(s) matching '$re' not there within $limit s (found ${n:-0})"
    return 1
}

# Stand-ins. A test that runs a script with stand-ins for what the script starts (a /bin/sh
# script of the test's that sleeps, say) and must find or stop them later puts the line
# $standin_rec in each, which defines `rec PID`, and has each record itself with
# `rec $$ >> FILE`: a line "PID START", START the process's start time (bench/proc.sh: a pid
# alone does not name a process once it ended). proc_ends PID START: true once that process
# does not run (proc_alive), false if it still runs after 10 s (a SIGKILL is taken when the
# process next runs, which on a loaded machine may be a while after the kill returned).
# standin_kill FILE...: SIGKILL to each process of FILE's lines that still runs, to no other.
# What the test starts itself in the background (a node, a proxy) it records with `child_rec $!`
# (bench/proc.sh) and signals with child_signal; the EXIT trap SIGKILLs those that still run
# (child_kill_all), and no process that got one of their pids since.
standin_rec='rec() { read -r s < "/proc/$1/stat"; p=$1; s=${s##*") "}; set -- $s; echo "$p ${20}"; }'
proc_ends() {
    for _ in $(seq 100); do proc_alive "$1" "$2" || return 0; sleep 0.1; done
    ! proc_alive "$1" "$2"
}
standin_kill() {
    local f p start
    for f; do
        [ -f "$f" ] || continue
        while read -r p start; do proc_signal KILL "$p" "$start"; done < "$f"
    done
    return 0
}

# signal_script NAME PID SIG WANT OUT [WHY]: send SIG to the script PID (started in the
# background of this shell), give it 30 s to end (else fail, with WHY, and SIGKILL it), reap it
# and fail unless it exited WANT (OUT: its output, shown then). The stop check of every test of
# a script's signal handling. PID gets a signal only while it is this shell's child, the one it
# started (child_rec): bash reaps an ended child at once, and its pid may be another's then.
signal_script() {
    local name=$1 pid=$2 sig=$3 want=$4 out=$5 why=${6:-} rc
    child_rec "$pid"
    child_signal "$sig" "$pid"
    for _ in $(seq 300); do child_runs "$pid" || break; sleep 0.1; done
    if child_runs "$pid"; then
        fail "$name still ran 30 s after SIG$sig${why:+ ($why)}"
        child_signal KILL "$pid"
    fi
    wait "$pid"
    rc=$?
    [ $rc = "$want" ] || fail "$name exited $rc after SIG$sig, not $want: $(cat "$out")"
}
