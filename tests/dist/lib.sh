# lib.sh: the setup the multi-process scripts share; sourced with the hetring binary as $1.
# Sets HR and what tests/harness.sh gives (fail, $tmp, base); scripts end with `finish`.
HR=$1
. "$(dirname "${BASH_SOURCE[0]}")/../harness.sh"

# write_conf FILE NODES TIMEOUT: a cluster of NODES nodes on 127.0.0.1 ports base.., without
# security, with the given read timeout; the [train] and [controller] sections from stdin
write_conf() {
  local i
  { printf '[cluster]\nsecurity = none\nconnect_timeout = 20\ntimeout = %s\n' "$3"
    cat
    for ((i = 0; i < $2; i++)); do printf '[node.%d]\nhost = 127.0.0.1\nport = %d\n' $i $((base+i)); done
  } > "$1"
}

# mlp_train LAYERS SAMPLES B ITERS: the [train] lines a run's section begins with (an MLP of
# LAYERS on SAMPLES synthetic samples, 64 held out, global batch B, ITERS iterations); the
# section's other keys follow it
mlp_train() {
  printf '[train]\nlayers = %s\nsamples = %s\neval_samples = 64\nglobal_batch = %s\niterations = %s\n' \
    "$1" "$2" "$3" "$4"
}

# iter_of ID: the last iteration node ID recorded in $tmp/m-ID.jsonl (-1 if none)
iter_of() {
  local v
  v=$(grep -o '^{"iter":[0-9]*' "$tmp/m-$1.jsonl" 2>/dev/null | tail -1 | grep -o '[0-9]*$')
  echo "${v:--1}"
}

# wait_iter ID N: until node ID recorded iteration N (at most 60 s)
wait_iter() {
  local t
  for ((t = 0; t < 600; t++)); do
    [ "$(iter_of "$1")" -ge "$2" ] && return 0
    sleep 0.1
  done
  fail "node $1 never reached iteration $2"
  return 1
}

# wait_log PATTERN FILES...: until one of the files holds a line matching PATTERN (grep -E;
# at most 60 s)
wait_log() {
  local t pat=$1
  shift
  for ((t = 0; t < 600; t++)); do
    grep -qhE "$pat" "$@" 2>/dev/null && return 0
    sleep 0.1
  done
  fail "no log line matching '$pat' within 60 s"
  return 1
}

# records_exactly_once WHO FILES...: records_check (tests/records.sh) over the metrics files
# with this script's ITERS and B; WHO names the nodes in the messages
. "$(dirname "${BASH_SOURCE[0]}")/../records.sh"
records_exactly_once() {
  local who=$1
  shift
  records_check "$who" "$ITERS" "$B" "$@" || fail "$who broke exactly-once (I8)"
}

# run_nodes NAME ARGS...: `hetring run` of nodes 0, 1 and 2 of $tmp/c.ini at once with ARGS
# (@ID@ in an argument becomes the node's id), 2 minutes each at most; metrics go to
# $tmp/NAME.mID, logs to $tmp/NAME.ID.log, and a node that fails fails the test
run_nodes() {
  local name=$1 id pids=()
  shift
  for id in 0 1 2; do
    timeout 120 "$HR" run --conf "$tmp/c.ini" --node $id --quiet "${@//@ID@/$id}" \
      --metrics "$tmp/$name.m$id" > "$tmp/$name.$id.log" 2>&1 &
    pids[$id]=$!
  done
  for id in 0 1 2; do
    wait "${pids[$id]}" || fail "$name: node $id failed: $(tail -2 "$tmp/$name.$id.log")"
  done
}

# finish: the failure count, and the exit status of the script; with HR_KEEP=DIR the
# temporary files are copied there first, for a look at the logs
finish() {
  [ -n "${HR_KEEP:-}" ] && rm -rf "$HR_KEEP" && cp -r "$tmp" "$HR_KEEP"
  echo "$fails failure(s)"
  [ "$fails" = 0 ]
}

# netns_nodes N: in the script's own network namespace (unshare -n), one namespace per node,
# each held by a `sleep` (holders[K]) and joined by a veth pair (hrhK here, hrcK there, address
# 10.77.0.K+1/24) to the bridge hrbr0, which must exist and be up. Each holder's namespace is
# awaited (up to 10 s) before its veth moves, so a loaded machine cannot move it into ours.
netns_nodes() {
  local k t me
  me=$(readlink /proc/self/ns/net)
  holders=()
  for ((k = 0; k < $1; k++)); do
    unshare -n sleep 600 &
    holders[$k]=$!
    child_rec $!
    disown
  done
  for ((k = 0; k < $1; k++)); do
    for ((t = 0; t < 200; t++)); do
      [ "$(readlink "/proc/${holders[$k]}/ns/net" 2>/dev/null)" != "$me" ] && break
      sleep 0.05
    done
    [ "$(readlink "/proc/${holders[$k]}/ns/net" 2>/dev/null)" != "$me" ] ||
      fail "the namespace of node $k's holder did not appear within 10 s"
    ip link add hrh$k type veth peer name hrc$k
    ip link set hrc$k netns "${holders[$k]}"
    ip link set hrh$k master hrbr0
    ip link set hrh$k up
    nsenter -t "${holders[$k]}" -n sh -c "ip link set lo up && ip addr add 10.77.0.$((k + 1))/24 dev hrc$k && ip link set hrc$k up"
  done
}
