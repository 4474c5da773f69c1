#!/usr/bin/env bash
# run.sh: the PyTorch example on 4 local nodes (cluster.ini: emulated slowdowns 1, 1.5, 2, 4),
# first with static batches (B/4 each), then with hetring's controller; prints the speed-up
# and the held-out accuracy.
#
#   examples/torch/run.sh [ITERATIONS]
#
# Needs: hetring (HETRING, else on PATH), python3 with torch and the hetring package
# (pip install ./python, or PYTHONPATH=python) and libhetring (installed, or HETRING_LIB).
# The data and the nodes' logs go to a temporary directory removed at exit; WORK=DIR puts them
# in DIR instead and keeps them (a later run reuses DIR's data).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
HETRING=${HETRING:-hetring}
PYTHON=${PYTHON:-python3}
iters=${1:-120}
pids=() starts=()
work=
# rec PID: a node this shell just started, into pids, and its start time (field 22 of
# /proc/PID/stat) into starts; runs I: node I of pids still runs. A pid alone does not name a
# process once it ended: another process of the machine may have it by then, and gets no signal.
rec() {
    local s=
    read -r s 2>/dev/null < "/proc/$1/stat" || true
    s=${s##*) }
    set -- "$1" $s
    pids+=("$1")
    if [ "${3:-}" = $$ ]; then starts+=("${21:-}"); else starts+=(""); fi
}
runs() {
    local s
    [ -n "${starts[$1]}" ] && read -r s 2>/dev/null < "/proc/${pids[$1]}/stat" || return 1
    s=${s##*) }
    set -- "$1" $s
    [ "$2" != Z ] && [ "${21}" = "${starts[$1]}" ]
}
# The nodes of the run in progress get SIGTERM, and SIGKILL 10 s later, before their logs'
# directory goes. (run runs in this shell, not in $(...), so that a signal finds its nodes and
# is not held until the run ends: bash takes a trapped signal as soon as `wait` is interrupted.)
cleanup() {
    local i
    for i in "${!pids[@]}"; do runs $i && kill "${pids[$i]}" 2>/dev/null || true; done
    for _ in $(seq 100); do
        local left=0
        for i in "${!pids[@]}"; do runs $i && left=1 || true; done
        [ $left = 1 ] || break
        sleep 0.1
    done
    for i in "${!pids[@]}"; do runs $i && kill -KILL "${pids[$i]}" 2>/dev/null || true; done
    [ -n "${WORK:-}" ] || [ -z "$work" ] || rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
work=${WORK:-$(mktemp -d /tmp/hetring-torch.XXXXXX)}
mkdir -p "$work"
[ -d "$work/data" ] || "$HETRING" gen-data --kind synthetic --out "$work/data" --samples 12000 \
    --eval-samples 2000 >/dev/null

# run POLICY: the 4 nodes with [controller] policy = POLICY; node 0's RESULT line into $result
run() {
    pids=() starts=()
    for k in 0 1 2 3; do
        "$PYTHON" "$here/mnist_cnn.py" --conf "$here/cluster.ini" --node "$k" --data "$work/data" \
            --set "controller.policy=$1" --set "train.iterations=$iters" >"$work/$1.$k.log" 2>&1 &
        rec $!
    done
    local rc=0
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    pids=() starts=()
    [ $rc = 0 ] || { tail -n 20 "$work"/"$1".*.log >&2; return 1; }
    result=$(grep -h '^RESULT' "$work/$1.0.log" | cut -c8-)
}

field() { "$PYTHON" -c "import json,sys; print(json.loads(sys.argv[1])['$2'])" "$1"; }

echo "4 nodes, slowdowns 1, 1.5, 2, 4 (emulated), $iters iterations of B = 256${WORK:+; data and logs in $work}"
run static
static=$result
echo "static:  $(field "$static" wall_s | cut -c1-5) s, accuracy $(field "$static" accuracy | cut -c1-6)"
run model
dynamic=$result
echo "dynamic: $(field "$dynamic" wall_s | cut -c1-5) s, accuracy $(field "$dynamic" accuracy | cut -c1-6)"
"$PYTHON" -c "import json,sys; s,d=(json.loads(x) for x in sys.argv[1:]); \
print(f\"speed-up of dynamic batching over static: {s['wall_s']/d['wall_s']:.2f}x; \
final held-out accuracy {d['accuracy']:.4f} (emulated heterogeneity)\")" "$static" "$dynamic"
