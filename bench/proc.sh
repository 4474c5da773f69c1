# proc.sh: signals to the processes a script started, and to no other. Sourced by
# bench/script_args.sh and tests/harness.sh. A pid alone does not name a process once it ended:
# bash reaps an ended child at once, and the kernel gives its pid to another process of the
# machine (within seconds where pid_max is 32768 and builds run), so a SIGKILL to a remembered
# pid, or `kill -0` taken for "it still runs", may reach that one. A process is named here by its
# pid and its start time (clock ticks since boot, field 22 of /proc/PID/stat), which no later
# process of that pid shares.
#   proc_stat PID: the fields of /proc/PID/stat from the state on into proc_f ([0] the state,
#     [1] the parent's pid, [2] the process group, [19] the start time), without a fork (whose
#     process could get a pid being checked); fails once PID is gone.
#   proc_alive PID START: that process still runs (not a zombie, not another that got PID since).
#   proc_signal SIG PID START: SIG to that process if it still runs, to no other; fails if not.
#   child_rec PID...: each PID, a process this shell started (`CMD &`, then `child_rec $!` at
#     once, in the shell that started it), with its start time in child_start; a PID that is not
#     this shell's child (it ended, and its pid is another's already) is not recorded.
#   child_runs PID: the child recorded as PID still runs.
#   child_signal SIG PID...: SIG to each of them that child_rec recorded and that still runs;
#     fails if none did.
#   child_kill_all: SIGKILL to every recorded child that still runs, with the process group of
#     one that leads its own (timeout's, which holds the command it runs), and reaps them.
#   proc_orphan_watch FILE: a watcher in the background for what this shell leaves running
#     when it ends without its traps (SIGKILL): once this shell is gone it sends SIGTERM, and
#     SIGKILL 10 s later, to each process of FILE's "PID START" lines that still runs, to no
#     other; where FILE is gone by then (the shell's traps stopped them and removed it), it
#     does nothing. For processes meant to run until stopped (nodes of endless iterations).
proc_f=()
proc_stat() {
    local s
    read -r s 2> /dev/null < "/proc/$1/stat" || return 1
    read -ra proc_f <<< "${s##*) }"
}
proc_alive() { proc_stat "$1" && [ "${proc_f[19]}" = "$2" ] && [ "${proc_f[0]}" != Z ]; }
proc_signal() { proc_alive "$2" "$3" && kill "-$1" "$2" 2> /dev/null; }

declare -gA child_start=()
child_rec() {
    local p
    for p; do
        proc_stat "$p" && [ "${proc_f[1]}" = "$BASHPID" ] && child_start[$p]=${proc_f[19]}
    done
    return 0
}
child_runs() { [ -n "${child_start[$1]:-}" ] && proc_alive "$1" "${child_start[$1]}"; }
child_signal() {
    local sig=$1 p r=1
    shift
    for p; do child_runs "$p" && kill "-$sig" "$p" 2> /dev/null && r=0; done
    return $r
}
child_kill_all() {
    local p killed=()
    for p in "${!child_start[@]}"; do
        child_runs "$p" || continue
        # (its group: only while it runs and leads it, when the group's id is its pid)
        [ "${proc_f[2]}" = "$p" ] && kill -KILL -- "-$p" 2> /dev/null
        kill -KILL "$p" 2> /dev/null && killed+=("$p")
    done
    for p in "${killed[@]}"; do wait "$p" 2> /dev/null || true; done
    return 0
}
proc_orphan_watch() {
    proc_stat "$BASHPID" || return 1
    local me=$BASHPID start=${proc_f[19]}
    (
        while proc_alive "$me" "$start"; do sleep 1; done
        [ -f "$1" ] || exit 0
        mapfile -t left < "$1"
        [ ${#left[@]} -gt 0 ] || exit 0
        for p in "${left[@]}"; do proc_signal TERM $p; done
        for _ in $(seq 100); do
            for p in "${left[@]}"; do proc_alive $p && break; done || exit 0
            sleep 0.1
        done
        for p in "${left[@]}"; do proc_signal KILL $p; done
    ) < /dev/null > /dev/null 2>&1 &
}
