#!/usr/bin/env bash
# One binary for every node (README, "GPUs"; DESIGN.md, "The GPU path"): a CUDA build loads the
# GPU libraries only in a process that uses them.
#   - hetring, hetring-bench and libhetring have no GPU library in NEEDED;
#   - a copy of hetring runs as a CPU node, and `hetring version` answers, with the libraries
#     out of the loader's reach (ld.so --inhibit-cache: /etc/ld.so.cache is where this machine
#     finds them) and with HETRING_CUDA_LIBS pointing at a folder without them;
#   - a CPU node maps none of them even where they are installed (LD_DEBUG=files);
#   - a cuda:0 node is refused at start-up with exit 2, the message naming the node, the key,
#     the library and what dlopen or the version check said: a missing driver, a missing
#     cuBLAS, a driver and a cuBLAS older than this build (stand-ins, stub_gpu_libs.c), and,
#     with backend = nccl, a missing NCCL (on the emulated GPU of the test hooks).
# Args: hetring, hetring-bench (or none), libhetring, the stand-ins' folder, the CUDA major.
HR=$1 BENCH=$2 LIB=$3 STUB=$4 MAJOR=$5
. "$(dirname "${BASH_SOURCE[0]}")/../harness.sh"
gpu_libs='libcuda\.so|libcudart|libcublas|libcublasLt|libcudnn|libnccl'

for f in "$HR" "$BENCH" "$LIB"; do
    [ "$f" = none ] && continue
    need=$(readelf -d "$f" | grep NEEDED)
    [ -n "$need" ] || fail "readelf -d $f lists no NEEDED at all"
    if grep -Eq "$gpu_libs" <<<"$need"; then
        fail "${f##*/} needs a GPU library: $(grep -E "$gpu_libs" <<<"$need" | tr -s ' ' | tr '\n' ' ')"
    fi
done

mkdir -p "$tmp/bin" "$tmp/none"
cp "$HR" "$tmp/bin/hetring"
sed "s/^port = .*/port = $base/" "$(dirname "${BASH_SOURCE[0]}")/../../bench/one_node.ini" > "$tmp/one.ini"
run() { timeout 60 "$@" run --conf "$tmp/one.ini" --node 0 --quiet; }

# out of the loader's reach: the CPU node trains, version says why each library cannot be used
ldso=$(readelf -l "$HR" | sed -n 's/.*Requesting program interpreter: \(.*\)]/\1/p')
if "$ldso" --help 2>/dev/null | grep -q -- --inhibit-cache; then
    nocache=("$ldso" --inhibit-cache)
    export HETRING_BLAS_CORETYPE=off # no re-execution of /proc/self/exe (ld.so itself here)
    run "${nocache[@]}" "$tmp/bin/hetring" > "$tmp/cpu0" 2>&1 || fail "a CPU node without the libraries: $(tail -3 "$tmp/cpu0")"
    grep -q 'done: 10 iterations' "$tmp/cpu0" || fail "a CPU node without the libraries did not finish: $(tail -2 "$tmp/cpu0")"
    "${nocache[@]}" "$tmp/bin/hetring" version > "$tmp/v0" 2>&1 || fail "version without the libraries: $(cat "$tmp/v0")"
    grep -q "cuBLAS: cannot be used: libcublas.so.$MAJOR: cannot open shared object file" "$tmp/v0" ||
        fail "version without the libraries does not say cuBLAS cannot be opened: $(grep -A5 cuda: "$tmp/v0")"
    unset HETRING_BLAS_CORETYPE
else
    echo "note: $ldso has no --inhibit-cache; only HETRING_CUDA_LIBS puts the libraries out of reach"
fi

# HETRING_CUDA_LIBS at a folder without them
HETRING_CUDA_LIBS=$tmp/none run "$tmp/bin/hetring" > "$tmp/cpu1" 2>&1 || fail "a CPU node, HETRING_CUDA_LIBS=$tmp/none: $(tail -3 "$tmp/cpu1")"
grep -q 'done: 10 iterations' "$tmp/cpu1" || fail "a CPU node with HETRING_CUDA_LIBS did not finish"
HETRING_CUDA_LIBS=$tmp/none "$tmp/bin/hetring" version > "$tmp/v1" 2>&1
for l in "CUDA driver" cuBLAS cuDNN NCCL; do
    grep -q "  $l: cannot be used: $tmp/none/lib" "$tmp/v1" || grep -q "  $l: cannot be used: .*HETRING_CUDA_LIBS" "$tmp/v1" ||
        { [ "$l" = cuDNN ] && ! grep -q "  cuDNN:" "$tmp/v1"; } || fail "version does not say $l cannot be used: $(cat "$tmp/v1")"
done

# where the libraries are installed, a CPU node maps none of them
LD_DEBUG=files run "$tmp/bin/hetring" > "$tmp/cpu2" 2>&1 || fail "a CPU node under LD_DEBUG: $(tail -3 "$tmp/cpu2")"
grep 'file=' "$tmp/cpu2" | grep -Eq "file=($gpu_libs)" &&
    fail "a CPU node loaded a GPU library: $(grep 'file=' "$tmp/cpu2" | grep -E "file=($gpu_libs)" | head -3)"

# refused: exit 2, naming the node, the key, the library and what was said
refused() { # WHAT DIR REGEX
    HETRING_CUDA_LIBS=$2 timeout 60 "$tmp/bin/hetring" run --conf "$tmp/one.ini" --node 0 --quiet \
        --set node.0.device=cuda:0 > "$tmp/r" 2>&1
    local rc=$?
    [ $rc = 2 ] || fail "$1: exited $rc, expected 2: $(tail -2 "$tmp/r")"
    grep -Eq "node 0: .*one.ini: \[node.0\] device = cuda:0: the GPU libraries cannot be used: $3" "$tmp/r" ||
        fail "$1: the refusal does not say '$3': $(tail -1 "$tmp/r")"
    echo "$1: $(tail -1 "$tmp/r")"
}
refused "no driver" "$tmp/none" "CUDA driver: $tmp/none/libcuda.so.1: cannot open shared object file"
refused "no cuBLAS" "$STUB/newdrv" "cuBLAS: $STUB/newdrv/libcublas.so.$MAJOR: cannot open shared object file"
refused "old driver" "$STUB/olddrv" "CUDA driver: $STUB/olddrv/libcuda.so.1: the driver supports CUDA $((MAJOR - 1)).8, this build's runtime is CUDA $MAJOR\.[0-9]+: update the NVIDIA driver"
refused "old cuBLAS" "$STUB/oldblas" "cuBLAS: $STUB/oldblas/libcublas.so.$MAJOR: cuBLAS $((MAJOR - 1))\.0\.0, but this build needs cuBLAS $MAJOR\.x"
# backend = nccl: a GPU node (emulated here, the test hooks' device) whose NCCL does not load is
# refused at start-up naming the key and the library; with auto NCCL is opened only by a view
if "$HR" version | grep -q '^test hooks: yes'; then
    HETRING_FAULT=emu_device:0 HETRING_CUDA_LIBS=$tmp/none timeout 60 "$tmp/bin/hetring" run \
        --conf "$tmp/one.ini" --node 0 --quiet --set node.0.device=cuda:0 \
        --set cluster.backend=nccl > "$tmp/r" 2>&1
    rc=$?
    [ $rc = 2 ] || fail "backend = nccl without NCCL: exited $rc, expected 2: $(tail -2 "$tmp/r")"
    grep -q "one.ini: \[cluster\] backend = nccl on \[node.0\] (device = cuda:0): NCCL: $tmp/none/libnccl.so.2: cannot open shared object file" "$tmp/r" ||
        fail "backend = nccl without NCCL: the refusal does not name the key and the library: $(tail -1 "$tmp/r")"
    echo "no NCCL: $(tail -1 "$tmp/r")"
fi
[ "$fails" = 0 ]
