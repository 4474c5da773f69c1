#!/usr/bin/env bash
# torch_bench.sh: the PyTorch example (examples/torch/mnist_cnn.py) on 4 local nodes with
# emulated slowdowns 1, 1.5, 2, 4 (examples/torch/cluster.ini), side by side:
#   hetring  dynamic batching ([controller] policy = model)
#   static   hetring with static batches (B/4 each)
#   ddp      PyTorch DistributedDataParallel over gloo, B/4 each, the same model, global
#            batch, iterations and emulated slowdowns
# each REPS times (default 3), alternating, and prints the median wall time of each and the
# speed-up of hetring over DDP and over static. CSV rows go to OUT/torch_bench.csv.
#
#   bench/torch_bench.sh [-r REPS] [-i ITERATIONS] [-o OUT] [-c wall|cpu] [-d]
#
# -c cpu times each node's compute by its thread's CPU seconds instead of wall seconds, in
# all three modes (the controller's speed signal and the emulated slowdowns): use it where the
# 4 nodes share fewer than 4 free cores, whose contention would otherwise stretch and scatter
# every measured compute time.
#
# -d measures correctness instead: the same seed and global batch trained by node 0 alone
# and by the 4 nodes with dynamic batching; prints the largest difference of the final
# parameters (float32 summation order is all that may differ, I3).
#
# Needs hetring (HETRING, else on PATH), PYTHON (default python3) with torch and the hetring
# package (PYTHONPATH=python) and libhetring (HETRING_LIB, or installed). The machine's load
# changes what emulated slowdowns measure: the report says how many cores it had.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
HETRING=${HETRING:-hetring}
PYTHON=${PYTHON:-python3}
reps=3 iters=120 out=${TMPDIR:-/tmp}/hetring-torch-bench drift=0 clock=wall
while getopts "r:i:o:c:d" opt; do
    case $opt in
    c) clock=$OPTARG ;;
    d) drift=1 ;;
    r) reps=$OPTARG ;;
    i) iters=$OPTARG ;;
    o) out=$OPTARG ;;
    *) echo "usage: $0 [-r REPS] [-i ITERATIONS] [-o OUT] [-c wall|cpu] [-d]" >&2; exit 2 ;;
    esac
done
command -v "$HETRING" > /dev/null ||
    { echo "$0: hetring not found ('$HETRING'): set HETRING=PATH/hetring or put it on PATH" >&2; exit 2; }
mkdir -p "$out"
conf=$here/examples/torch/cluster.ini
[ -d "$out/data" ] || "$HETRING" gen-data --kind synthetic --out "$out/data" --samples 12000 \
    --eval-samples 2000 > /dev/null
# The nodes of the run in progress (script_pids) get SIGTERM, and SIGKILL 10 s later, at exit,
# also on SIGTERM or SIGINT to this script alone (bench/script_args.sh). Every run runs in this
# shell, its nodes in the background, not in $(...) or <(...), so that the trap finds them.
. "$(dirname "$0")/script_args.sh"
script_traps

# one MODE REP: the 4 nodes; node 0's wall seconds and accuracy into $wall and $acc
one() {
    local mode=$1 rep=$2 args=(--set "train.iterations=$iters" --clock "$clock")
    case $mode in
    hetring) args+=(--set controller.policy=model) ;;
    static) args+=(--set controller.policy=static) ;;
    ddp) args+=(--mode ddp --ddp-port $((29600 + rep))) ;;
    esac
    script_pids=()
    for k in 0 1 2 3; do
        "$PYTHON" "$here/examples/torch/mnist_cnn.py" --conf "$conf" --node $k --data "$out/data" \
            "${args[@]}" > "$out/$mode.$rep.$k.log" 2>&1 &
        script_add $!
    done
    local rc=0
    for p in "${script_pids[@]}"; do wait "$p" || rc=1; done
    script_pids=()
    [ $rc = 0 ] || { echo "$mode run $rep failed:" >&2; tail -n 5 "$out/$mode.$rep".*.log >&2; exit 1; }
    read -r wall acc <<< "$(grep -h '^RESULT' "$out/$mode.$rep.0.log" | cut -c8- |
        "$PYTHON" -c "import json,sys; r=json.load(sys.stdin); print(f\"{r['wall_s']:.3f} {r['accuracy']:.4f}\")")"
}

if [ $drift = 1 ]; then
    sed '/^\[node\.1\]/,$d' "$conf" > "$out/one.ini"
    "$PYTHON" "$here/examples/torch/mnist_cnn.py" --conf "$out/one.ini" --node 0 --data "$out/data" \
        --set "train.iterations=$iters" --save "$out/one.pt" > "$out/one.log" 2>&1 &
    script_add $!
    wait "${script_pids[0]}" || { tail "$out/one.log"; exit 1; }
    script_pids=()
    for k in 0 1 2 3; do
        "$PYTHON" "$here/examples/torch/mnist_cnn.py" --conf "$conf" --node $k --data "$out/data" \
            --set "train.iterations=$iters" --save "$out/four.$k.pt" > "$out/four.$k.log" 2>&1 &
        script_add $!
    done
    for p in "${script_pids[@]}"; do wait "$p"; done
    script_pids=()
    "$PYTHON" - "$out" <<'PY'
import json, sys, torch
d = sys.argv[1]
def losses(f):
    return next(json.loads(l[7:]) for l in open(f) if l.startswith("RESULT "))["losses"]
l1, l4 = losses(f"{d}/one.log"), losses(f"{d}/four.0.log")
rel = [abs(a - b) / abs(a) for a, b in zip(l1, l4)]
marks = sorted({i for i in (0, 9, 39, 79, len(rel) - 1) if i < len(rel)})  # the last once
print("relative loss difference, 4 nodes vs 1, at iterations " +
      ", ".join(f"{i + 1}: {rel[i]:.2g}" for i in marks))
one = torch.load(f"{d}/one.pt")
fours = [torch.load(f"{d}/four.{k}.pt") for k in range(4)]
same = all(torch.equal(f[k], fours[0][k]) for f in fours for k in f)
diff = max(float((one[k] - fours[0][k]).abs().max()) for k in one)
scale = max(float(one[k].abs().max()) for k in one)
print(f"4 nodes (dynamic) vs 1 node, same seed and B: largest parameter difference {diff:.3g} "
      f"(largest parameter {scale:.3g}); the 4 replicas bitwise equal: {same}")
PY
    grep -h "^done" "$out/one.log" "$out/four.0.log"
    exit 0
fi
csv=$out/torch_bench.csv
echo "mode,rep,wall_s,accuracy,iterations,global_batch,nodes,slowdowns,cores,clock" > "$csv"
echo "4 nodes, slowdowns 1,1.5,2,4 (emulated), $iters iterations of B = 256, $reps runs each," \
    "compute timed by the $clock clock, $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg)"
for rep in $(seq 1 "$reps"); do
    for mode in hetring static ddp; do
        one $mode "$rep"
        echo "$mode,$rep,$wall,$acc,$iters,256,4,1;1.5;2;4,$(nproc),$clock" >> "$csv"
        printf '  run %d %-8s %8.2f s  accuracy %s\n' "$rep" "$mode" "$wall" "$acc"
    done
done
"$PYTHON" - "$csv" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
med = {m: statistics.median(float(r["wall_s"]) for r in rows if r["mode"] == m)
       for m in ("hetring", "static", "ddp")}
acc = {m: statistics.median(float(r["accuracy"]) for r in rows if r["mode"] == m) for m in med}
for m in med:
    print(f"{m:8s} median {med[m]:7.2f} s, accuracy {acc[m]:.4f}")
print(f"speed-up of hetring (dynamic) over DDP gloo: {med['ddp'] / med['hetring']:.2f}x, "
      f"over static hetring: {med['static'] / med['hetring']:.2f}x (emulated heterogeneity)")
PY
echo "CSV: $csv"
