#!/usr/bin/env bash
# What of the machine a node may use comes from its cgroup as well as from the machine: the
# cores ([node] threads = 0, bucket_bytes = auto) and the memory a model must fit at start
# (base/hr_cores). In a mount namespace of this test's own, a tmpfs over /sys/fs/cgroup holds the
# files of a cgroup limited to half a core and 1 GB, first as cgroup v1 writes them
# (cpu.cfs_quota_us, cpu.cfs_period_us, memory.limit_in_bytes), then as v2 (cpu.max,
# memory.max): threads = 0 gives 1 thread, a CIFAR-10 file of 1.05 GB in memory is refused
# as it loads, naming it and the 1 GB, and a model that needs 2.0 GB is refused, naming the
# 1 GB; one of 0.392 GB trains alone, and is refused for four nodes at one host (1.57 GB); and
# bench allreduce refuses four nodes of 512 MiB messages (2.15 GB). Without the limits (the machine's own files) the same model starts. Skipped (77) where
# this process may not make a mount namespace.
HR=${1:?usage: test_limits.sh HETRING}
unshare -m true 2>/dev/null || { echo "skipped: no mount namespace here (unshare -m)"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
cat > "$tmp/c.ini" <<INI
[cluster]
security = none
[train]
layers = 784,16,10
samples = 400
eval_samples = 10
global_batch = 32
iterations = 2
[node.0]
host = 127.0.0.1
port = 1
threads = 0
INI
# a CIFAR-10 batch of 1.05 GB in memory (sparse on disk): the cgroup's limit is not
# allocation's, so it loaded until the kernel killed the node
mkdir "$tmp/cifar" && truncate -s $((340000 * 3073)) "$tmp/cifar/data_batch_1.bin" && : > "$tmp/cifar/test_batch.bin"
sed 's|^layers = .*|dataset = cifar10\nmodel = softmax\ndata_dir = '"$tmp/cifar"'|' "$tmp/c.ini" > "$tmp/cifar.ini"
# four nodes at one host: each fits the 1 GB alone (0.392 GB), not together
{ sed '/^\[node.0\]/,$d' "$tmp/c.ini"; for k in 0 1 2 3; do printf '[node.%d]\nhost = 127.0.0.1\nport = %d\n' $k $((1 + k)); done; } > "$tmp/c4.ini"
# in_cgroup VERSION: the script on stdin (with HR and tmp) run where /sys/fs/cgroup holds that
# version's files
in_cgroup() {
  local setup
  if [ "$1" = v1 ]; then
    setup='mkdir -p /sys/fs/cgroup/cpu /sys/fs/cgroup/memory &&
      echo 50000 > /sys/fs/cgroup/cpu/cpu.cfs_quota_us &&
      echo 100000 > /sys/fs/cgroup/cpu/cpu.cfs_period_us &&
      echo 1000000000 > /sys/fs/cgroup/memory/memory.limit_in_bytes'
  else
    setup='echo "50000 100000" > /sys/fs/cgroup/cpu.max && echo 1000000000 > /sys/fs/cgroup/memory.max'
  fi
  HR=$HR tmp=$tmp unshare -m bash -c "mount -t tmpfs none /sys/fs/cgroup && $setup && bash -s"
}
for v in v1 v2; do
  in_cgroup $v > "$tmp/$v.out" 2>&1 <<'SH'
timeout 60 "$HR" run --conf "$tmp/c.ini" --quiet 2>&1 | grep "ready"
timeout 60 "$HR" run --conf "$tmp/c.ini" --set train.layers=784,200000,10 2>&1 | tail -1
timeout 60 "$HR" run --conf "$tmp/c.ini" --set train.layers=784,40000,10 --quiet 2>&1 | tail -1
timeout 60 "$HR" config --conf "$tmp/c4.ini" --node 0 --set train.layers=784,40000,10 2>&1 | grep "needs"
timeout 60 "$HR" run --conf "$tmp/cifar.ini" --quiet 2>&1 | tail -1
! "$HR" bench --help > /dev/null 2>&1 || timeout 60 "$HR" bench allreduce --nodes 4 -e 512M 2>&1 | tail -1
SH
  grep -q "node 0 of 1 ready (cpu, 1 thread(s): threads = 0, every core it may use)" "$tmp/$v.out" ||
    fail "$v: half a core did not give 1 thread: $(cat "$tmp/$v.out")"
  grep -q "layers 784,200000,10 needs 1.96 GB of memory at a batch of 32 .* more than the 1 GB this process may use here" "$tmp/$v.out" ||
    fail "$v: the 1 GB limit did not refuse the model: $(tail -1 "$tmp/$v.out")"
  grep -q "done: 2 iterations" "$tmp/$v.out" || fail "$v: a 0.392 GB model did not train alone"
  grep -q "784,40000,10 needs 0.392 GB of memory at a batch of 32 (.*); the 4 nodes at this node's host need 1.57 GB together, more than the 1 GB of this machine (expected a smaller model or global_batch, or fewer nodes on this machine)" "$tmp/$v.out" ||
    fail "$v: four nodes of 0.392 GB at one host were not refused: $(grep needs "$tmp/$v.out")"
  grep -q "cifar/data_batch_1.bin (1.04 GB on disk): its records (340000 counted) need 1.0[0-9] GB of memory, more than the 1 GB this process may use here" "$tmp/$v.out" ||
    fail "$v: a CIFAR-10 file of 1.05 GB was not refused as it loaded: $(grep -v ready "$tmp/$v.out" | tail -3)"
  if "$HR" bench --help > /dev/null 2>&1; then
    grep -q "^hetring bench allreduce: --nodes 4 with --max-bytes 536870912 need at least 2.15 GB of memory, more than the 1 GB of this machine (expected fewer nodes or a smaller --max-bytes)$" "$tmp/$v.out" ||
      fail "$v: bench allreduce of 4 x 512 MiB was not refused: $(grep allreduce "$tmp/$v.out")"
  fi
done
# the same model starts where the machine's own limits allow it (it needs 2.0 GB)
if awk '/MemTotal/ { exit !($2 > 4000000) }' /proc/meminfo; then
  timeout 60 "$HR" config --conf "$tmp/c.ini" --node 0 --set train.layers=784,200000,10 > "$tmp/free.out" 2>&1 ||
    fail "the model did not start without the limits: $(tail -2 "$tmp/free.out")"
fi
[ $fails = 0 ] && echo "limits: ok"
exit $((fails > 0))
