#!/usr/bin/env bash
# test_verify_skips.sh: on a machine whose nvidia-smi lists a GPU, a CUDA test of verify.sh that
# exits 77 (it saw no CUDA device: typically a driver older than the build's CUDA) fails its
# check; it must not pass beside tests that ran, nor count as a skip (ctest gpu.verify_skips).
# And a build given with --build but configured at another path fails the build check, naming
# both paths (its ctest files name the old ones).
# Runs anywhere: a stand-in nvidia-smi lists one GPU, and a stand-in build folder holds a
# `hetring`, one cuda test that passes and one that exits 77 (ctest -L cuda), a test_cuda_* and
# a test_nccl_single that exit 77, and a stand-in compute-sanitizer that runs its binary.
#
# usage: test_verify_skips.sh VERIFY_SH
set -u
verify=${1:?verify.sh}
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bin=$tmp/bin build=$tmp/build out=$tmp/out
mkdir -p "$bin" "$build/tests/cuda"

cat > "$bin/nvidia-smi" <<'EOF'
#!/bin/sh
case "$*" in
  -L) echo "GPU 0: NVIDIA H200 (UUID: GPU-00000000-stand-in)" ;;
  *driver_version*) echo "570.00" ;;
  *--query-gpu*) echo "NVIDIA H200 (stand-in)" ;;
  *) echo "stand-in nvidia-smi" ;;
esac
EOF
cat > "$bin/compute-sanitizer" <<'EOF'
#!/bin/sh
[ "$1" = --version ] && { echo "stand-in compute-sanitizer"; exit 0; }
for last; do :; done
exec "$last"
EOF
cat > "$build/hetring" <<'EOF'
#!/bin/sh
echo "hetring (stand-in)"
echo "  CUDA driver: cannot be used: the driver supports CUDA 12.8, this build's runtime is CUDA 13.0"
EOF
skip77='echo "SKIP: no CUDA device"; exit 77'
printf '#!/bin/sh\n%s\n' "$skip77" > "$build/tests/cuda/test_cuda_stub"
printf '#!/bin/sh\n%s\n' "$skip77" > "$build/tests/cuda/test_nccl_single"
chmod +x "$bin"/* "$build/hetring" "$build"/tests/cuda/*
: > "$build/CMakeCache.txt"
cat > "$build/CTestTestfile.cmake" <<EOF
add_test(cuda.ran "/bin/sh" "-c" "exit 0")
set_tests_properties(cuda.ran PROPERTIES LABELS "cuda")
add_test(cuda.nodevice "/bin/sh" "-c" "exit 77")
set_tests_properties(cuda.nodevice PROPERTIES LABELS "cuda" SKIP_RETURN_CODE 77)
EOF

PATH=$bin:$PATH bash "$verify" "$out" --build "$build" --only ctest-cuda,sanitizer,nccl-1rank \
  > "$tmp/stdout" 2>&1
rc=$?
cat "$tmp/stdout"
[ $rc = 1 ] || fail "verify.sh exited $rc, not 1 (a check failed)"
python3 - "$out/report.json" <<'PY' || fail "report.json: the checks whose CUDA tests skipped did not fail"
import json, sys
r = json.load(open(sys.argv[1]))
st = {c["name"]: (c["status"], c["detail"]) for c in r["checks"]}
ok = True
for name in ("ctest-cuda", "sanitizer", "nccl-1rank"):
    s, d = st[name]
    print("%s: %s: %s" % (name, s, d))
    if s != "fail" or "CUDA 12.8" not in d:
        print("  expected fail, with hetring version's driver line")
        ok = False
if "cuda.nodevice" not in st["ctest-cuda"][1]:
    print("  ctest-cuda does not name the skipped test")
    ok = False
sys.exit(0 if ok else 1)
PY
# a build carried to another path than it was configured in: the build check says so
printf 'CMAKE_CACHEFILE_DIR:INTERNAL=/elsewhere/build\nCMAKE_HOME_DIRECTORY:INTERNAL=/elsewhere\n' \
  > "$build/CMakeCache.txt"
PATH=$bin:$PATH bash "$verify" "$tmp/out2" --build "$build" --only build > "$tmp/stdout2" 2>&1
rc=$?
cat "$tmp/stdout2"
[ $rc = 1 ] && grep -q "fail.*configured as /elsewhere/build from the source /elsewhere" "$tmp/stdout2" ||
  fail "a build configured elsewhere: verify.sh exited $rc without naming the paths"
echo "$fails failure(s)"
[ "$fails" = 0 ]
