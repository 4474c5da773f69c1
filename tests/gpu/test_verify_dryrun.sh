#!/usr/bin/env bash
# test_verify_dryrun.sh: tests/gpu/verify.sh where there is no GPU (ctest gpu.verify_dryrun).
# It must exit 0, print "no GPU: skipped", and write report.md and a report.json that
# `python3 -m json.tool` reads, with every check "skip". On a machine with a GPU the script is
# told to take the same path (HR_VERIFY_NO_GPU=1), so that this stays a dry run of seconds.
#
# usage: test_verify_dryrun.sh VERIFY_SH BUILD_DIR
set -u
verify=${1:?verify.sh}
build=${2:?build folder}
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
out=$tmp/out

if command -v nvidia-smi > /dev/null && [ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')" -gt 0 ]; then
  export HR_VERIFY_NO_GPU=1
fi
bash "$verify" "$out" --build "$build" > "$tmp/stdout" 2>&1
rc=$?
cat "$tmp/stdout"
[ $rc = 0 ] || fail "verify.sh exited $rc"
grep -q 'no GPU: skipped' "$tmp/stdout" || fail "verify.sh did not print 'no GPU: skipped'"
[ -s "$out/report.md" ] || fail "no report.md"
grep -q 'no GPU: skipped' "$out/report.md" 2>/dev/null || fail "report.md lacks the headline"
python3 -m json.tool "$out/report.json" > /dev/null || fail "report.json is not JSON"
python3 - "$out/report.json" <<'PY' || fail "report.json: not every check is skip"
import json, sys
r = json.load(open(sys.argv[1]))
names = [c["name"] for c in r["checks"]]
want = ["versions", "build", "gpu-libs", "ctest-cuda", "sanitizer", "gpu-vs-cpu", "gpu-shared-kill-rejoin",
        "cpu-gpu-cpu", "nccl-1rank", "bench-gpu", "bench-mixed", "torch-cuda"]
assert names == want, names
for c in r["checks"]:
    assert c["status"] == "skip", c
    assert set(c) >= {"name", "status", "seconds", "detail", "log"}, c
assert r["headline"].startswith("no GPU: skipped"), r["headline"]
print("report.json: %d checks, all skip: %s" % (len(names), r["headline"]))
PY
echo "$fails failure(s)"
[ "$fails" = 0 ]
