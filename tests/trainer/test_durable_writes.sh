#!/usr/bin/env bash
# test_durable_writes.sh HETRING: a file that replaces another (the checkpoint, --summary) is on
# the disk before its name is: a one-node run, traced by strace, writes each into FILE.tmp.PID.TAG,
# fsyncs that file, renames it over FILE and then fsyncs FILE's directory, which holds the
# rename; so a crash (a power cut) leaves the old file or the new one whole, never an empty or
# partial file under the name.
#   checkpoint   every save of the run, in this order
#   summary      the --summary JSON, in this order
# Exits 77 (skipped) where strace is missing or may not trace (no ptrace in the container).
set -u
HR=$1
. "$(dirname "${BASH_SOURCE[0]}")/../harness.sh"
if ! command -v strace > /dev/null || ! strace -o /dev/null true 2> /dev/null; then
    echo "strace cannot trace here: skipped"
    exit 77
fi
mkdir "$tmp/ck" "$tmp/sum"
cat > "$tmp/c.ini" <<INI
[cluster]
security = none
[train]
samples = 500
eval_samples = 50
iterations = 3
global_batch = 50
layers = 784,16,10
checkpoint = $tmp/ck/run.ckpt
checkpoint_interval = 1
[node.0]
host = 127.0.0.1
port = $base
INI
# the main thread alone, which writes both files (a trace of every thread splits lines)
timeout 60 strace -o "$tmp/trace" -e trace=openat,open,fsync,fdatasync,rename,renameat,renameat2 \
    "$HR" run --conf "$tmp/c.ini" --summary "$tmp/sum/s.json" --quiet > "$tmp/out" 2>&1 ||
    fail "the run: $(tail -2 "$tmp/out")"
# The state each replace of FILE reaches: 1 its temporary file opened, 2 that file fsynced,
# 3 renamed over FILE, 4 FILE's directory opened, 5 the directory fsynced; and how many reached 5.
order() {
    awk -v tmp="\"$1.tmp." -v dir="\"$(dirname "$1")\"" '
        /^open/ && index($0, tmp) && / = [0-9]+$/ { fd = $NF; st = 1; next }
        st == 1 && $0 ~ "^f(data)?sync\\(" fd "\\)" { st = 2; next }
        st == 2 && /^rename/ && index($0, tmp) { st = 3; next }
        st == 3 && /^open/ && index($0, dir) && /O_DIRECTORY/ && / = [0-9]+$/ { dfd = $NF; st = 4; next }
        st == 4 && $0 ~ "^f(data)?sync\\(" dfd "\\)" { st = 5; done++ }
        END { printf "%d %d\n", st, done }' "$tmp/trace"
}
read -r st n < <(order "$tmp/ck/run.ckpt")
echo "checkpoint: last save reached step $st of 5; $n saves whole"
[ "$st" = 5 ] && [ "$n" = 3 ] ||
    fail "checkpoint: a save that is not fsynced, renamed and its directory fsynced in order (step $st, $n of 3 saves)"
read -r st n < <(order "$tmp/sum/s.json")
echo "summary: reached step $st of 5"
[ "$st" = 5 ] && [ "$n" = 1 ] ||
    fail "summary: not fsynced, renamed and its directory fsynced in order (step $st of 5)"
[ "$fails" = 0 ] && echo "PASS" || { grep -e "$tmp" "$tmp/trace" | tail -12; exit 1; }
