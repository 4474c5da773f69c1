#!/usr/bin/env bash
# fake_node.sh run --conf FILE --node ID [ARGS...]: a stand-in for `hetring run` that the
# launcher test (test_launch.c) starts instead of hetring, so that it can script each node.
#
# FAKE_DIR is a directory for the node's records; FAKE_PLAN_<ID> lists one action per start of
# node ID (the last repeats): ok:S (sleep S seconds, exit 0), exit:N (exit N at once), early:N
# (exit N at once, before it joined the cluster: a start-up failure), idle:S (sleep S seconds,
# 60 without :S, and exit 0, never having joined: a node still in its first election), kill:S
# (sleep S, then SIGKILL itself), hang (sleep until a signal), stop (SIGSTOP itself, then hang),
# orphan (leave a process behind in its process group that ignores SIGTERM and holds the output
# pipe for 60 s, then hang).
# Every start appends its pid to $FAKE_DIR/count.ID. SIGTERM and SIGINT are answered the way a
# node that checkpoints and leaves answers them: the signal's name goes to $FAKE_DIR/sig.ID and
# the node exits 0, FAKE_LEAVE_<ID> seconds later (default 0: at once). Once it answers them, it
# appends its pid to $FAKE_DIR/ready.ID (orphan: the process it leaves, to orphan.ID); with
# FAKE_AFTER_<ID>="FILE ..." it then waits (at most 20 s) until each $FAKE_DIR/FILE is there
# before its action, so that a test can order the nodes' steps however slowly a loaded machine
# starts them (FAKE_AFTER_0="ready.2": node 0 acts once node 2 answers signals). Every action
# but early:N and idle first says the node joined the cluster, on the launcher's
# $HETRING_LAUNCH_FD, as `hetring run` does when its first view formed, and then appends its pid
# to $FAKE_DIR/joined.ID.
id=$5
dir=${FAKE_DIR:?}
echo $$ >> "$dir/count.$id" # the launcher made $$ a process group: the test's clean-up kills it
n=$(wc -l < "$dir/count.$id")
plan_var=FAKE_PLAN_$id
read -r -a plan <<< "${!plan_var:-ok:0}"
k=$(( n <= ${#plan[@]} ? n - 1 : ${#plan[@]} - 1 ))
action=${plan[$k]}
sp=
leave_var=FAKE_LEAVE_$id
leave() {
    echo "$1" >> "$dir/sig.$id"
    # the background sleeps, also one whose $! was not yet taken when the signal came
    kill $(jobs -p) 2>/dev/null
    sleep "${!leave_var:-0}"
    exit 0
}
trap 'leave TERM' TERM
trap 'leave INT' INT
echo $$ >> "$dir/ready.$id"
nap() { sleep "$1" & wait $!; }
after_var=FAKE_AFTER_$id
for f in ${!after_var:-}; do
    for _ in $(seq 200); do [ -s "$dir/$f" ] && break; sleep 0.1; done
done
echo "fake node $id start $n: $action"
case ${action%%:*} in
    early | idle) ;;
    *) [ -n "${HETRING_LAUNCH_FD:-}" ] && echo "$id" >&"$HETRING_LAUNCH_FD"
       echo $$ >> "$dir/joined.$id" ;;
esac
case $action in
    early:*) exit "${action#early:}" ;;
    idle) nap 60; exit 0 ;;
    idle:*) nap "${action#idle:}"; exit 0 ;;
    ok:*) nap "${action#ok:}"; exit 0 ;;
    exit:*) exit "${action#exit:}" ;;
    kill:*) nap "${action#kill:}"; kill -KILL $$ ;;
    hang) nap 60; exit 0 ;;
    stop) kill -STOP $$; nap 60; exit 0 ;;
    orphan)
        (trap '' TERM INT; exec sleep 60) &
        echo $! >> "$dir/orphan.$id"
        disown
        nap 60; exit 0 ;;
esac
echo "fake node $id: unknown action '$action'" >&2
exit 99
