# script_args.sh: the start every bench script that measures a HETRING shares. Sourced; then
#   script_hetring "$@"; HR=$1; shift
# prints the script's header comment (from line 2 to `set -u`) as its usage for -h/--help
# (exit 0) or no argument (exit 2), and refuses at once a HETRING that is not an executable
# file (exit 2): each node's start would fail and every wait run to its end, minutes before
# the script said anything. script_run and script_traps (below) run its commands so that a
# SIGTERM or SIGINT to the script alone stops them; script_lock and script_locked run them one
# at a time with every other holder of a lock (the bench lock).
. "$(dirname "${BASH_SOURCE[0]}")/proc.sh"
script_usage() { sed -n '2,/^set -u/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; }
script_hetring() {
    case ${1:-} in
    -h | --help) script_usage; exit 0 ;;
    "") script_usage >&2; exit 2 ;;
    esac
    [ -f "$1" ] && [ -x "$1" ] || {
        echo "$(basename "$0"): '$1' is not an executable file (the hetring to measure; --help)" >&2
        exit 2
    }
}

# script_run CMD...: CMD in the background of this shell, waited for (script_run's status is
# CMD's, its stdin /dev/null), so that a SIGTERM or SIGINT to the script alone reaches it: bash
# takes a trapped signal as soon as `wait` is interrupted, only once a command in the foreground
# ends. A script that runs several at once (a cluster's nodes) starts each with & and adds it
# with `script_add $!` (to script_pids, recorded with its start time: bench/proc.sh), and empties
# script_pids once it waited for them. script_traps [CMD], once before the first run, makes such
# a signal end the script (143 or 130) and, at exit, sends the runs in progress (script_pids)
# and their children (that of /usr/bin/time or timeout) SIGTERM and, 10 s later, SIGKILL, with
# the process group of a run that leads one (timeout's, which holds the processes its command
# starts: mpirun's ranks, a bench's nodes); then it runs CMD (e.g. removes a temporary folder
# the run writes in). Only processes that still run get a signal, no other that got a pid of
# theirs since they ended (a run of script_pids not waited for yet, say).
script_pids=()
script_add() {
    script_pids+=("$1")
    child_rec "$1"
}
script_run() {
    local rc=0
    "$@" < /dev/null &
    script_pids=()
    script_add $!
    wait "${script_pids[0]}" || rc=$?
    script_pids=()
    return $rc
}
# script_stop: the runs of script_pids that still run and their children get SIGTERM; what is
# left of them and of the groups they lead 10 s later, SIGKILL. Each process by its pid and
# start time ("PID START"), read while it runs: the runs' at their start (script_add), their
# children's and group members' here, from pgrep's list.
script_stop() {
    [ ${#script_pids[@]} -gt 0 ] || return 0
    local term=() watch=() leads=() p q g left=0
    for p in "${script_pids[@]}"; do
        child_runs "$p" || continue
        g=${proc_f[2]}
        term+=("$p ${child_start[$p]}")
        for q in $(pgrep -P "$p" 2> /dev/null); do proc_stat "$q" && term+=("$q ${proc_f[19]}"); done
        [ "$g" = "$p" ] || continue
        leads+=("$p ${child_start[$p]}")
        for q in $(pgrep -g "$p" 2> /dev/null); do proc_stat "$q" && watch+=("$q ${proc_f[19]}"); done
    done
    watch+=("${term[@]}")
    for p in "${term[@]}"; do proc_signal TERM $p || true; done
    for _ in $(seq 100); do
        left=0
        for p in "${watch[@]}"; do proc_alive $p && left=1 && break; done
        [ $left = 1 ] || break
        sleep 0.1
    done
    if [ $left = 1 ]; then
        # a group by its leader's pid only while the leader runs, when that is its id
        for p in "${leads[@]}"; do proc_alive $p && kill -KILL -- "-${p% *}" 2> /dev/null || true; done
        for p in "${watch[@]}"; do proc_signal KILL $p || true; done
    fi
    script_pids=()
}
script_traps() {
    trap "script_stop; ${1:-}" EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
}

# script_lock FILE: FILE (made if missing) becomes the script's lock, open in this shell
# (script_lock_fd); exits 2 if it cannot be opened. script_locked CMD... is script_run CMD
# holding flock FILE, released once CMD ended: the wait for it runs as a run too (a signal stops
# it), and the lock belongs to this shell's open file, which CMD does not get, so that a run left
# behind never holds it. Exits 2 if flock fails.
script_lock_file=
script_lock_fd=
script_lock() {
    script_lock_file=$1
    { : >> "$1"; } 2> /dev/null || [ -r "$1" ] ||
        { echo "$(basename "$0"): cannot create the lock $1" >&2; exit 2; }
    exec {script_lock_fd}< "$1"
}
script_locked() {
    local rc=0
    script_run flock "$script_lock_fd" ||
        { echo "$(basename "$0"): flock $script_lock_file failed" >&2; exit 2; }
    script_run "$@" {script_lock_fd}>&- || rc=$?
    flock -u "$script_lock_fd"
    return $rc
}
