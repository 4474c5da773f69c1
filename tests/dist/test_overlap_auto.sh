#!/usr/bin/env bash
# [train] bucket_bytes = auto (README "Overlapping communication with backward"): two nodes
# on loopback, each pinned to a known number of cores with taskset, so the choice is the same
# on any machine with two cores or more (the first two this script may use).
#  1. spare: hosts 127.0.0.1 and 127.0.0.2 (two machines to the configuration), 2 cores each
#     for 1 compute + 1 communication thread: rank 0 logs 2 buckets of >= 1 MiB during
#     backward, and the summary counts 2 buckets;
#  2. tight: both on 127.0.0.1 (one machine), 2 cores for 2 x (1 + 1) threads: off, naming
#     node 0, its figures and the node it shares its host with (its all-reduce waits for that
#     node's compute, not for a wire: no measurement can turn it on);
#  3. mixed: the two hosts, node 0 on 1 core and node 1 on 2: each says its own cores at
#     start; the choice is off until the all-reduce is measured, then made once from what
#     both nodes measured and kept, and the log says what they measured (on only if it waits on the wire: on
#     loopback that depends on the load; the table of tests/trainer/test_overlap.c pins the
#     rule), the summary's buckets follow the last choice, and both train to the same
#     parameters (a node deciding alone would cut other frames than its peer's);
#  4. an explicit bucket_bytes overrides: 0 where auto would overlap, 1048576 where it would
#     not;
#  5. hetring config --node ID (the dry run) says how that node overlaps;
#  6. views change while the nodes overlap: of three nodes on three hosts, node 2 is killed
#     and started again; every view begins with one all-reduce and then overlaps again (a
#     choice carried over from the last view would cut other frames than the joiner's), and
#     all three end with the same parameters. Here the links are probed ([cluster]
#     link_probe = on, the default), so the bucket size is the view's measured one (256 KiB
#     to 4 MiB), and every member of a new view starts again from the constant plan.
# Parts 1-5 keep the links unprobed (link_probe = off): their subject is the choice from the
# cores with the constant 1 MiB plan, which a measured size would make depend on the load
# (app.link_tune and dist.elastic.kill test the probe).
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# the first two CPUs this script may run on, A and B (from "0-3,8" style lists)
cpus=()
for r in $(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status | tr ',' ' '); do
  for ((c = ${r%-*}; c <= ${r#*-} && ${#cpus[@]} < 2; c++)); do cpus+=("$c"); done
done
[ "${#cpus[@]}" = 2 ] || { echo "SKIP: needs two cores to pin the nodes to"; exit 77; }
A=${cpus[0]} AB=${cpus[0]},${cpus[1]}
cat > "$tmp/train" <<'EOF2'
link_probe = off
[train]
layers = 784,512,512,10
samples = 1024
eval_samples = 64
global_batch = 64
iterations = 12
hash_interval = 1
[controller]
policy = static
EOF2
write_conf "$tmp/tight.ini" 2 20 < "$tmp/train"
sed "0,/host = 127.0.0.1/! s/host = 127.0.0.1/host = 127.0.0.2/" "$tmp/tight.ini" > "$tmp/spare.ini"
grep -q "host = 127.0.0.2" "$tmp/spare.ini" || fail "spare.ini has no second host"

# run NAME CONF CPUS0 CPUS1 [ARGS...]: both nodes, node K pinned to CPUSK; logs, metrics and
# summary in $tmp/NAME.*; rc0 and rc1 their exit statuses
run() {
  local name=$1 conf=$2 c0=$3 c1=$4
  shift 4
  timeout 90 taskset -c "$c0" "$HR" run --conf "$tmp/$conf" --node 0 --quiet "$@" \
    --metrics "$tmp/$name.m0" --summary "$tmp/$name.json" > "$tmp/$name.0.log" 2>&1 &
  local p0=$!
  timeout 90 taskset -c "$c1" "$HR" run --conf "$tmp/$conf" --node 1 --quiet "$@" \
    --metrics "$tmp/$name.m1" > "$tmp/$name.1.log" 2>&1
  rc1=$?
  wait $p0
  rc0=$?
  echo "$name: exit status $rc0 $rc1; $(grep -h 'train: overlap: [o0-9]' "$tmp/$name.0.log")"
  [ "$rc0" = 0 ] && [ "$rc1" = 0 ] ||
    fail "$name: a node failed: $(tail -2 "$tmp/$name.0.log") / $(tail -2 "$tmp/$name.1.log")"
}
# has NAME NODE TEXT: node NODE's log of run NAME holds TEXT
has() { grep -qF -- "$3" "$tmp/$1.$2.log" || fail "$1: node $2's log lacks '$3': $(grep -h overlap "$tmp/$1.$2.log")"; }
buckets() { # buckets NAME WANT: the summary's gradient_buckets
  grep -q "\"gradient_buckets\": $2," "$tmp/$1.json" ||
    fail "$1: summary: $(grep -h gradient_buckets "$tmp/$1.json"), expected $2"
}
same_params() { # same_params NAME: both nodes ended with the same parameters
  local h0 h1
  h0=$(grep -ho '"param_hash":"[0-9a-f]*"' "$tmp/$1.m0" | tail -1)
  h1=$(grep -ho '"param_hash":"[0-9a-f]*"' "$tmp/$1.m1" | tail -1)
  [ -n "$h0" ] && [ "$h0" = "$h1" ] || fail "$1: parameters differ at the end: '$h0' / '$h1'"
}

# 1. every node has a core to spare
run spare spare.ini $AB $AB
has spare 0 "overlap: 2 buckets of >= 1 MiB, all-reduced during backward (auto: every node has a core to spare; fewest: node 0, 2 cores for 2 threads)"
has spare 1 "overlap: auto, chosen after the first iteration: 2 buckets of >= 1 MiB"
has spare 1 "node 1 has 2 cores for 2 threads (compute, and communication, of the nodes on its host): a core to spare"
buckets spare 2
same_params spare

# 2. two nodes on one machine of two cores
run tight tight.ini $AB $AB
has tight 0 "overlap: off, one all-reduce after backward (auto: node 0 has no core to spare, 2 cores for 4 threads; node 0 shares its host with 1 other node)"
has tight 1 "node 1 has 2 cores for 4 threads (compute, and communication, of the nodes on its host): no core to spare"
buckets tight 1
same_params tight

# 3. machines that differ: the choice is the same on both, made from both nodes' cores
run mixed spare.ini $A $AB
has mixed 0 "overlap: off, one all-reduce after backward (auto: node 0 has no core to spare, 1 core for 2 threads; the all-reduce is not measured yet in this view)"
has mixed 0 "node 0 has 1 core for 2 threads"
has mixed 1 "node 1 has 2 cores for 2 threads"
last=$(grep -h "train: overlap: [o0-9]" "$tmp/mixed.0.log" | tail -1)
# chosen once from the measured facts and kept (a choice that followed every new measurement
# went back and forth under load)
[ "$(grep -c "the all-reduce took " "$tmp/mixed.0.log")" = 1 ] ||
  fail "mixed: not one choice from measured facts: $(grep -h 'the all-reduce took ' "$tmp/mixed.0.log" | cut -c1-120)"
case $last in
*"overlap: off"*"the all-reduce took "*"ms of CPU at most"*) buckets mixed 1 ;;
*"overlap: 2 buckets"*"the all-reduce took "*"it waits on the wire, buckets hide it)") buckets mixed 2 ;;
*) fail "mixed: the last choice does not say what was measured: $last" ;;
esac
same_params mixed

# 4. an explicit value wins either way
run zero spare.ini $AB $AB --set train.bucket_bytes=0
has zero 0 "overlap: off, one all-reduce after backward (bucket_bytes = 0)"
buckets zero 1
run forced tight.ini $AB $AB --set train.bucket_bytes=1048576
has forced 0 "overlap: 2 buckets of >= 1 MiB, all-reduced during backward (bucket_bytes = 1048576)"
buckets forced 2
same_params forced
for n in zero forced; do
  grep -q "overlap: auto" "$tmp/$n.0.log" "$tmp/$n.1.log" && fail "$n: an explicit value was taken for auto"
done

# 5. the dry run says it too
taskset -c "$AB" "$HR" config --conf "$tmp/tight.ini" --node 1 > "$tmp/dry" 2>&1 || fail "dry run failed: $(tail -3 "$tmp/dry")"
grep -F "; overlap:" "$tmp/dry"
grep -qF "; overlap: auto, chosen after the first iteration: 2 buckets of >= 1 MiB during backward if every node has a core to spare; node 1 has 2 cores for 4 threads" "$tmp/dry" ||
  fail "the dry run does not say how node 1 overlaps: $(cat "$tmp/dry")"
"$HR" config --conf "$tmp/tight.ini" --node 1 --set train.bucket_bytes=0 > "$tmp/dry0" 2>&1
grep -qF "; overlap: off, one all-reduce after backward (bucket_bytes = 0)" "$tmp/dry0" ||
  fail "the dry run with bucket_bytes = 0: $(grep overlap "$tmp/dry0")"

# 6. a node leaves and rejoins while the nodes overlap, the links probed (the default)
grep -v "^link_probe" "$tmp/train" | write_conf "$tmp/three.ini" 3 20
awk '/^host =/ { n++; print "host = 127.0.0." n; next } { print }' "$tmp/three.ini" > "$tmp/t3.ini"
start3() { # start3 ID: node ID of t3.ini, pinned to two cores, 300 iterations
  taskset -c "$AB" "$HR" run --conf "$tmp/t3.ini" --node "$1" --quiet --set train.iterations=300 \
    --metrics "$tmp/m-$1.jsonl" >> "$tmp/e$1.log" 2>&1 &
  epid[$1]=$!
  child_rec $!
}
declare -a epid
for i in 0 1 2; do start3 $i; done
wait_iter 2 30 && child_signal KILL "${epid[2]}"
wait "${epid[2]}" 2>/dev/null
wait_iter 0 60 && start3 2
for i in 0 1 2; do
  timeout 120 tail --pid="${epid[$i]}" -f /dev/null
  wait "${epid[$i]}" || [ "$i" = 2 ] || fail "elastic: node $i failed: $(tail -2 "$tmp/e$i.log")"
done
grep -h "overlap: \|node 2 left\|node 2 rejoined" "$tmp/e0.log" | cut -c1-150
# node 2 rejoins: in a view of its own after the survivors', or, started again within their
# view change, in the same one (node 0 then names it as rejoined in that view)
grep -q "node 2 rejoined" "$tmp/e0.log" ||
  fail "elastic: node 2 did not rejoin: $(grep -h 'view [0-9]*:' "$tmp/e0.log" | tail -3)"
grep -qE "overlap: 2 buckets of >= ((256|512) KiB|[124] MiB), all-reduced during backward \(auto: every node" "$tmp/e0.log" ||
  fail "elastic: the nodes never overlapped"
grep -q "train: links: " "$tmp/e0.log" || fail "elastic: the links were not probed"
grep -q "disagree on the size" "$tmp"/e*.log && fail "elastic: frames of different plans met"
h=$(for i in 0 1 2; do grep -ho '"param_hash":"[0-9a-f]*"' "$tmp/m-$i.jsonl" | tail -1; done | sort -u)
[ "$(echo "$h" | wc -l)" = 1 ] && [ -n "$h" ] || fail "elastic: the nodes ended with different parameters: $h"
finish
