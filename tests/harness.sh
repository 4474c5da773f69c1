# harness.sh: the setup every multi-process test script shares, sourced once the script has set
# HR (and its other arguments). Gives a failure counter (`fail MSG`; the script ends with
# `[ "$fails" = 0 ]` or dist/lib.sh's `finish`), a temporary directory $tmp removed on exit, and
# `base`, the first of 8 ports claimed for this script (tests/ports.sh). A script that must stop
# something of its own on exit puts the command in `on_exit`, run before $tmp goes.
set -u
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
. "$(dirname "${BASH_SOURCE[0]}")/ports.sh"
on_exit=
tmp=$(mktemp -d)
trap 'eval "$on_exit"; rm -rf "$tmp"; port_release' EXIT
port_block || exit 1 # base: 8 ports no other test holds
