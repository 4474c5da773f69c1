#!/usr/bin/env bash
# run_resnet.sh: ResNet-18 (resnet.py) on 3 local nodes (resnet.ini: slowdowns 1, 2, 3), node 2
# killed with SIGKILL once node 0 printed an iteration at or past KILL_AT (default: a third of
# the run) and started again; at the end every node must hold the same parameters and buffers
# (one state hash).
#
#   examples/torch/run_resnet.sh [ITERATIONS] [--sync-bn] [--data DIR] [other resnet.py flags]
#
# ITERATIONS: 60 by default, 30 at least.
#
# Needs python3 with torch, torchvision and the hetring package (pip install ./python, or
# PYTHONPATH=python) and libhetring (installed, or HETRING_LIB).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
PYTHON=${PYTHON:-python3}
iters=60
if [[ ${1:-} =~ ^[0-9]+$ ]]; then iters=$1; shift; fi
# node 0 prints every 10th iteration and the kill follows the first print at or past KILL_AT:
# with fewer iterations node 2 was killed near the end and waited rejoin_timeout for nothing
[ "$iters" -ge 30 ] || { echo "run_resnet.sh: ITERATIONS $iters (expected 30 or more, so that" \
    "node 2, killed at node 0's first printed iteration past a third of the run, can rejoin" \
    "before the end)" >&2; exit 2; }
kill_at=${KILL_AT:-$((iters / 3))}
work=${WORK:-$(mktemp -d /tmp/hetring-resnet.XXXXXX)}
mkdir -p "$work"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
node() { # node K LOG: resnet.py as node K in the background
    "$PYTHON" "$here/resnet.py" --conf "$here/resnet.ini" --node "$1" \
        --set "train.iterations=$iters" "${@:3}" >> "$2" 2>&1 &
    pids[$1]=$!
}
echo "3 nodes, slowdowns 1, 2, 3 (emulated), $iters iterations of B = 48; node 2 killed after" \
     "iteration $kill_at; logs in $work"
for k in 0 1 2; do node $k "$work/n$k.log" "$@"; done
# node 0 prints every 10th iteration: the kill follows the first one at or past kill_at
until awk -v k="$kill_at" '/^iter/ {n = $2} END {exit !(n >= k)}' "$work/n0.log" 2>/dev/null ||
      ! kill -0 "${pids[0]}" 2>/dev/null; do sleep 0.5; done
kill -KILL "${pids[2]}"; wait "${pids[2]}" 2>/dev/null || true
echo "node 2 killed; starting it again"
sleep 1
node 2 "$work/n2.log" "$@"
rc=0
for k in 0 1 2; do wait "${pids[$k]}" || rc=1; done
pids=()
[ $rc = 0 ] || { tail -n 20 "$work"/n*.log >&2; exit 1; }
grep -h "^view\|^iter" "$work/n0.log"
grep -h "^node " "$work"/n*.log
hashes=$(grep -h '^RESULT' "$work"/n*.log | "$PYTHON" -c \
    "import json,sys; print(len({json.loads(l[7:])['hash'] for l in sys.stdin}))")
[ "$hashes" = 1 ] || { echo "the nodes' states differ ($hashes hashes)" >&2; exit 1; }
echo "every node holds the same parameters and buffers"
