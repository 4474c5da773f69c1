#!/usr/bin/env bash
# test_allreduce_iperf.sh HETRING: R, the iperf3 rate of `hetring bench allreduce`.
#  - without iperf3 in PATH the header says iperf3 is not installed (it said "iperf3 failed");
#  - with a fake iperf3 whose client fails at once, the bench goes on ("iperf3 failed") rather
#    than waiting for ever on the server no client reached;
#  - SIGTERM or SIGINT while the (fake) client runs: the bench exits 143 or 130 and its iperf3
#    server is gone (it was left running, waiting for a client);
#  - the server listens on the port after the nodes' (base+2), checked free: with that port
#    taken it listens on another free one, which the client is given, and the bench says so
#    (it took base+100 unchecked, and the client met whatever listened there).
set -u
HR=$1
. "$(dirname "$0")/../harness.sh" # the nodes take base.. (--port)
on_exit="standin_kill '$tmp/all.pids'" # the fake iperf3s that still run (tests/harness.sh)
TIMEOUT=$(command -v timeout)
run() { "$TIMEOUT" 60 "$HR" bench allreduce --port "$base" --nodes 2 -b 1K -e 1K --iters 1 --warmup 0 "$@"; }

mkdir -p "$tmp/none"
PATH=$tmp/none run > "$tmp/none.out" 2>&1 || fail "without iperf3: exit $?: $(tail -2 "$tmp/none.out")"
grep -q '^# R unknown (iperf3 is not installed; install it or give --rate)$' "$tmp/none.out" ||
    fail "without iperf3: $(grep '^# R' "$tmp/none.out")"

mkdir -p "$tmp/fake"
cat > "$tmp/fake/iperf3" << EOS
#!/bin/sh
$standin_rec
case " \$* " in
*" -s "*) rec \$\$ > "$tmp/server.pid"; rec \$\$ >> "$tmp/all.pids"; port=server; ;;
*" -c "*) rec \$\$ > "$tmp/client.pid"; rec \$\$ >> "$tmp/all.pids"; port=client; ;;
*) exit 2 ;;
esac
while [ \$# -gt 1 ]; do [ "\$1" = -p ] && echo "\$2" > "$tmp/\$port.port"; shift; done
case \$port in
server) exec sleep 300 ;;
client) [ -e "$tmp/client-fails" ] && exit 1; exec sleep 300 ;;
esac
exit 2
EOS
chmod +x "$tmp/fake/iperf3"
: > "$tmp/client-fails"
start=$SECONDS
PATH=$tmp/fake:$PATH run > "$tmp/failed.out" 2>&1 || fail "iperf3 failing: exit $?: $(tail -2 "$tmp/failed.out")"
grep -q '^# R unknown (iperf3 failed; give --rate)$' "$tmp/failed.out" ||
    fail "iperf3 failing: $(grep '^# R' "$tmp/failed.out")"
server=$(cat "$tmp/server.pid" 2> /dev/null)
[ -n "$server" ] && ! proc_alive $server || fail "iperf3 failing: the server ${server:-?} is left running"
echo "client failing: done in $((SECONDS - start)) s"
[ "$(cat "$tmp/server.port" 2> /dev/null)" = $((base + 2)) ] && [ "$(cat "$tmp/client.port" 2> /dev/null)" = $((base + 2)) ] ||
    fail "iperf3 on port $(cat "$tmp/server.port" 2> /dev/null), its client on $(cat "$tmp/client.port" 2> /dev/null), expected $((base + 2)) (after the nodes')"
# the port after the nodes' taken: the server listens on another, free one, and the bench says so
/usr/bin/python3 -c 'import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(1)
open(sys.argv[2], "w").close(); time.sleep(60)' $((base + 2)) "$tmp/held" &
holder=$!
child_rec $holder
for _ in $(seq 100); do [ -e "$tmp/held" ] && break; sleep 0.1; done
rm -f "$tmp/server.port" "$tmp/client.port"
PATH=$tmp/fake:$PATH run > "$tmp/taken.out" 2>&1 || fail "iperf3 port taken: exit $?: $(tail -2 "$tmp/taken.out")"
sp=$(cat "$tmp/server.port" 2> /dev/null)
[ -n "$sp" ] && [ "$sp" != $((base + 2)) ] && [ "$(cat "$tmp/client.port" 2> /dev/null)" = "$sp" ] &&
    grep -qxF "hetring bench allreduce: port $((base + 2)) for the iperf3 server is taken; it listens on $sp" "$tmp/taken.out" ||
    fail "iperf3 port taken: server on '$sp', client on '$(cat "$tmp/client.port" 2> /dev/null)': $(grep iperf3 "$tmp/taken.out")"
child_signal TERM "$holder"
wait "$holder" 2> /dev/null
rm -f "$tmp/client-fails"

for sig in TERM INT; do
    rm -f "$tmp/server.pid" "$tmp/client.pid"
    PATH=$tmp/fake:$PATH "$HR" bench allreduce --port "$base" --nodes 2 -b 1K -e 1K > "$tmp/$sig.out" 2>&1 &
    bench=$!
    child_rec $bench
    for _ in $(seq 100); do [ -s "$tmp/client.pid" ] && break; sleep 0.1; done
    server=$(cat "$tmp/server.pid" 2> /dev/null)
    [ -n "$server" ] || fail "SIG$sig: no iperf3 server started"
    child_signal "$sig" "$bench"
    for _ in $(seq 100); do child_runs "$bench" || break; sleep 0.1; done
    child_signal KILL "$bench" && fail "SIG$sig: the bench still ran 10 s after the signal"
    wait "$bench"
    rc=$?
    [ "$rc" = $((128 + $(kill -l "$sig"))) ] || fail "SIG$sig: exit $rc"
    sleep 0.2 # the client's death signal
    [ -n "$server" ] && proc_alive $server && fail "SIG$sig: the iperf3 server ${server% *} is left running"
    client=$(cat "$tmp/client.pid" 2> /dev/null)
    [ -n "$client" ] && proc_alive $client && fail "SIG$sig: the iperf3 client ${client% *} is left running"
done
echo "$fails failure(s)"
[ "$fails" = 0 ]
