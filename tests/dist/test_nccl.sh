#!/usr/bin/env bash
# NCCL among GPU views (DESIGN.md, "The GPU path") on a machine without a GPU: every node's GPU
# is the host emulation of the test hooks (emu_device) and its NCCL the recording fake
# (fake_nccl, cluster/nccl_fake.c), whose all-reduce goes over the view's TCP ring, so the NCCL
# path of the cluster runs for real here.
# usage: test_nccl.sh HETRING SCENARIO
#   bitwise   3 GPU nodes, static split: backend = nccl and backend = auto train over the fake
#             (rank 0 says so, and every node's fake counts one all-reduce of the whole gradient
#             an iteration: the fake sums over the TCP ring, so the bits alone cannot tell a
#             silent fall-back to TCP), every member's init has the unique id rank 0 made, and
#             the final parameters are bitwise those of the same cluster with backend = tcp
#   kill      node 2 dies at iteration 20: the survivors abort view 1's communicator (their ring
#             still at view 1), view 2 gets a new id, the same on both; node 2 is started again
#             and rejoins (a planned view change, no failed collective): the survivors abort
#             view 2's communicator before that election too, and view 3 has a new id on all
#             three; every iteration is recorded once (I8) and the three end alike
#   fallback  node 1's init fails in view 1: the others wait in theirs for it until
#             connect_timeout, as in NCCL's, and give up; every member goes over TCP for that
#             view, rank 0 logs once which node failed and why (node 1, not those that timed out
#             waiting for it), and the run ends bitwise where the TCP run does
#   late      the same in view 2, after an NCCL error at iteration 10, where the ring's deadline
#             is [cluster] timeout (2 s) and not connect_timeout (10 s): node 1, whose init failed
#             at once, waits for the others' results until their inits give up, the view trains
#             over TCP and does not fail
#   refused   node 1's device is refused for new communicators (nccl_refused, as after a teardown
#             that failed), with connect_timeout = 60: node 1 says so in the round before any
#             init, so no member makes an id or enters NCCL's init, the view trains over TCP at
#             once (its first iteration within 30 s, where waiting in the init would take 60),
#             rank 0 names node 1 and why once, and the run ends bitwise where the TCP run does;
#             the same in view 2, after an NCCL error at iteration 10 on node 1 whose teardown
#             left its device refused: view 1 trained over NCCL, view 2 goes over TCP at once
#   error     node 1's NCCL all-reduce fails at iteration 15: every node aborts, a new view
#             forms with a new id and iteration 15 runs again; exactly once (I8), and the end
#             is bitwise the TCP run's
#   noload    backend = auto, node 2's NCCL cannot be loaded (its build's real NCCL under an
#             empty HETRING_CUDA_LIBS; in a build without NCCL it has none): the members' facts
#             say so, the view goes over TCP without a unique id or an init on any member (a
#             member whose init fails at once leaves the others waiting in theirs until
#             connect_timeout), and rank 0 names node 2
#   startup   backend = nccl with security = encrypt (exit 2, both keys named), with a CPU node
#             (exit 2), in a build without NCCL (exit 2, when this build has none); auto with a
#             CPU member trains over TCP and rank 0 says why
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
scenario=${2:?scenario}
ITERS=40
B=48
GPU="emu_device:*:0.2,fake_nccl:*"

# conf FILE BACKEND [CPU-IDS...]: 3 nodes, every one a GPU node but the CPU-IDS
conf() {
  local f=$1 be=$2 id
  shift 2
  write_conf "$f" 3 2 <<EOT
backend = $be
rejoin_timeout = 30
$(mlp_train 784,32,10 2048 "$B" "$ITERS")
lr = 0.05
momentum = 0.9
hash_interval = 1
bucket_bytes = 0
[controller]
policy = static
EOT
  for id in 0 1 2; do
    case " $* " in *" $id "*) ;; *) sed -i "/^\[node\.$id\]\$/a device = cuda:0" "$f" ;; esac
  done
}

export TMPDIR=$tmp # where the fake's members meet in its init
pids=()
# start NAME ID FAULTS: node ID of $tmp/NAME.ini in the background
start() {
  HETRING_FAULT=$3 timeout 120 "$HR" run --conf "$tmp/$1.ini" --node "$2" --quiet \
    --metrics "$tmp/$1-$2.jsonl" >> "$tmp/$1-$2.log" 2>&1 &
  pids[$2]=$!
  child_rec $!
}
# run NAME FAULTS [FAULTS-OF-NODE-1]: the 3 nodes; all must exit 0
run() {
  local id
  start "$1" 0 "$2"; start "$1" 1 "${3:-$2}"; start "$1" 2 "$2"
  for id in 0 1 2; do
    wait "${pids[$id]}" || fail "$1: node $id failed: $(tail -3 "$tmp/$1-$id.log")"
  done
}
end_hash() {
  grep '"event":"end"' "$tmp/$1-$2.jsonl" | tail -1 | grep -o '"param_hash":"[0-9a-f]*"' | cut -d'"' -f4
}
# same_end NAME REF IDS...: the nodes of run NAME end with run REF's parameters
same_end() {
  local name=$1 ref id h r
  r=$(end_hash "$2" 0)
  shift 2
  [ -n "$r" ] || fail "the reference run wrote no final hash"
  for id in "$@"; do
    h=$(end_hash "$name" "$id")
    [ -n "$h" ] && [ "$h" = "$r" ] || fail "$name: node $id ends with parameters ${h:-none}, the reference with $r"
  done
  echo "$name: nodes $* end with parameters $r"
}
# id_made NAME EPOCH: the unique id rank 0 made for view EPOCH (from whichever node made it)
id_made() {
  grep -ho "fake nccl: unique id for view $2: [0-9a-f]*" "$tmp/$1"-*.log | head -1 | awk '{print $NF}'
}
# id_used NAME ID EPOCH: the id node ID initialised view EPOCH with
id_used() {
  grep -o "fake nccl: init view $3 rank [0-9]*/[0-9]* id [0-9a-f]*" "$tmp/$1-$2.log" | head -1 | awk '{print $NF}'
}
# same_id NAME EPOCH IDS...: every node of IDS initialised view EPOCH with rank 0's id
same_id() {
  local name=$1 ep=$2 id made u
  shift 2
  made=$(id_made "$name" "$ep")
  [ ${#made} = 256 ] || { fail "$name: no 128-byte unique id for view $ep"; return; }
  for id in "$@"; do
    u=$(id_used "$name" "$id" "$ep")
    [ "$u" = "$made" ] || fail "$name: node $id initialised view $ep with id ${u:0:16}..., rank 0 made ${made:0:16}..."
  done
  echo "$name: view $ep: nodes $* share id ${made:0:16}..."
}
# exactly_once NAME IDS...: records_exactly_once (lib.sh) over run NAME's nodes IDS
exactly_once() {
  local name=$1 id files=()
  shift
  for id in "$@"; do files+=("$tmp/$name-$id.jsonl"); done
  records_exactly_once "$name: nodes $*" "${files[@]}"
}
# aborted_before NAME ID EPOCH: node ID aborted view EPOCH's communicator while its ring was
# still at that view (before the next election), and before it initialised view EPOCH+1
aborted_before() {
  local f="$tmp/$1-$2.log" a i
  a=$(grep -n "fake nccl: abort of view $3's communicator (ring at view $3)" "$f" | head -1 | cut -d: -f1)
  i=$(grep -n "fake nccl: init view $(($3 + 1)) " "$f" | head -1 | cut -d: -f1)
  [ -n "$a" ] && [ -n "$i" ] && [ "$a" -lt "$i" ] ||
    fail "$1: node $2 did not abort view $3's communicator before the election (abort line ${a:-none}, view $(($3 + 1))'s init line ${i:-none})"
}

# init_failed NAME EPOCH WAITERS...: node 1's init of view EPOCH failed at once (nccl_init_fail);
# the WAITERS waited in theirs for it until connect_timeout and gave up; rank 0 logged once
# that node 1 failed and why, and the view went over TCP
init_failed() {
  local name=$1 ep=$2 id n
  shift 2
  grep -h "NCCL init failed" "$tmp/$name-0.log"
  grep -q "view $ep: NCCL init failed on node 1 (.*nccl_init_fail.*); this view's gradients go over TCP" \
    "$tmp/$name-0.log" || fail "$name: rank 0 did not say that node 1's init failed and why"
  n=$(grep -c "NCCL init failed" "$tmp/$name"-*.log | awk -F: '{s += $2} END {print s}')
  [ "$n" = 1 ] || fail "$name: the fallback was logged $n times, not once"
  for id in "$@"; do
    grep -q "fake nccl: init view $ep rank [0-9]/3 id [0-9a-f]*: failed (communicator init: no progress within" \
      "$tmp/$name-$id.log" || fail "$name: node $id did not wait in its init of view $ep for node 1"
  done
}

case $scenario in
bitwise)
  conf "$tmp/tcp.ini" tcp
  conf "$tmp/nccl.ini" nccl
  conf "$tmp/auto.ini" auto
  run tcp "$GPU"
  run nccl "$GPU"
  run auto "$GPU"
  grep -q "fake nccl" "$tmp"/tcp-*.log && fail "backend = tcp used NCCL"
  P=$((784 * 32 + 32 + 32 * 10 + 10)) # the gradient's floats (layers 784,32,10)
  for name in nccl auto; do
    grep -q "view 1: gradients over nccl" "$tmp/$name-0.log" || fail "$name: rank 0 did not say the gradients go over NCCL"
    for id in 0 1 2; do
      grep -q "fake nccl: abort of view 1's communicator (ring at view 1): $ITERS all-reduce(s) of $((ITERS * P)) floats" "$tmp/$name-$id.log" ||
        fail "$name: node $id's gradients did not go through NCCL ($ITERS all-reduces of $P floats): $(grep -h 'fake nccl: abort' "$tmp/$name-$id.log" | cut -d' ' -f5-)"
    done
    same_id $name 1 0 1 2
    same_end $name tcp 0 1 2
  done
  grep -h "gradients over" "$tmp/auto-0.log"
  ;;
kill)
  ITERS=300 conf "$tmp/k.ini" nccl
  ITERS=300
  slow="$GPU,sleep:*:0.005" # steps long enough for node 2 to come back before the end
  start k 0 "$slow"; start k 1 "$slow"; start k 2 "$slow,crash:2:20"
  wait "${pids[2]}"
  echo "node 2 died (status $?)"
  for ((t = 0; t < 600; t++)); do # until node 0 recorded iteration 40
    grep -q '^{"iter":40,' "$tmp/k-0.jsonl" 2>/dev/null && break
    sleep 0.1
  done
  start k 2 "$slow"
  for id in 0 1 2; do wait "${pids[$id]}" || fail "node $id failed: $(tail -3 "$tmp/k-$id.log")"; done
  grep -q "node 2 left" "$tmp/k-0.log" || fail "node 0 did not log that node 2 left"
  grep -q "node 2 rejoined" "$tmp/k-0.log" || fail "node 0 did not log that node 2 rejoined"
  same_id k 1 0 1 2
  same_id k 2 0 1
  same_id k 3 0 1 2
  [ "$(id_made k 1)" != "$(id_made k 2)" ] && [ "$(id_made k 2)" != "$(id_made k 3)" ] ||
    fail "a view reused the id of the one before"
  for id in 0 1; do aborted_before k $id 1; aborted_before k $id 2; done
  grep -h "fake nccl: abort of view 2" "$tmp/k-0.log" | head -1
  exactly_once k 0 1
  h=$(end_hash k 0)
  [ -n "$h" ] && [ "$(end_hash k 1)" = "$h" ] && [ "$(end_hash k 2)" = "$h" ] || fail "the three end apart"
  ;;
fallback)
  conf "$tmp/tcp.ini" tcp
  conf "$tmp/fb.ini" nccl
  run tcp "$GPU"
  run fb "$GPU" "$GPU,nccl_init_fail:1:1"
  init_failed fb 1 0 2
  same_end fb tcp 0 1 2
  ;;
late)
  conf "$tmp/tcp.ini" tcp
  conf "$tmp/lt.ini" nccl
  sed -i 's/^connect_timeout = .*/connect_timeout = 10/' "$tmp/lt.ini"
  run tcp "$GPU"
  run lt "$GPU" "$GPU,nccl_error:1:10,nccl_init_fail:1:2"
  grep -q "all-reduce error injected at iteration 10" "$tmp/lt-1.log" || fail "no error was injected"
  init_failed lt 2 0 2
  grep -h "failed before training" "$tmp"/lt-*.log && fail "view 2 failed instead of going over TCP"
  grep -q "fake nccl: init view 3 " "$tmp"/lt-*.log && fail "a third view formed"
  same_end lt tcp 0 1 2
  ;;
refused)
  conf "$tmp/tcp.ini" tcp
  run tcp "$GPU"
  # refused NAME EPOCH ITER FAULTS-OF-NODE-1: node 1's device is refused from view EPOCH on; node
  # 0 records iteration ITER (the first of view EPOCH) within 30 s of the start, where a wait in
  # NCCL's init would take connect_timeout (60 s); rank 0 names node 1 and why once, nobody made
  # an id for that view or entered its init, and the run ends where the TCP run does
  refused() {
    local name=$1 ep=$2 it=$3 id n t0=$SECONDS took
    conf "$tmp/$name.ini" nccl
    sed -i 's/^connect_timeout = .*/connect_timeout = 60/' "$tmp/$name.ini"
    start "$name" 0 "$GPU"; start "$name" 1 "$GPU,$4"; start "$name" 2 "$GPU"
    until grep -q "^{\"iter\":$it," "$tmp/$name-0.jsonl" 2>/dev/null; do
      [ $((SECONDS - t0)) -lt 30 ] || break
      sleep 0.2
    done
    took=$((SECONDS - t0))
    echo "$name: iteration $it recorded after ${took} s (connect_timeout 60 s)"
    [ "$took" -lt 30 ] || fail "$name: iteration $it not within 30 s: the others waited in NCCL's init for node 1"
    for id in 0 1 2; do wait "${pids[$id]}" || fail "$name: node $id failed: $(tail -3 "$tmp/$name-$id.log")"; done
    grep -h "cannot take part in NCCL" "$tmp/$name"-*.log
    grep -q "view $ep: node 1 cannot take part in NCCL (.*nccl_refused.*); this view's gradients go over TCP" \
      "$tmp/$name-0.log" || fail "$name: rank 0 did not say that node 1 cannot take part in view $ep, and why"
    n=$(cat "$tmp/$name"-*.log | grep -c "cannot take part in NCCL")
    [ "$n" = 1 ] || fail "$name: the fallback was logged $n times, not once"
    grep -q "fake nccl: \(unique id for\|init\) view $ep" "$tmp/$name"-*.log &&
      fail "$name: a member made an id for view $ep or entered its init"
    same_end "$name" tcp 0 1 2
  }
  refused rf 1 1 nccl_refused:1:1
  refused rl 2 10 nccl_error:1:10,nccl_refused:1:2
  grep -q "all-reduce error injected at iteration 10" "$tmp/rl-1.log" || fail "rl: no error was injected"
  same_id rl 1 0 1 2
  ;;
error)
  conf "$tmp/tcp.ini" tcp
  conf "$tmp/e.ini" nccl
  run tcp "$GPU"
  run e "$GPU" "$GPU,nccl_error:1:15"
  grep -q "all-reduce error injected at iteration 15" "$tmp/e-1.log" || fail "no error was injected"
  grep -h "iteration 15 failed" "$tmp/e-0.log" | head -1
  for id in 0 1 2; do
    grep -q "iteration 15 failed" "$tmp/e-$id.log" || fail "node $id did not see iteration 15 fail"
    aborted_before e $id 1
  done
  same_id e 1 0 1 2
  same_id e 2 0 1 2
  [ "$(id_made e 1)" != "$(id_made e 2)" ] || fail "view 2 reused view 1's id"
  exactly_once e 0
  exactly_once e 1
  exactly_once e 2
  same_end e tcp 0 1 2
  ;;
noload)
  conf "$tmp/nl.ini" auto
  mkdir -p "$tmp/none"
  start nl 0 "$GPU"; start nl 1 "$GPU"
  HETRING_CUDA_LIBS=$tmp/none start nl 2 "emu_device:*:0.2" # no fake: the build's own NCCL
  for id in 0 1 2; do wait "${pids[$id]}" || fail "node $id failed: $(tail -3 "$tmp/nl-$id.log")"; done
  grep -h "gradients over\|NCCL init failed\|NCCL cannot be used" "$tmp"/nl-*.log
  grep -q "view 1: gradients over tcp (node 2" "$tmp/nl-0.log" ||
    fail "rank 0 did not say the view stays on TCP because of node 2"
  grep -q "fake nccl: \(unique id\|init\)" "$tmp"/nl-*.log &&
    fail "a view with a node that cannot load NCCL made an id or initialised NCCL"
  grep -q "NCCL init failed" "$tmp"/nl-*.log && fail "NCCL was tried on node 2, which cannot load it"
  if "$HR" version | grep -q '^cuda: yes'; then
    grep -q "NCCL cannot be used here, so views with this node stay on TCP: .*HETRING_CUDA_LIBS" \
      "$tmp/nl-2.log" || fail "node 2 did not say why it cannot run NCCL"
  fi
  ;;
startup)
  conf "$tmp/enc.ini" nccl
  sed -i "s/^security = none\$/security = encrypt\npsk = $(printf '%064d' 7)/" "$tmp/enc.ini"
  msg=$(HETRING_FAULT=$GPU "$HR" run --conf "$tmp/enc.ini" --node 0 2>&1 >/dev/null); rc=$?
  echo "$msg"
  [ $rc = 2 ] && echo "$msg" | grep -q "enc.ini: \[cluster\] backend = nccl with \[cluster\] security = encrypt" ||
    fail "backend = nccl with security = encrypt exited $rc: $msg"
  conf "$tmp/cpu.ini" nccl 2
  msg=$(HETRING_FAULT=$GPU "$HR" run --conf "$tmp/cpu.ini" --node 0 2>&1 >/dev/null); rc=$?
  [ $rc = 2 ] && echo "$msg" | grep -q "\[node.2\] device = cpu" ||
    fail "backend = nccl with a CPU node exited $rc: $msg"
  if "$HR" version | grep -q '^cuda: no'; then
    msg=$(HETRING_FAULT=emu_device:*:0.2 "$HR" run --conf "$tmp/cpu.ini" --node 0 2>&1 >/dev/null)
    conf "$tmp/nonccl.ini" nccl
    msg=$(HETRING_FAULT=emu_device:*:0.2 "$HR" run --conf "$tmp/nonccl.ini" --node 0 2>&1 >/dev/null); rc=$?
    echo "$msg"
    [ $rc = 2 ] && echo "$msg" | grep -q "nonccl.ini: \[cluster\] backend = nccl: this build has no NCCL" ||
      fail "backend = nccl in a build without NCCL exited $rc: $msg"
  else
    echo "this build has NCCL: its refusal without NCCL is checked by a build without CUDA"
  fi
  conf "$tmp/mix.ini" auto 0
  run mix "emu_device:1:0.2,emu_device:2:0.2,fake_nccl:*"
  grep -h "gradients over" "$tmp/mix-0.log"
  grep -q "view 1: gradients over tcp (node 0 is a CPU node (device = cpu))" "$tmp/mix-0.log" ||
    fail "auto with a CPU member did not say it stays on TCP, and why"
  grep -q "fake nccl: init" "$tmp"/mix-*.log && fail "auto with a CPU member initialised NCCL"
  ;;
*)
  echo "unknown scenario $scenario"
  exit 2
  ;;
esac
finish
