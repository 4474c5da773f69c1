#!/usr/bin/env bash
# test_start_stress.sh HETRING: process starts, one after another, none crashing. Each start
# decides its BLAS kernels before anything else runs (trainer/blas_pick.h); a kernel switch
# inside a running process, where OpenBLAS's own thread pool lives, crashed 3-5 starts in 100.
#   500 x hetring version                 started as if OpenBLAS had picked Prescott on its own
#                                         (HETRING_BLAS_PICKED=Prescott:Prescott), so every
#                                         start re-executes once with the CPU's choice: 1000
#                                         processes; on a CPU without AVX2, 500 plain starts
#   200 x hetring bench allreduce -f 1    the same, through hetring's exec of hetring-bench,
#                                         which refuses -f 1 (exit 2) once started: 3 processes
#                                         each
# A start fails when it is killed by a signal, exits otherwise than expected or misses its
# output line; every failure is counted and the first few are shown. About 1-3 minutes.
set -u
HR=$(realpath "$1")
. "$(dirname "$0")/../harness.sh"
unset OPENBLAS_CORETYPE HETRING_BLAS_CORETYPE HETRING_BLAS_PICKED OPENBLAS_VERBOSE HETRING_LOG
export HETRING_BLAS_PICKED=Prescott:Prescott OPENBLAS_CORETYPE=Prescott

# starts N EXPECTED-EXIT PATTERN ARGS...: N starts of hetring ARGS; prints the failures' count
starts() {
    local n=$1 want=$2 pattern=$3 bad=0 rc
    shift 3
    for ((i = 0; i < n; i++)); do
        timeout 60 "$HR" "$@" > "$tmp/out" 2>&1
        rc=$?
        if [ $rc != "$want" ] || ! grep -q -- "$pattern" "$tmp/out"; then
            bad=$((bad + 1))
            [ $bad -le 3 ] && echo "start $i of hetring $*: exit $rc ($([ $rc -gt 128 ] &&
                kill -l $((rc - 128)) 2>/dev/null)): $(head -c 300 "$tmp/out")" >&2
        fi
    done
    echo $bad
}
chosen=$("$HR" version | sed -n 's/^blas: .*, kernels \([A-Za-z0-9_]*\) .*/\1/p')
echo "kernels after the re-execution: $chosen"
[ -n "$chosen" ] || fail "hetring version names no kernels: $("$HR" version)"

t0=$(date +%s.%N)
bad=$(starts 500 0 "^blas: OpenBLAS .*, kernels $chosen " version)
t1=$(date +%s.%N)
echo "hetring version: $bad of 500 starts failed ($(awk "BEGIN { printf \"%.0f\", $t1 - $t0 }") s)"
[ "$bad" = 0 ] || fail "$bad of 500 starts of hetring version failed"

bad=$(starts 200 2 "step-factor '1' (expected 2..1024)" bench allreduce -f 1 --port "$base")
t2=$(date +%s.%N)
echo "hetring bench allreduce -f 1: $bad of 200 starts failed ($(awk "BEGIN { printf \"%.0f\", $t2 - $t1 }") s)"
[ "$bad" = 0 ] || fail "$bad of 200 starts of hetring bench allreduce -f 1 failed"

echo "$fails failure(s)"
[ "$fails" = 0 ]
