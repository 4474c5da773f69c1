#!/usr/bin/env bash
# ring_test.sh SCENARIO MODE RING_NODE [TAMPER_PROXY | STRANGER]: multi-process ring tests on 127.0.0.1.
#   correct   N = 1..5, counts 0, 1, N-1, N+1 and a large prime: all-reduce, all-gather(v),
#             broadcast from every root, barrier, against a serial reference; the bf16
#             all-reduce too, and near FLT_MAX, where a finite float saturates at bf16's largest
#   big       16 Mi floats, N = 1..5
#   rekey     N = 2 and 4, key windows of 4 frames (a test hook) and 4 KiB segments: as correct,
#             with frame keys changing hundreds of times on every link; node 0 runs in order
#   tree      N = 4 to 8, counts on both sides of the tree's limits: as correct, and the
#             all-reduces that must go over the tree did (and no others); from N = 6 on small
#             all-gathers, broadcasts and barriers too
#   tree_tamper four nodes; the proxy sits on the tree link from node 0 to node 2 (no ring link
#             joins them) and tampers with a frame: node 2 names that link, the others too
#   probe     N = 6: the link probe measures and leaves the tree's cut as it was; a cut lowered
#             to 4 KiB on every node sends 9000 floats round the ring, tree_bytes over the tree
#   tree_death  N = 8, all-reduces on the tree; node 1 (an inner node of the tree) is killed,
#             then in a second run stopped (SIGSTOP): every survivor names node 1
#   peer_death  SIGKILL of one node mid all-reduce: every survivor names it within the timeout
#   bad_peers   wrong identity key, wrong PSK, unknown node id, group-readable key file
#   startup     late starters and any start order
#   tamper      a proxy flips a payload bit or a header field, truncates a frame, replays a frame
#   reform      one node leaves (view epoch 1) and rejoins (epoch 2) without any restart
#   strangers   idle and garbage connections from a node without the key, at formation and
#               during a run: the ring forms and runs on, they are closed and named
#   size_mismatch  two nodes all-reduce a different number of floats (a small collective and a
#               large one, eight times): both stop with a ring error that says the nodes may
#               disagree on the size, the node that found it and the one it told, whether that
#               one was still sending or had sent its frames and waited on the other
#   workers     HETRING_RING_WORKERS: a bad value stops the node with a message naming it
#   dns_again   node 0's first lookups of its peers' names fail for now (EAI_AGAIN, an
#               LD_PRELOAD shim given as the fourth argument): it retries and the ring forms;
#               and a resolver that answers only after 30 s holds no connection attempt past
#               its deadline, nor the lookup of node 0's own host to listen on
#   poll_enomem node 0's poll() fails with ENOMEM (a shim, the fourth argument) while its peer
#               is stopped: it gives up at its timeout, on either engine
#   nofile      an open-file limit too low for a node: a hard one stops it at its start naming
#               the limit, a soft one is raised and the ring runs
#   mt_nomem    two nodes on the threaded engine, one of them without the address space for its
#               staging: it says so and runs the collectives on its own thread, and both
#               nodes' results check (the frames are the same either way)
# With HETRING_RING_WORKERS=N in the environment (the *.mt tests), every node must log that
# large collectives run on the threaded engine with N workers.
# MODE is none, auth (cluster PSK) or encrypt (identity keys). Ports come in claimed blocks of 8
# (tests/ports.sh), so tests side by side never share one; they are in 10000-32000,
# below the kernel's ephemeral range (32768+), so no outgoing connection can hold one.
set -u
scenario=$1 mode=$2 NODE=$3 PROXY=${4:-}
. "$(dirname "$0")/../harness.sh"
. "$(dirname "$0")/security.sh"
now() { date +%s.%N; }

# identity keys for ids 0..7, a cluster PSK, and a second ("wrong") key and PSK
for i in 0 1 2 3 4 5 6 7; do pub[$i]=$("$NODE" keygen "$tmp/node$i.key"); done
rogue_pub=$("$NODE" keygen "$tmp/rogue.key")
mkpsk() { printf '# test psk\n%s\n' "$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')" > "$1"; chmod 600 "$1"; }
mkpsk "$tmp/psk"; mkpsk "$tmp/wrong.psk"

newbase() { port_block || exit 1; } # a fresh block of 8 ports, held until the script ends
# [CT=S] [TO=S] conf FILE N: a cluster of nodes 0..N-1 on 127.0.0.1:base+i (connect_timeout
# CT, timeout TO)
conf() {
    local f=$1 n=$2
    {
        printf '[cluster]\nname = ringtest\nconnect_timeout = %s\ntimeout = %s\n' "${CT:-20}" "${TO:-10}"
        security_lines "$mode"
        [ -n "${SEG:-}" ] && printf 'segment_bytes = %s\n' "$SEG"
        printf '[train]\niterations = 1\n'
        for ((i = 0; i < n; i++)); do
            printf '[node.%d]\nhost = 127.0.0.1\nport = %d\n' $i $((base + i))
            [ "$mode" = encrypt ] && printf 'pubkey = %s\n' "${pub[$i]}"
        done
    } > "$f"
}
# start ID CONF ARGS...: one node in the background, output in $tmp/out.ID; recorded, for the
# EXIT trap (tests/harness.sh)
start() {
    local id=$1 f=$2; shift 2
    "$NODE" "$f" "$id" "$@" > "$tmp/out.$id" 2>&1 &
    pid[$id]=$!
    child_rec $!
}
# running N TIMEOUT_S: until nodes 0..N-1 each said they run (their first collective is done)
running() {
    local i
    for ((i = 0; i < $1; i++)); do wait_for_line "$tmp/out.$i" "^node $i: running" "$2" || return 1; done
}
# listening PORT TIMEOUT_S: until a process listens on 127.0.0.1:PORT (fails the test past it)
listening() {
    local t
    for ((t = 0; t < $2 * 20; t++)); do
        [ -n "$(ss -Hltn "sport = :$1")" ] && return 0
        sleep 0.05
    done
    fail "nothing listens on port $1 within $2 s"
    return 1
}
# finish IDS...: wait for the nodes, exit codes in rc[ID]
finish() { for id in "$@"; do wait "${pid[$id]}"; rc[$id]=$?; done; }
show() { for id in "$@"; do sed "s/^/    out.$id: /" "$tmp/out.$id" | tail -n 8; done; }
# the *.mt tests: the engine asked for is the one used
check_engine() {
    case ${HETRING_RING_WORKERS:-} in
    [0-9]*) ;;
    *) return ;;
    esac
    local f want="threaded engine (sender + $HETRING_RING_WORKERS worker"
    for f in "$tmp"/out.*; do
        [ "$(basename "$f")" = "${inorder_out:-}" ] && continue # runs in order on purpose
        grep -q "ring: ring formed" "$f" || continue
        grep -qF "$want" "$f" || fail "$(basename "$f"): no '$want' in its ring formed line"
        grep -q "ok$" "$f" && ! grep -q "[1-9][0-9]* collective(s) on the threaded engine" "$f" &&
            fail "$(basename "$f"): no collective ran on the threaded engine"
    done
}

# proxied N TARGET WHAT: a cluster of N nodes in $tmp/c.ini, and $tmp/c0.ini, the same with
# node TARGET's port replaced by a tamper proxy's, which does WHAT to data frame 3 of the
# connection it relays to TARGET; its pid in ppid. Another test running beside this one may
# hold the proxy's port: then it takes other ports
proxied() {
    local n=$1 target=$2 what=$3
    for _ in 1 2 3 4 5; do
        newbase; TO=5 conf "$tmp/c.ini" "$n"
        pport=$((base + 5))
        sed "s|port = $((base + target))\$|port = $pport|" "$tmp/c.ini" > "$tmp/c0.ini"
        "$PROXY" $pport $((base + target)) "$what" 3 > "$tmp/proxy.out" 2>&1 &
        ppid=$!
        child_rec $ppid
        for _ in $(seq 1 200); do # at most 10 s: a loaded machine starts it late
            grep -q "proxy listening" "$tmp/proxy.out" || ! child_runs $ppid && break
            sleep 0.05
        done
        grep -q "proxy listening" "$tmp/proxy.out" && break
        # not listening: its port was taken, or it is still starting; a proxy that came up
        # late would wait for connections for ever, so it is stopped before the next try
        child_signal TERM $ppid
        wait $ppid 2>/dev/null
    done
}

case $scenario in
correct | big)
    for n in 1 2 3 4 5; do
        # a generous ring timeout: under sanitizers on a loaded machine, computing the serial
        # reference for 16 Mi floats can keep one node away from the ring for seconds
        newbase; TO=60 conf "$tmp/c.ini" $n
        if [ "$scenario" = big ]; then counts="16777216"; else counts="0 1 $((n - 1)) $((n + 1)) 1000003"; fi
        t0=$(now)
        for ((i = 0; i < n; i++)); do start $i "$tmp/c.ini" correct $counts; done
        ids=$(seq 0 $((n - 1)))
        finish $ids
        check_engine
        bad=0
        for i in $ids; do [ "${rc[$i]}" = 0 ] || bad=1; done
        echo "N=$n $mode counts [$counts]: $(awk "BEGIN{printf \"%.2f\", $(now) - $t0}") s"
        grep -h 'bf16 all-reduce \(near FLT_MAX \)\?count [0-9]\{7,\}' "$tmp/out.0" | sed 's/^/    /'
        [ "$n" = 1 ] || [ "$scenario" = big ] || grep -q 'bf16 all-reduce near FLT_MAX count [0-9]\{7,\}: [1-9]' "$tmp/out.0" ||
            fail "N=$n: node 0 saturated no bf16 value near FLT_MAX"
        if [ $bad = 1 ]; then fail "N=$n: a node failed"; show $ids; fi
    done
    ;;
rekey)
    # key windows of 4 frames (HETRING_TEST_KEY_WINDOW=2) and 4 KiB segments: a million floats
    # cross hundreds of windows on every link (and 4 nodes the tree's links too), on the engine
    # HETRING_RING_WORKERS says, except node 0, which runs every collective in order (so the
    # threaded engine's frames and the in-order engine's must agree on every window's key);
    # ring_node correct checks every sum and every byte
    [ "$mode" = none ] && { fail "rekey: a secure mode is needed"; exit 1; }
    export HETRING_TEST_KEY_WINDOW=2
    aead=XChaCha20-Poly1305
    grep -qw aes /proc/cpuinfo && aead=AES-256-GCM
    inorder_out=out.0
    for n in 2 4; do
        newbase; TO=60 SEG=4096 conf "$tmp/c.ini" $n
        counts="1 1000 1000003"
        HETRING_RING_WORKERS=off start 0 "$tmp/c.ini" correct $counts
        for ((i = 1; i < n; i++)); do start $i "$tmp/c.ini" correct $counts; done
        ids=$(seq 0 $((n - 1)))
        finish $ids
        check_engine
        bad=0
        for i in $ids; do
            [ "${rc[$i]}" = 0 ] || bad=1
            grep -q "HETRING_TEST_KEY_WINDOW=2: frame keys change every 4 frames" "$tmp/out.$i" ||
                fail "N=$n: node $i did not take the key window of the test"
            grep -q "ring formed: .*security $mode ($aead)" "$tmp/out.$i" ||
                fail "N=$n: node $i's links are not sealed with $aead"
            grep -q "all-reduce count 1000003: " "$tmp/out.$i" ||
                fail "N=$n: node $i did not finish the all-reduce of 1000003 floats"
        done
        echo "N=$n $mode, key windows of 4 frames, counts [$counts]: rc ${rc[*]}"
        if [ $bad = 1 ]; then fail "N=$n: a node failed"; show $ids; fi
    done
    ;;
tree)
    # counts 1 and 7 gather (n - 1 hops), 9000 and 16384 floats reduce (2(n - 1) hops) on the
    # ring; the tree (2 * depth hops, depth 2 for n = 4 to 7, 3 for 8) takes the all-reduces it
    # beats, up to tree_bytes = 64 KiB = 16384 floats; 16385 stays on the ring. From n = 6 on
    # it also beats the n - 1 hops of small all-gathers, broadcasts and barriers, which check
    # every byte (ring_node correct)
    counts="1 7 9000 16384 16385"
    # (n = 5: the tree's 4 hops tie the gathering ring's 4, and the ring keeps them)
    for nt in "4:ring ring tree tree ring" "5:ring ring tree tree ring" "6:tree tree tree tree ring" \
              "7:tree tree tree tree ring" "8:tree tree tree tree ring"; do
        n=${nt%%:*} want=(${nt#*:})
        newbase; TO=60 conf "$tmp/c.ini" $n
        for ((i = 0; i < n; i++)); do start $i "$tmp/c.ini" correct $counts; done
        ids=$(seq 0 $((n - 1)))
        finish $ids
        bad=0
        for i in $ids; do
            [ "${rc[$i]}" = 0 ] || bad=1
            k=0
            for c in $counts; do
                grep -q "^node $i: all-reduce count $c: .* on the ${want[$k]}\$" "$tmp/out.$i" ||
                    fail "N=$n: node $i: the all-reduce of $c floats did not go over the ${want[$k]}"
                k=$((k + 1))
            done
            tot=$(sed -n "s/^node $i: \([0-9]*\) collective(s) on the tree/\1/p" "$tmp/out.$i")
            ar=$(grep -c "^node $i: all-reduce count .* on the tree\$" "$tmp/out.$i")
            if [ "$n" -ge 6 ]; then
                [ "${tot:-0}" -gt "$ar" ] || fail "N=$n: node $i: no all-gather, broadcast or barrier went over the tree ($tot collectives, $ar all-reduces)"
            else
                [ "${tot:-0}" = "$ar" ] || fail "N=$n: node $i: $tot collectives on the tree, expected only its $ar all-reduces"
            fi
        done
        grep -q "tree links for small collectives" "$tmp/out.0" || fail "N=$n: no tree formed"
        echo "N=$n $mode counts [$counts]: all-reduces on the ${want[*]}; $tot collectives on the tree"
        if [ $bad = 1 ]; then fail "N=$n: a node failed"; show $ids; fi
    done
    ;;
probe)
    # 6 nodes: the link probe (ring_probe_links) measures a hop's latency and a byte's time and
    # leaves the tree's cut as it was; with the cut lowered to 4 KiB on every node, 9000 floats
    # (36 KB) go round the ring, and with it back at tree_bytes (64 KiB) over the tree, correct
    # and the same bits on every node both times
    newbase; TO=60 conf "$tmp/c.ini" 6
    for ((i = 0; i < 6; i++)); do start $i "$tmp/c.ini" probe 9000; done
    ids=$(seq 0 5)
    finish $ids
    for i in $ids; do
        [ "${rc[$i]}" = 0 ] || { fail "node $i failed"; show $i; }
        grep -q "^node $i: probe: .* tree cut 65536 before, 65536 after\$" "$tmp/out.$i" ||
            fail "node $i: no probe line, or the cut moved: $(grep probe "$tmp/out.$i")"
        [ "$(sed -n "s/^node $i: all-reduce count 9000: .* on the \([a-z]*\)\$/\1/p" "$tmp/out.$i" | tr '\n' ' ')" = "ring tree " ] ||
            fail "node $i: 9000 floats went over: $(grep 'count 9000' "$tmp/out.$i" | tr '\n' ' ') (expected the ring at a 4 KiB cut, then the tree)"
    done
    grep -h "probe:" "$tmp/out.0"
    ;;
tree_tamper)
    for what in ${TAMPER_WHAT:-flip flip-seq replay truncate}; do
        proxied 4 2 "$what" # node 0 reaches node 2 through the proxy
        for i in 1 2 3; do start $i "$tmp/c.ini" reduce 9000 6; done
        listening $((base + 2)) 10; start 0 "$tmp/c0.ini" reduce 9000 6
        finish 0 1 2 3
        child_signal TERM "$ppid"; wait "$ppid" 2>/dev/null
        for i in 0 1 2 3; do
            [ "${rc[$i]}" = 3 ] || fail "$what: node $i exited ${rc[$i]}, expected 3 (ring error)"
            grep -q "node $i: ok\|WRONG" "$tmp/out.$i" && fail "$what: node $i applied a result"
        done
        link="authentication failed on the tree link from node 0 (127.0.0.1:$base) (tampered or corrupted frame"
        if [ "$what" = truncate ]; then
            grep -q "node 0 (127.0.0.1:$base) closed the connection" "$tmp/out.2" ||
                fail "$what: node 2 did not report that node 0 closed the connection"
        else
            grep -q "error.*$link 0)" "$tmp/out.2" || fail "$what: node 2 did not report '$link 0)'"
            for i in 0 1 3; do
                grep -q "error.*$link 0).*(reported by node 2 " "$tmp/out.$i" ||
                    fail "$what: node $i does not name the tree link from node 0"
            done
        fi
        echo "$what: $(tail -n 1 "$tmp/proxy.out")"; show 2 0 1 3
    done
    ;;
tree_death)
    # node 1 is rank 1: parent 0, children 3 and 4. Killed, every neighbour sees its links
    # close; stopped, they time out, and nodes further off wait on nodes that wait themselves.
    # Before the signal every node formed its tree links and ran its first all-reduce over
    # the tree (9000 floats: the tree's 6 hops beat the ring's 14 at N = 8)
    for sig in KILL STOP; do
        n=8; newbase; TO=3 conf "$tmp/c.ini" $n
        for ((i = 0; i < n; i++)); do start $i "$tmp/c.ini" loop 9000; done
        running $n 30
        for ((i = 0; i < n; i++)); do
            grep -q "ring formed: .*tree links for small collectives" "$tmp/out.$i" ||
                fail "SIG$sig: node $i formed no tree links"
            grep -q "^node $i: running, [1-9][0-9]* collective(s) on the tree" "$tmp/out.$i" ||
                fail "SIG$sig: node $i's first all-reduce did not go over the tree: $(grep running "$tmp/out.$i")"
        done
        child_signal $sig "${pid[1]}"; t0=$(now)
        finish 0 2 3 4 5 6 7
        el=$(awk "BEGIN{printf \"%.2f\", $(now) - $t0}")
        child_signal KILL "${pid[1]}"
        echo "SIG$sig: survivors returned $el s after it (timeout 3 s)"
        awk "BEGIN{exit !($el < 8)}" || fail "SIG$sig: survivors took $el s (timeout 3 s)"
        for i in 0 2 3 4 5 6 7; do
            [ "${rc[$i]}" = 3 ] || fail "SIG$sig: node $i exited ${rc[$i]}, expected 3 (ring error)"
            grep "ring error" "$tmp/out.$i" | grep -q "node 1 (127.0.0.1:$((base + 1)))" ||
                fail "SIG$sig: node $i does not name node 1: $(grep 'ring error' "$tmp/out.$i")"
            grep "ring error" "$tmp/out.$i" | sed 's/^/    /'
        done
    done
    ;;
poll_enomem)
    if ldd "$NODE" 2>/dev/null | grep -q 'lib[at]san'; then
        echo "SKIP: a sanitizer build cannot take an LD_PRELOAD shim"; exit 77
    fi
    # poll() fails with ENOMEM on node 0 once the file exists, while its peer is stopped
    # (SIGSTOP) in the middle of the all-reduces: node 0 still gives up at its deadline
    # (timeout 2 s) naming the peer, on the calling thread's engine and on the threaded one
    for workers in off 1; do
        newbase; TO=2 conf "$tmp/c.ini" 2
        rm -f "$tmp/poll_fail"
        HETRING_RING_WORKERS=$workers start 1 "$tmp/c.ini" loop 100000
        HETRING_RING_WORKERS=$workers POLL_FAIL_FILE="$tmp/poll_fail" LD_PRELOAD=$PROXY \
            start 0 "$tmp/c.ini" loop 100000
        running 2 20
        touch "$tmp/poll_fail"; child_signal STOP "${pid[1]}"; t0=$(now)
        for _ in $(seq 200); do child_runs "${pid[0]}" || break; sleep 0.1; done
        el=$(awk "BEGIN{printf \"%.1f\", $(now) - $t0}")
        child_signal KILL "${pid[0]}" "${pid[1]}"
        finish 0 1
        grep -q "^poll_fail: poll() fails with ENOMEM" "$tmp/out.0" ||
            fail "workers $workers: node 0's poll() never failed: the check proves nothing"
        echo "workers $workers: node 0 exited ${rc[0]} $el s after its poll() began to fail (timeout 2 s)"
        [ "${rc[0]}" = 3 ] || { fail "workers $workers: node 0 exited ${rc[0]}, expected 3 (ring error)"; show 0; }
        awk "BEGIN{exit !($el < 8)}" || fail "workers $workers: node 0 took $el s (timeout 2 s)"
        grep "ring error" "$tmp/out.0" | sed 's/^/    /'
    done
    ;;
peer_death)
    n=4; newbase; TO=4 conf "$tmp/c.ini" $n
    for i in 0 1 2 3; do start $i "$tmp/c.ini" loop 4194304; done
    running 4 20
    child_signal KILL "${pid[2]}"; t0=$(now)
    finish 0 1 3
    el=$(awk "BEGIN{printf \"%.2f\", $(now) - $t0}")
    echo "survivors returned $el s after the SIGKILL (timeout 4 s)"
    awk "BEGIN{exit !($el < 6)}" || fail "survivors took $el s (timeout 4 s)"
    for i in 0 1 3; do
        [ "${rc[$i]}" = 3 ] || fail "node $i exited ${rc[$i]}, expected 3 (ring error)"
        grep -q "node 2 (127.0.0.1:$((base + 2)))" "$tmp/out.$i" || fail "node $i does not name node 2"
        grep "ring error" "$tmp/out.$i" | sed 's/^/    /'
    done
    ;;
bad_peers)
    # 1. node 0 runs with a key that is not the one pinned by the others
    newbase; CT=4 conf "$tmp/c.ini" 3
    sed -e "s|key_file = .*|key_file = $tmp/rogue.key|" -e "s|${pub[0]}|$rogue_pub|" "$tmp/c.ini" > "$tmp/c0.ini"
    # node 2 reaches node 0 first and must refuse its proof; node 1 starts only then, so that
    # node 0 cannot give up (refused by node 1) and close its port before node 2 has seen it
    start 2 "$tmp/c.ini" init; start 0 "$tmp/c0.ini" init
    wait_for_line "$tmp/out.2" "authentication failed" 10
    start 1 "$tmp/c.ini" init
    finish 0 1 2
    for i in 0 1 2; do [ "${rc[$i]}" = 3 ] || fail "wrong key: node $i exited ${rc[$i]}, expected 3"; done
    grep -q "refused this node" "$tmp/out.0" || fail "wrong key: node 0 was not told it was refused"
    grep -q "rejected a connection.*signature does not match" "$tmp/out.1" || fail "wrong key: node 1 did not log the rejection"
    grep -q "authentication failed" "$tmp/out.2" || fail "wrong key: node 2 accepted node 0's proof"
    show 0 1 2
    # 2. an unknown node id knocks first; the real ring must still form
    newbase; conf "$tmp/c.ini" 3
    rport=$((base + 7))
    sed -e "s|\[node.0\]|[node.7]|" -e "s|port = $base\$|port = $rport|" -e "s|${pub[0]}|${pub[7]}|" \
        -e "/\[node.2\]/,\$d" "$tmp/c.ini" > "$tmp/rogue.ini"
    [ "$mode" = auth ] && sed -i "s|$tmp/psk|$tmp/wrong.psk|" "$tmp/rogue.ini"
    start 1 "$tmp/c.ini" init; start 2 "$tmp/c.ini" init; start 7 "$tmp/rogue.ini" init
    finish 7
    [ "${rc[7]}" = 3 ] || fail "unknown peer: the rogue exited ${rc[7]}, expected 3"
    grep -q "refused this node.*unknown peer" "$tmp/out.7" || fail "unknown peer: not refused as unknown"
    start 0 "$tmp/c.ini" init
    finish 0 1 2
    for i in 0 1 2; do [ "${rc[$i]}" = 0 ] || fail "unknown peer: node $i exited ${rc[$i]}"; done
    grep -q "rejected a connection.*unknown peer" "$tmp/out.1" || fail "unknown peer: node 1 did not log it"
    show 7 1
    # 3. a wrong cluster PSK (auth mode)
    mode=auth; newbase; CT=4 conf "$tmp/c.ini" 2
    sed "s|$tmp/psk|$tmp/wrong.psk|" "$tmp/c.ini" > "$tmp/c0.ini"
    start 0 "$tmp/c0.ini" init; start 1 "$tmp/c.ini" init
    finish 0 1
    for i in 0 1; do [ "${rc[$i]}" = 3 ] || fail "wrong psk: node $i exited ${rc[$i]}"; done
    grep -q "key confirmation does not match" "$tmp/out.0" "$tmp/out.1" || fail "wrong psk: no clear message"
    show 0
    # 4. a key file readable by others is refused
    mode=encrypt; newbase; conf "$tmp/c.ini" 1
    chmod 644 "$tmp/node0.key"
    start 0 "$tmp/c.ini" init; finish 0
    [ "${rc[0]}" = 3 ] || fail "loose key file: exited ${rc[0]}"
    grep -q "readable by group or others" "$tmp/out.0" || fail "loose key file accepted"
    chmod 600 "$tmp/node0.key"
    show 0
    ;;
startup)
    n=4
    for order in "3 2 1 0" "0 2 3 1" "1 3 0 2"; do
        newbase; conf "$tmp/c.ini" $n
        for i in $order; do start $i "$tmp/c.ini" correct 1000; sleep 0.7; done
        finish 0 1 2 3
        for i in 0 1 2 3; do [ "${rc[$i]}" = 0 ] || { fail "order $order: node $i exited ${rc[$i]}"; show $i; }; done
        echo "start order $order (0.7 s apart): ok"
    done
    # one node 3 s late
    newbase; conf "$tmp/c.ini" $n
    for i in 0 1 3; do start $i "$tmp/c.ini" correct 1000; done
    sleep 3; start 2 "$tmp/c.ini" correct 1000
    finish 0 1 2 3
    for i in 0 1 2 3; do [ "${rc[$i]}" = 0 ] || { fail "late node 2: node $i exited ${rc[$i]}"; show $i; }; done
    echo "node 2 started 3 s late: ok"
    ;;
tamper)
    # three nodes; node 0 reaches node 1 through the proxy, which tampers with node 0's data
    # frame 3. Every failure of authentication names the link from node 0, on node 1 (which
    # detects it) and on the others (told by aborts); nobody blames a dead or silent peer.
    for what in ${TAMPER_WHAT:-flip flip-type flip-coll flip-epoch flip-seq flip-index flip-len replay truncate}; do
        proxied 3 1 "$what" # node 0 reaches node 1 through the proxy
        # nodes 1 and 2 first, so that node 1 is forming its view when the proxy connects
        for i in 1 2; do start $i "$tmp/c.ini" reduce 4194304 3; done
        listening $((base + 1)) 10; start 0 "$tmp/c0.ini" reduce 4194304 3
        finish 0 1 2
        check_engine
        child_signal TERM "$ppid"; wait "$ppid" 2>/dev/null
        for i in 0 1 2; do
            [ "${rc[$i]}" = 3 ] || fail "$what: node $i exited ${rc[$i]}, expected 3 (ring error)"
            grep -q "node $i: ok\|WRONG" "$tmp/out.$i" && fail "$what: node $i applied a result"
        done
        link="authentication failed on the link from node 0 (127.0.0.1:$base) (tampered or corrupted frame"
        k=3; [ "$what" = replay ] && k=4 # the copy arrives where frame 4 is expected
        if [ "$what" = truncate ]; then
            grep -q "node 0 (127.0.0.1:$base) closed the connection" "$tmp/out.1" ||
                fail "$what: node 1 did not report that node 0 closed the connection"
        else
            grep -q "error.*$link $k)" "$tmp/out.1" || fail "$what: node 1 did not report '$link $k)'"
            grep -q "the same collectives\|same config\|view epoch [0-9]*, this node" "$tmp"/out.[012] &&
                fail "$what: a node reports a header field of the tampered frame"
            # Nodes 0 and 2 learn of it from aborts, even when a link closes first: node 0 may
            # see the proxy close its successor link before the news comes round the ring
            for i in 0 2; do
                grep -q "error.*$link $k).*(reported by node 1 " "$tmp/out.$i" ||
                    fail "$what: node $i does not name the link from node 0"
            done
        fi
        echo "$what: $(cat "$tmp/proxy.out" | tail -n 1)"; show 1 0 2
    done
    ;;
reform)
    # leave and rejoin without restarting: view epoch 0 = all four, epoch 1 = all but node 2,
    # epoch 2 = all four again; node 2 re-forms for epoch 2 while the others still work in 1
    n=4; newbase; conf "$tmp/c.ini" $n
    for i in 0 1 2 3; do start $i "$tmp/c.ini" reform 2 100003; done
    finish 0 1 2 3
    for i in 0 1 2 3; do [ "${rc[$i]}" = 0 ] || { fail "node $i exited ${rc[$i]}"; show $i; }; done
    for i in 0 1 3; do
        grep -q "view epoch 1 formed, rank [0-2] of 3" "$tmp/out.$i" || fail "node $i: no epoch 1 of 3"
    done
    for i in 0 1 2 3; do
        grep -q "view epoch 2 formed, rank $i of 4" "$tmp/out.$i" || fail "node $i: no epoch 2 of 4"
    done
    grep -q "epoch 1 formed" "$tmp/out.2" && fail "node 2 took part in epoch 1"
    echo "leave (epoch 1, 3 nodes) and rejoin (epoch 2, 4 nodes): $fails failure(s)"
    show 2
    ;;
strangers)
    # connections from a node without the key (tests/ring/stranger.c, the 4th argument): idle
    # ones before and while a ring forms must not slow it down, and during a run idle and
    # garbage ones are closed within 2 s while the all-reduces go on; node 0 names them
    stranger=$PROXY
    # 1. one idle connection, then 200, at node 0 before nodes 1 and 2 start (its log is
    # rate-limited: with 200, only some are named)
    for k in 1 200; do
        newbase; TO=10 conf "$tmp/c.ini" 3
        start 0 "$tmp/c.ini" init
        listening $base 10 # node 0 listens and waits for node 2
        "$stranger" $base $k idle 15 > "$tmp/s.out" 2>&1 &
        sp=$!
        child_rec $sp
        wait_for_line "$tmp/s.out" "^connect(ed|ion [0-9]+ to port)" 10 $k # each one tried
        t0=$(now)
        start 1 "$tmp/c.ini" init; start 2 "$tmp/c.ini" init
        finish 0 1 2
        el=$(awk "BEGIN{printf \"%.2f\", $(now) - $t0}")
        named=$(grep -o 'connection from 127.0.0.1:[0-9]*' "$tmp/out.0" | sort -u | wc -l)
        echo "3 nodes formed with $(grep -c connected "$tmp/s.out") idle connections at node 0 in $el s (timeout 10 s); $named named"
        for i in 0 1 2; do [ "${rc[$i]}" = 0 ] || { fail "$k idle at formation: node $i exited ${rc[$i]}"; show $i; }; done
        awk "BEGIN{exit !($el < 4)}" || fail "$k idle: the ring took $el s to form"
        grep -m 2 "connection from" "$tmp/out.0" | sed 's/^/    /'
        if [ $k = 1 ]; then
            a=$(sed -n 's/^connected //p' "$tmp/s.out")
            grep -q "connection from $a[: ]" "$tmp/out.0" || fail "node 0 did not name the idle connection $a"
        else
            [ "$named" -ge 20 ] || fail "200 idle: node 0 named only $named addresses"
        fi
        wait $sp 2>/dev/null
    done
    # 2. during a run: 1 idle at node 0, 20 garbage at node 1, 200 idle at node 2
    newbase; TO=4 conf "$tmp/c.ini" 3
    for i in 0 1 2; do start $i "$tmp/c.ini" loop 65536; done
    running 3 20
    t0=$(now)
    "$stranger" $base 1 idle 2 > "$tmp/s.0" 2>&1 & sp[0]=$!
    "$stranger" $((base + 1)) 20 garbage 2 > "$tmp/s.1" 2>&1 & sp[1]=$!
    "$stranger" $((base + 2)) 200 idle 2 > "$tmp/s.2" 2>&1 & sp[2]=$!
    child_rec "${sp[@]}"
    for i in 0 1 2; do
        wait "${sp[$i]}" || fail "during the run: node $i did not close every stranger within 2 s"
        echo "    node $i: $(tail -n 1 "$tmp/s.$i")"
    done
    # past the ring timeout (4 s): a collective held up by the strangers would have failed
    sleep "$(awk "BEGIN{d = $t0 + 5.5 - $(now); print (d > 0 ? d : 0)}")"
    for i in 0 1 2; do
        child_runs "${pid[$i]}" || { fail "node $i stopped during the run"; show $i; }
        grep -q "ring error\|WRONG" "$tmp/out.$i" && { fail "node $i: ring error during the run"; show $i; }
    done
    child_signal KILL "${pid[0]}" "${pid[1]}" "${pid[2]}"
    a0=$(sed -n 's/^connected //p' "$tmp/s.0")
    grep -q "connection from $a0[: ]" "$tmp/out.0" || fail "node 0 did not name the idle connection $a0"
    grep -m 1 "connection from" "$tmp/out.0" "$tmp/out.1" | sed 's/^/    /'
    ;;
size_mismatch)
    # With 1000000 against 1000001 floats only node 0 finds a frame of another size (node 1's
    # second reduce-scatter frame), and node 1 learns it from node 0's abort, which comes on its
    # successor link (in mode none on that link alone). Node 1 may still be sending then, or have
    # sent every frame and wait on its predecessor, node 0, which exits: the close of that link
    # comes before node 1 reads the abort (fail_rx_closed reads it then). Which one it is depends
    # on timing, so the pair runs eight times; each run ends within the ring timeout (10 s).
    for pair in "1000 1001" $(for _ in 1 2 3 4 5 6 7 8; do echo 1000000:1000001; done); do
        pair=${pair/:/ }
        set -- $pair
        newbase; TO=10 conf "$tmp/c.ini" 2
        start 0 "$tmp/c.ini" reduce "$1" 1; start 1 "$tmp/c.ini" reduce "$2" 1
        finish 0 1
        for i in 0 1; do
            [ "${rc[$i]}" = 3 ] || { fail "$1 against $2 floats: node $i exited ${rc[$i]}, expected 3"; show $i; }
            grep -q "ring error.*disagree on the size" "$tmp/out.$i" ||
                { fail "$1 against $2 floats: node $i did not say the nodes may disagree on the size"; show $i; }
        done
        grep -h "ring error" "$tmp/out.0" "$tmp/out.1" | cut -c1-300 | sed 's/^/    /'
    done
    check_engine
    ;;
workers)
    # a value the engine cannot honour stops the node at start-up, naming the variable
    newbase; conf "$tmp/c.ini" 1
    for bad in bogus -1 9 2x; do
        HETRING_RING_WORKERS=$bad "$NODE" "$tmp/c.ini" 0 init > "$tmp/out.w" 2>&1
        st=$?
        [ $st != 0 ] || fail "HETRING_RING_WORKERS=$bad: the node started"
        grep -q "HETRING_RING_WORKERS=$bad: expected off or 0 to 8" "$tmp/out.w" ||
            { fail "HETRING_RING_WORKERS=$bad: no message naming it"; sed 's/^/    /' "$tmp/out.w"; }
    done
    for good in off 0 3; do
        HETRING_RING_WORKERS=$good "$NODE" "$tmp/c.ini" 0 init > "$tmp/out.w" 2>&1 ||
            { fail "HETRING_RING_WORKERS=$good: the node failed"; sed 's/^/    /' "$tmp/out.w"; }
    done
    grep -q "threaded engine (sender + 3 workers)" "$tmp/out.w" || fail "3 workers not in the log"
    ;;
dns_again)
    # a sanitizer must come first among the libraries a process loads: skipped there
    if ldd "$NODE" 2>/dev/null | grep -q 'lib[at]san'; then
        echo "SKIP: a sanitizer build cannot take an LD_PRELOAD shim"; exit 77
    fi
    # the peers by name (a numeric address is never looked up): localhost, where it is loopback
    getent hosts localhost | grep -qE '^(127\.|::1 )' ||
        { echo "SKIP: localhost does not resolve to a loopback address here"; exit 77; }
    newbase; conf "$tmp/c.ini" 3
    sed -i 's/^host = 127.0.0.1$/host = localhost/' "$tmp/c.ini"
    for i in 1 2; do start $i "$tmp/c.ini" correct 1000; done
    LD_PRELOAD=$PROXY GAI_AGAIN_COUNT=5 start 0 "$tmp/c.ini" correct 1000
    finish 0 1 2
    for i in 0 1 2; do [ "${rc[$i]}" = 0 ] || { fail "node $i exited ${rc[$i]}"; show $i; }; done
    n=$(grep -c "^gai_again: lookup [0-9]* of localhost failed with EAI_AGAIN" "$tmp/out.0")
    [ "$n" = 5 ] || { fail "the shim failed $n lookups of node 0's, not 5"; show 0; }
    echo "node 0's first $n lookups failed for now; the ring formed and ran"
    # slow_lookup VAR NAME SAYS: node 0 of 3 (its peers down, connect_timeout 3 s) with the
    # shim's VAR=30, a resolver that takes 30 s an answer: it gives up within 12 s, not 0, and
    # says SAYS (NAME names the case in the messages)
    slow_lookup() {
        newbase; CT=3 TO=2 conf "$tmp/c.ini" 3
        sed -i 's/^host = 127.0.0.1$/host = localhost/' "$tmp/c.ini"
        t0=$(now)
        export "$1=30"
        LD_PRELOAD=$PROXY start 0 "$tmp/c.ini" init
        unset "$1"
        finish 0
        el=$(awk "BEGIN{printf \"%.1f\", $(now) - $t0}")
        grep -h "ring error\|gai_again" "$tmp/out.0" | head -3 | cut -c1-240 | sed 's/^/    /'
        echo "$2: node 0 exited ${rc[0]} after $el s (connect_timeout 3 s)"
        [ "${rc[0]}" != 0 ] || fail "$2: node 0 formed a ring without its peers"
        awk "BEGIN{exit !($el < 12)}" || { fail "$2: node 0 took $el s to give up"; show 0; }
        grep -q "$3" "$tmp/out.0" || { fail "$2: node 0 did not say '$3'"; show 0; }
    }
    # its lookups of its successor wait no longer than its deadlines, so it gives up at
    # connect_timeout as it would without a lookup, and says the lookup is what took the time
    slow_lookup GAI_SLOW_S "slow resolver" "looking up localhost took longer than the time left"
    # the same on node 0's own host, which it listens on: it names itself and the host
    slow_lookup GAI_SLOW_OWN_S "slow own lookup" \
        "node 0 cannot listen: looking up its own host localhost took longer than connect_timeout"
    ;;
nofile)
    # an open-file limit below what a node may need at once (sockets of the ring, the tree, the
    # election and the gate): a hard limit stops the node at its start, naming the limit and
    # what to raise it to, instead of accepts and connects failing mid-run (EMFILE); a soft
    # limit alone is raised, and the ring forms and checks its sums
    newbase; conf "$tmp/c.ini" 3
    (ulimit -n 24; exec "$NODE" "$tmp/c.ini" 0 init) > "$tmp/out.0" 2>&1
    st=$?
    [ $st = 3 ] || fail "under ulimit -n 24 the node exited with $st, expected 3"
    grep -q "the open-file limit (RLIMIT_NOFILE, ulimit -n) is 24 (hard 24), but a node of a 3-node cluster may need [0-9]* descriptors at once" "$tmp/out.0" &&
        grep -q "raise it to [0-9]* or more (ulimit -n [0-9]*" "$tmp/out.0" ||
        { fail "no message naming the limit"; show 0; }
    for ((i = 0; i < 3; i++)); do
        (ulimit -Sn 16; exec "$NODE" "$tmp/c.ini" $i correct 1000003) > "$tmp/out.$i" 2>&1 &
        pid[$i]=$!
        child_rec $!
    done
    finish 0 1 2
    [ "${rc[0]}${rc[1]}${rc[2]}" = 000 ] || { fail "a node failed under ulimit -Sn 16"; show 0 1 2; }
    grep -q "raised the open-file limit (RLIMIT_NOFILE) from 16 to [0-9]*" "$tmp/out.0" ||
        { fail "node 0 did not say it raised its soft limit"; show 0; }
    grep -h "open-file limit" "$tmp/out.0" | sed 's/^/    /'
    ;;
mt_nomem)
    # 128 MiB segments: the ring's own two stages take 256 MiB at the start, the threaded
    # engine's eight (no workers: four slots each way) another 1 GiB when the first large
    # all-reduce starts it. Node 0 gets 1156 MiB of address space: the stages and up to 900 MiB
    # of its own (libraries, thread stacks, malloc's arenas), never the engine's 1 GiB more.
    # (A sanitizer reserves terabytes of address space up front: skipped there.)
    if ldd "$NODE" 2>/dev/null | grep -q 'lib[at]san'; then
        echo "SKIP: a sanitizer build cannot run under an address-space limit"; exit 77
    fi
    newbase; SEG=134217728 conf "$tmp/c.ini" 2
    (ulimit -v 1183744; HETRING_RING_WORKERS=0 exec "$NODE" "$tmp/c.ini" 0 correct 1000003) \
        > "$tmp/out.0" 2>&1 &
    pid[0]=$!
    child_rec $!
    HETRING_RING_WORKERS=0 start 1 "$tmp/c.ini" correct 1000003
    finish 0 1
    [ "${rc[0]}" = 0 ] && [ "${rc[1]}" = 0 ] || { fail "a node failed: ${rc[0]} ${rc[1]}"; show 0 1; }
    grep -q "the threaded engine could not start (out of memory or threads): the collectives run on the calling thread" "$tmp/out.0" &&
        grep -q "node 0: 0 collective(s) on the threaded engine" "$tmp/out.0" ||
        { fail "node 0 did not fall back to its own thread"; show 0; }
    grep -q "node 1: [1-9][0-9]* collective(s) on the threaded engine" "$tmp/out.1" ||
        { fail "node 1 did not run the threaded engine"; show 1; }
    grep -h "threaded engine" "$tmp/out.0" "$tmp/out.1" | sed 's/^/    /'
    ;;
*) echo "unknown scenario $scenario"; exit 2 ;;
esac
echo "$fails failure(s)"
[ "$fails" = 0 ]
