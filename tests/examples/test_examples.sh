#!/usr/bin/env bash
# test_examples.sh HETRING CMAKE BUILD-DIR SOURCE-DIR c|torch [PYTHON]: the examples as a user
# builds and runs them, for a few iterations.
#   c      cmake --install into a temporary prefix, examples/c built there with its Makefile
#          (pkg-config) and with its CMakeLists.txt (find_package), run on 3 local nodes; in a
#          sanitizer build with its sanitizer (HR_EXAMPLE_SANITIZE), as the library needs
#   torch  examples/torch/mnist_cnn.py on 4 local nodes on data from `hetring gen-data`: every
#          node ends with the same parameters, node 0's progress shows the 4 batches, and a
#          second run of 12 iterations resumes each node's --checkpoint of 8 (exit 77 when
#          PYTHON has no torch)
#   run-sh examples/torch/run.sh with a fake PYTHON whose nodes print a RESULT at once: the
#          temporary directory of its data and logs is gone after it, and its output does not
#          name it; with WORK=DIR, DIR keeps the data and logs and the output names it;
#          SIGTERM to the script alone, its nodes running: it exits 143 without waiting for
#          them, its nodes gone and its directory removed (it waited for the policy's run)
set -u
HR=$1 CMAKE=$2 BUILD=$3 SRC=$4 WHAT=$5 PY=${6:-python3}
. "$SRC/tests/harness.sh"
sets=()
for k in 0 1 2 3; do sets+=("node.$k.port=$((base + k))"); done

case $WHAT in
c)
    P=$tmp/prefix
    "$CMAKE" --install "$BUILD" --prefix "$P" > "$tmp/install.log" 2>&1 ||
        { echo "FAIL: cmake --install: $(cat "$tmp/install.log")"; exit 1; }
    for f in include/hetring.h lib/libhetring.so.0 lib/pkgconfig/hetring.pc \
             lib/cmake/hetring/hetringConfig.cmake; do
        [ -e "$P/$f" ] || fail "$f was not installed"
    done
    cp -r "$SRC/examples/c" "$tmp/c"
    # no LD_LIBRARY_PATH: as a user's shell, the program built by the Makefile finds the library
    # of a prefix outside the loader's search by the rpath it records
    export PKG_CONFIG_PATH=$P/lib/pkgconfig
    unset LD_LIBRARY_PATH
    # HR_EXAMPLE_SANITIZE: the sanitizer of a sanitizer build, whose library needs it
    san=${HR_EXAMPLE_SANITIZE:-}
    CFLAGS="-O2 -Wall -Wextra $san" LDFLAGS="$san" make -s -C "$tmp/c" model > "$tmp/make.log" 2>&1 ||
        fail "make (pkg-config): $(cat "$tmp/make.log")"
    "$CMAKE" -S "$tmp/c" -B "$tmp/cbuild" -DCMAKE_PREFIX_PATH="$P" -DCMAKE_C_FLAGS="$san" \
        -DCMAKE_EXE_LINKER_FLAGS="$san" > "$tmp/cmake.log" 2>&1 &&
        "$CMAKE" --build "$tmp/cbuild" > "$tmp/cmake.log" 2>&1 ||
        fail "the CMake build (find_package(hetring)): $(tail -20 "$tmp/cmake.log")"
    pids=()
    for k in 0 1 2; do
        timeout 120 "$tmp/c/model" "$tmp/c/cluster.ini" $k train.iterations=40 "${sets[@]:0:3}" \
            > "$tmp/n$k.log" 2>&1 &
        pids+=($!)
    done
    for k in 0 1 2; do wait "${pids[$k]}" || fail "node $k exited $?: $(tail -5 "$tmp/n$k.log")"; done
    grep -h "^done:" "$tmp/n0.log" || fail "node 0 printed no result: $(cat "$tmp/n0.log")"
    # SIGTERM to node 2 once node 0 printed iteration 50 (of 10000, about 1000 a second): node
    # 2 leaves cleanly, and the others log its leave, not a failure, and finish
    for k in 0 1 2; do
        timeout 120 stdbuf -oL "$tmp/c/model" "$tmp/c/cluster.ini" $k train.iterations=10000 \
            "${sets[@]:0:3}" > "$tmp/t$k.log" 2>&1 &
        pids[$k]=$!
    done
    for _ in $(seq 600); do grep -q "^iter   50" "$tmp/t0.log" && break; sleep 0.1; done
    kill -TERM "${pids[2]}" # timeout passes it on to the node
    for k in 0 1 2; do wait "${pids[$k]}" || fail "node $k exited $? after SIGTERM to node 2: $(tail -3 "$tmp/t$k.log")"; done
    grep -h "left the cluster" "$tmp/t2.log" || fail "node 2 did not leave on SIGTERM: $(tail -3 "$tmp/t2.log")"
    grep -q "ring: node 2 left at iteration" "$tmp/t0.log" || fail "node 0 did not log node 2's leave: $(grep ring: "$tmp/t0.log" | tail -3)"
    grep -q "^done:" "$tmp/t0.log" || fail "node 0 did not finish after node 2 left: $(tail -3 "$tmp/t0.log")"
    ! grep -h "\] \(warn\|error\) " "$tmp/t0.log" "$tmp/t1.log" | grep -v "security = none" ||
        fail "a node reported node 2's leave as a failure"
    ;;
torch)
    if ! "$PY" -c "import torch" 2> /dev/null; then
        echo "skipped: PyTorch is not installed for $PY (Debian: apt-get install python3-torch)"
        exit 77
    fi
    "$HR" gen-data --kind synthetic --out "$tmp/data" --samples 2000 --eval-samples 500 \
        > /dev/null || fail "gen-data"
    # run ITERATIONS [ARGS...]: the 4 nodes, each with its own --checkpoint, logs in n$k.log
    run() {
        local args=(--set "train.iterations=$1") pids=() k
        shift
        for s in "${sets[@]}"; do args+=(--set "$s"); done
        for k in 0 1 2 3; do
            timeout 180 "$PY" "$SRC/examples/torch/mnist_cnn.py" --conf "$SRC/examples/torch/cluster.ini" \
                --node $k --data "$tmp/data" --checkpoint "$tmp/ck.$k" "${args[@]}" "$@" \
                > "$tmp/n$k.log" 2>&1 &
            pids+=($!)
        done
        for k in 0 1 2 3; do wait "${pids[$k]}" || fail "node $k exited $?: $(tail -5 "$tmp/n$k.log")"; done
    }
    run 8
    grep -h "^done:" "$tmp/n0.log" || fail "node 0 printed no result"
    n=$(grep -h '^RESULT' "$tmp"/n*.log | sed 's/.*"hash": \([0-9]*\).*/\1/' | sort -u | wc -l)
    [ "$(grep -h '^RESULT' "$tmp"/n*.log | wc -l)" = 4 ] || fail "not every node printed its RESULT"
    [ "$n" = 1 ] || fail "the nodes' final parameters differ ($n distinct hashes)"
    # node 0's progress shows every node's batch (Node.members), together the global batch
    line=$(grep -h '^iter ' "$tmp/n0.log" | tail -1)
    echo "$line"
    sum=$(echo "$line" | sed -n 's/.*batches \([0-9/]*\) of 256.*/\1/p' | tr / + )
    [ -n "$sum" ] && [ "$(echo "$sum" | tr + '\n' | wc -l)" = 4 ] && [ $(($sum)) = 256 ] ||
        fail "node 0's progress line does not give the 4 batches of 256: $line"
    # the same 4 nodes with 12 iterations resume their checkpoints of 8: 4 iterations each
    run 12
    its=$(grep -h '^RESULT' "$tmp"/n*.log | sed 's/.*"iterations": \([0-9]*\).*/\1/' | sort -u)
    [ "$its" = 4 ] || fail "the resumed run ran '$its' iterations per node, not 4"
    # SIGINT (Ctrl-C) to node 3 once node 0 printed its first iteration (of 60): node 3 leaves
    # cleanly (a KeyboardInterrupt killed it), node 0 logs its leave, and the others finish
    pids=()
    for k in 0 1 2 3; do
        args=(--set train.iterations=60)
        for s in "${sets[@]}"; do args+=(--set "$s"); done
        timeout 180 "$PY" "$SRC/examples/torch/mnist_cnn.py" --conf "$SRC/examples/torch/cluster.ini" \
            --node $k --data "$tmp/data" "${args[@]}" > "$tmp/i$k.log" 2>&1 &
        pids+=($!)
    done
    for _ in $(seq 1200); do grep -q "^iter " "$tmp/i0.log" && break; sleep 0.1; done
    kill -INT "${pids[3]}" # timeout passes it on to the node
    for k in 0 1 2 3; do wait "${pids[$k]}" || fail "node $k exited $? after SIGINT to node 3: $(tail -3 "$tmp/i$k.log")"; done
    grep -h "left the cluster" "$tmp/i3.log" || fail "node 3 did not leave on SIGINT: $(tail -3 "$tmp/i3.log")"
    grep -q "ring: node 3 left at iteration" "$tmp/i0.log" || fail "node 0 did not log node 3's leave"
    grep -q "^done:" "$tmp/i0.log" || fail "node 0 did not finish after node 3 left: $(tail -3 "$tmp/i0.log")"
    ;;
run-sh)
    # the fake: a node records its --data and prints its RESULT, or while $tmp/hang exists
    # records itself (in node-pids) and sleeps; anything else is PY's
    cat > "$tmp/python" << EOS
#!/bin/sh
$standin_rec
case "\$1" in
*mnist_cnn.py)
    while [ \$# -gt 0 ]; do [ "\$1" = --data ] && echo "\$2" >> "$tmp/data-dirs"; shift; done
    [ -e "$tmp/hang" ] && { rec \$\$ >> "$tmp/node-pids"; exec sleep 300; }
    echo 'RESULT {"wall_s": 2.0, "accuracy": 0.5}'
    exit 0 ;;
esac
exec "$PY" "\$@"
EOS
    chmod +x "$tmp/python"
    out=$(HETRING=$HR PYTHON=$tmp/python timeout 120 bash "$SRC/examples/torch/run.sh" 3 2>&1) ||
        fail "run.sh exited $?: $out"
    work=$(dirname "$(head -1 "$tmp/data-dirs" 2> /dev/null)")
    echo "$out" | head -1
    case $work in /tmp/hetring-torch.*) ;; *) fail "run.sh's nodes got --data in '$work'" ;; esac
    [ ! -e "$work" ] || { fail "run.sh left $work behind ($(du -sh "$work" | cut -f1))"; rm -rf "$work"; }
    echo "$out" | grep -q "$work\|logs in" && fail "run.sh names a directory it removed: $out"
    echo "$out" | grep -q "^speed-up of dynamic batching over static: 1.00x" || fail "run.sh printed no speed-up: $out"
    out=$(WORK=$tmp/keep HETRING=$HR PYTHON=$tmp/python timeout 120 bash "$SRC/examples/torch/run.sh" 3 2>&1) ||
        fail "run.sh with WORK exited $?: $out"
    [ -s "$tmp/keep/static.0.log" ] && [ -d "$tmp/keep/data" ] || fail "WORK=$tmp/keep does not hold the data and logs: $(ls "$tmp/keep")"
    echo "$out" | grep -q "data and logs in $tmp/keep" || fail "run.sh with WORK does not say where the logs are: $out"
    # run.sh's rec and runs, by which its stop signals a node: a node it started runs; a pid
    # that another process took after the node that had it ended is not the node; a process
    # that is not the script's child (its pid taken before rec read it) is recorded as none
    eval "$(sed -n '/^rec() {/,/^}/p; /^runs() {/,/^}/p' "$SRC/examples/torch/run.sh")"
    sleep 300 &
    node=$!
    child_rec $node
    sh -c "$standin_rec"'; rec $$ > "$1"; exec sleep 300' - "$tmp/other" &
    other=$!
    child_rec $other
    for _ in $(seq 100); do [ -s "$tmp/other" ] && break; sleep 0.05; done
    sh -c "$standin_rec"'; rec $$' > "$tmp/ended"
    read -r _ ended_start < "$tmp/ended"
    pids=() starts=()
    rec $node
    pids+=($other) starts+=("$ended_start")
    (sh -c "$standin_rec"'; rec $$ > "$1"; exec sleep 300' - "$tmp/orphan" &)
    on_exit="standin_kill '$tmp/orphan'; $on_exit"
    for _ in $(seq 100); do [ -s "$tmp/orphan" ] && break; sleep 0.05; done
    read -r orphan _ < "$tmp/orphan"
    rec $orphan
    runs 2 && fail "run.sh's runs: $orphan, not a child of the shell that recorded it, runs as its node"
    runs 0 || fail "run.sh's runs: the node $node does not run"
    [ "${child_start[$other]}" != "$ended_start" ] && runs 1 &&
        fail "run.sh's runs: $other, which took the pid of a node that ended, runs as that node"
    child_signal KILL $node $other
    wait $node $other 2> /dev/null
    # SIGTERM to the script alone while its 4 nodes run (a fake that sleeps 300 s)
    : > "$tmp/hang"
    rm -f "$tmp/data-dirs"
    # (no timeout: it would signal the script's whole process group; the waits below are bounded)
    HETRING=$HR PYTHON=$tmp/python bash "$SRC/examples/torch/run.sh" 3 > "$tmp/term.out" 2>&1 &
    script=$!
    on_exit="standin_kill '$tmp/node-pids'; $on_exit"
    for _ in $(seq 600); do [ "$(wc -l 2> /dev/null < "$tmp/node-pids")" = 4 ] && break; sleep 0.1; done
    [ "$(wc -l 2> /dev/null < "$tmp/node-pids")" = 4 ] || fail "run.sh started no 4 nodes: $(cat "$tmp/term.out")"
    signal_script run.sh "$script" TERM 143 "$tmp/term.out" "its nodes sleep 300 s"
    while read -r p start; do
        proc_ends "$p" "$start" || fail "run.sh left node $p running after SIGTERM"
    done < "$tmp/node-pids"
    work=$(dirname "$(head -1 "$tmp/data-dirs" 2> /dev/null)")
    case $work in /tmp/hetring-torch.*) ;; *) fail "run.sh's nodes got --data in '$work'" ;; esac
    [ ! -e "$work" ] || { fail "run.sh left $work behind after SIGTERM"; rm -rf "$work"; }
    ;;
*) echo "unknown example $WHAT"; exit 2 ;;
esac
[ $fails = 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "ok"
