#!/usr/bin/env bash
# What hetring run tells a user: "ready on HOST:PORT" only once the port is bound (a busy port
# gives an error naming the address and the port's FILE:LINE, and no ready line), the security = none warning once per
# node, per-node progress columns labelled, no internal invariant tags (I4, I5, I6), and a last
# line that carries the reason of a failure rather than a bare status, or that there was nothing
# left to train, and how many of the run's iterations a node computed where it took a state
# past some; a node alone stops on SIGTERM or SIGINT with its checkpoint, as a node of a
# cluster leaves, and a node of a cluster asked to leave before it joined stops with exit 0;
# metrics that could not be written fail the run, progress that could not be written is said
# once with its cause; a model beyond the process's
# memory is refused at start; a bad HETRING_RING_WORKERS is named once, after the node's
# prefix; an IPv6 address is written [HOST]:PORT.
# HR, fail, $tmp and the port block `base` from the shared setup, whose EXIT trap also stops
# the process holding a port, if it still runs (child_rec)
. "$(dirname "${BASH_SOURCE[0]}")/../dist/lib.sh"
cat > "$tmp/c.ini" <<INI
[cluster]
security = none
connect_timeout = 20
timeout = 10
rejoin_timeout = 5
[train]
samples = 2000
eval_samples = 100
iterations = 12
global_batch = 64
layers = 784,16,10
hash_interval = 5
[node.0]
host = 127.0.0.1
port = $base
[node.1]
host = 127.0.0.1
port = $((base + 1))
INI
# pair FAULT [CONF]: both nodes, logs in $tmp/l0 and $tmp/l1, exit codes in rc0 rc1
pair() {
    local conf=${2:-$tmp/c.ini}
    HETRING_FAULT=$1 timeout 60 "$HR" run --conf "$conf" --node 1 > "$tmp/l1" 2>&1 & local p1=$!
    HETRING_FAULT=$1 timeout 60 "$HR" run --conf "$conf" --node 0 > "$tmp/l0" 2>&1; rc0=$?
    wait $p1; rc1=$?
}

# a clean run: one warning per node, ready after the bind, labelled columns, no tags
pair ""
[ $rc0 = 0 ] && [ $rc1 = 0 ] || fail "clean run exited $rc0/$rc1: $(tail -3 "$tmp/l0")"
for i in 0 1; do
    n=$(grep -c "security = none" "$tmp/l$i")
    [ "$n" = 1 ] || fail "node $i warned about security = none $n times"
    grep -q "node $i of 2 ready on 127.0.0.1:$((base + i))" "$tmp/l$i" || fail "node $i: no ready line"
done
grep -Eq '\| batch [0-9]+/[0-9]+ compute [0-9]+/[0-9]+ ms' "$tmp/l0" ||
    fail "progress columns unlabelled: $(grep iter "$tmp/l0" | tail -1)"

# node 0's all-reduce of iteration 5 completes, then its view fails (test fault fail_view):
# node 1 applied the step, node 0 takes its state, one iteration past. Its last line counts the
# run's 12 iterations and says it computed 11 of them (it said "done: 11 iterations", read as one
# lost)
pair "fail_view:0:5"
[ $rc0 = 0 ] && [ $rc1 = 0 ] || fail "fail_view:0:5 exited $rc0/$rc1: $(tail -3 "$tmp/l0")"
tail -1 "$tmp/l0" | grep -q "train: done: 12 iterations (11 computed by this node, 1 in a state from a peer), 768 samples" ||
    fail "node 0 that took a state: last line: $(tail -1 "$tmp/l0")"

# the port is taken: no ready line, and the error names the address
python3 -c 'import socket,sys,time
s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(1); time.sleep(60)' \
    "$base" & holder=$!
child_rec "$holder"
for _ in $(seq 50); do
    python3 -c 'import socket,sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])))' \
        "$base" 2>/dev/null && break
    sleep 0.1
done
timeout 30 "$HR" run --conf "$tmp/c.ini" --node 0 --set cluster.connect_timeout=2 > "$tmp/busy" 2>&1; rc=$?
child_signal TERM "$holder"; wait "$holder" 2>/dev/null
[ $rc = 1 ] || fail "busy port: exited $rc, expected 1"
grep -q "ready on" "$tmp/busy" && fail "busy port: said ready: $(cat "$tmp/busy")"
tail -1 "$tmp/busy" | grep -qF "c.ini:15: [node.0] port = $base: cannot listen on 127.0.0.1:$base: Address already in use (is another node or program using it?)" ||
    fail "busy port: last line: $(tail -1 "$tmp/busy")"

# a replica mismatch: every node's last line says why, in words
pair perturb:1:3
for i in 0 1; do
    last=$(tail -1 "$tmp/l$i")
    echo "node $i: $last"
    [ "$(eval echo \$rc$i)" = 1 ] || fail "mismatch: node $i exited $(eval echo \$rc$i)"
    case $last in
        *"the nodes disagree"*) ;;
        *) fail "mismatch: node $i's last line is '$last'" ;;
    esac
    grep -q "(I[0-9]" "$tmp/l$i" && fail "node $i shows an internal tag: $(grep '(I[0-9]' "$tmp/l$i")"
    grep -q "every node must hold identical parameters" "$tmp/l$i" ||
        fail "node $i: the mismatch is not explained: $(tail -3 "$tmp/l$i")"
done
# no held-out samples (eval_samples = 0): no evaluation, no "nan" anywhere, and the last line
# says so (the progress and the done line showed "eval acc nan%" and "held-out accuracy nan")
sed -e 's/^eval_samples = 100$/eval_samples = 0/' -e '/^\[node.1\]$/,$d' "$tmp/c.ini" > "$tmp/e0.ini"
timeout 60 "$HR" run --conf "$tmp/e0.ini" --set train.eval_interval=4 > "$tmp/e0" 2>&1; rc=$?
[ $rc = 0 ] || fail "eval_samples = 0: exited $rc: $(tail -3 "$tmp/e0")"
grep -qi "nan" "$tmp/e0" && fail "eval_samples = 0: a nan was printed: $(grep -i nan "$tmp/e0")"
grep -Eq "eval (acc|mse)" "$tmp/e0" && fail "eval_samples = 0: an evaluation was printed: $(grep -E "eval (acc|mse)" "$tmp/e0")"
tail -1 "$tmp/e0" | grep -q "train: done: 12 iterations, .*, no held-out samples to evaluate on" ||
    fail "eval_samples = 0: last line: $(tail -1 "$tmp/e0")"
# resumed at or past the end: nothing is trained, and the last line says so, alone and in a
# cluster (it said "done: 0 iterations, 0 samples ... (0 samples/s), final loss nan")
sed -e "s|^iterations = 12$|iterations = 12\ncheckpoint = $tmp/ck.bin|" "$tmp/c.ini" > "$tmp/ck.ini"
sed -e '/^\[node.1\]$/,$d' "$tmp/ck.ini" > "$tmp/ck1.ini"
timeout 60 "$HR" run --conf "$tmp/ck1.ini" > "$tmp/ck" 2>&1 || fail "checkpointed run: $(tail -3 "$tmp/ck")"
for past in 12 8; do
    timeout 60 "$HR" run --conf "$tmp/ck1.ini" --set train.iterations=$past > "$tmp/ck" 2>&1 ||
        fail "resumed at 12 of $past: exited $?: $(tail -3 "$tmp/ck")"
    grep -qi "nan" "$tmp/ck" && fail "resumed at 12 of $past: a nan was printed: $(grep -i nan "$tmp/ck")"
    tail -1 "$tmp/ck" | grep -q "train: done: nothing left to train (resumed at iteration 12, \[train\] iterations = $past); held-out accuracy" ||
        fail "resumed at 12 of $past: last line: $(tail -1 "$tmp/ck")"
done
pair "" "$tmp/ck.ini"
[ $rc0 = 0 ] && [ $rc1 = 0 ] || fail "cluster resumed at the end exited $rc0/$rc1: $(tail -3 "$tmp/l0")"
grep -qi "nan" "$tmp/l0" && fail "cluster resumed at the end: a nan was printed: $(grep -i nan "$tmp/l0")"
tail -1 "$tmp/l0" | grep -q "train: done: nothing left to train (resumed at iteration 12, \[train\] iterations = 12); held-out accuracy" ||
    fail "cluster resumed at the end: last line: $(tail -1 "$tmp/l0")"
# one node alone leaves on SIGTERM or SIGINT as a cluster node does: it stops after the iteration
# in progress, writes its checkpoint, says so and exits 0, and a second run resumes there (the
# signal killed it, exit 143, with no checkpoint written)
for sig in TERM INT; do
    rm -f "$tmp/sig.ckpt" "$tmp/sig.jsonl"
    timeout 60 "$HR" run --conf "$tmp/ck1.ini" --quiet --set train.iterations=100000 \
        --set "train.checkpoint=$tmp/sig.ckpt" --metrics "$tmp/sig.jsonl" > "$tmp/sig" 2>&1 & p=$!
    child_rec $p
    wait_for_line "$tmp/sig.jsonl" '^\{"iter":3,' 30
    child_signal $sig $p; wait $p; rc=$?
    [ $rc = 0 ] || fail "SIG$sig alone: exited $rc: $(tail -2 "$tmp/sig")"
    stop=$(grep -o "train: stopping at iteration [0-9]* on SIG$sig; checkpoint written to $tmp/sig.ckpt$" "$tmp/sig" | grep -o '[0-9][0-9]*' | head -1)
    [ -n "$stop" ] && [ -s "$tmp/sig.ckpt" ] || fail "SIG$sig alone: no checkpoint said or written: $(tail -2 "$tmp/sig")"
    tail -1 "$tmp/sig" | grep -q "train: node 0 stopped at iteration $stop of 100000$" ||
        fail "SIG$sig alone: last line: $(tail -1 "$tmp/sig")"
    timeout 60 "$HR" run --conf "$tmp/ck1.ini" --quiet --set train.iterations=$((stop + 2)) \
        --set "train.checkpoint=$tmp/sig.ckpt" > "$tmp/sig2" 2>&1 &&
        grep -q "resumed from checkpoint $tmp/sig.ckpt at iteration $stop$" "$tmp/sig2" ||
        fail "SIG$sig alone: the next run did not resume at $stop: $(tail -2 "$tmp/sig2")"
done
# a node of a cluster asked to leave before it joined (while its data loads, while the first
# election waits for its peer, which never starts) stops at once, says so and exits 0: the
# handler is in place before the data loads (its bit in /proc's SigCgt), and the first election
# ends on the signal
caught() { # PID SIGNUM: the process has a handler for the signal
    local mask
    mask=$(awk '/^SigCgt:/ {print $2}' "/proc/$1/status" 2>/dev/null) || return 1
    [ -n "$mask" ] && (((0x$mask >> ($2 - 1)) & 1))
}
child() { # PID: its child (hetring under timeout), once there is one, as "PID START" (proc.sh)
    local c
    for _ in $(seq 200); do
        c=$(pgrep -P "$1" | head -1) && [ -n "$c" ] && proc_stat "$c" &&
            { echo "$c ${proc_f[19]}"; return; }
        sleep 0.05
    done
}
for when in load election; do
    samples=2000
    [ $when = load ] && samples=60000 # seconds of synthetic data to make
    timeout 60 "$HR" run --conf "$tmp/c.ini" --node 0 --set train.samples=$samples \
        > "$tmp/early" 2>&1 & p=$!
    child_rec $p
    read -r hp hs <<< "$(child $p)"
    for _ in $(seq 300); do caught "$hp" 15 && break; sleep 0.05; done
    [ $when = election ] && wait_for_line "$tmp/early" "waiting for a quorum" 30
    grep -q "ready on" "$tmp/early" && [ $when = load ] && fail "SIGTERM $when: the data had loaded already"
    proc_signal TERM "$hp" "$hs"; wait $p; rc=$?
    [ $rc = 0 ] || fail "SIGTERM in the $when: exited $rc: $(tail -2 "$tmp/early")"
    tail -1 "$tmp/early" | grep -q "train: node 0 stopped on SIGTERM before it joined the cluster (nothing trained, no checkpoint written)$" ||
        fail "SIGTERM in the $when: last line: $(tail -1 "$tmp/early")"
done
# one request sent twice at once (as timeout(1) sends it to the node and its process group; here
# 0.05 s apart, so that the node handles the first before the second comes) is one request: the
# node, loading its data for 1-2 s, stops once it has; a second one 0.6 s after the first stops
# it at once (143)
for gap in 0.05 0.6; do
    timeout 60 "$HR" run --conf "$tmp/c.ini" --node 0 --set train.samples=120000 \
        > "$tmp/early" 2>&1 & p=$!
    child_rec $p
    read -r hp hs <<< "$(child $p)"
    for _ in $(seq 300); do caught "$hp" 15 && break; sleep 0.05; done
    proc_signal TERM "$hp" "$hs"; sleep $gap; proc_signal TERM "$hp" "$hs"; wait $p; rc=$?
    want=0
    [ $gap = 0.6 ] && want=143
    [ $rc = $want ] || fail "SIGTERM, then again $gap s later, while the data loads: exited $rc, not $want: $(tail -1 "$tmp/early")"
done
# metrics that cannot be written (a file size limit stands in for a full disk): said once when
# it happens, training goes on, and the run ends 1 naming the file and the first lost record
# (the run exited 0, the file cut short mid-record)
sed -e '/^\[node.1\]$/,$d' "$tmp/c.ini" > "$tmp/m1.ini"
(ulimit -f 4; trap '' XFSZ; exec timeout 60 "$HR" run --conf "$tmp/m1.ini" \
    --set train.iterations=100 --metrics "$tmp/m.jsonl") 2>&1 | cat > "$tmp/mf"
rc=${PIPESTATUS[0]}
[ "$rc" = 1 ] || fail "metrics past the size limit: exited $rc: $(tail -2 "$tmp/mf")"
n=$(grep -c "m.jsonl: cannot write the record of iteration [0-9]* (File too large); training goes on" "$tmp/mf")
[ "$n" = 1 ] || fail "metrics past the size limit: $n warnings: $(grep -i metrics "$tmp/mf")"
tail -1 "$tmp/mf" | grep -Eq "m.jsonl: write failed \(File too large\): the records from iteration [0-9]+ on are missing or cut short$" ||
    fail "metrics past the size limit: last line: $(tail -1 "$tmp/mf")"
# progress that cannot be written (standard output on a full disk: /dev/full): said once when
# it happens, with its cause, training goes on, and the run ends 1 (its last line said "an
# earlier write failed", and no line said why)
if [ -w /dev/full ]; then
    timeout 60 "$HR" run --conf "$tmp/m1.ini" --set train.iterations=40 > /dev/full 2> "$tmp/ff"
    rc=$?
    n=$(grep -c "train: cannot write the progress of iteration [0-9]* to standard output (No space left on device); training goes on" "$tmp/ff")
    [ "$rc" = 1 ] && [ "$n" = 1 ] && grep -q "train: done: 40 iterations" "$tmp/ff" ||
        fail "progress to /dev/full: exited $rc, $n warnings: $(cat "$tmp/ff")"
fi
# a summary that cannot be written leaves the one before it as it was, and no part of its own
# (it emptied the old one: fopen truncated it before the write failed)
echo '{"old": 1}' > "$tmp/s.json"
(ulimit -f 0; trap '' XFSZ; exec timeout 60 "$HR" run --conf "$tmp/m1.ini" --summary "$tmp/s.json") \
    2>&1 | cat > "$tmp/sf"
rc=${PIPESTATUS[0]}
[ "$rc" = 1 ] && tail -1 "$tmp/sf" | grep -q "s.json: write failed (File too large); it was not written$" ||
    fail "summary past the size limit: exited $rc: $(tail -1 "$tmp/sf")"
[ "$(cat "$tmp/s.json")" = '{"old": 1}' ] || fail "summary past the size limit: the old one became '$(head -c 80 "$tmp/s.json")'"
ls "$tmp" | grep -q 's.json.tmp' && fail "summary past the size limit: left $(ls "$tmp" | grep s.json.tmp)"
# a model (or a synthetic set) the process cannot hold is refused at start, naming the key (exit
# 2), where it failed as "model: out of memory (batch 64)" (exit 1), or, where the kernel lends
# more memory than it has, the node was killed while it trained. An address-space limit of 4 GB
# stands in for a small machine: 784,30000,30000,10 needs about 11 GB. Not checked where a small
# model cannot start under that limit (a sanitizer's build reserves more)
if (ulimit -v 4000000; timeout 60 "$HR" config --conf "$tmp/c.ini" --node 0 > /dev/null 2>&1); then
    (ulimit -v 4000000; exec timeout 60 "$HR" run --conf "$tmp/c.ini" --node 0 \
        --set train.layers=784,30000,30000,10) > "$tmp/mem" 2>&1; rc=$?
    [ $rc = 2 ] || fail "a model beyond memory: exited $rc, expected 2: $(tail -1 "$tmp/mem")"
    tail -1 "$tmp/mem" | grep -Eq "^hetring run: node 0: .*c.ini: \[train\] layers 784,30000,30000,10 needs 1[01]\.[0-9] GB of memory at a batch of 64 \(923880010 parameters.*more than the 4\.1 GB this process may use here \(expected a smaller model or global_batch\)$" ||
        fail "a model beyond memory: last line: $(tail -1 "$tmp/mem")"
    # the same for a synthetic set: 6,000,000 samples of 788 bytes (it was written page by page)
    # in hetring run
    (ulimit -v 4000000; exec timeout 60 "$HR" run --conf "$tmp/c.ini" --node 0 \
        --set train.samples=6000000) > "$tmp/mem" 2>&1; rc=$?
    [ $rc = 2 ] && tail -1 "$tmp/mem" | grep -Eq "c.ini: \[train\] samples 6000000 \(and eval_samples 100\) of synthetic data need 4\.73 GB of memory, more than the 4\.1 GB this process may use here \(expected fewer samples\)$" ||
        fail "a data set beyond memory: exited $rc: $(tail -1 "$tmp/mem")"
    # and gen-data, before it makes the directory
    (ulimit -v 4000000; exec timeout 60 "$HR" gen-data --kind synthetic --out "$tmp/gd" \
        --samples 6000000) > "$tmp/mem" 2>&1; rc=$?
    [ $rc = 2 ] && [ ! -e "$tmp/gd" ] && grep -q "^hetring gen-data: --samples 6000000 (and --eval-samples 10000) of synthetic data need 4.74 GB of memory, more than the 4.1 GB this process may use here (expected fewer samples)$" "$tmp/mem" ||
        fail "gen-data beyond memory: exited $rc: $(tail -1 "$tmp/mem")"
else
    echo "memory case not run: a small model does not start under ulimit -v 4000000 here"
fi
# an environment variable the ring cannot honour is named once, after the node's prefix (it
# read "hetring run: node 0: node 0: HETRING_RING_WORKERS=9: ...")
HETRING_RING_WORKERS=9 timeout 60 "$HR" run --conf "$tmp/c.ini" --node 0 > "$tmp/w" 2>&1; rc=$?
[ $rc = 2 ] && grep -q "^hetring run: node 0: HETRING_RING_WORKERS=9: expected off or 0 to 8$" "$tmp/w" ||
    fail "HETRING_RING_WORKERS=9: exited $rc: $(tail -1 "$tmp/w")"
# IPv6: a cluster on ::1 trains, and an address is written [HOST]:PORT, so that its colons do
# not run into the port's (it said "ready on ::1:PORT"); not checked where ::1 cannot be bound
if python3 -c 'import socket; s=socket.socket(socket.AF_INET6); s.bind(("::1", 0))' 2>/dev/null; then
    sed 's/^host = 127.0.0.1$/host = ::1/' "$tmp/c.ini" > "$tmp/v6.ini"
    pair "" "$tmp/v6.ini"
    [ $rc0 = 0 ] && [ $rc1 = 0 ] || fail "IPv6 run exited $rc0/$rc1: $(tail -3 "$tmp/l0")"
    grep -q "node 0 of 2 ready on \[::1\]:$base " "$tmp/l0" || fail "IPv6: ready line: $(grep ready "$tmp/l0")"
    grep -q "successor node 1 (\[::1\]:$((base + 1)))" "$tmp/l0" ||
        fail "IPv6: ring line: $(grep 'ring formed' "$tmp/l0")"
else
    echo "IPv6 case not run: ::1 cannot be bound on this machine"
fi
[ $fails = 0 ] && echo "run messages: ok"
exit $((fails > 0))
