#!/usr/bin/env bash
# run.sh BUILD SECONDS [TARGET...]: fuzz each target (default: all) of a HETRING_FUZZ=ON build
# folder for SECONDS, one after another, starting from its seed corpus. New inputs go to
# BUILD/fuzz-work/TARGET (kept between runs, never into the source tree); a crash, leak,
# timeout or out-of-memory input is saved as BUILD/fuzz-artifacts/TARGET/crash-* (replay it
# with BUILD/tests/fuzz/fuzz_TARGET FILE). Prints one line per target; exit 1 if any found
# something. FUZZ_FLAGS adds libFuzzer flags (e.g. -malloc_limit_mb=100000 with
# ASAN_OPTIONS=allocator_may_return_null=1 to look past an oversized allocation).
set -uo pipefail
build=${1:?usage: run.sh BUILD SECONDS [TARGET...]}
secs=${2:?usage: run.sh BUILD SECONDS [TARGET...]}
shift 2
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(ini frame handshake idx cifar csv ckpt)
failed=()
for t in "${targets[@]}"; do
    bin=$build/tests/fuzz/fuzz_$t
    [ -x "$bin" ] || { echo "fuzz $t: $bin missing (configure with -DHETRING_FUZZ=ON)"; exit 1; }
    work=$build/fuzz-work/$t art=$build/fuzz-artifacts/$t
    mkdir -p "$work" "$art"
    seeds=("$here/corpus/$t")
    [ "$t" = ini ] && seeds+=("$root/tests/conf/good" "$root/tests/conf/bad" "$root/conf/examples")
    log=$build/fuzz-artifacts/$t.log
    # -close_fd_mask=2: the parsers' own error messages are not shown (sanitizer and libFuzzer
    # reports still are, in the log)
    "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=1536 -close_fd_mask=2 \
        -print_final_stats=1 -artifact_prefix="$art/" ${FUZZ_FLAGS:-} "$work" "${seeds[@]}" \
        > "$log" 2>&1
    rc=$?
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
    if [ $rc -eq 0 ]; then
        echo "fuzz $t: ${secs} s, ${runs:-?} inputs, ${cov:-cov: ?}, nothing found"
    else
        failed+=("$t")
        echo "fuzz $t: FOUND something (exit $rc) after ${runs:-?} inputs; log $log:"
        grep -E 'ERROR|SUMMARY|^ *#[0-9]+ |Test unit written|==[0-9]+==' "$log" | head -40
    fi
done
[ ${#failed[@]} -eq 0 ] || { echo "fuzz: findings in ${failed[*]}"; exit 1; }
