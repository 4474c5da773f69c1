#!/usr/bin/env bash
# test_torch_bench_sh.sh HETRING: bench/torch_bench.sh with stand-ins for its nodes (a fake
# PYTHON whose mnist_cnn.py prints a RESULT at once, or sleeps) and for `hetring gen-data`, so
# that it needs no torch and runs in seconds:
#   - a run of the three modes writes its CSV and prints the speed-ups;
#   - SIGTERM to the script alone while its 4 nodes run: it exits 143 without waiting for them
#     and its nodes are gone (they ran in <(...), out of the trap's reach, and were left behind);
#   - SIGINT to the script alone while node 0 of -d runs alone, a node that ignores SIGTERM: it
#     exits 130 and the node is gone (SIGKILL after the grace of 10 s).
# Skipped (77) without python3, which the script's tables need.
set -u
HR=$1
SRC=$(cd "$(dirname "$0")/../.." && pwd)
. "$SRC/tests/harness.sh"
PY=$(command -v python3) || { echo "SKIP: no python3"; exit 77; }

# the fakes: gen-data makes its --out; a node records itself (in node-pids, and in all-pids
# for on_exit), then prints its RESULT, or sleeps while $tmp/hang exists (ignoring SIGTERM
# while $tmp/deaf exists); anything else is PY's
cat > "$tmp/hetring" << 'EOS'
#!/bin/sh
while [ $# -gt 0 ]; do [ "$1" = --out ] && mkdir -p "$2"; shift; done
EOS
cat > "$tmp/python" << EOS
#!/bin/sh
$standin_rec
case "\$1" in
*mnist_cnn.py)
    rec \$\$ >> "$tmp/node-pids"
    rec \$\$ >> "$tmp/all-pids"
    [ -e "$tmp/deaf" ] && trap '' TERM
    [ -e "$tmp/hang" ] && exec sleep 300
    echo 'RESULT {"wall_s": 2.0, "accuracy": 0.5}'
    exit 0 ;;
esac
exec "$PY" "\$@"
EOS
chmod +x "$tmp/hetring" "$tmp/python"
on_exit="standin_kill '$tmp/all-pids'"
export HETRING=$tmp/hetring PYTHON=$tmp/python

out=$(timeout 120 bash "$SRC/bench/torch_bench.sh" -r 1 -i 3 -o "$tmp/out" 2>&1) ||
    fail "torch_bench.sh exited $?: $out"
[ "$(grep -c '^[a-z]*,1,2.000,0.5000,3,' "$tmp/out/torch_bench.csv" 2> /dev/null)" = 3 ] ||
    fail "torch_bench.sh's CSV has no row per mode: $(cat "$tmp/out/torch_bench.csv" 2> /dev/null)"
echo "$out" | grep -q "^speed-up of hetring (dynamic) over DDP gloo: 1.00x, over static hetring: 1.00x" ||
    fail "torch_bench.sh printed no speed-up: $out"

# term SIGNAL RC NODES ARGS...: the script, with ARGS, gets SIGNAL once NODES nodes sleep; it
# must exit RC within 30 s and leave no node running
term() {
    local sig=$1 want=$2 nodes=$3 script p start
    shift 3
    rm -f "$tmp/node-pids"
    # (no timeout: it would signal the script's whole process group; the waits below are
    # bounded. set -m: a background job of a script ignores SIGINT otherwise.)
    set -m
    bash "$SRC/bench/torch_bench.sh" "$@" -o "$tmp/out" > "$tmp/term.out" 2>&1 &
    script=$!
    set +m
    for _ in $(seq 600); do [ "$(wc -l 2> /dev/null < "$tmp/node-pids")" = "$nodes" ] && break; sleep 0.1; done
    [ "$(wc -l 2> /dev/null < "$tmp/node-pids")" = "$nodes" ] ||
        fail "torch_bench.sh $* started no $nodes node(s): $(cat "$tmp/term.out")"
    signal_script "torch_bench.sh $*" "$script" "$sig" "$want" "$tmp/term.out" "its nodes sleep 300 s"
    [ -f "$tmp/node-pids" ] || return 0
    while read -r p start; do
        proc_ends "$p" "$start" || fail "torch_bench.sh $* left node $p running after SIG$sig"
    done < "$tmp/node-pids"
}
: > "$tmp/hang"
term TERM 143 4 -r 1 -i 3
: > "$tmp/deaf"
term INT 130 1 -d -i 3
[ "$fails" = 0 ]
