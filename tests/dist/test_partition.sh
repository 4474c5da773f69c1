#!/usr/bin/env bash
# Network partitions, in network namespaces this test creates (README "Elastic training").
# usage: test_partition.sh HETRING N SPLIT      e.g. 4 2 (2+2) or 5 3 (3+2)
# Nodes 0..SPLIT-1 and SPLIT..N-1 are cut apart while they train, then joined again. Only a
# side holding a quorum (a majority of N) may train while they are apart; afterwards every
# node ends with the same parameters, and the side that trained throughout recorded every
# iteration exactly once.
# The whole test runs in a private network namespace (unshare -n): one bridge per side, one
# namespace per node with a veth into a bridge, addresses 10.77.0.x that exist nowhere else.
# Without the privilege to create namespaces it exits 77 (skipped).
set -u
if [ -z "${HR_IN_NETNS:-}" ]; then
  unshare -n true 2>/dev/null || { echo "SKIP: cannot create network namespaces here"; exit 77; }
  exec unshare -n env HR_IN_NETNS=1 bash "$0" "$@"
fi
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
N=${2:?nodes}
SPLIT=${3:?size of the first side}
ITERS=12000
B=64
majority=$((N / 2 + 1))

holders=()
pids=()

ip link set lo up
ip link add hrbr0 type bridge && ip link add hrbr1 type bridge || {
  echo "SKIP: cannot create bridges in the namespace"
  exit 77
}
ip link set hrbr0 up
ip link set hrbr1 up
netns_nodes $N

{
  printf '[cluster]\nsecurity = none\nconnect_timeout = 20\ntimeout = 1\nrejoin_timeout = 60\n'
  printf '[train]\nlayers = 784,32,10\nsamples = 4096\neval_samples = 64\nglobal_batch = %d\n' $B
  printf 'iterations = %d\nhash_interval = 5\n[controller]\npolicy = proportional\n' $ITERS
  for ((k = 0; k < N; k++)); do printf '[node.%d]\nhost = 10.77.0.%d\nport = %d\n' $k $((k + 1)) $((base + k)); done
} > "$tmp/c.ini"

for ((k = 0; k < N; k++)); do
  nsenter -t "${holders[$k]}" -n "$HR" run --conf "$tmp/c.ini" --node $k --quiet \
    --metrics "$tmp/m-$k.jsonl" > "$tmp/n$k.log" 2>&1 &
  pids[$k]=$!
  child_rec $!
done

wait_iter 0 200
for ((k = SPLIT; k < N; k++)); do ip link set hrh$k master hrbr1; done
echo "cut: nodes 0..$((SPLIT - 1)) | $SPLIT..$((N - 1)) at iteration $(iter_of 0)"
sleep 2.5 # a timeout (1 s) to notice, and an election
a0=$(iter_of 0); a1=$(iter_of $((N - 1)))
sleep 1.5
b0=$(iter_of 0); b1=$(iter_of $((N - 1)))
echo "while cut: side 1 went $a0 -> $b0, side 2 went $a1 -> $b1 (a quorum is $majority of $N)"
side1=$SPLIT side2=$((N - SPLIT))
if [ $side1 -ge $majority ]; then
  [ "$b0" -gt "$a0" ] || fail "the side with a quorum ($side1 nodes) did not train"
else
  [ "$b0" = "$a0" ] || fail "a side of $side1 nodes, no quorum, trained ($a0 -> $b0)"
fi
[ "$b1" = "$a1" ] || fail "a side of $side2 nodes, no quorum, trained ($a1 -> $b1)"
grep -qh "quorum" "$tmp/n$((N - 1)).log" || fail "node $((N - 1)) did not say it waits for a quorum"
for ((k = SPLIT; k < N; k++)); do ip link set hrh$k master hrbr0; done
echo "joined again"

for ((k = 0; k < N; k++)); do
  wait "${pids[$k]}"
  rc=$?
  [ $rc = 0 ] || fail "node $k exited with status $rc: $(tail -3 "$tmp/n$k.log")"
done
ref=""
for ((k = 0; k < N; k++)); do
  h=$(grep '"event":"end"' "$tmp/m-$k.jsonl" | tail -1 | grep -o '"param_hash":"[0-9a-f]*"')
  [ -n "$h" ] || { fail "node $k wrote no final hash"; continue; }
  [ -z "$ref" ] && ref=$h
  [ "$h" = "$ref" ] || fail "node $k's final parameters differ: $h vs $ref (I4)"
done
echo "final parameters: ${ref:-none}"
# I8: every iteration recorded by one node at least (one that takes a state at a view change
# has not recorded the iteration it brings), none recorded twice by one node. Checked over
# the nodes whose lineage the final state continues: with a quorum, side 1, which trained
# from the first iteration to the last (side 2's last iteration before the cut may be
# dropped); without one, every node, since the side that finished the all-reduce cut in
# half (its last segments arrived, the other side's did not) is ahead and gives the state.
last=$((SPLIT - 1))
[ $side1 -ge $majority ] || last=$((N - 1))
for ((k = 0; k <= last; k++)); do echo "$tmp/m-$k.jsonl"; done | xargs awk -v n="$ITERS" '
  /^\{"iter":/ { match($0, /^\{"iter":[0-9]+/); i = substr($0, 9, RLENGTH - 8) + 0
                 if ((FILENAME, i) in seen) d++; seen[FILENAME, i] = 1; any[i] = 1 }
  END { for (i = 0; i < n; i++) if (!(i in any)) m++
        printf "nodes 0..%d: %d iterations recorded by none, %d recorded twice by one node\n", ARGC - 2, m, d
        exit (m || d) }' || fail "the run broke exactly-once (I8)"
# no epoch was installed with two member sets
cat "$tmp"/m-*.jsonl | grep '"event":"view"' | sed 's/.*"epoch":\([0-9]*\),"nodes":\[\([0-9,]*\)\].*/\1 \2/' |
  sort -u | awk '{ if ($1 in m && m[$1] != $2) { print "epoch " $1 ": " m[$1] " and " $2; bad = 1 } m[$1] = $2 }
  END { exit bad }' || fail "an epoch was installed with two member sets"
finish
