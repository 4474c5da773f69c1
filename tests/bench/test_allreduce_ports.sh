#!/usr/bin/env bash
# test_allreduce_ports.sh HETRING: the ports of `hetring bench allreduce`.
#  - by default it takes N ports found free at start: in a network namespace of the test's own
#    where every port of 10000-32767 but 20000-21599 is taken, a run of 2 nodes succeeds on
#    ports in that window (a random port, unchecked, hit a taken one almost always and the
#    nodes could not listen); without the privilege to make one, this part is skipped (77);
#  - --port P with --netns: every node listens on P in its own namespace (port 47000 was used
#    whatever --port said), where namespaces can be made.
set -u
HR=$1
tmp=$(mktemp -d)
holders=()
cleanup() {
    for p in "${holders[@]}"; do kill "$p" 2> /dev/null; done
    rm -rf "$tmp"
}
trap cleanup EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

if ! timeout 10 unshare -n true 2> /dev/null; then
    echo "SKIP: cannot make a network namespace here"
    exit 77
fi
# in a namespace of its own (no other user's ports are touched): three holders of 7,000 ports
# each (a process may hold 20,000 descriptors here), then the bench
timeout 120 unshare -n bash -c '
    ip link set lo up || exit 1
    hold() { # listen on ports [$1, $2) but the window, until killed
        python3 -c "
import resource, socket, sys, time
lo, hi = int(sys.argv[1]), int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_NOFILE, (hi - lo + 64,) * 2)
held = []
for p in range(lo, hi):
    if 20000 <= p < 21600:
        continue
    s = socket.socket()
    s.bind((\"127.0.0.1\", p))
    s.listen(1)
    held.append(s)
open(sys.argv[3], \"w\").close()
time.sleep(300)
" "$1" "$2" "$3" &
        pids="$pids $!"
    }
    pids=
    hold 10000 17000 '"$tmp"'/r1; hold 17000 24600 '"$tmp"'/r2; hold 24600 32768 '"$tmp"'/r3
    for _ in $(seq 300); do [ -e '"$tmp"'/r1 ] && [ -e '"$tmp"'/r2 ] && [ -e '"$tmp"'/r3 ] && break; sleep 0.1; done
    if ! [ -e '"$tmp"'/r1 ] || ! [ -e '"$tmp"'/r2 ] || ! [ -e '"$tmp"'/r3 ]; then
        echo skip > '"$tmp"'/rc # a descriptor limit under 7,064, or no python3: nothing held
        kill $pids 2> /dev/null
        exit 0
    fi
    timeout 60 "$0" bench allreduce --nodes 2 -b 1K -e 1K --iters 1 --warmup 0 --rate 1 \
        > '"$tmp"'/out 2> '"$tmp"'/err
    echo $? > '"$tmp"'/rc
    kill $pids
' "$HR"
rc=$(cat "$tmp/rc" 2> /dev/null || echo none)
if [ "$rc" = skip ]; then
    echo "SKIP: the ports could not be held (a descriptor limit under 7,064, or no python3)"
    exit 77
fi
head -1 "$tmp/out"
ports=$(sed -n 's/^# hetring bench allreduce: 2 nodes on loopback, ports \([0-9]*\)-\([0-9]*\),.*/\1 \2/p' "$tmp/out")
read -r p0 p1 <<< "${ports:-0 0}"
[ "$rc" = 0 ] && [ "$p0" -ge 20000 ] && [ "$p1" -lt 21600 ] && [ $((p1 - p0)) = 1 ] ||
    fail "with every port but 20000-21599 taken: exit $rc, ports '$ports': $(tail -2 "$tmp/err")"

ns=hrap$$
if ip netns add "$ns" 2> /dev/null; then
    ip netns del "$ns"
    timeout 90 "$HR" bench allreduce --netns --port 47100 --nodes 2 -b 1K -e 1K --iters 1 \
        --warmup 0 > "$tmp/ns" 2>&1
    rc=$?
    [ "$rc" = 0 ] && grep -q "^# hetring bench allreduce: 2 nodes in network namespaces (veth links), port 47100," "$tmp/ns" &&
        grep -q "successor node 1 (10.77.0.2:47100)" "$tmp/ns" ||
        fail "--netns --port 47100: exit $rc: $(grep -E '^# hetring|successor' "$tmp/ns" | head -2)"
else
    echo "note: cannot create network namespaces; --netns --port not checked"
fi
echo "$fails failure(s)"
[ "$fails" = 0 ]
