#!/usr/bin/env bash
# test_ckpt_read_error.sh HETRING: a checkpoint whose reading fails (EIO from a disk or a network
# file system, injected by strace into the reads of that one file) is refused as a read error:
# the node stops with a message naming the file and the part it was reading, and does not call
# it truncated or corrupt, whose advice is to delete it; the file is left as it was, and a run
# without the fault resumes from it.
#   when=1   the header's read fails
#   when=2   the parameters' read fails
# Exits 77 (skipped) where strace is missing or may not trace (no ptrace in the container).
set -u
HR=$1
. "$(dirname "${BASH_SOURCE[0]}")/../harness.sh"
if ! command -v strace > /dev/null || ! strace -f -o /dev/null -e inject=getpid:error=EIO true 2> /dev/null; then
    echo "strace cannot inject faults here: skipped"
    exit 77
fi
cat > "$tmp/c.ini" <<INI
[cluster]
security = none
[train]
samples = 500
eval_samples = 50
iterations = 2
global_batch = 50
layers = 784,16,10
checkpoint = $tmp/ck.bin
[node.0]
host = 127.0.0.1
port = $base
INI
timeout 60 "$HR" run --conf "$tmp/c.ini" --quiet > "$tmp/first" 2>&1 || fail "first run: $(tail -2 "$tmp/first")"
[ -s "$tmp/ck.bin" ] || { fail "the first run wrote no checkpoint"; exit 1; }
cp "$tmp/ck.bin" "$tmp/ck.copy"
parts=(header parameters)
for when in 1 2; do
    part=${parts[$((when - 1))]}
    timeout 60 strace -f -o /dev/null -P "$tmp/ck.bin" -e trace=read -e inject=read:error=EIO:when=$when \
        "$HR" run --conf "$tmp/c.ini" --set train.iterations=4 --quiet > "$tmp/eio" 2>&1
    rc=$?
    msg=$(tail -1 "$tmp/eio")
    echo "read $when fails: exit $rc: $msg"
    [ "$rc" = 1 ] || fail "read $when fails: exit $rc (expected 1)"
    echo "$msg" | grep -q "checkpoint $tmp/ck.bin: read error in the $part (Input/output error)" ||
        fail "read $when fails: not said as a read error in the $part: $msg"
    if grep -q -i "delete\|truncated\|corrupt" "$tmp/eio"; then fail "read $when fails: called the file bad: $msg"; fi
    cmp -s "$tmp/ck.bin" "$tmp/ck.copy" || fail "read $when fails: the checkpoint changed"
done
timeout 60 "$HR" run --conf "$tmp/c.ini" --set train.iterations=4 > "$tmp/again" 2>&1 &&
    grep -q "resumed from checkpoint $tmp/ck.bin at iteration 2$" "$tmp/again" ||
    fail "without the fault the run did not resume from the checkpoint: $(tail -2 "$tmp/again")"
[ "$fails" = 0 ] && echo "PASS" || exit 1
