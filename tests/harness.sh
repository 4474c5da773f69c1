# harness.sh: the setup every multi-process test script shares, sourced once the script has set
# HR (and its other arguments). Gives a failure counter (`fail MSG`; the script ends with
# `[ "$fails" = 0 ]` or dist/lib.sh's `finish`), a temporary directory $tmp removed on exit, and
# `base`, the first of 8 ports claimed for this script (tests/ports.sh). A script that must stop
# something of its own on exit puts the command in `on_exit`, run before $tmp goes. Waits on a
# node's state go through `wait_for_line` (below), never a bare sleep.
set -u
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
. "$(dirname "${BASH_SOURCE[0]}")/ports.sh"
on_exit=
tmp=$(mktemp -d)
# keep_tmp: with HR_TEST_KEEP=DIR, a script that failed (a `fail`, or a non-zero exit) leaves
# a copy of $tmp (node logs, metrics, cluster files) in DIR/SCRIPT-PID, for the failure that does
# not repeat. First in every EXIT trap, so that it sees the script's exit status.
keep_tmp() {
    local rc=$?
    [ -n "${HR_TEST_KEEP:-}" ] && { [ "$fails" != 0 ] || [ "$rc" != 0 ]; } || return 0
    mkdir -p "$HR_TEST_KEEP" && cp -a "$tmp" "$HR_TEST_KEEP/$(basename "$0" .sh)-$$"
    echo "kept $tmp as $HR_TEST_KEEP/$(basename "$0" .sh)-$$"
}
trap 'keep_tmp; eval "$on_exit"; rm -rf "$tmp"; port_release' EXIT
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
# `rec $$ >> FILE`: a line "PID START", START the process's start time (clock ticks since boot,
# field 22 of /proc/PID/stat). A pid alone does not name a process once it ended: another
# process of the machine may have it (within seconds where pid_max is 32768 and builds run), and
# a SIGKILL to it at the test's end would hit that one. proc_alive PID START: that process still
# runs (not a zombie, not another that got PID since). proc_ends PID START: true once it does not,
# false if it still runs after 10 s (a SIGKILL is taken when the process next runs, which on a
# loaded machine may be a while after the kill returned). standin_kill FILE...: SIGKILL to each
# process of FILE's lines that still runs, to no other. proc_stat PID: the fields of
# /proc/PID/stat from the state on into proc_f ([0] the state, [1] the parent's pid, [19] the
# start time), without a fork (whose process could get a pid being checked); fails once PID is
# gone.
standin_rec='rec() { read -r s < "/proc/$1/stat"; p=$1; s=${s##*") "}; set -- $s; echo "$p ${20}"; }'
proc_f=()
proc_stat() {
    local s
    read -r s 2> /dev/null < "/proc/$1/stat" || return 1
    read -ra proc_f <<< "${s##*) }"
}
proc_alive() { proc_stat "$1" && [ "${proc_f[19]}" = "$2" ] && [ "${proc_f[0]}" != Z ]; }
proc_ends() {
    for _ in $(seq 100); do proc_alive "$1" "$2" || return 0; sleep 0.1; done
    ! proc_alive "$1" "$2"
}
standin_kill() {
    local f p start
    for f; do
        [ -f "$f" ] || continue
        while read -r p start; do proc_alive "$p" "$start" && kill -KILL "$p" 2> /dev/null; done < "$f"
    done
    return 0
}

# signal_script NAME PID SIG WANT OUT [WHY]: send SIG to the script PID (started in the
# background of this shell), give it 30 s to end (else fail, with WHY, and SIGKILL it), reap it
# and fail unless it exited WANT (OUT: its output, shown then). The stop check of every test of
# a script's signal handling. PID gets a signal only while it is this shell's child, the one it
# started (proc_alive): bash reaps an ended child at once, and its pid may be another's then.
signal_script() {
    local name=$1 pid=$2 sig=$3 want=$4 out=$5 why=${6:-} rc start=
    proc_stat "$pid" && [ "${proc_f[1]}" = $$ ] && [ "${proc_f[0]}" != Z ] && start=${proc_f[19]}
    [ -z "$start" ] || kill "-$sig" "$pid"
    for _ in $(seq 300); do proc_alive "$pid" "$start" || break; sleep 0.1; done
    if proc_alive "$pid" "$start"; then
        fail "$name still ran 30 s after SIG$sig${why:+ ($why)}"
        kill -KILL "$pid"
    fi
    wait "$pid"
    rc=$?
    [ $rc = "$want" ] || fail "$name exited $rc after SIG$sig, not $want: $(cat "$out")"
}
