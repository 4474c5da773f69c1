#!/usr/bin/env bash
# Elastic membership of `hetring run` nodes on loopback (README "Elastic training").
# usage: test_elastic.sh HETRING SCENARIO
#   kill     node 2 kills itself (SIGKILL) at iteration 20; the survivors go on; node 2 is
#            started again and rejoins with the state transferred
#   stop     node 3 is stopped (SIGSTOP) past the timeout, then continued once the others
#            have gone on without it: it is left out, then rejoins as a joiner (every node
#            sleeps 2 ms a step, so that a fast machine cannot finish before it is back)
#   stop0    the same with node 0, the lowest id: every survivor names node 0 (issue 15's
#            blame), and node 1 leads the next view
#   quorum   nodes 1 and 2 die at once: 0 and 3 are no quorum of 4 and pause; node 1 comes
#            back and the three resume
#   leave    node 1 gets SIGTERM: it leaves at a boundary with a checkpoint, exit 0; the
#            others go on without it
#   resume   only node 2 holds a checkpoint (disks not shared): every node starts from it
#   phases   5 nodes: node 4 dies inside an all-reduce, node 3 inside the view change that
#            follows; node 3 comes back and dies inside its state transfer (a joiner); then
#            comes back for good
#   compute  node 2 (emulated 30x slower) dies 1 ms into its compute
#   twojoin  5 nodes: nodes 3 and 4 die together and come back together (in one view change
#            when both reach the lobby within about a step of each other)
#   late     nodes 0..2 start alone, train once connect_timeout has passed, and node 3
#            joins later
#   coldmiss nodes 0..2 start and node 3 never does: the cold start waits connect_timeout for
#            it, then elects 0..2 (connect_timeout = rejoin_timeout = 6 s)
#   stopall  every node gets SIGTERM at once: all leave with a checkpoint, exit 0
#   slowstep node 2 takes 0.4 s more a step (test fault sleep) against a timeout of 0.2 s:
#            with step_timeout the deadline follows the step time (connect_timeout, 20 s, for
#            the first step) and nobody is taken for dead; with step_timeout = 0 node 2 is
#            (the negative control)
#   badstate node 3 rejoins, and a test fault changes the state it received: every node
#            stops, naming node 3 (the state check, I4)
#   donor    node 3 dies and comes back; the donor of its state (node 0) dies inside the
#            transfer (a test fault: once the state's size went round, before the state):
#            every survivor says the view failed in the state's broadcast, naming node 0, and
#            the others take the state from the next donor
#   restart0 5 nodes: nodes 0 and 2 are killed together, node 0 is started again 0.5 s later
#            while node 2 stays down: node 0 finds the others training and joins through
#            admission at once (a cold start's wait for every node is not a rejoin's), so no
#            survivor pauses for longer than a view change (at most 5 s here, against the
#            connect_timeout of 20 s a first-election wait for node 2 costs)
#   restart0alone the same with node 0 alone killed and restarted
#   churn    8 nodes; for CHURN_S seconds (default 25; 120 for the issue's full run) a random
#            live node, the lowest ids included, is killed (SIGKILL) every 2-5 s, at most two
#            down at once, and restarted 1-3 s later (RANDOM seeded from CHURN_SEED, default 32:
#            a schedule in which node 0 is killed 4 times and restarted once while node 5 is down);
#            then every node is back: the end checks below over every node's metrics, and the
#            longest pause of training (the gap between consecutive iterations of a node that
#            lived through it) is reported and must be at most the slowest resume after a
#            kill (view records' elect_s, of views that a node left or whose election saw a
#            view fail to form: a node killed while a view forms, and back before the next one,
#            leaves no trace in "left") plus 1 s; when it is not, every kill, restart and log
#            line from half a second before the pause to half a second after it is printed
# With BUCKETS=N the gradient goes in buckets of N bytes or more during backward ([train]
# bucket_bytes; with WIRE=bf16 the nodes must say "bf16 buckets").
# With WIRE=bf16 or powersgd the cluster's gradients go that way ([cluster] wire): the nodes
# must say so, and the losses follow the one-node float32 run within the wire's bound (window
# means, not the iteration-by-iteration bound of float32). With EMU=ID:MS in the environment, node ID is a GPU node (device = cuda:0) whose GPU is the
# host emulation of the test hooks (trainer/device.h), each device operation MS ms late: the
# same scenarios then check that a GPU node keeps every invariant, killed and rejoined included.
# Where a node is restarted while the others train (kill, phases, donor, twojoin, late), every
# node sleeps 2 ms a step (PACE, below), as stop, stop0 and restart0 do.
# After each, every final member's parameters hash the same, every iteration 0..N-1 is
# recorded exactly once by each node that ran to the end (I8) with a split summing to B, and
# the loss follows the uninterrupted one-node run with the same seed and B (I3).
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
scenario=${2:?scenario}
ITERS=${ITERS:-3000}
B=64

# conf FILE NODES: the cluster (or one node), a small MLP, read timeout 1 s
conf() {
  write_conf "$1" "$2" 1 <<EOF
rejoin_timeout = 30
$(mlp_train 784,32,10 4096 "$B" "$ITERS")
lr = 0.05
hash_interval = 5
[controller]
policy = proportional
EOF
  if [ -n "${WIRE:-}" ]; then # the gradient's wire format ([cluster] wire)
    sed -i "/^\[cluster\]\$/a wire = $WIRE" "$1"
  fi
  if [ -n "${BUCKETS:-}" ]; then # buckets of this size during backward ([train] bucket_bytes)
    sed -i "/^\[train\]\$/a bucket_bytes = $BUCKETS" "$1"
  fi
  if [ -n "${EMU:-}" ] && [ "$2" -gt 1 ]; then # node ${EMU%%:*} is a GPU node
    sed -i "/^\[node\.${EMU%%:*}\]\$/a device = cuda:0" "$1"
  fi
}

pids=()
# start ID [ENV...]: node ID in the background (its pid in pids[ID], the hetring process
# itself, so that signals reach it; recorded, so that one still running when the script ends,
# after a failed check or at ctest's timeout, is killed), its metrics appended to m-ID.jsonl
# With PACE=1 every node sleeps 2 ms a step (the test fault sleep), so that however fast or
# loaded the machine, the others are still training when a restarted node comes back: 3000
# steps of 4 nodes took 3.2 s here, and a loaded machine's restart (0.8 s idle) could come
# after the end (the run ended without the rejoin the scenario is about)
start() {
  local id=$1 i found=0 more=""
  shift
  local envs=("$@")
  [ -n "${EMU:-}" ] && more="$more,emu_device:$EMU" # the emulated GPU joins the other faults
  [ -n "${PACE:-}" ] && more="$more,sleep:*:0.002"
  if [ -n "$more" ]; then
    for i in "${!envs[@]}"; do
      case ${envs[$i]} in HETRING_FAULT=*) envs[$i]="${envs[$i]}$more" found=1 ;; esac
    done
    [ $found = 1 ] || envs+=("HETRING_FAULT=${more#,}")
  fi
  echo "== test: node $id starts" >> "$tmp/n$id.log" # one per life (restarted_lines)
  env "${envs[@]}" "$HR" run --conf "$tmp/c.ini" --node "$id" --quiet \
    --metrics "$tmp/m-$id.jsonl" ${EXTRA[$id]:-} >> "$tmp/n$id.log" 2>&1 &
  pids[$id]=$!
  child_rec $!
}

# restarted_lines FILES...: the log lines of every life but the first (a node's first start may
# wait for peers that are not listening yet, as any cold start does; a restart must not)
restarted_lines() {
  awk 'FNR == 1 { lives = 0 } /^== test: node [0-9]+ starts$/ { lives++; next } lives > 1' "$@"
}
declare -a EXTRA

# finish_all IDS...: wait for the nodes; each must exit 0
finish_all() {
  local id rc
  for id in "$@"; do
    wait "${pids[$id]}"
    rc=$?
    [ $rc = 0 ] || fail "node $id exited with status $rc: $(tail -3 "$tmp/n$id.log")"
  done
}

# check_end IDS...: the nodes' final records: iteration ITERS and one parameter hash
check_end() {
  local id h ref=""
  for id in "$@"; do
    h=$(grep '"event":"end"' "$tmp/m-$id.jsonl" | tail -1 | grep -o '"param_hash":"[0-9a-f]*"')
    grep '"event":"end"' "$tmp/m-$id.jsonl" | tail -1 | grep -q "\"iter\":$ITERS," ||
      fail "node $id did not end at iteration $ITERS"
    [ -n "$h" ] || { fail "node $id wrote no final hash"; continue; }
    [ -z "$ref" ] && ref=$h
    [ "$h" = "$ref" ] || fail "node $id's final parameters differ: $h vs $ref (I4)"
  done
  echo "final parameters of nodes $*: ${ref:-none}"
}

# exactly_once IDS...: records_exactly_once (lib.sh) over the nodes IDS' metrics
exactly_once() {
  local id files=()
  for id in "$@"; do files+=("$tmp/m-$id.jsonl"); done
  records_exactly_once "nodes $*" "${files[@]}"
}

# losses FILE: "iter loss" per iteration record, in the order join wants
losses() {
  sed -n 's/^{"iter":\([0-9]*\),"epoch":[0-9]*,"loss":\([^,]*\),.*/\1 \2/p' "$1" |
    LC_ALL=C sort -u -k1,1
}

# follows_reference IDS...: the losses the nodes IDS recorded (each iteration from whichever
# recorded it: one that takes a state at a view change has not recorded the iteration the
# state brings) against the one-node run's (I3): within a relative
# 1e-5 for the first 1000 iterations, where every fault of these scenarios falls, and 5e-3
# after that, where float summation drift grows as the loss nears zero (measured: 1e-5 is
# first passed near iteration 1250, 1.5e-3 is the worst by 3000)
follows_reference() {
  local id
  conf "$tmp/one.ini" 1
  timeout 120 "$HR" run --conf "$tmp/one.ini" --node 0 --quiet --metrics "$tmp/one.jsonl" \
    > "$tmp/one.log" 2>&1 || fail "the one-node reference run failed: $(tail -3 "$tmp/one.log")"
  losses "$tmp/one.jsonl" > "$tmp/one.l"
  for id in "$@"; do losses "$tmp/m-$id.jsonl"; done | LC_ALL=C sort -u -k1,1 > "$tmp/n.l"
  # lossy: the means of 300-iteration windows within a bound: bf16 2% (measured 0.13-0.64%
  # over five kill runs: each run's splits round differently; the 1% target is the
  # benchmark's, over runs), powersgd at rank 4 15% (measured 4.2-5.7% over four runs; a
  # rank-4 step of this 784x32 layer is a coarser gradient, and Q starts again at each view)
  if [ -n "${WIRE:-}" ]; then
    local bound=0.02
    [ "$WIRE" = powersgd ] && bound=0.15
    LC_ALL=C join "$tmp/one.l" "$tmp/n.l" | awk -v id="$*" -v n="$ITERS" -v w="$WIRE" -v bound=$bound '
      { k = int($1 / 300); a[k] += $2; b[k] += $3; c++ }
      END {
        for (k in a) { r = (b[k] - a[k]) / a[k]; if (r < 0) r = -r; if (r > m) m = r }
        printf "nodes %s (wire = %s): %d iterations compared with the one-node float32 run, worst relative difference of 300-iteration mean losses %.3g (bound %g)\n", id, w, c, m, bound
        exit (c == n && m <= bound) ? 0 : 1
      }' || fail "the losses of nodes $* leave the one-node trajectory by more than $bound (wire = $WIRE)"
    return
  fi
  LC_ALL=C join "$tmp/one.l" "$tmp/n.l" | awk -v id="$*" -v n="$ITERS" '
    { d = $2 - $3; if (d < 0) d = -d; r = d / ($2 < 0 ? -$2 : $2); c++
      if ($1 < 1000) { if (r > e) e = r } else if (r > w) w = r }
    END {
      printf "nodes %s: %d iterations compared with the one-node run, worst relative loss difference %.3g (iterations < 1000), %.3g (after)\n", id, c, e, w
      exit (c == n && e <= 1e-5 && w <= 5e-3) ? 0 : 1
    }' || fail "the losses of nodes $* leave the one-node trajectory (I3)"
}

# mark_logs IDS...: the nodes' logs so far are left out of view_failed's search
declare -a marked
mark_logs() {
  local id
  for id in "$@"; do marked[$id]=$(wc -l < "$tmp/n$id.log"); done
}
# view_failed DEAD STEP IDS...: each of the nodes IDS logged (since mark_logs, within 20 s)
# that a view failed before training in STEP (an extended regex of the failed step, "state
# transfer failed: broadcast"), naming node DEAD
view_failed() {
  local dead=$1 step=$2 id line t
  shift 2
  for id in "$@"; do
    for ((t = 0; t < 200; t++)); do # the line may still be on its way when the dead node is reaped
      line=$(tail -n +$((${marked[$id]:-0} + 1)) "$tmp/n$id.log" |
        grep -E -m1 "view ([0-9]+) failed before training \\($step #[0-9]+ \\(view epoch \\1\\): node $dead ")
      [ -n "$line" ] && break
      sleep 0.1
    done
    [ -n "$line" ] || { fail "node $id did not log a view failed in '$step' on node $dead within 20 s"; continue; }
    echo "node $id: ${line#*warn  }" | cut -c1-200
  done
}

conf "$tmp/c.ini" 4
case $scenario in
kill)
  PACE=1
  for id in 0 1 3; do start $id; done
  start 2 HETRING_FAULT=crash:2:20
  wait "${pids[2]}"
  echo "node 2 died (status $?)"
  wait_iter 0 40
  start 2
  finish_all 0 1 2 3
  grep -h "node 2 left" "$tmp"/n*.log | head -1
  grep -qh "node 2 left" "$tmp"/n*.log || fail "no node logged that node 2 left"
  grep -qh "node 2 rejoined" "$tmp"/n*.log || fail "no node logged that node 2 rejoined"
  grep -h "node 2 rejoined" "$tmp"/n*.log | head -1
  check_end 0 1 2 3
  exactly_once 0 1 3
  follows_reference 0 1 3
  # every view probes its links once, at its first step, and tunes from every member's
  # figures ([cluster] link_probe = on, the default), which its rank 0, node 0, logs: one line
  # for each view in which node 0 recorded an iteration (at least the three of the kill: 4,
  # 3 and 4 members; a view that failed before its first step completed has none)
  trained=$(grep -o '"view":[0-9]*,"nodes":\[[0-9,]*\]' "$tmp/m-0.jsonl" | uniq |
    sed 's/.*\[\(.*\)\]/\1/' | awk -F, '{printf "%d ", NF}')
  tuned=$(sed -n 's/.*train: links: .* the slowest of \([0-9]*\) members.*/\1/p' "$tmp/n0.log" | tr '\n' ' ')
  grep -h "train: links:" "$tmp/n0.log" | cut -c1-200
  [ "$tuned" = "$trained" ] && [ "$(echo $trained | wc -w)" -ge 3 ] ||
    fail "node 0 trained in views of [$trained] members, tuned the links in views of [$tuned] (one each expected)"
  ;;
stop)
  # every node sleeps 2 ms a step (a test fault), so that however fast the machine, the
  # survivors are still training when node 3 comes back; node 3 is continued once a survivor
  # has logged that it left and node 0 has gone 25 iterations further
  for id in 0 1 2 3; do start $id HETRING_FAULT=sleep:*:0.002; done
  wait_iter 3 20
  child_signal STOP "${pids[3]}"
  echo "node 3 stopped at iteration $(iter_of 3)"
  wait_log "node 3 left" "$tmp"/n[012].log
  at=$(iter_of 0)
  wait_iter 0 $((at + 25))
  at=$(iter_of 0)
  child_signal CONT "${pids[3]}"
  echo "node 3 continued; node 0 was at iteration $at"
  [ "$at" -lt $((ITERS / 2)) ] || fail "node 3 was continued too late to rejoin (node 0 at $at)"
  finish_all 0 1 2 3
  grep -qh "node 3 left" "$tmp"/n*.log || fail "no node logged that node 3 left"
  grep -qh "node 3 rejoined" "$tmp"/n*.log || fail "no node logged that node 3 rejoined"
  check_end 0 1 2 3
  exactly_once 0 1 2
  follows_reference 0 1 2
  ;;
stop0)
  # the lowest id, the leader of the first view, stops: every survivor must name node 0
  for id in 0 1 2 3; do start $id HETRING_FAULT=sleep:*:0.002; done
  wait_iter 0 20
  child_signal STOP "${pids[0]}"
  wait_log "node 0 left" "$tmp"/n[123].log
  at=$(iter_of 1)
  wait_iter 1 $((at + 25))
  child_signal CONT "${pids[0]}"
  finish_all 0 1 2 3
  grep -h "node 0 left" "$tmp"/n*.log | head -1
  grep -q "node 0 left" "$tmp/n1.log" || fail "node 1 (the lowest live id) did not log that node 0 left"
  grep -hE "node [0-9] left" "$tmp"/n*.log | grep -v "node 0 left" && fail "a survivor blamed a live node"
  grep -qh "node 0 rejoined" "$tmp"/n*.log || fail "node 0 did not rejoin"
  check_end 0 1 2 3
  exactly_once 1 2 3
  follows_reference 1 2 3
  ;;
quorum)
  start 0
  start 3
  start 1 HETRING_FAULT=crash:1:20
  start 2 HETRING_FAULT=crash:2:20
  wait "${pids[1]}"
  wait "${pids[2]}"
  # node 0 says it waits for a quorum, and again one period (5 s) later: no iteration between
  k=$(grep -c "waiting for a quorum" "$tmp/n0.log")
  wait_for_line "$tmp/n0.log" "waiting for a quorum" 60 $((k + 1))
  a=$(iter_of 0)
  wait_for_line "$tmp/n0.log" "waiting for a quorum" 60 $((k + 2))
  b=$(iter_of 0)
  echo "without a quorum node 0 recorded iterations up to $a, then $b"
  [ "$a" = "$b" ] || fail "nodes 0 and 3 trained without a quorum ($a -> $b)"
  grep -qh "quorum" "$tmp/n0.log" "$tmp/n3.log" || fail "the survivors did not say they wait for a quorum"
  start 1
  finish_all 0 1 3
  check_end 0 1 3
  exactly_once 0 3
  follows_reference 0 3
  ;;
leave)
  EXTRA[1]="--set train.checkpoint=$tmp/n1.ckpt"
  for id in 0 1 2 3; do start $id; done
  wait_iter 1 20
  child_signal TERM "${pids[1]}"
  finish_all 0 1 2 3
  grep -q "leaving the cluster" "$tmp/n1.log" || fail "node 1 did not say it leaves"
  left=$(grep '"event":"end"' "$tmp/m-1.jsonl" | grep -o '"iter":[0-9]*' | grep -o '[0-9]*$')
  echo "node 1 left at iteration ${left:-?}"
  [ -n "$left" ] && [ "$left" -lt "$ITERS" ] || fail "node 1 did not leave early"
  at=$(od -An -tu8 -j16 -N8 "$tmp/n1.ckpt" 2>/dev/null | tr -d ' ')
  [ "${at:-x}" = "${left:-y}" ] || fail "node 1's checkpoint is at iteration ${at:-none}, expected ${left:-?}"
  check_end 0 2 3
  exactly_once 0 2 3
  follows_reference 0 2 3
  ;;
resume)
  # a first run checkpoints on node 2 only (not rank 0: every node writes its own) and stops
  # half-way; the second run must start every node from node 2's checkpoint
  ITERS=1500 conf "$tmp/c.ini" 4
  EXTRA[2]="--set train.checkpoint=$tmp/n2.ckpt --set train.checkpoint_interval=40"
  for id in 0 1 2 3; do start $id; done
  finish_all 0 1 2 3
  [ -f "$tmp/n2.ckpt" ] || fail "node 2 wrote no checkpoint"
  conf "$tmp/c.ini" 4
  rm -f "$tmp"/m-*.jsonl
  for id in 0 1 2 3; do start $id; done
  finish_all 0 1 2 3
  grep -q "resumed from checkpoint" "$tmp/n2.log" || fail "node 2 did not resume"
  n=$(grep -o '^{"iter":[0-9]*' "$tmp/m-0.jsonl" | head -1 | grep -o '[0-9]*$')
  echo "node 0 (no checkpoint of its own) began at iteration ${n:-?}"
  [ "$n" = 1500 ] || fail "node 0 began at iteration ${n:-?}, expected 1500 from node 2's checkpoint"
  check_end 0 1 2 3
  ;;
phases)
  PACE=1
  conf "$tmp/c.ini" 5
  for id in 0 1 2; do start $id; done
  start 3 HETRING_FAULT=crash_view:3:1
  start 4 HETRING_FAULT=crash_comm:4:30
  wait "${pids[4]}"
  wait "${pids[3]}"
  echo "nodes 4 and 3 died"
  wait_iter 0 100
  mark_logs 0 1 2
  start 3 HETRING_FAULT=crash_xfer:3:0
  wait "${pids[3]}"
  echo "node 3 died again, as a joiner (status $?)"
  grep -q "crashing inside the state transfer, as a receiver" "$tmp/n3.log" ||
    fail "node 3 did not die in its state transfer"
  # the others fail in the transfer, or, where the last hop of the state's broadcast to node 3
  # was sent, in the check of every member's state that follows it
  view_failed 3 "state (transfer|check) failed: [a-z-]+" 0 1 2
  wait_iter 0 300
  start 3
  finish_all 0 1 2 3
  grep -q "crashing .* into the all-reduce" "$tmp/n4.log" || fail "node 4 did not die in an all-reduce"
  grep -q "crashing .* into the view change" "$tmp/n3.log" || fail "node 3 did not die in a view change"
  check_end 0 1 2 3
  # over every node's records: when node 4 dies inside the all-reduce of iteration 30, node 3
  # may have received all of it and recorded 30 while nodes 0..2 had not; node 3, ahead, then
  # gives the state that brings 30 in the view change
  exactly_once 0 1 2 3 4
  follows_reference 0 1 2 3 4
  ;;
donor)
  PACE=1
  for id in 1 2; do start $id; done
  start 0 HETRING_FAULT=crash_xfer:0:2
  start 3 HETRING_FAULT=crash:3:20
  wait "${pids[3]}"
  wait_iter 1 60
  mv "$tmp/m-3.jsonl" "$tmp/m-3.l0.jsonl" # the restart writes its metrics anew
  mark_logs 1 2 3
  start 3
  wait "${pids[0]}"
  echo "node 0 died (status $?)"
  grep -q "crashing inside the state transfer, as its donor" "$tmp/n0.log" ||
    fail "node 0 did not die in the state transfer as its donor"
  # the donor died after the size and before the state: every other member waited for the state
  view_failed 0 "state transfer failed: broadcast" 1 2 3
  finish_all 1 2 3
  check_end 1 2 3
  # over every node's records, node 3's first life and node 0's included: a node may have
  # recorded an iteration whose all-reduce completed on it alone before a failure, and bring
  # it to the others as the donor of the next view
  exactly_once 0 1 2 3 3.l0
  follows_reference 0 1 2 3 3.l0
  ;;
compute)
  EXTRA[2]="--set node.2.slowdown=30"
  for id in 0 1 3; do start $id; done
  start 2 HETRING_FAULT=crash_compute:2:25
  wait "${pids[2]}"
  grep -q "crashing .* into the compute" "$tmp/n2.log" || fail "node 2 did not die in its compute"
  finish_all 0 1 3
  grep -qh "node 2 left" "$tmp"/n*.log || fail "no node logged that node 2 left"
  check_end 0 1 3
  exactly_once 0 1 3
  follows_reference 0 1 3
  ;;
twojoin)
  conf "$tmp/c.ini" 5
  PACE=1
  for id in 0 1 2; do start $id; done
  start 3 HETRING_FAULT=crash:3:20
  start 4 HETRING_FAULT=crash:4:20
  wait "${pids[3]}"
  wait "${pids[4]}"
  wait_iter 0 60
  start 3
  start 4
  finish_all 0 1 2 3 4
  grep -h "joined at" "$tmp/n0.log" | head -2
  # both come back; in one view change when both are in the lobby when it is decided (a
  # window of about one step, which a busy machine's start-up can miss: then in two)
  grep -q "nodes 3,4 joined at" "$tmp/n0.log" ||
    { grep -q "node 3 rejoined at" "$tmp/n0.log" && grep -q "node 4 rejoined at" "$tmp/n0.log"; } ||
    fail "nodes 3 and 4 did not both join"
  check_end 0 1 2 3 4
  exactly_once 0 1 2
  follows_reference 0 1 2
  ;;
late)
  PACE=1
  sed -i 's/^connect_timeout = .*/connect_timeout = 2/' "$tmp/c.ini"
  for id in 0 1 2; do start $id; done
  wait_iter 0 30
  start 3
  finish_all 0 1 2 3
  grep -h "started at\|joined at" "$tmp/n0.log" | head -2
  grep -q "view [0-9]*: nodes 0,1,2; ready" "$tmp/n0.log" || fail "nodes 0..2 did not start on their own"
  grep -q "node 3 rejoined at" "$tmp/n0.log" || fail "node 3 did not join late"
  grep -h "waiting for node 3" "$tmp/n0.log" | head -1
  grep -q "waiting for node 3 (127.0.0.1:[0-9]*): .*; starting without it in [0-9]* s more" \
    "$tmp/n0.log" || fail "node 0 did not say whom it waited for at the start"
  check_end 0 1 2 3
  exactly_once 0 1 2
  follows_reference 0 1 2
  ;;
coldmiss)
  # node 3 never starts: the cold start waits connect_timeout for it, then elects 0..2 within
  # rejoin_timeout more (with the two equal, an election limited to the larger alone ended as
  # the wait did, and both timed out: "no view within connect_timeout")
  sed -i 's/^connect_timeout = .*/connect_timeout = 6/; s/^rejoin_timeout = .*/rejoin_timeout = 6/' \
    "$tmp/c.ini"
  for id in 0 1 2; do start $id; done
  finish_all 0 1 2
  grep -h "starting without it\|view [0-9]*: nodes 0,1,2; ready" "$tmp/n0.log" | head -2
  grep -q "waiting for node 3 (127.0.0.1:[0-9]*): .*; starting without it in [0-9]* s more" \
    "$tmp/n0.log" || fail "node 0 did not wait for node 3 at the start"
  grep -q "view [0-9]*: nodes 0,1,2; ready" "$tmp/n0.log" || fail "nodes 0..2 did not form a view"
  check_end 0 1 2
  exactly_once 0 1 2
  ;;
stopall)
  for id in 0 1 2 3; do EXTRA[$id]="--set train.checkpoint=$tmp/n$id.ckpt"; start $id; done
  wait_iter 0 100
  child_signal TERM "${pids[@]}"
  finish_all 0 1 2 3
  its=""
  for id in 0 1 2 3; do
    grep -q "leaving the cluster" "$tmp/n$id.log" || fail "node $id did not leave cleanly"
    its="$its $(od -An -tu8 -j16 -N8 "$tmp/n$id.ckpt" 2>/dev/null | tr -d ' ')"
  done
  echo "checkpoints at iterations:$its"
  [ "$(echo $its | wc -w)" = 4 ] || fail "not every node wrote its checkpoint"
  ;;
slowstep)
  # 20 steps; node 2 sleeps 0.4 s at the start of each (a test fault: a slow step whatever the
  # load), against a read timeout of 0.2 s
  for st in 10 0; do
    rm -f "$tmp"/m-*.jsonl "$tmp"/n*.log
    write_conf "$tmp/c.ini" 4 0.2 <<EOF
step_timeout = $st
rejoin_timeout = 5
$(mlp_train 784,16,10 4096 64 20)
[controller]
policy = static
EOF
    for id in 0 1 3; do start $id; done
    start 2 HETRING_FAULT=sleep:2:0.4
    if [ "$st" = 10 ]; then
      finish_all 0 1 2 3
      grep -h "sent nothing\|left" "$tmp"/n*.log | head -2
      ! grep -qh "node 2 left\|sent nothing" "$tmp"/n*.log || fail "step_timeout = 10: a slow step was taken for a dead peer"
      ITERS=20 check_end 0 1 2 3
      # the 784-16-10 gradient and the stats fit tree_bytes: four nodes all-reduce on the tree
      grep -q "gradient path: tree" "$tmp/n0.log" ||
        fail "four nodes of a small model: $(grep -h 'gradient path' "$tmp/n0.log" || echo 'no gradient path line')"
    else
      for id in 0 1 3; do wait "${pids[$id]}"; done
      child_signal KILL "${pids[2]}" # it may still try to rejoin the finished run
      grep -qh "sent nothing for 0.2 s" "$tmp"/n*.log || fail "step_timeout = 0: the slow node was never taken for dead"
      echo "step_timeout = 0: $(grep -h 'sent nothing' "$tmp"/n*.log | head -1 | cut -c1-160)"
    fi
  done
  ;;
badstate)
  for id in 0 1 2; do start $id; done
  start 3 HETRING_FAULT=crash:3:20
  wait "${pids[3]}"
  wait_iter 0 40
  start 3 HETRING_FAULT=perturb_xfer:3:0
  for id in 0 1 2 3; do
    wait "${pids[$id]}"
    rc=$?
    [ $rc != 0 ] || fail "node $id exited 0 although node 3's state differs"
  done
  grep -h "training state differs" "$tmp"/n*.log | head -1
  n=$(grep -l "node 3's training state differs" "$tmp"/n*.log | wc -l)
  [ "$n" = 4 ] || fail "$n of 4 nodes named node 3's state as the one that differs"
  ;;
churn)
  CHURN_S=${CHURN_S:-25}
  RANDOM=${CHURN_SEED:-32}
  echo "churn for $CHURN_S s, seed ${CHURN_SEED:-32}"
  ITERS=$((CHURN_S * 250 + 2500))
  conf "$tmp/c.ini" 8
  for id in 0 1 2 3 4 5 6 7; do start $id HETRING_FAULT=sleep:*:0.004; done
  wait_iter 0 20
  declare -a back_at # the time a killed node is due back (0: up)
  lives=()            # the metrics of the nodes' earlier lives, as IDs for the checks below
  # relive ID: start node ID again; the metrics of its last life move to m-ID.lK.jsonl (a node
  # that starts without a checkpoint writes its metrics file anew)
  relive() {
    local k=0
    while [ -e "$tmp/m-$1.l$k.jsonl" ]; do k=$((k + 1)); done
    [ -e "$tmp/m-$1.jsonl" ] && mv "$tmp/m-$1.jsonl" "$tmp/m-$1.l$k.jsonl" && lives+=("$1.l$k")
    echo "$1 start $(date +%T.%3N)" >> "$tmp/churn"
    start $1 HETRING_FAULT=sleep:*:0.004
  }
  # explain_pause AT SECONDS: the kills, restarts and log lines of every node from half a
  # second before a pause to half a second after it, in time order (the logs' clock)
  explain_pause() {
    local from to
    from=$(date -d "@$(awk -v a="$1" 'BEGIN { printf "%.3f", a - 0.5 }')" +%T.%3N)
    to=$(date -d "@$(awk -v a="$1" -v p="$2" 'BEGIN { printf "%.3f", a + p + 0.5 }')" +%T.%3N)
    echo "what happened from $from to $to:"
    { awk -v f="$from" -v t="$to" '$3 >= f && $3 <= t { print $3 " (test) node " $1 " " $2 }' \
      "$tmp/churn"
      cat "$tmp"/n*.log | awk -v f="$from" -v t="$to" '$1 >= f && $1 <= t'; } |
      sort -s -k1,1 | head -200
  }
  for id in 0 1 2 3 4 5 6 7; do back_at[$id]=0; done
  t_end=$(($(date +%s%N) / 1000000 + CHURN_S * 1000)) next_kill=0 kills=0
  while :; do
    now_ms=$(($(date +%s%N) / 1000000))
    [ "$now_ms" -ge "$t_end" ] && break
    for id in 0 1 2 3 4 5 6 7; do # restarts that are due
      if [ "${back_at[$id]}" -gt 0 ] && [ "$now_ms" -ge "${back_at[$id]}" ]; then
        relive $id
        back_at[$id]=0
      fi
    done
    down=0 up=()
    for id in 0 1 2 3 4 5 6 7; do [ "${back_at[$id]}" -gt 0 ] && down=$((down + 1)) || up+=($id); done
    if [ "$now_ms" -ge "$next_kill" ] && [ $down -lt 2 ]; then
      v=${up[$((RANDOM % ${#up[@]}))]}
      child_signal KILL "${pids[$v]}"
      wait "${pids[$v]}" 2>/dev/null
      echo "$v kill $(date +%T.%3N)" >> "$tmp/churn"
      kills=$((kills + 1))
      back_at[$v]=$((now_ms + 1000 + RANDOM % 2001))
      next_kill=$((now_ms + 2000 + RANDOM % 3001))
    fi
    sleep 0.05
  done
  for id in 0 1 2 3 4 5 6 7; do # the last ones back
    [ "${back_at[$id]}" -gt 0 ] && relive $id
  done
  echo "$kills kills, of nodes $(awk '$2 == "kill" { printf "%s ", $1 }' "$tmp/churn")"
  finish_all 0 1 2 3 4 5 6 7
  check_end 0 1 2 3 4 5 6 7
  exactly_once 0 1 2 3 4 5 6 7 "${lives[@]}"
  follows_reference 0 1 2 3 4 5 6 7 "${lives[@]}"
  # the slowest resume after a kill, and the longest pause within a node's life
  slow=$(cat "$tmp"/m-*.jsonl | awk '/"event":"view"/ && (!/"left":\[\]/ || /"failed_views":[1-9]/) {
      match($0, /"elect_s":[0-9.]+/); e = substr($0, RSTART + 10, RLENGTH - 10) + 0; if (e > m) m = e }
    END { printf "%.3f", m }')
  for id in 0 1 2 3 4 5 6 7 "${lives[@]}"; do
    awk -v id=$id '/^\{"iter":/ { match($0, /"t_unix":[0-9.]+/); t = substr($0, RSTART + 9, RLENGTH - 9) + 0
        if (p && t - p > g) { g = t - p; at = p }
        p = t }
      END { printf "%s %.3f %.3f\n", id, g, at }' "$tmp/m-$id.jsonl"
  done > "$tmp/pauses"
  read -r pid_ pause at_ < <(sort -k2,2 -g "$tmp/pauses" | tail -1)
  echo "longest pause of training: ${pause} s (node ${pid_}, at $at_); slowest resume after a kill: $slow s"
  awk -v p="$pause" -v s="$slow" 'BEGIN { exit !(p <= s + 1) }' || {
    fail "a node paused ${pause} s, more than the slowest resume ($slow s) plus 1 s"
    explain_pause "$at_" "$pause"
  }
  restarted_lines "$tmp"/n*.log | grep "starting without it" | head -1
  ! restarted_lines "$tmp"/n*.log | grep -q "starting without it" ||
    fail "a restarted node waited as at a cold start"
  ;;
restart0 | restart0alone)
  conf "$tmp/c.ini" 5
  down="0 2" up="1 3 4"
  [ "$scenario" = restart0alone ] && down="0" up="1 2 3 4"
  for id in 0 1 2 3 4; do start $id HETRING_FAULT=sleep:*:0.002; done
  wait_iter 1 30
  for id in $down; do child_signal KILL "${pids[$id]}"; done
  for id in $down; do wait "${pids[$id]}" 2>/dev/null; done
  echo "killed node(s) $down at iteration $(iter_of 1)"
  sleep 0.5
  start 0 HETRING_FAULT=sleep:*:0.002
  wait_log "node 0 rejoined" "$tmp"/n*.log
  finish_all 0 $up
  grep -h "node 0 rejoined" "$tmp"/n*.log | head -1
  restarted_lines "$tmp/n0.log" | grep "starting without it" | head -1
  ! restarted_lines "$tmp/n0.log" | grep -q "starting without it" ||
    fail "the restarted node 0 waited as at a cold start"
  # the longest gap between consecutive iterations on any survivor: two view changes at most
  for id in $up; do
    awk -v id=$id '/^\{"iter":/ { match($0, /"t_unix":[0-9.]+/); t = substr($0, RSTART + 9, RLENGTH - 9) + 0
        if (p && t - p > g) g = t - p; p = t }
      END { printf "node %s: longest pause of training %.2f s\n", id, g; exit g <= 5 ? 0 : 1 }' \
      "$tmp/m-$id.jsonl" || fail "node $id paused for longer than 5 s"
  done
  check_end 0 $up
  exactly_once $up
  follows_reference $up
  ;;
*)
  echo "unknown scenario $scenario"
  exit 2
  ;;
esac
# the variants' modes took effect: the *.emu node says its cuda:0 is emulated, and with
# HETRING_ELECT=bounded (restart0.bounded) every node says its elections are bounded
if [ -n "${EMU:-}" ]; then
  grep -h "device cuda:0 is emulated" "$tmp/n${EMU%%:*}.log" | head -1 | cut -c1-160
  grep -q "test hook: node ${EMU%%:*}'s device cuda:0 is emulated on the host" "$tmp/n${EMU%%:*}.log" ||
    fail "node ${EMU%%:*} does not say its cuda:0 is emulated"
fi
if [ -n "${WIRE:-}" ]; then
  grep -h "gradient path: " "$tmp"/n*.log | sort -u | cut -c1-120
  want="$WIRE${BUCKETS:+ buckets}" # with BUCKETS, bf16 goes in buckets
  grep -qhE "gradient path: $want( \(|\$)" "$tmp"/n*.log || fail "no node says its gradient path is $want"
fi
if [ "${HETRING_ELECT:-}" = bounded ]; then
  for f in "$tmp"/n[0-9]*.log; do
    grep -q "HETRING_ELECT=bounded: elections probe the lowest ids" "$f" ||
      fail "${f##*/}: the node does not say its elections are bounded"
  done
fi
finish
