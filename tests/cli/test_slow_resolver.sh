#!/usr/bin/env bash
# A resolver out of reach holds no start past connect_timeout: the lookups before the node
# listens (which node this is, whether its loopback host is reachable from the others, which
# nodes share its machine, and hetring local's check that every node is on this machine) give
# up at connect_timeout, with an error naming the node and the host. The resolver is an
# LD_PRELOAD shim (the second argument, tests/ring/gai_again.c) whose lookups answer only after
# 30 s.
SHIM=$2
. "$(dirname "${BASH_SOURCE[0]}")/../dist/lib.sh"
# a sanitizer must come first among the libraries a process loads: skipped there
if ldd "$HR" 2>/dev/null | grep -q 'lib[at]san'; then
    echo "SKIP: a sanitizer build cannot take an LD_PRELOAD shim"; exit 77
fi
now() { date +%s.%N; }
# cluster FILE HOST0 HOST1: two nodes, connect_timeout = 3
cluster() {
    printf '[cluster]\nsecurity = none\nconnect_timeout = 3\ntimeout = 3\n' > "$1"
    mlp_train 784,16,10 200 32 4 >> "$1"
    printf '[node.0]\nhost = %s\nport = %d\n[node.1]\nhost = %s\nport = %d\n' \
        "$2" "$base" "$3" $((base + 1)) >> "$1"
}
# slow NAME EXPECTED ARGS...: hetring ARGS under the 30 s resolver gives up within 20 s (well
# short of the resolver's answer, so a load on the machine does not matter), exits non-zero
# and says EXPECTED (a fixed string)
slow() {
    local name=$1 want=$2 t0 el rc
    shift 2
    t0=$(now)
    LD_PRELOAD=$SHIM GAI_SLOW_S=30 timeout 90 "$HR" "$@" > "$tmp/$name.out" 2>&1; rc=$?
    el=$(awk "BEGIN{printf \"%.1f\", $(now) - $t0}")
    echo "$name: exit $rc after $el s: $(grep -v gai_again "$tmp/$name.out" | head -1 | cut -c1-200)"
    [ "$rc" != 0 ] || fail "$name: exited 0"
    awk "BEGIN{exit !($el < 20)}" || fail "$name: took $el s to give up (connect_timeout is 3 s)"
    grep -qF -- "$want" "$tmp/$name.out" || { fail "$name: no '$want'"; sed 's/^/    /' "$tmp/$name.out"; }
}
getent hosts localhost | grep -qE '^(127\.|::1 )' ||
    { echo "SKIP: localhost is not a loopback name here"; exit 77; }

cluster "$tmp/own.ini" localhost localhost
slow "own host" "own.ini:12: [node.0] host = localhost: looking it up took longer than connect_timeout (3 s), so it is not known which address node 0 listens on" \
    run --conf "$tmp/own.ini" --node 0
cluster "$tmp/peer.ini" 127.0.0.1 localhost
slow "peer host" "peer.ini:15: [node.1] host = localhost: looking it up took longer than connect_timeout (3 s), so it is not known whether node 1 is on the machine of node 0" \
    run --conf "$tmp/peer.ini" --node 0
slow "which node" "cannot tell which node this is: $tmp/own.ini:12: [node.0] host = localhost: looking it up took longer than connect_timeout (3 s)" \
    run --conf "$tmp/own.ini"
slow "hetring local" "own.ini:11: [node.0] host localhost: looking it up took longer than connect_timeout (3 s), so it is not known whether it is on this machine" \
    local --conf "$tmp/own.ini"
[ $fails = 0 ] && echo "slow resolver: ok"
exit $((fails > 0))
