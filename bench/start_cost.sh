#!/usr/bin/env bash
# start_cost.sh: what a process of a build costs before it does any work (a CPU node of a CUDA
# build against one of a build without CUDA, say): resident memory (the maximum, /usr/bin/time's
# %M) and wall time per start of `hetring version` and of a one-node `hetring run` (a CPU node:
# 784-16-10, 10 iterations of B = 32, synthetic data), each the median of RUNS starts one after
# another (warm page cache; one untimed start first).
# ENV... are put in the environment of every start (e.g. HETRING_CUDA_LIBS=/nonexistent).
# usage: start_cost.sh HETRING [--runs 31] [--port 29950] [ENV=VALUE...]
set -u
. "$(dirname "$0")/script_args.sh"
script_hetring "$@" # the comment above is the usage
HR=$1
shift
RUNS=31 PORT=29950 ENVS=()
while [ $# -gt 0 ]; do
  case $1 in
  --runs) RUNS=$2; shift 2 ;;
  --port) PORT=$2; shift 2 ;;
  *=*) ENVS+=("$1"); shift ;;
  *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
tmp=$(mktemp -d)
# SIGTERM or SIGINT to this script alone stops the start in progress (SIGKILL 10 s later) and
# exits 143 or 130
script_traps 'rm -rf "$tmp"'
sed "s/^port = .*/port = $PORT/" "$(dirname "$0")/one_node.ini" > "$tmp/one.ini"

# measure NAME ARGS...: median ms over RUNS starts and the largest max RSS (MB) seen
measure() {
  local name=$1 i t0 t1
  shift
  script_run env "${ENVS[@]}" "$HR" "$@" > /dev/null 2>&1 || { echo "$name: exited $?" >&2; return 1; }
  : > "$tmp/ms"
  : > "$tmp/kb"
  for i in $(seq "$RUNS"); do
    t0=$(date +%s%N)
    script_run env "${ENVS[@]}" /usr/bin/time -f %M -o "$tmp/rss" "$HR" "$@" > /dev/null 2>&1
    t1=$(date +%s%N)
    echo $(((t1 - t0) / 1000)) >> "$tmp/ms"
    cat "$tmp/rss" >> "$tmp/kb"
  done
  printf '%-8s %8.2f ms  %7.1f MB\n' "$name" \
    "$(sort -n "$tmp/ms" | awk -v n="$RUNS" 'NR == int((n + 1) / 2) { print $1 / 1000 }')" \
    "$(sort -n "$tmp/kb" | tail -1 | awk '{ print $1 / 1024 }')"
}
measure version version
measure node run --conf "$tmp/one.ini" --node 0 --quiet
