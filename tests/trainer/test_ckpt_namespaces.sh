#!/usr/bin/env bash
# test_ckpt_namespaces.sh HETRING: nodes in two containers that share a checkpoint directory
# (here two one-node runs, each in a PID namespace of its own, where each is process 1) and
# write one checkpoint file, saving at every iteration: each save is written under a temporary
# name of its own (PATH.tmp.PID.TAG, TAG its namespace's), so neither writes into the other's
# temporary file, renames it away from under the other, or removes it at start; both runs end
# with exit 0 and the file is a whole checkpoint that a third run resumes from.
# Exits 77 (skipped) where this process may not make PID namespaces (unshare, as root).
set -u
HR=$1
. "$(dirname "${BASH_SOURCE[0]}")/../harness.sh"
if ! unshare -p -f --mount-proc true 2> /dev/null; then
    echo "no PID namespaces here (unshare -p needs root): skipped"
    exit 77
fi
mkdir "$tmp/shared"
cat > "$tmp/c.ini" <<INI
[cluster]
security = none
[train]
samples = 2000
eval_samples = 50
iterations = 60
global_batch = 32
layers = 784,512,512,10
checkpoint = $tmp/shared/run.ckpt
checkpoint_interval = 1
[node.0]
host = 127.0.0.1
port = $base
INI
for k in 1 2; do
    timeout 120 unshare -p -f --mount-proc "$HR" run --conf "$tmp/c.ini" --quiet > "$tmp/run$k" 2>&1 &
    pids[$k]=$!
done
for k in 1 2; do
    wait "${pids[$k]}"
    rc=$?
    echo "run $k: exit $rc: $(tail -1 "$tmp/run$k")"
    [ "$rc" = 0 ] || fail "run $k in its own PID namespace: exit $rc: $(tail -1 "$tmp/run$k")"
done
left=$(ls "$tmp/shared" | grep -c '\.tmp\.')
[ "$left" = 0 ] || fail "$left temporary file(s) left: $(ls "$tmp/shared")"
timeout 60 "$HR" run --conf "$tmp/c.ini" --set train.iterations=61 > "$tmp/again" 2>&1 &&
    grep -q "resumed from checkpoint $tmp/shared/run.ckpt at iteration 60$" "$tmp/again" ||
    fail "the shared checkpoint does not resume: $(tail -1 "$tmp/again")"
[ "$fails" = 0 ] && echo "PASS" || exit 1
