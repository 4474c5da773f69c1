#!/usr/bin/env bash
# resnet_wire.sh: what the lossy wires cost ResNet-18 in loss, through the PyTorch binding.
#
# examples/torch/resnet.py (torchvision's ResNet-18, synthetic 32x32x3 images, BatchNorm
# statistics averaged) on 3 local nodes of equal speed with the static policy, once per wire
# ([cluster] wire = fp32, bf16, powersgd at powersgd_rank = 4), the same seed, data and B = 48.
# Prints each run's mean training loss over windows of its iterations, its held-out accuracy,
# and what each lossy wire adds to fp32's last window (issue 36's I3 table for a lossy path).
#
#   bench/py/resnet_wire.sh [ITERATIONS (default 200)] [WIRES (default "fp32 bf16 powersgd")]
#
# Needs python3 with torch and torchvision, the hetring package on PYTHONPATH and libhetring
# (HETRING_LIB). Logs and RESULT lines in $WORK (default: a new directory under /tmp).
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
PYTHON=${PYTHON:-python3}
iters=${1:-200}
wires=${2:-fp32 bf16 powersgd}
work=${WORK:-$(mktemp -d /tmp/hetring-resnet-wire.XXXXXX)}
mkdir -p "$work"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
port=$((20000 + RANDOM % 10000))
for wire in $wires; do
    pids=()
    for k in 0 1 2; do
        timeout 3600 "$PYTHON" "$here/examples/torch/resnet.py" --conf "$here/examples/torch/resnet.ini" \
            --node $k --set "train.iterations=$iters" --set "cluster.wire=$wire" \
            --set controller.policy=static --set node.1.slowdown=1 --set node.2.slowdown=1 \
            --set "node.0.port=$port" --set "node.1.port=$((port + 1))" \
            --set "node.2.port=$((port + 2))" > "$work/$wire.n$k.log" 2>&1 &
        pids[$k]=$!
    done
    rc=0
    for k in 0 1 2; do wait "${pids[$k]}" || rc=$?; done
    [ $rc = 0 ] || { echo "wire = $wire: a node failed (status $rc); logs in $work" >&2; exit 1; }
    port=$((port + 3))
done
"$PYTHON" - "$work" $wires <<'PY'
import json, sys
work, wires = sys.argv[1], sys.argv[2:]
res = {}
for w in wires:
    r = [json.loads(l[7:]) for k in range(3) for l in open(f"{work}/{w}.n{k}.log") if l.startswith("RESULT ")]
    assert len(r) == 3 and len({x["hash"] for x in r}) == 1, f"{w}: the nodes' states differ"
    res[w] = r[0]
n = len(res[wires[0]]["losses"])
win = max(1, n // 5)
print(f"ResNet-18, 3 nodes, B = 48, {n} iterations; mean training loss over windows of {win}")
print("wire       " + "  ".join(f"{i * win:>4}-{min(n, (i + 1) * win) - 1:<4}" for i in range(n // win))
      + "  held-out acc  last window vs fp32")
base = None
for w in wires:
    L = res[w]["losses"]
    means = [sum(L[i * win:(i + 1) * win]) / win for i in range(n // win)]
    base = base if base is not None else means[-1]
    print(f"{w:<10} " + "  ".join(f"{m:9.4f}" for m in means)
          + f"  {res[w]['accuracy']:12.3f}  {100 * (means[-1] / base - 1):+.1f}%")
PY
echo "logs: $work"
