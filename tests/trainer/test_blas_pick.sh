#!/usr/bin/env bash
# test_blas_pick.sh TEST HETRING: the BLAS kernel choice end to end (trainer/blas_pick.h).
#   TEST table                    the choice as a pure function over a table of cases
#   TEST switch                   OpenBLAS loaded Prescott (OPENBLAS_CORETYPE, then forgotten):
#                                 with OPENBLAS_VERBOSE=2 OpenBLAS itself prints "Core: Prescott"
#                                 and then the new set; GEMM stays correct
#   TEST keep                     the same with HETRING_BLAS_CORETYPE=off: one "Core:" line only
#   hetring version               names the library and kernels; OPENBLAS_CORETYPE set by the
#                                 user is kept and said so; HETRING_BLAS_CORETYPE=NAME is taken,
#                                 an unknown name or one contradicting OPENBLAS_CORETYPE exits 2
# Exits 77 (skipped) on a CPU without AVX2, where there is nothing to switch to.
set -u
T=$1 HR=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
unset OPENBLAS_CORETYPE HETRING_BLAS_CORETYPE OPENBLAS_VERBOSE

"$T" table || fail "the table of choices"

OPENBLAS_CORETYPE=Prescott OPENBLAS_VERBOSE=2 "$T" switch > "$tmp/sw.out" 2> "$tmp/sw.err"
rc=$?
cat "$tmp/sw.out" "$tmp/sw.err"
if [ $rc = 77 ]; then
    echo "SKIP: no AVX2 on this CPU, no stronger kernels to switch to"
    exit 77
fi
[ $rc = 0 ] || fail "switch exited $rc"
cores=$(grep '^Core: ' "$tmp/sw.err" | sed 's/^Core: //' | tr '\n' ' ')
set -- $cores
[ $# = 2 ] && [ "$1" = Prescott ] && [ "$2" != Prescott ] ||
    fail "OpenBLAS should say Core: Prescott, then a stronger set; it said: $cores"
grep -q "kernels $2 (chosen by hetring for .*; OpenBLAS picked Prescott)" "$tmp/sw.out" ||
    fail "the description does not name $2 chosen by hetring over Prescott"

OPENBLAS_CORETYPE=Prescott OPENBLAS_VERBOSE=2 HETRING_BLAS_CORETYPE=off "$T" keep > "$tmp/k.out" 2> "$tmp/k.err" ||
    { fail "keep exited $?"; cat "$tmp/k.out" "$tmp/k.err"; }
[ "$(grep -c '^Core: ' "$tmp/k.err")" = 1 ] || fail "HETRING_BLAS_CORETYPE=off still switched: $(cat "$tmp/k.err")"

# hetring version: the user's OPENBLAS_CORETYPE is kept, and said so
OPENBLAS_CORETYPE=Prescott OPENBLAS_VERBOSE=2 "$HR" version > "$tmp/v1.out" 2> "$tmp/v1.err" || fail "version exited $?"
grep -q '^blas: OpenBLAS .*, kernels Prescott (forced by OPENBLAS_CORETYPE=Prescott)$' "$tmp/v1.out" ||
    fail "hetring version with OPENBLAS_CORETYPE=Prescott: $(grep blas "$tmp/v1.out")"
[ "$(grep -c '^Core: ' "$tmp/v1.err")" = 1 ] || fail "the user's OPENBLAS_CORETYPE was overridden"
# plain: a line naming library and kernels
"$HR" version > "$tmp/v2.out" || fail "version exited $?"
grep -q '^blas: OpenBLAS [0-9.]* (.*), kernels [A-Za-z0-9_]* (' "$tmp/v2.out" ||
    fail "hetring version has no blas line: $(cat "$tmp/v2.out")"
grep '^blas: ' "$tmp/v2.out"
# a named set
HETRING_BLAS_CORETYPE=haswell "$HR" version > "$tmp/v3.out" 2>&1 || fail "HETRING_BLAS_CORETYPE=haswell exited $?"
grep -q '^blas: OpenBLAS .*, kernels Haswell (HETRING_BLAS_CORETYPE=Haswell; OpenBLAS picked ' "$tmp/v3.out" ||
    fail "HETRING_BLAS_CORETYPE=haswell: $(cat "$tmp/v3.out")"
# never accept and ignore
HETRING_BLAS_CORETYPE=Skylake "$HR" version > "$tmp/v4.out" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "HETRING_BLAS_CORETYPE='Skylake' is not auto, off or a kernel set (.*SkylakeX" "$tmp/v4.out" ||
    fail "HETRING_BLAS_CORETYPE=Skylake: exit $rc, $(cat "$tmp/v4.out")"
OPENBLAS_CORETYPE=Prescott HETRING_BLAS_CORETYPE=Haswell "$HR" version > "$tmp/v5.out" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "HETRING_BLAS_CORETYPE=Haswell and OPENBLAS_CORETYPE=Prescott disagree" "$tmp/v5.out" ||
    fail "conflicting HETRING_BLAS_CORETYPE and OPENBLAS_CORETYPE: exit $rc, $(cat "$tmp/v5.out")"

echo "$fails failure(s)"
[ "$fails" = 0 ]
