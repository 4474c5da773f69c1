#!/usr/bin/env bash
# elastic_test.sh SCENARIO MODE RING_NODE: elastic membership (ring_elect) with real processes on
# 127.0.0.1. Every node runs `ring_node CONF ID elastic STOPFILE 30`: elect, then rounds of
# checked all-reduces, re-electing after a failure or an admit request (tests/ring/ring_node.c).
#   kill    4 nodes; SIGKILL node 0: the 3 survivors install a view of 3 within 3 s and go on;
#           node 0 restarts and is admitted (it takes rank 1's state): all 4 go on in a new view
#   quorum  4 nodes; SIGKILL nodes 2 and 3: nodes 0 and 1 pause (no view of 2, the log says
#           they wait for a quorum, and no round in any view between two of those lines);
#           node 3 restarts: 0, 1 and 3 go on
#   stop    4 nodes; SIGSTOP node 1 for 6 s (timeout 2 s): the others go on without it; after
#           SIGCONT it rejoins through an admit request and all 4 go on
#   blame   5 nodes; three times a node is stopped (SIGSTOP: nodes 1, 3 and 0 in turn) and
#           continued once the others went on without it: every survivor's failure line names
#           the stopped node, though the nodes after it wait on each other and time out at
#           about the same moment (issue 29: the one after the stopped node's successor named
#           its own predecessor, alive and waiting, as dead)
#   relife  4 nodes; SIGKILL node 3, then start it again: node 0 decides the view that admits it
#           and (test hook HETRING_TEST_JOIN_WAIT) waits 3 s before forming it; node 0 is
#           killed inside that wait and started again at once, while the others form the view.
#           The new node 0 must not adopt the view decided with its earlier life (it records that
#           life's lineage, and would make the new process the donor): it says so, the view
#           fails, node 0's first view has it take another node's state, and all 4 go on
#   scale   NODES nodes (default 40: a bounded election, ring/elect.c), started together: the
#           first view of all forms within 20 s; SIGKILL node NODES/2: the survivors' view
#           within 8 s, and its restart is admitted within 8 s; SIGKILL nodes 0 and 1 (both
#           candidates every other node calls): the others' view within 8 s; node 0 restarts
#           and is admitted within 8 s while node 1 stays down. No gate evicted a connection
#           (every connection here is an honest lobby call or ring link)
# Every scenario also checks, over all nodes' logs: no wrong sum, no view below the quorum, and
# no epoch with two different member sets. MODE is none, auth (PSK) or encrypt (identity keys).
set -u
scenario=$1 mode=$2 NODE=$3
. "$(dirname "$0")/../harness.sh"
. "$(dirname "$0")/security.sh"
now() { date +%s.%N; }
calc() { awk "BEGIN{printf \"%.2f\", $*}"; }

N=4
[ "$scenario" = scale ] && N=${NODES:-40}
[ "$scenario" = blame ] && N=5
port[0]=$base
for ((i = 1; i < N; i++)); do # blocks of 8 ports, claimed as needed (tests/ports.sh)
    [ $((i % 8)) = 0 ] && { port_block || exit 1; }
    port[$i]=$((base + i % 8))
done
for ((i = 0; i < N; i++)); do pub[$i]=$("$NODE" keygen "$tmp/node$i.key"); done
printf '# test psk\n%s\n' "$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')" > "$tmp/psk"
chmod 600 "$tmp/psk"
{
    printf '[cluster]\nname = elastic\nconnect_timeout = %s\ntimeout = 2\n' "$( [ $N -gt 4 ] && echo 20 || echo 5)"
    security_lines "$mode"
    printf '[train]\niterations = 1\n'
    for ((i = 0; i < N; i++)); do
        printf '[node.%d]\nhost = 127.0.0.1\nport = %d\n' $i "${port[$i]}"
        [ "$mode" = encrypt ] && printf 'pubkey = %s\n' "${pub[$i]}"
    done
} > "$tmp/c.ini"
stopfile=$tmp/stop

# start ID [VAR=VALUE...]: a node in the background, with those variables in its environment;
# each start gets a log of its own (out.ID.K); recorded, for the EXIT trap (tests/harness.sh)
declare -A runs
start() {
    local id=$1 k=${runs[$1]:-0}
    shift
    runs[$id]=$((k + 1))
    env "$@" "$NODE" "$tmp/c.ini" "$id" elastic "$stopfile" 30 > "$tmp/out.$id.$k" 2>&1 &
    pid[$id]=$!
    child_rec $!
    log[$id]=$tmp/out.$id.$k
}
# last_view ID: "EPOCH MEMBERS T" of the node's last installed view
last_view() { sed -n 's/^node [0-9]*: view \([0-9]*\) members \([0-9,]*\) .* t=\(.*\)$/\1 \2 \3/p' "${log[$1]}" | tail -n 1; }
# wait_view MEMBERS TIMEOUT_S IDS...: until every node's last view has MEMBERS and an epoch
# above $min_epoch; sets epoch and t_view (the latest of their view times)
wait_view() {
    local want=$1 limit=$2; shift 2
    local end; end=$(calc "$(now) + $limit")
    while awk "BEGIN{exit !($(now) < $end)}"; do
        local ok=1 ep="" tv=0
        for id in "$@"; do
            read -r e m t <<< "$(last_view "$id")"
            if [ "${m:-}" != "$want" ] || [ "${e:-0}" -le "$min_epoch" ] || { [ -n "$ep" ] && [ "$e" != "$ep" ]; }; then ok=0; break; fi
            ep=$e; tv=$(awk "BEGIN{printf \"%.3f\", ($t > $tv) ? $t : $tv}")
        done
        if [ $ok = 1 ]; then epoch=$ep; t_view=$tv; return 0; fi
        sleep 0.05
    done
    return 1
}
# rounds ID EPOCH: rounds the node completed in that view ("[0-9]*": in every view)
rounds() { grep -c "^node $1: round [0-9]* view $2 ok" "${log[$1]}"; }
# wait_rounds K EPOCH TIMEOUT_S IDS...: until every node completed K rounds in view EPOCH
wait_rounds() {
    local k=$1 ep=$2 limit=$3; shift 3
    local end; end=$(calc "$(now) + $limit")
    while awk "BEGIN{exit !($(now) < $end)}"; do
        local ok=1
        for id in "$@"; do [ "$(rounds "$id" "$ep")" -ge "$k" ] || { ok=0; break; }; done
        [ $ok = 1 ] && return 0
        sleep 0.1
    done
    return 1
}
show() { for f in "$tmp"/out.*; do grep -v ' round [0-9]* view [0-9]* ok' "$f" | tail -n 12 | sed "s|^|    ${f##*/}: |"; done; }
# stop_all IDS...: raise the stop flag; every node ends at the same round and exits 0
stop_all() {
    touch "$stopfile"
    for id in "$@"; do
        local end; end=$(calc "$(now) + 15")
        while child_runs "${pid[$id]}" && awk "BEGIN{exit !($(now) < $end)}"; do sleep 0.1; done
        child_runs "${pid[$id]}" && { fail "node $id still runs 15 s after the stop flag"; continue; }
        wait "${pid[$id]}"; local rc=$?
        [ $rc = 0 ] || fail "node $id exited $rc"
        grep -q "^node $id: ok rounds" "${log[$id]}" || fail "node $id did not stop on the flag"
    done
}
# Over every log: no wrong sum, no view below the quorum (N/2 + 1), one member set per epoch.
check_logs() {
    grep -h "WRONG" "$tmp"/out.* && fail "a wrong sum"
    grep -h "^node [0-9]*: view " "$tmp"/out.* | awk -v q=$((N / 2 + 1)) '
        { e = $4; m = $6; n = split(m, a, ",")
          if (n < q) { print "view " e " has " n " members: " m; bad = 1 }
          if ((e in set) && set[e] != m) { print "epoch " e ": members " set[e] " and " m; bad = 1 }
          set[e] = m }
        END { for (e in set) k++; print "  " k " distinct epochs, one member set each: " (bad ? "NO" : "yes"); exit bad }' ||
        fail "views: an epoch with two member sets, or a view below the quorum"
}

# ids A..B, comma-separated, less those given after
ids() {
    local a=$1 b=$2 i out=""; shift 2
    for ((i = a; i <= b; i++)); do [[ " $* " == *" $i "* ]] || out="$out,$i"; done
    echo "${out#,}"
}
all=$(ids 0 $((N - 1)))
min_epoch=0
for ((i = 0; i < N; i++)); do
    # relife: debug lines say when a node adopts a view
    if [ "$scenario" = relife ] && [ $i = 0 ]; then start 0 HETRING_TEST_JOIN_WAIT=3 HETRING_LOG=ring=debug
    elif [ "$scenario" = relife ]; then start $i HETRING_LOG=ring=debug; else start $i; fi
done
t_start=$(now)
wait_view "$all" 20 $(seq 0 $((N - 1))) || { fail "the first view of $N did not form within 20 s"; show; exit 1; }
e0=$epoch
echo "first view $e0 of $N formed ($(calc "$t_view - $t_start") s after the last start)"
if [ "${HETRING_ELECT:-}" = bounded ]; then # the *.bounded tests: the mode took effect
    for ((i = 0; i < N; i++)); do
        grep -q "HETRING_ELECT=bounded: elections probe the lowest ids" "${log[$i]}" ||
            fail "node $i does not say its elections are bounded"
    done
fi
wait_rounds 20 "$e0" 20 $(seq 0 $((N - 1))) || fail "no 20 rounds in view $e0"

case $scenario in
kill)
    # node 0: the survivors' leader is another node, and the restarted node 0 (no state, rank
    # 0) must not be the donor
    child_signal KILL "${pid[0]}"; t_kill=$(now); wait "${pid[0]}" 2>/dev/null
    min_epoch=$e0
    if wait_view 1,2,3 10 1 2 3; then
        dt=$(calc "$t_view - $t_kill"); e1=$epoch
        echo "kill -9 node 0 -> view $e1 (1,2,3) on all survivors after $dt s (timeout 2 s)"
        awk "BEGIN{exit !($dt < 3)}" || fail "the survivors took $dt s to install a view of 3"
        wait_rounds 20 "$e1" 20 1 2 3 || fail "the survivors did not go on in view $e1"
        min_epoch=$e1
        start 0; t_start=$(now)
        if wait_view 0,1,2,3 15 0 1 2 3; then
            dt=$(calc "$t_view - $t_start")
            echo "node 0 restarted -> view $epoch (0,1,2,3) on all after $dt s"
            awk "BEGIN{exit !($dt < 5)}" || fail "admitting node 0 took $dt s"
            grep -q "view $epoch members 0,1,2,3 rank 0 donor 1 in_sync 0" "${log[0]}" ||
                fail "node 0 (no state) is not told to take rank 1's state"
            wait_rounds 20 "$epoch" 20 0 1 2 3 || fail "the 4 did not go on in view $epoch"
        else
            fail "restarted node 0 was not admitted within 15 s"
        fi
    else
        fail "no view of 1,2,3 within 10 s of the kill"
    fi
    stop_all 0 1 2 3
    ;;
relife)
    child_signal KILL "${pid[3]}"; wait "${pid[3]}" 2>/dev/null
    min_epoch=$e0
    wait_view 0,1,2 10 0 1 2 || { fail "no view of 0,1,2 within 10 s of the kill"; show; exit 1; }
    e1=$epoch
    wait_rounds 20 "$e1" 20 0 1 2 || fail "the survivors did not go on in view $e1"
    start 3 HETRING_LOG=ring=debug
    wait_for_line "${log[0]}" "test hook: waiting 3.0 s before forming view" 15 || { show; exit 1; }
    e2=$(sed -n 's/.*test hook: waiting 3.0 s before forming view \([0-9]*\).*/\1/p' "${log[0]}" | tail -n 1)
    # the others form it (their windows: 2.5 s, and connect_timeout for node 3, new) when node 0
    # dies; its new life starts at once
    for id in 1 2 3; do wait_for_line "${log[$id]}" "adopting view $e2: nodes 0,1,2,3; forming" 3 || { show; exit 1; }; done
    child_signal KILL "${pid[0]}"; wait "${pid[0]}" 2>/dev/null
    start 0; t_start=$(now)
    echo "node 0 killed while view $e2 (admitting node 3) formed, and started again"
    wait_for_line "${log[0]}" "not adopting view $e2 .*earlier life of this node" 10 &&
        grep -h "not adopting view $e2" "${log[0]}" | head -n 1 | sed 's/^/    /'
    grep -q "view $e2 members" "${log[0]}" && fail "the new node 0 formed view $e2, its earlier life's"
    min_epoch=$e2
    if wait_view 0,1,2,3 15 0 1 2 3; then
        echo "view $epoch (0,1,2,3) on all $(calc "$t_view - $t_start") s after node 0's restart"
        first=$(grep -m1 "^node 0: view " "${log[0]}")
        echo "    the new node 0's first view: $first"
        [[ "$first" =~ rank\ 0\ donor\ [1-3]\ in_sync\ 0 ]] ||
            fail "the new node 0 (no state) is not told to take another node's state in its first view"
        wait_rounds 20 "$epoch" 20 0 1 2 3 || fail "the 4 did not go on in view $epoch"
    else
        fail "no view of 0,1,2,3 within 15 s of node 0's restart"
    fi
    stop_all 0 1 2 3
    ;;
quorum)
    child_signal KILL "${pid[2]}" "${pid[3]}"; t_kill=$(now); wait "${pid[2]}" "${pid[3]}" 2>/dev/null
    # nodes 0 and 1 say they wait for a quorum, and again one period (5 s) later; between the
    # two lines neither completes a round, in whatever view
    wq="waiting for a quorum of 3 of 4 nodes: reachable: nodes 0,1"
    for i in 0 1; do wq0[$i]=$(grep -c "$wq" "${log[$i]}"); done
    for i in 0 1; do wait_for_line "${log[$i]}" "$wq" 20 $((wq0[$i] + 1)); done
    r0=$(rounds 0 "[0-9]*"); r1=$(rounds 1 "[0-9]*")
    for i in 0 1; do wait_for_line "${log[$i]}" "$wq" 20 $((wq0[$i] + 2)); done
    echo "after the kill: rounds of node 0 $r0 -> $(rounds 0 "[0-9]*"), node 1 $r1 -> $(rounds 1 "[0-9]*")"
    [ "$(rounds 0 "[0-9]*")" = "$r0" ] && [ "$(rounds 1 "[0-9]*")" = "$r1" ] || fail "nodes 0 and 1 trained on without a quorum"
    for i in 0 1; do
        grep -q "waiting for a quorum of 3 of 4 nodes: reachable: nodes 0,1" "${log[$i]}" ||
            fail "node $i does not say it waits for a quorum"
        [ "$(last_view $i | cut -d' ' -f1)" = "$e0" ] || fail "node $i installed a view without a quorum"
    done
    grep -h "waiting for a quorum" "${log[0]}" | head -n 1 | sed 's/^/    /'
    min_epoch=$e0
    start 3; t_start=$(now)
    if wait_view 0,1,3 15 0 1 3; then
        echo "node 3 restarted -> view $epoch (0,1,3) after $(calc "$t_view - $t_start") s; the pause lasted $(calc "$t_view - $t_kill") s"
        wait_rounds 20 "$epoch" 20 0 1 3 || fail "0, 1 and 3 did not go on in view $epoch"
    else
        fail "no view of 0,1,3 within 15 s of node 3's restart"
    fi
    stop_all 0 1 3
    ;;
stop)
    child_signal STOP "${pid[1]}"; t_stop=$(now)
    min_epoch=$e0
    if wait_view 0,2,3 10 0 2 3; then
        e1=$epoch
        echo "SIGSTOP node 1 -> view $e1 (0,2,3) after $(calc "$t_view - $t_stop") s (timeout 2 s)"
        wait_rounds 20 "$e1" 20 0 2 3 || fail "0, 2 and 3 did not go on in view $e1"
    else
        fail "no view of 0,2,3 within 10 s of SIGSTOP"
    fi
    sleep "$(awk "BEGIN{d = $t_stop + 6 - $(now); print (d > 0 ? d : 0)}")"
    child_signal CONT "${pid[1]}"; t_cont=$(now)
    min_epoch=${e1:-$e0}
    if wait_view 0,1,2,3 15 0 1 2 3; then
        echo "SIGCONT node 1 -> view $epoch (0,1,2,3) after $(calc "$t_view - $t_cont") s"
        grep -q "admit requested" "${log[0]}" || fail "node 1 came back without an admit request"
        wait_rounds 20 "$epoch" 20 0 1 2 3 || fail "the 4 did not go on in view $epoch"
    else
        fail "node 1 was not admitted within 15 s of SIGCONT"
    fi
    stop_all 0 1 2 3
    ;;
blame)
    ep=$e0
    for v in 1 3 0; do
        child_signal STOP "${pid[$v]}"; t_stop=$(now)
        min_epoch=$ep
        rest=$(ids 0 $((N - 1)) "$v")
        if ! wait_view "$rest" 12 ${rest//,/ }; then
            fail "no view of $rest within 12 s of stopping node $v"
            child_signal CONT "${pid[$v]}"
            break
        fi
        echo "SIGSTOP node $v -> view $epoch ($rest) after $(calc "$t_view - $t_stop") s"
        for id in ${rest//,/ }; do # the line of the view the stop failed: whom it blames
            line=$(grep -m1 "^node $id: failed in view $ep " "${log[$id]}")
            who=$(sed -n 's/.*(view epoch [0-9]*): node \([0-9]*\) .*/\1/p' <<< "$line")
            echo "    node $id: ${line#*: failed in view $ep }" | cut -c1-240
            [ "$who" = "$v" ] || fail "node $id blamed node ${who:-?} for the stop of node $v"
        done
        child_signal CONT "${pid[$v]}"; t_cont=$(now)
        min_epoch=$epoch
        if ! wait_view "$all" 15 $(seq 0 $((N - 1))); then
            fail "node $v was not admitted within 15 s of SIGCONT"
            break
        fi
        ep=$epoch
        wait_rounds 5 "$ep" 20 $(seq 0 $((N - 1))) || fail "the $N did not go on in view $ep"
    done
    stop_all $(seq 0 $((N - 1)))
    ;;
scale)
    # phase VIEW TIMEOUT WHAT IDS...: until every node IDS holds view VIEW; says how long after
    # t0 it took, under WHAT
    phase() {
        local want=$1 limit=$2 what=$3; shift 3
        min_epoch=${epoch:-$e0}
        if wait_view "$want" "$limit" "$@"; then
            echo "$what -> view $epoch of $(echo "$want" | tr ',' '\n' | wc -l) after $(calc "$t_view - $t0") s"
        else
            fail "$what: no view of $want within $limit s"
        fi
    }
    v=$((N / 2))
    child_signal KILL "${pid[$v]}"; t0=$(now); wait "${pid[$v]}" 2>/dev/null
    phase "$(ids 0 $((N - 1)) $v)" 8 "kill -9 node $v" $(ids 0 $((N - 1)) $v | tr ',' ' ')
    start $v; t0=$(now)
    phase "$all" 8 "node $v restarted" $(seq 0 $((N - 1)))
    child_signal KILL "${pid[0]}" "${pid[1]}"; t0=$(now); wait "${pid[0]}" "${pid[1]}" 2>/dev/null
    phase "$(ids 2 $((N - 1)))" 8 "kill -9 nodes 0 and 1" $(seq 2 $((N - 1)))
    start 0; t0=$(now)
    phase "$(ids 0 $((N - 1)) 1)" 8 "node 0 restarted, node 1 down" $(ids 0 $((N - 1)) 1 | tr ',' ' ')
    n_ev=$(cat "$tmp"/out.* | grep -c "evicted: too many")
    echo "connections evicted by a gate: $n_ev"
    [ "$n_ev" = 0 ] || fail "a gate evicted $n_ev honest connections"
    stop_all $(ids 0 $((N - 1)) 1 | tr ',' ' ')
    ;;
*) echo "unknown scenario $scenario"; exit 2 ;;
esac
check_logs
[ "$fails" = 0 ] || show
echo "$fails failure(s)"
[ "$fails" = 0 ]
