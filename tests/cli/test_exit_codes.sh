#!/usr/bin/env bash
# CLI exit codes: 0 success, 1 runtime failure, 2 usage or configuration error (a bad HETRING_LOG
# among them).
set -u
HR=$1 SRC=$2
fails=0
expect() { # expect CODE CMD...
    local want=$1; shift
    "$@" >/dev/null 2>&1
    local got=$?
    if [ "$got" != "$want" ]; then echo "FAIL: '$*' exited $got, expected $want"; fails=$((fails+1));
    else echo "ok: '$*' -> $got"; fi
}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
expect 2 "$HR"
expect 2 "$HR" no-such-command
expect 0 "$HR" help
expect 0 "$HR" --help
expect 0 "$HR" version
for c in run local config version help; do expect 0 "$HR" "$c" --help; done
expect 2 "$HR" version extra # a stray argument is refused, as by every other command
for a in "--conf $SRC/conf/examples/demo.ini" "--set train.lr=0.1" "--node 0"; do
    expect 2 "$HR" config --reference $a # the defaults, not a file's: the option would be ignored
done
expect 0 "$HR" help run
expect 2 "$HR" help no-such-command
expect 2 "$HR" run
expect 2 "$HR" run --conf "$tmp/missing.ini"
expect 2 "$HR" run --bogus-flag
expect 2 "$HR" config --conf "$SRC/tests/conf/bad/unknown_key.ini"
expect 0 "$HR" config --conf "$SRC/conf/examples/demo.ini"
expect 2 "$HR" run --conf "$SRC/conf/examples/demo.ini" --node 9
expect 2 "$HR" run --conf "$SRC/conf/examples/demo.ini" --set train.lr=fast --node 0
expect 2 "$HR" local --conf "$SRC/conf/examples/demo.ini" --grace -1
# a log setting hetring cannot honour is refused at start, naming it (it was warned about and
# dropped, and the run went on at the default level); good ones still run
for spec in bogus ring=loud 'info,rings=debug'; do
    expect 2 env HETRING_LOG="$spec" "$HR" config --conf "$SRC/conf/examples/demo.ini"
    msg=$(HETRING_LOG="$spec" "$HR" version 2>&1)
    case $msg in
        "hetring: HETRING_LOG: bad item '${spec##*,}'"*) ;;
        *) echo "FAIL: HETRING_LOG=$spec: '$msg'"; fails=$((fails+1)) ;;
    esac
done
for spec in '' debug 'warn,ring=debug,CTRL=Trace'; do
    expect 0 env HETRING_LOG="$spec" "$HR" config --conf "$SRC/conf/examples/demo.ini"
done
# standard output that cannot be written (a full disk: /dev/full) fails the command, saying so
# (config --reference > file exited 0 with the file cut short); a failure keeps its own status
if [ -w /dev/full ]; then
    for args in "config --reference" "config --conf $SRC/conf/examples/demo.ini" "version" "bench --help"; do
        # shellcheck disable=SC2086
        msg=$("$HR" $args 2>&1 >/dev/full); rc=$?
        case "$rc:$msg" in
            "1:hetring"*": cannot write standard output (No space left on device)") echo "ok: '$args' > /dev/full -> 1" ;;
            *) echo "FAIL: '$args' > /dev/full: exited $rc: '$msg'"; fails=$((fails+1)) ;;
        esac
    done
    expect 2 sh -c "'$HR' config --conf '$tmp/missing.ini' > /dev/full"
fi
# every help line names a command that answers --help
for c in $("$HR" help | awk '/^Commands:/{on=1;next} on && /^  [a-z]/{print $1}'); do
    expect 0 "$HR" "$c" --help
done
# config prints secrets redacted
printf '[cluster]\npsk = %s\n[node.0]\nhost = 127.0.0.1\nport = 7001\n' \
    0011223344556677889900112233445566778899001122334455667788990011 > "$tmp/psk.ini"
out=$("$HR" config --conf "$tmp/psk.ini")
if echo "$out" | grep -q 00112233; then echo "FAIL: psk printed"; fails=$((fails+1)); fi
echo "$out" | grep -q '^psk = <redacted>$' || { echo "FAIL: psk not shown as redacted"; fails=$((fails+1)); }
# a configuration error prints its FILE:LINE message
msg=$("$HR" config --conf "$SRC/tests/conf/bad/malformed_number.ini" 2>&1)
[ "$msg" = "$(cat "$SRC/tests/conf/bad/malformed_number.err" | sed "s|^|$SRC/tests/conf/bad/|")" ] \
    || { echo "FAIL: config error message: $msg"; fails=$((fails+1)); }
# settings the build or the machine cannot honour are refused at start-up, naming the file, the
# node, the key and the reason, before anything listens or trains: a GPU node here (no GPU, or
# no GPU libraries, which a CUDA build loads at run time; a build without CUDA says so instead). The node that checks is the one that would use it (and
# hetring local, which would start every node here); the emulated GPU of the test hooks is
# accepted in its place.
printf '[cluster]\nsecurity = none\n[node.0]\nhost = 127.0.0.1\nport = 7001\n[node.3]\nhost = 127.0.0.1\nport = 7002\ndevice = cuda:1\n' > "$tmp/gpu.ini"
why='(this build has no CUDA|the GPU libraries cannot be used: [^:]+: [^ ]+|no usable CUDA device|out of range)'
for c in "config --node 3" "run --node 3" local; do
    msg=$("$HR" $c --conf "$tmp/gpu.ini" 2>&1 >/dev/null); rc=$?
    [ $rc = 2 ] && echo "$msg" | grep -Eq "gpu.ini: \[node.3\] device = cuda:1: .*$why" \
        || { echo "FAIL: $c with device = cuda:1 exited $rc: $msg"; fails=$((fails+1)); }
done
if "$HR" version | grep -q '^test hooks: yes'; then
    msg=$(HETRING_FAULT=emu_device:3 "$HR" config --node 3 --conf "$tmp/gpu.ini" 2>&1); rc=$?
    [ $rc = 0 ] && echo "$msg" | grep -q "cuda:1 is emulated" ||
        { echo "FAIL: the emulated cuda:1 was refused ($rc): $msg"; fails=$((fails+1)); }
fi
sed -e 's/^device = cuda:1$//' -e 's/^security = none$/security = none\nbackend = nccl/' "$tmp/gpu.ini" > "$tmp/nccl.ini"
# backend = nccl with CPU nodes: refused, naming a CPU node (or, in a build without NCCL, the
# build); with security it names both keys (tests/dist/test_nccl.sh runs NCCL on the fake)
msg=$("$HR" run --conf "$tmp/nccl.ini" --node 0 2>&1 >/dev/null); rc=$?
[ $rc = 2 ] && echo "$msg" | grep -Eq "nccl.ini: \[cluster\] backend = nccl(: this build has no NCCL|, but \[node.0\] device = cpu: .*use backend = auto)" \
    || { echo "FAIL: backend = nccl exited $rc: $msg"; fails=$((fails+1)); }
sed -i 's/^security = none$/security = auth\npsk = 0011223344556677889900112233445566778899001122334455667788990011/' "$tmp/nccl.ini"
msg=$("$HR" config --conf "$tmp/nccl.ini" --node 0 2>&1 >/dev/null); rc=$?
[ $rc = 2 ] && echo "$msg" | grep -q "nccl.ini: \[cluster\] backend = nccl with \[cluster\] security = auth" \
    || { echo "FAIL: backend = nccl with security = auth exited $rc: $msg"; fails=$((fails+1)); }
# the files --metrics and --summary name are checked before anything listens or trains: a
# directory that does not exist, a directory given for the file (two nodes: without the check,
# node 0 would wait for node 1, and the timeout fails the case)
for opt in "--metrics $tmp/nodir/m.jsonl" "--summary $tmp"; do
    msg=$(timeout 20 "$HR" run --conf "$tmp/gpu.ini" --node 0 $opt 2>&1 >/dev/null); rc=$?
    [ $rc = 2 ] && echo "$msg" | grep -q -- "${opt%% *} ${opt#* }: cannot write it (.*); checked before training" \
        || { echo "FAIL: run $opt exited $rc: $msg"; fails=$((fails+1)); }
done
# hetring local hands its run options to every node: a --metrics file without {id} would be one
# file that all of them write at once (their lines interleaved), so it is refused before any
# starts; also abbreviated, as hetring run (getopt_long) takes it (--metr slipped past the check)
for opt in "--metrics $tmp/m.jsonl" "--metrics=$tmp/m.jsonl" "--metr $tmp/m.jsonl" "--m=$tmp/m.jsonl"; do
    msg=$(timeout 20 "$HR" local --conf "$SRC/conf/examples/demo.ini" -- $opt 2>&1 >/dev/null); rc=$?
    [ $rc = 2 ] && echo "$msg" | grep -q -- "--metrics $tmp/m.jsonl: the 4 nodes would all write this one file" \
        && [ ! -e "$tmp/m.jsonl" ] || { echo "FAIL: local -- $opt exited $rc: $msg"; fails=$((fails+1)); }
done
# --compare-static writes each run's summary itself and reads its rates from them: a --summary
# among the run options would take its place (the comparison then found no summary), so it is
# refused before any node starts
for opt in "--summary $tmp/s.json" "--summ $tmp/s.json" "--su=$tmp/s.json"; do
    msg=$(timeout 20 "$HR" local --conf "$SRC/conf/examples/demo.ini" --compare-static -- $opt 2>&1 >/dev/null); rc=$?
    [ $rc = 2 ] && echo "$msg" | grep -q -- "--summary with --compare-static: the comparison writes each run's summary itself" ||
        { echo "FAIL: local --compare-static -- $opt exited $rc: $msg"; fails=$((fails+1)); }
done
# nor a --metrics file: the second run would write over the first's
for opt in "--metrics $tmp/m{id}.jsonl" "--metr=$tmp/m{id}.jsonl"; do
    msg=$(timeout 20 "$HR" local --conf "$SRC/conf/examples/demo.ini" --compare-static -- $opt 2>&1 >/dev/null); rc=$?
    [ $rc = 2 ] && echo "$msg" | grep -q -- "--metrics with --compare-static: the two runs would write the same files, the second over the first" ||
        { echo "FAIL: local --compare-static -- $opt exited $rc: $msg"; fails=$((fails+1)); }
done
# every argument reaches the nodes: 64 --set (the most allowed) and 121 run options after "--",
# the --summary last (the launcher kept 63 arguments of a child's command line, so that 28 --set
# options dropped the --summary after them, and the run exited 0 without writing it; and local
# itself kept 208)
printf '[cluster]\nsecurity = none\n[train]\nlayers = 784,8,10\nsamples = 256\neval_samples = 32\nglobal_batch = 32\niterations = 2\n[node.0]\nhost = 127.0.0.1\nport = 7001\n' > "$tmp/one.ini"
sets=() quiets=()
for _ in $(seq 64); do sets+=(--set train.lr=0.05); done
for _ in $(seq 120); do quiets+=(--quiet); done
msg=$(timeout 60 "$HR" local --conf "$tmp/one.ini" "${sets[@]}" -- "${quiets[@]}" --summary="$tmp/many.json" 2>&1); rc=$?
[ $rc = 0 ] && [ -s "$tmp/many.json" ] ||
    { echo "FAIL: local with 64 --set and 121 run options exited $rc, summary $(ls "$tmp/many.json" 2>&1): $msg"; fails=$((fails+1)); }
# what gen-data writes, a run loads, in every format: no held-out samples (--eval-samples 0), and
# 3 samples over CIFAR's five training batches, two of them empty (the empty test_batch.bin,
# test.csv and batches were refused as "empty" or "no samples")
for kind in synthetic:mnist:softmax synthetic-rgb:cifar10:softmax synthetic-regression:csv:linreg; do
    IFS=: read -r k ds model <<< "$kind"
    for counts in "--samples 40 --eval-samples 0" "--samples 3 --eval-samples 2"; do
        rm -rf "$tmp/gd"
        "$HR" gen-data --kind "$k" --out "$tmp/gd" $counts > /dev/null 2>&1 || { echo "FAIL: gen-data --kind $k $counts"; fails=$((fails+1)); }
        printf '[cluster]\nsecurity = none\n[train]\ndataset = %s\nmodel = %s\ndata_dir = %s\nglobal_batch = 2\niterations = 2\n[node.0]\nhost = 127.0.0.1\nport = 7001\n' \
            "$ds" "$model" "$tmp/gd" > "$tmp/gd.ini"
        msg=$(timeout 30 "$HR" run --conf "$tmp/gd.ini" --quiet 2>&1); rc=$?
        [ $rc = 0 ] || { echo "FAIL: run on gen-data --kind $k $counts exited $rc: $(echo "$msg" | tail -1)"; fails=$((fails+1)); }
    done
done
# gen-data with, then without --gzip (and back) leaves one variant of each IDX file, which a run
# loads (both stayed, and the loader took the stale .gz ones)
printf '[cluster]\nsecurity = none\n[train]\ndataset = mnist\nmodel = softmax\ndata_dir = %s\nglobal_batch = 2\niterations = 2\n[node.0]\nhost = 127.0.0.1\nport = 7001\n' \
    "$tmp/gz" > "$tmp/gz.ini"
for gzip in --gzip "" --gzip; do
    "$HR" gen-data --kind synthetic --out "$tmp/gz" --samples 30 --eval-samples 5 $gzip --force > /dev/null 2>&1 || { echo "FAIL: gen-data $gzip"; fails=$((fails+1)); }
    n=$(ls "$tmp/gz" | grep -c '\.gz$'); want=$([ -n "$gzip" ] && echo 4 || echo 0)
    [ "$n" = "$want" ] && [ "$(ls "$tmp/gz" | wc -l)" = 4 ] || { echo "FAIL: gen-data '$gzip' left $(ls "$tmp/gz" | tr '\n' ' ')"; fails=$((fails+1)); }
    msg=$(timeout 30 "$HR" run --conf "$tmp/gz.ini" --quiet 2>&1) || { echo "FAIL: run after gen-data '$gzip': $(echo "$msg" | tail -1)"; fails=$((fails+1)); }
done
# both variants (copied in by hand): refused, naming both
cp "$tmp/gz/train-images-idx3-ubyte.gz" "$tmp/gz/t.gz" && gunzip -c "$tmp/gz/t.gz" > "$tmp/gz/train-images-idx3-ubyte" && rm "$tmp/gz/t.gz"
msg=$(timeout 30 "$HR" run --conf "$tmp/gz.ini" --quiet 2>&1); rc=$?
[ $rc = 1 ] && echo "$msg" | grep -q "gz/train-images-idx3-ubyte and .*gz/train-images-idx3-ubyte.gz both exist" ||
    { echo "FAIL: both train-images variants: exited $rc: $(echo "$msg" | tail -1)"; fails=$((fails+1)); }
# --out with missing parents: made, as mkdir -p (refused, "No such file or directory"); a parent
# that is a file: refused, naming it (exit 1)
msg=$(timeout 30 "$HR" gen-data --kind synthetic --out "$tmp/p1/p2/p3" --samples 10 --eval-samples 0 2>&1); rc=$?
[ $rc = 0 ] && [ -s "$tmp/p1/p2/p3/train-images-idx3-ubyte" ] ||
    { echo "FAIL: gen-data into missing parents exited $rc: $msg"; fails=$((fails+1)); }
: > "$tmp/pfile"
msg=$(timeout 30 "$HR" gen-data --kind synthetic --out "$tmp/pfile/d" --samples 10 2>&1); rc=$?
[ $rc = 1 ] && echo "$msg" | grep -q "cannot create .*pfile/d (Not a directory)" ||
    { echo "FAIL: gen-data under a file exited $rc: $msg"; fails=$((fails+1)); }
# held-out MNIST images of another size than the training images: refused at start, naming the
# file (they overflowed the heap in the evaluation)
"$HR" gen-data --kind synthetic --out "$tmp/mnist" --samples 200 --eval-samples 20 >/dev/null 2>&1
rm -f "$tmp/mnist"/t10k-*
{ printf '\x00\x00\x08\x03\x00\x00\x00\x02\x00\x00\x00\x20\x00\x00\x00\x20'; head -c 2048 /dev/zero; } \
    > "$tmp/mnist/t10k-images-idx3-ubyte"
printf '\x00\x00\x08\x01\x00\x00\x00\x02\x00\x00' > "$tmp/mnist/t10k-labels-idx1-ubyte"
printf '[cluster]\nsecurity = none\n[train]\ndataset = mnist\ndata_dir = %s\nmodel = softmax\nglobal_batch = 20\niterations = 2\n[node.0]\nhost = 127.0.0.1\nport = 7001\n' \
    "$tmp/mnist" > "$tmp/mnist.ini"
msg=$(timeout 30 "$HR" run --conf "$tmp/mnist.ini" --node 0 2>&1 >/dev/null); rc=$?
[ $rc = 1 ] && echo "$msg" | grep -q "t10k-images-idx3-ubyte: size mismatch: held-out samples of 32x32x1" \
    || { echo "FAIL: 32x32 held-out images with 28x28 training images exited $rc: $msg"; fails=$((fails+1)); }
# a data set that is not there: the error names the key that points to it (exit 1, as for every
# data file that cannot be read), from hetring run and from hetring local's node
printf '[cluster]\nsecurity = none\n[train]\ndataset = mnist\ndata_dir = %s\nmodel = softmax\nglobal_batch = 20\niterations = 2\n[node.0]\nhost = 127.0.0.1\nport = 7001\n' \
    "$tmp/nodata" > "$tmp/nodata.ini"
want="nodata.ini:5: [train] data_dir = $tmp/nodata: $tmp/nodata/train-images-idx3-ubyte: cannot open"
for cmd in run local; do
    msg=$(timeout 30 "$HR" $cmd --conf "$tmp/nodata.ini" 2>&1); rc=$?
    [ $rc = 1 ] && echo "$msg" | grep -qF "$want" ||
        { echo "FAIL: $cmd with no data exited $rc: $msg"; fails=$((fails+1)); }
done
echo "$fails failure(s)"
[ "$fails" = 0 ]
