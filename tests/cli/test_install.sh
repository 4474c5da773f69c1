#!/usr/bin/env bash
# test_install.sh HETRING CMAKE BUILD-DIR HOOKS: `cmake --install BUILD-DIR --prefix P` puts
# hetring and hetring-bench in P/bin (so that `hetring bench` finds the bench), the example
# clusters in P/share/hetring/examples and the README in P/share/doc/hetring. The installed
# hetring has no fault hooks: HETRING_FAULT=crash:0:2 does not stop a one-node run, while the
# build-tree HETRING, which the tests use, still dies of it when HOOKS (HETRING_TEST_HOOKS as
# 1 or 0) is 1.
set -u
HR=$1 CMAKE=$2 BUILD=$3 HOOKS=$4
. "$(dirname "$0")/../harness.sh"
P=$tmp/prefix

"$CMAKE" --install "$BUILD" --prefix "$P" > "$tmp/install.log" 2>&1 ||
    { echo "FAIL: cmake --install exited $?: $(cat "$tmp/install.log")"; exit 1; }
for f in bin/hetring share/hetring/examples/demo.ini share/hetring/examples/reference.ini \
         share/hetring/examples/two-node.ini share/doc/hetring/README.md; do
    [ -s "$P/$f" ] || fail "$f was not installed: $(cat "$tmp/install.log")"
done
"$P/bin/hetring" --help > "$tmp/help" 2>&1 && grep -q "^usage: hetring COMMAND" "$tmp/help" ||
    fail "installed hetring --help: $(cat "$tmp/help")"
"$P/bin/hetring" config --reference > "$tmp/ref" 2>&1 && grep -q "^\[cluster\]" "$tmp/ref" ||
    fail "installed hetring config --reference: $(head -5 "$tmp/ref")"
"$P/bin/hetring" config --conf "$P/share/hetring/examples/demo.ini" > "$tmp/demo" 2>&1 ||
    fail "the installed demo.ini is not valid: $(cat "$tmp/demo")"
if "$HR" help bench > /dev/null 2>&1; then # built with the bench: it is installed beside hetring
    [ -x "$P/bin/hetring-bench" ] || fail "bin/hetring-bench was not installed"
    "$P/bin/hetring" bench allreduce --help > "$tmp/bench" 2>&1 ||
        fail "installed hetring bench does not reach hetring-bench: $(cat "$tmp/bench")"
fi

# fault hooks: off in the installed binary, on in the build tree
conf=$tmp/one.ini
printf '[cluster]\nsecurity = none\n[train]\nlayers = 784,16,10\nsamples = 2000\n' > "$conf"
printf 'eval_samples = 200\nglobal_batch = 64\niterations = 5\n' >> "$conf"
printf '[node.0]\nhost = 127.0.0.1\nport = %d\n' "$base" >> "$conf"
HETRING_FAULT=crash:0:2 timeout 60 "$P/bin/hetring" run --conf "$conf" --quiet > "$tmp/run" 2>&1
rc=$?
[ $rc = 0 ] && grep -q "done: 5 iterations" "$tmp/run" ||
    fail "installed hetring with HETRING_FAULT=crash:0:2 exited $rc: $(cat "$tmp/run")"
! grep -q "test fault" "$tmp/run" || fail "the installed hetring acted on HETRING_FAULT"
"$P/bin/hetring" version | grep -q "^test hooks: no$" || fail "installed: $("$P/bin/hetring" version)"
if [ "$HOOKS" = 1 ]; then
    HETRING_FAULT=crash:0:2 timeout 60 "$HR" run --conf "$conf" --quiet > "$tmp/run2" 2>&1
    rc=$?
    [ $rc = 137 ] && grep -q "test fault: crashing" "$tmp/run2" ||
        fail "build-tree hetring with HETRING_FAULT=crash:0:2 exited $rc, expected 137: $(cat "$tmp/run2")"
else
    echo "note: this build has no test hooks (HETRING_TEST_HOOKS=OFF); the build tree is not checked"
fi
[ $fails = 0 ] && echo "PASS" || { echo "$fails failure(s)"; exit 1; }
