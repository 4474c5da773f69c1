#!/usr/bin/env bash
# Links that flap, peers that vanish without a FIN or a reset, links that drop packets, in
# network namespaces this test creates (as test_partition.sh does).
# usage: test_netfault.sh HETRING SCENARIO
#   flap     node 2's link is down for 0.5 s, well within timeout (3 s): the run goes on with
#            every node, and nothing is lost
#   rejoin   node 2's link is down for 4 s (timeout 1 s): nodes 0 and 1 go on without it, and
#            when the link comes back it rejoins; all three end with the same parameters
#   vanish   node 0's link goes down for good while the three train; its process lives on.
#            Nodes 1 and 2 finish; node 0 stops after rejoin_timeout (6 s) with an error that
#            names the nodes that did not answer (never "reachable 0", a count to the eye)
#   lossy    every link is rate-limited with a queue that drops what overflows it (tbf: TCP
#            loses segments and retransmits them at every iteration; the kernel here has no
#            netem); the run ends with every replica bitwise equal
# SECURITY=encrypt (or auth) runs it on links secured with a pre-shared key.
# A node's link is cut by taking its veth out of the bridge: its packets go nowhere, and no
# FIN, reset or ICMP error tells anyone. Without the privilege to create namespaces, bridges or
# the tbf queue it exits 77 (skipped).
set -u
if [ -z "${HR_IN_NETNS:-}" ]; then
  unshare -n true 2>/dev/null || { echo "SKIP: cannot create network namespaces here"; exit 77; }
  exec unshare -n env HR_IN_NETNS=1 bash "$0" "$@"
fi
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
SCEN=${2:?scenario}
N=3
B=64
timeout_s=1 rejoin=60 fault=
case $SCEN in
flap) ITERS=1500 timeout_s=3 ;;
rejoin) ITERS=1500 fault='sleep_short:*:0.02' ;; # the survivors still train when node 2 is back
vanish) ITERS=1500 rejoin=6 ;;
lossy) ITERS=40 timeout_s=3 ;;
*) echo "unknown scenario $SCEN"; exit 2 ;;
esac

holders=()
pids=()
ip link set lo up
ip link add hrbr0 type bridge || { echo "SKIP: cannot create a bridge in the namespace"; exit 77; }
ip link set hrbr0 up
netns_nodes $N
if [ "$SCEN" = lossy ]; then
  # 50 Mbit/s with 16 KiB of queue each way: an all-reduce's burst (about 100 KB) overflows it
  q="tbf rate 50mbit burst 16k limit 16k"
  tc qdisc add dev hrh0 root $q 2>/dev/null || { echo "SKIP: no tbf queue here"; exit 77; }
  for ((k = 1; k < N; k++)); do tc qdisc add dev hrh$k root $q; done
  for ((k = 0; k < N; k++)); do nsenter -t "${holders[$k]}" -n tc qdisc add dev hrc$k root $q; done
fi

{
  printf '[cluster]\nsecurity = %s\nconnect_timeout = 20\ntimeout = %s\nrejoin_timeout = %s\n' \
    "${SECURITY:-none}" $timeout_s $rejoin
  [ "${SECURITY:-none}" = none ] || printf 'psk = %064d\n' 7
  mlp_train 784,32,10 4096 $B $ITERS
  printf 'hash_interval = 5\n[controller]\npolicy = proportional\n'
  for ((k = 0; k < N; k++)); do printf '[node.%d]\nhost = 10.77.0.%d\nport = %d\n' $k $((k + 1)) $((base + k)); done
} > "$tmp/c.ini"

for ((k = 0; k < N; k++)); do
  nsenter -t "${holders[$k]}" -n env "HETRING_FAULT=$fault" timeout 120 "$HR" run --conf "$tmp/c.ini" \
    --node $k --quiet --metrics "$tmp/m-$k.jsonl" > "$tmp/n$k.log" 2>&1 &
  pids[$k]=$!
  child_rec $!
done
cut_link() { ip link set hrh$1 nomaster; echo "node $1's link down at iteration $(iter_of $1)"; }
heal_link() { ip link set hrh$1 master hrbr0; echo "node $1's link up"; }
# views ID: the member sets of the views node ID installed, one a line ("0,1,2")
views() { grep -o '"event":"view","epoch":[0-9]*,"nodes":\[[0-9,]*\]' "$tmp/m-$1.jsonl" | grep -o '[0-9,]*\]$' | tr -d ']'; }

case $SCEN in
flap)
  wait_iter 2 100
  cut_link 2
  sleep 0.5
  heal_link 2
  ;;
rejoin)
  wait_iter 2 100
  cut_link 2
  wait_log '"nodes":\[0,1\]' "$tmp/m-0.jsonl"
  sleep 3
  heal_link 2
  ;;
vanish)
  wait_iter 0 100
  cut_link 0
  ;;
esac

for ((k = 0; k < N; k++)); do
  wait "${pids[$k]}"
  rc[$k]=$?
  [ ${rc[$k]} = 124 ] && fail "node $k did not end within 120 s: $(tail -2 "$tmp/n$k.log")"
done
live="0 1 2"
if [ "$SCEN" = vanish ]; then
  live="1 2"
  [ ${rc[0]} = 1 ] || fail "node 0, alone, exited with status ${rc[0]}, not 1"
  msg=$(grep "no view within rejoin_timeout" "$tmp/n0.log" | tail -1)
  echo "node 0 says: ${msg##*node 0: }"
  [[ "$msg" == *"reachable: node 0 (electing 0); no answer from nodes 1,2 (node 1 (10.77.0.2:$((base + 1))): "* ]] ||
    fail "node 0 does not name the nodes it waited for: $(tail -1 "$tmp/n0.log")"
fi
ref=
for k in $live; do
  [ ${rc[$k]} = 0 ] || fail "node $k exited with status ${rc[$k]}: $(tail -2 "$tmp/n$k.log")"
  h=$(grep '"event":"end"' "$tmp/m-$k.jsonl" | tail -1 | grep -o '"param_hash":"[0-9a-f]*"')
  [ -n "$h" ] || { fail "node $k wrote no final hash"; continue; }
  [ -z "$ref" ] && ref=$h
  [ "$h" = "$ref" ] || fail "node $k's final parameters differ: $h vs $ref (I4)"
done
echo "final parameters: ${ref:-none}; views of node 0: $(views 0 | tr '\n' ' ')"
case $SCEN in
flap | lossy)
  for k in 0 1 2; do
    views $k | grep -qvx '0,1,2' && fail "node $k installed a view without every node: $(views $k | tr '\n' ' ')"
  done
  ;;
rejoin)
  views 0 | grep -qx '0,1' || fail "nodes 0 and 1 never went on without node 2"
  [ "$(views 2 | tail -1)" = 0,1,2 ] || fail "node 2 did not rejoin: its views $(views 2 | tr '\n' ' ')"
  ;;
esac
files=()
for k in $live; do files+=("$tmp/m-$k.jsonl"); done
records_exactly_once "nodes ${live// /,}" "${files[@]}"
if [ "$SCEN" = lossy ]; then
  # the queues did drop: TCP retransmitted in every node's namespace (RetransSegs, /proc/net/snmp)
  for ((k = 0; k < N; k++)); do
    re=$(nsenter -t "${holders[$k]}" -n awk '/^Tcp:/ { if (h) { print $13; exit } h = 1 }' /proc/net/snmp)
    echo "node $k: ${re:-?} TCP segments retransmitted"
    [ "${re:-0}" -gt 0 ] || fail "node $k retransmitted nothing: the lossy links lost nothing"
  done
fi
finish
