#!/usr/bin/env bash
# elastic_scale.sh: membership at scale, with separate `hetring run` processes on loopback: how
# long N nodes take to form a ring, to go on without a killed node and to take it back, and what
# an iteration costs them. For each N: RUNS fresh clusters of a tiny MLP (784-16-10, B = 8 per
# node, security none, connect_timeout 60), and per run
#   formed   seconds from the start of the last node's first election (its first view
#            record's t_unix less its elect_s: the process is up and listening) to the
#            first iteration of every node; also from the last process launched;
#   resume   seconds from a kill -9 of one node (node N/2) to node 0's first iteration in a
#            view without it;
#   back     seconds from that node's restart to its first iteration in a view with it;
#   iter_ms  node 0's median wall time per iteration (t_unix apart) over the 40 iterations
#            before the kill, and comm_ms its median t_comm there;
# then the medians over the runs, as a line per N and as JSON (--json FILE).
# --tree-bytes B sets [cluster] tree_bytes (0: every all-reduce on the ring; unset: the
# default, which sends the tiny model's all-reduce over the tree from N = 4 on).
# usage: elastic_scale.sh HETRING [--nodes "16 64 128"] [--runs 3] [--port 20000]
#                          [--json FILE] [--keep DIR] [--tree-bytes B]
# A cluster's nodes are stopped at the end of its run, and at exit, also on SIGTERM or SIGINT
# to this script alone (exit 143 or 130): SIGTERM, and SIGKILL 10 s later. Their iterations are
# endless: killed by SIGKILL (no trap runs), the script leaves a watcher that stops them so
# within a second or so.
set -u
. "$(dirname "$0")/script_args.sh"
script_hetring "$@" # the comment above is the usage
HR=$1
shift
NODES="16 64 128" RUNS=3 PORT=20000 JSON="" KEEP="" TREE=""
while [ $# -gt 0 ]; do
  case $1 in
  --nodes) NODES=$2; shift 2 ;;
  --runs) RUNS=$2; shift 2 ;;
  --port) PORT=$2; shift 2 ;;
  --json) JSON=$2; shift 2 ;;
  --keep) KEEP=$2; shift 2 ;;
  --tree-bytes) TREE=$2; shift 2 ;;
  *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
tmp=$(mktemp -d)
pids=()
script_traps 'rm -rf "$tmp"'
proc_orphan_watch "$tmp/nodes"
now() { date +%s.%N; }
sub() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a - b }'; }
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "nan"; else print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }

# conf FILE N
conf() {
  { printf '[cluster]\nsecurity = none\nconnect_timeout = 60\ntimeout = 2\nrejoin_timeout = 120\n'
    [ -n "$TREE" ] && printf 'tree_bytes = %s\n' "$TREE"
    printf '[train]\nlayers = 784,16,10\nsamples = 2048\neval_samples = 16\nglobal_batch = %d\n' $((8 * $2))
    printf 'iterations = 100000000\nhash_interval = 50\n[controller]\npolicy = static\n'
    for ((i = 0; i < $2; i++)); do printf '[node.%d]\nhost = 127.0.0.1\nport = %d\n' $i $((PORT + i)); done
  } > "$1"
}
start() { # start ID: its pid in pids[ID], and in script_pids (script_args.sh)
  "$HR" run --conf "$tmp/c.ini" --node "$1" --quiet --metrics "$tmp/m-$1.jsonl" >> "$tmp/n$1.log" 2>&1 &
  pids[$1]=$!
  script_add $!
  [ -n "${child_start[$!]:-}" ] && echo "$! ${child_start[$!]}" >> "$tmp/nodes"
}
# first_iter FILE [AFTER] [WITH|WITHOUT ID]: t_unix of the first iteration record after AFTER
# whose view contains (or not) node ID
first_iter() {
  awk -v after="${2:-0}" -v how="${3:-}" -v id="${4:-}" '
    /^\{"iter":/ { match($0, /"t_unix":[0-9.]+/); t = substr($0, RSTART + 9, RLENGTH - 9) + 0
      if (t <= after) next
      if (how != "") { match($0, /"nodes":\[[0-9,]*\]/); s = "," substr($0, RSTART + 9, RLENGTH - 10) ","
        has = index(s, "," id ",") > 0; if ((how == "with") != has) next }
      printf "%.6f\n", t; exit }' "$1" 2>/dev/null
}
# wait_for VAR CMD... : until CMD prints something (at most 150 s), into VAR; in this shell, not
# in $(...), where a SIGTERM or SIGINT would wait for it to end (script_args.sh)
wait_for() {
  local var=$1 v t
  shift
  for ((t = 0; t < ${WAIT_TICKS:-1500}; t++)); do
    v=$("$@")
    [ -n "$v" ] && { printf -v "$var" '%s' "$v"; return 0; }
    sleep 0.1
  done
  return 1
}
all_started() { # once every node has its first iteration: the latest of them, and the latest
  # start of a node's first election (its first view record's t_unix less its elect_s)
  local i
  for ((i = 0; i < N; i++)); do [ -n "$(first_iter "$tmp/m-$i.jsonl")" ] || return 0; done
  for ((i = 0; i < N; i++)); do
    first_iter "$tmp/m-$i.jsonl"
    awk '/"event":"view"/ { match($0, /"elect_s":[0-9.]+/); e = substr($0, RSTART + 10, RLENGTH - 10)
      match($0, /"t_unix":[0-9.]+/); printf "open %.6f\n", substr($0, RSTART + 9, RLENGTH - 9) - e; exit }' "$tmp/m-$i.jsonl"
  done | awk '$1 == "open" { if ($2 > o) o = $2; next } { if ($1 > m) m = $1 } END { printf "%.6f %.6f\n", m, o }'
}

# keep: with --keep DIR, the run's logs, cluster file and node 0's metrics into DIR/N<N>-run<R>
keep() {
  [ -n "$KEEP" ] || return 0
  rm -rf "$KEEP/N$N-run$run"
  mkdir -p "$KEEP/N$N-run$run"
  cp "$tmp"/n*.log "$tmp"/c.ini "$tmp"/m-0.jsonl "$KEEP/N$N-run$run/" 2>/dev/null
}

results=()
for N in $NODES; do
  F=() L=() R=() K=() I=() C=()
  for ((run = 0; run < RUNS; run++)); do
    script_stop # (what a run that broke off left running)
    rm -f "$tmp"/m-*.jsonl "$tmp"/n*.log
    pids=()
    conf "$tmp/c.ini" "$N"
    for ((i = 0; i < N; i++)); do start $i; done
    t_last=$(now)
    wait_for t_all all_started || { echo "N=$N run $run: the ring never formed" >&2; keep; break; }
    read -r t_all t_open <<< "$t_all"
    F+=("$(sub "$t_all" "$t_open")") L+=("$(sub "$t_all" "$t_last")")
    sleep 2 # steady state
    victim=$((N / 2))
    t_kill=$(now)
    child_signal KILL "${pids[$victim]}"
    wait "${pids[$victim]}" 2>/dev/null
    wait_for t_res first_iter "$tmp/m-0.jsonl" "$t_kill" without $victim || { echo "N=$N: no resume" >&2; keep; break; }
    R+=("$(sub "$t_res" "$t_kill")")
    # the iteration before the kill, on node 0
    awk -v tk="$t_kill" '/^\{"iter":/ { match($0, /"t_unix":[0-9.]+/); t = substr($0, RSTART + 9, RLENGTH - 9) + 0
        if (t > tk) exit; match($0, /"t_comm":[0-9.e-]+/); c = substr($0, RSTART + 9, RLENGTH - 9) + 0
        n++; d[n] = p ? t - p : 0; cc[n] = c; p = t }
      END { for (j = (n > 40 ? n - 39 : 2); j <= n; j++) printf "%.4f %.4f\n", d[j] * 1e3, cc[j] * 1e3 }' \
      "$tmp/m-0.jsonl" > "$tmp/it"
    it=$(cut -d' ' -f1 "$tmp/it" | tr '\n' ' ' | median) cm=$(cut -d' ' -f2 "$tmp/it" | tr '\n' ' ' | median)
    I+=("$it") C+=("$cm")
    sleep 1
    t_re=$(now)
    start $victim
    wait_for t_back first_iter "$tmp/m-$victim.jsonl" "$t_re" with $victim || { echo "N=$N: node $victim never back" >&2; keep; break; }
    K+=("$(sub "$t_back" "$t_re")")
    echo "N=$N run $run: formed ${F[-1]} s (${L[-1]} s from the last launch), resume ${R[-1]} s, back ${K[-1]} s, iteration $it ms (comm $cm ms)" >&2
    keep
    script_stop
    pids=()
  done
  f=$(echo "${F[*]:-}" | median) l=$(echo "${L[*]:-}" | median) r=$(echo "${R[*]:-}" | median) k=$(echo "${K[*]:-}" | median)
  i=$(echo "${I[*]:-}" | median) c=$(echo "${C[*]:-}" | median)
  echo "N=$N (${#F[@]} runs, medians): ring formed $f s ($l s from the last launch), resume after kill -9 $r s, restarted node back in $k s, iteration $i ms, comm $c ms"
  results+=("{\"nodes\":$N,\"runs\":${#F[@]},\"formed_s\":$f,\"formed_launch_s\":$l,\"resume_s\":$r,\"back_s\":$k,\"iter_ms\":$i,\"comm_ms\":$c,\"formed_all\":[${F[*]:-}],\"resume_all\":[${R[*]:-}],\"back_all\":[${K[*]:-}]}")
done
if [ -n "$JSON" ]; then
  (IFS=,; echo "[${results[*]}]" | sed 's/\[\([0-9. ]*\)\]/[\1]/g; s/ \([0-9]\)/,\1/g') > "$JSON"
fi
