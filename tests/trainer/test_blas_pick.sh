#!/usr/bin/env bash
# test_blas_pick.sh TEST HETRING: the BLAS kernel choice end to end (trainer/blas_pick.h).
# OpenBLAS reads OPENBLAS_CORETYPE once per process; with OPENBLAS_VERBOSE=2 it prints one
# "Core: SET" line per process start, so the lines count the re-executions.
#   TEST table              the choice as a pure function over a table of cases
#   TEST switch Prescott    started as if OpenBLAS had picked Prescott on its own
#                           (HETRING_BLAS_PICKED=Prescott:Prescott): "Core: Prescott", then
#                           exactly one re-execution with the choice for this CPU
#   TEST host Prescott      the same through blas_pick_init (a library's host): no re-execution
#   TEST keep               HETRING_BLAS_CORETYPE=off: one start, OpenBLAS's own pick
#   hetring version         names the library and kernels; OPENBLAS_CORETYPE set by the user is
#                           kept and said so; HETRING_BLAS_CORETYPE=NAME is taken, an unknown
#                           name or one contradicting OPENBLAS_CORETYPE exits 2
#   hetring bench --help    hetring-bench, started by hetring, inherits the choice: no second
#                           re-execution
# Exits 77 (skipped) on a CPU without AVX2, where there is nothing to switch to.
set -u
T=$1 HR=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
unset OPENBLAS_CORETYPE HETRING_BLAS_CORETYPE HETRING_BLAS_PICKED OPENBLAS_VERBOSE
cores() { grep '^Core: ' "$1" | sed 's/^Core: //' | tr '\n' ' ' | sed 's/ $//'; }
weak() { HETRING_BLAS_PICKED=Prescott:Prescott OPENBLAS_CORETYPE=Prescott OPENBLAS_VERBOSE=2 "$@"; }

"$T" table || fail "the table of choices"

weak "$T" switch Prescott > "$tmp/sw.out" 2> "$tmp/sw.err"
rc=$?
cat "$tmp/sw.out" "$tmp/sw.err"
if [ $rc = 77 ]; then
    echo "SKIP: no AVX2 on this CPU, no stronger kernels to switch to"
    exit 77
fi
[ $rc = 0 ] || fail "switch exited $rc"
set -- $(cores "$tmp/sw.err")
[ $# = 2 ] && [ "$1" = Prescott ] && [ "$2" != Prescott ] ||
    fail "OpenBLAS should say Core: Prescott, then once a stronger set; it said: $*"
chosen=${2:-}
grep -q "kernels $chosen (chosen by hetring for .*; OpenBLAS picked Prescott)" "$tmp/sw.out" ||
    fail "the description does not name $chosen chosen by hetring over Prescott"

weak "$T" host Prescott > "$tmp/h.out" 2> "$tmp/h.err" || { fail "host exited $?"; cat "$tmp/h.out"; }
[ "$(cores "$tmp/h.err")" = Prescott ] || fail "a library's host was re-executed: $(cores "$tmp/h.err")"

OPENBLAS_VERBOSE=2 HETRING_BLAS_CORETYPE=off "$T" keep > "$tmp/k.out" 2> "$tmp/k.err" ||
    { fail "keep exited $?"; cat "$tmp/k.out" "$tmp/k.err"; }
[ "$(grep -c '^Core: ' "$tmp/k.err")" = 1 ] || fail "HETRING_BLAS_CORETYPE=off still switched: $(cat "$tmp/k.err")"

# hetring version: the user's OPENBLAS_CORETYPE is kept, and said so
OPENBLAS_CORETYPE=Prescott OPENBLAS_VERBOSE=2 "$HR" version > "$tmp/v1.out" 2> "$tmp/v1.err" || fail "version exited $?"
grep -q '^blas: OpenBLAS .*, kernels Prescott (forced by OPENBLAS_CORETYPE=Prescott)$' "$tmp/v1.out" ||
    fail "hetring version with OPENBLAS_CORETYPE=Prescott: $(grep blas "$tmp/v1.out")"
[ "$(grep -c '^Core: ' "$tmp/v1.err")" = 1 ] || fail "the user's OPENBLAS_CORETYPE was overridden"
# ... and so is a user's OPENBLAS_CORETYPE that differs from what HETRING_BLAS_PICKED says
HETRING_BLAS_PICKED=SkylakeX:Prescott OPENBLAS_CORETYPE=Prescott OPENBLAS_VERBOSE=2 "$HR" version \
    > "$tmp/v1b.out" 2> "$tmp/v1b.err" || fail "version exited $?"
grep -q 'kernels Prescott (forced by OPENBLAS_CORETYPE=Prescott)$' "$tmp/v1b.out" &&
    [ "$(cores "$tmp/v1b.err")" = Prescott ] ||
    fail "a user's OPENBLAS_CORETYPE under another HETRING_BLAS_PICKED: $(cat "$tmp/v1b.out" "$tmp/v1b.err")"
# plain: a line naming library and kernels
"$HR" version > "$tmp/v2.out" || fail "version exited $?"
grep -q '^blas: OpenBLAS [0-9.]* (.*), kernels [A-Za-z0-9_]* (' "$tmp/v2.out" ||
    fail "hetring version has no blas line: $(cat "$tmp/v2.out")"
grep '^blas: ' "$tmp/v2.out"
# the switch through hetring, and hetring-bench started by it inherits it: three starts in all
weak "$HR" version > "$tmp/v6.out" 2> "$tmp/v6.err" || fail "version exited $?"
[ "$(cores "$tmp/v6.err")" = "Prescott $chosen" ] && grep -q "kernels $chosen (chosen by hetring" "$tmp/v6.out" ||
    fail "hetring version from a weak pick: $(cores "$tmp/v6.err"); $(grep blas "$tmp/v6.out")"
weak "$HR" bench --help > "$tmp/b.out" 2> "$tmp/b.err" || fail "bench --help exited $?"
[ "$(cores "$tmp/b.err")" = "Prescott $chosen $chosen" ] ||
    fail "hetring bench: hetring, its re-execution and hetring-bench should start on Prescott, $chosen, $chosen: $(cores "$tmp/b.err")"
# a named set
HETRING_BLAS_CORETYPE=haswell OPENBLAS_VERBOSE=2 "$HR" version > "$tmp/v3.out" 2> "$tmp/v3.err" || fail "HETRING_BLAS_CORETYPE=haswell exited $?"
grep -q '^blas: OpenBLAS .*, kernels Haswell (HETRING_BLAS_CORETYPE=Haswell; OpenBLAS picked ' "$tmp/v3.out" ||
    fail "HETRING_BLAS_CORETYPE=haswell: $(cat "$tmp/v3.out")"
[ "$(cores "$tmp/v3.err" | awk '{print $NF}')" = Haswell ] && [ "$(grep -c '^Core: ' "$tmp/v3.err")" -le 2 ] ||
    fail "HETRING_BLAS_CORETYPE=haswell: OpenBLAS started $(cores "$tmp/v3.err")"
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
