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

# signal_script NAME PID SIG WANT OUT [WHY]: send SIG to the script PID (started in the
# background of this shell), give it 30 s to end (else fail, with WHY, and SIGKILL it), reap it
# and fail unless it exited WANT (OUT: its output, shown then). The stop check of every test of
# a script's signal handling.
signal_script() {
    local name=$1 pid=$2 sig=$3 want=$4 out=$5 why=${6:-} rc
    kill "-$sig" "$pid"
    for _ in $(seq 300); do kill -0 "$pid" 2> /dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2> /dev/null; then
        fail "$name still ran 30 s after SIG$sig${why:+ ($why)}"
        kill -KILL "$pid"
    fi
    wait "$pid"
    rc=$?
    [ $rc = "$want" ] || fail "$name exited $rc after SIG$sig, not $want: $(cat "$out")"
}
