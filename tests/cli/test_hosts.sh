#!/usr/bin/env bash
# The hosts as a node's start sees them, through a resolver of the test's own names (the second
# argument, tests/cli/gai_names.c, LD_PRELOAD: self.test and peer.test are 127.0.0.1, each
# lookup said on stderr):
#  - hetring run looks a peer's host up once before it listens: the memory check and the
#    library's decisions (the overlap's cores, the shared checkpoint) take the same answer;
#  - two nodes whose hosts are written differently but name one endpoint (a name and its
#    address at one port) pass conf/, which resolves nothing, and are refused where the hosts
#    are resolved: hetring run, hetring local (no node left running) and the dry run of
#    hetring config --node, each naming both nodes' FILE:LINE, host:port and the address, and
#    each exiting 2;
#  - a host that does not resolve (gone.test) is refused before the node listens, naming its
#    FILE:LINE: the node's own (it could not listen), a peer's beside a loopback host (it could
#    never reach this node), and any node's in hetring local.
SHIM=$2
. "$(dirname "${BASH_SOURCE[0]}")/../dist/lib.sh"
if ldd "$HR" 2>/dev/null | grep -q 'lib[at]san'; then
    echo "SKIP: a sanitizer build cannot take an LD_PRELOAD shim"; exit 77
fi
export GAI_NAMES=self.test=127.0.0.1,peer.test=127.0.0.1,gone.test=
# cluster FILE PORT1: node 0 self.test:base, node 1 peer.test:PORT1
cluster() {
    printf '[cluster]\nsecurity = none\nconnect_timeout = 5\ntimeout = 5\nrejoin_timeout = 1\n' > "$1"
    mlp_train 784,16,10 200 32 4 >> "$1"
    printf '[node.0]\nhost = self.test\nport = %d\n[node.1]\nhost = peer.test\nport = %d\n' \
        "$base" "$2" >> "$1"
}

# once: node 0 alone (node 1 never comes, rejoin_timeout ends it) looks peer.test up once
# before it listens on self.test
cluster "$tmp/two.ini" $((base + 1))
LD_PRELOAD=$SHIM timeout 60 "$HR" run --conf "$tmp/two.ini" --node 0 > "$tmp/once.out" 2>&1
rc=$?
[ $rc = 1 ] || fail "node 0 alone exited $rc, not 1: $(tail -3 "$tmp/once.out")"
before=$(sed '/gai_names: lookup of self.test to listen/q' "$tmp/once.out")
grep -q "lookup of self.test to listen" <<< "$before" || fail "node 0 never listened: $(cat "$tmp/once.out")"
n=$(grep -c "gai_names: lookup of peer.test$" <<< "$before")
[ "$n" = 1 ] || { fail "peer.test looked up $n times before node 0 listened, expected 1"; sed 's/^/    /' <<< "$before"; }

# one endpoint written two ways: refused, naming both nodes and the address
cluster "$tmp/dup.ini" "$base"
want="dup.ini:16: [node.1] peer.test:$base and $tmp/dup.ini:13: [node.0] self.test:$base are the same endpoint (127.0.0.1:$base)"
LD_PRELOAD=$SHIM "$HR" config --conf "$tmp/dup.ini" > "$tmp/conf.out" 2>&1 ||
    fail "hetring config (no lookup) refused dup.ini: $(cat "$tmp/conf.out")"
# refused NAME RC CMD...: hetring CMD exits RC within the timeout, and says $want
refused() {
    local name=$1 want_rc=$2 rc
    shift 2
    LD_PRELOAD=$SHIM timeout 60 "$HR" "$@" > "$tmp/$name.out" 2>&1; rc=$?
    [ $rc = "$want_rc" ] || fail "$name exited $rc, not $want_rc: $(tail -3 "$tmp/$name.out")"
    grep -qF -- "$want" "$tmp/$name.out" || { fail "$name: no '$want'"; sed 's/^/    /' "$tmp/$name.out"; }
}
refused "run" 2 run --conf "$tmp/dup.ini" --node 1
refused "local" 2 local --conf "$tmp/dup.ini"
refused "dry run" 2 config --conf "$tmp/dup.ini" --node 0 # exit 2 as hetring run
pgrep -f -- "--conf $tmp/dup.ini" > /dev/null && fail "a node of hetring local still runs"

# a host that does not resolve
printf '[cluster]\nsecurity = none\nconnect_timeout = 5\ntimeout = 5\nrejoin_timeout = 1\n' > "$tmp/gone.ini"
mlp_train 784,16,10 200 32 4 >> "$tmp/gone.ini"
printf '[node.0]\nhost = gone.test\nport = %d\n[node.1]\nhost = 127.0.0.1\nport = %d\n' \
    "$base" $((base + 1)) >> "$tmp/gone.ini"
want="gone.ini:13: [node.0] host = gone.test does not resolve (cannot resolve gone.test: "
refused "own host" 2 run --conf "$tmp/gone.ini" --node 0
grep -qF "so node 0 cannot listen on it" "$tmp/own host.out" || fail "own host: $(cat "$tmp/own host.out")"
refused "peer host" 2 run --conf "$tmp/gone.ini" --node 1
grep -qF "node 1 listens on 127.0.0.1 (127.0.0.1), a loopback address" "$tmp/peer host.out" ||
    fail "peer host: $(cat "$tmp/peer host.out")"
want="gone.ini:12: [node.0] host gone.test does not resolve (cannot resolve gone.test: "
refused "local gone" 2 local --conf "$tmp/gone.ini"
pgrep -f -- "--conf $tmp/gone.ini" > /dev/null && fail "a node of hetring local still runs"
[ $fails = 0 ] && echo "hosts: ok"
exit $((fails > 0))
