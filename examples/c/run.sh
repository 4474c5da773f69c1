#!/usr/bin/env bash
# run.sh: build model.c with pkg-config and start the 3 nodes of cluster.ini on this machine.
#   examples/c/run.sh [SECTION.KEY=VALUE ...]     e.g. train.iterations=20
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$here}
make -s -C "$here" model >/dev/null
[ "$out" = "$here" ] || mv "$here/model" "$out/model"
pids=()
for k in 0 1 2; do
    "$out/model" "$here/cluster.ini" "$k" "$@" &
    pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
exit $rc
