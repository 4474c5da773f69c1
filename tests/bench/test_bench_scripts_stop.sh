#!/usr/bin/env bash
# test_bench_scripts_stop.sh: bench/compare_builds.sh, bench/slow_links.sh,
# bench/start_cost.sh and bench/elastic_scale.sh with a stand-in for hetring (a script that
# answers at once, or sleeps), so that it runs in seconds and makes no namespace; their TMPDIR
# holds a space:
#   - each, its stand-in answering at once, ends 0 with the stand-in's figures;
#   - SIGTERM to the script alone while its stand-in sleeps: it exits 143 without waiting for
#     it and the stand-in is gone (each ran it in the foreground, where the trap could not reach
#     it: it was left running, compare_builds.sh's temporary folder removed under it);
#   - start_cost.sh: SIGINT while the stand-in sleeps under /usr/bin/time ignoring SIGTERM: it
#     exits 130 and the stand-in is gone (SIGKILL after the grace of 10 s);
#   - elastic_scale.sh: a cluster that never forms (its stand-ins sleep) is stopped before the
#     next one starts, and at the end none is left (it lost the nodes of every cluster but the
#     last); SIGTERM while a cluster runs: exit 143, its nodes and its folder gone.
# Skipped (77) without python3, timeout, pgrep or /usr/bin/time, which the scripts need.
set -u
SRC=$(cd "$(dirname "$0")/../.." && pwd)
HR=unused
. "$SRC/tests/harness.sh"
for c in python3 timeout pgrep; do command -v $c > /dev/null || { echo "SKIP: no $c"; exit 77; }; done
[ -x /usr/bin/time ] || { echo "SKIP: no /usr/bin/time"; exit 77; }

# the stand-in: records itself (in pids, and in all-pids for on_exit); its Nth call since pids was emptied sleeps when
# $tmp/hang holds a number up to N (ignoring SIGTERM while $tmp/deaf exists), else it answers:
# bench allreduce writes a busbw of 2.5 to its --json file, bench powersgd prints a line
mkdir -p "$tmp/old" "$tmp/new"
cat > "$tmp/old/hetring" << EOS
#!/bin/sh
$standin_rec
rec \$\$ >> "$tmp/pids"
rec \$\$ >> "$tmp/all-pids"
printf '%s\n' "\$@" > "$tmp/args"
if [ -e "$tmp/hang" ] && [ "\$(wc -l < "$tmp/pids")" -ge "\$(cat "$tmp/hang")" ]; then
    [ -e "$tmp/deaf" ] && trap '' TERM
    exec sleep 300
fi
case "\$1 \$2" in
"bench allreduce")
    while [ \$# -gt 1 ] && [ "\$1" != --json ]; do shift; done
    echo '{"nodes": 2, "bytes": 1048576, "busbw": 2.5}' > "\$2" ;;
"bench powersgd") echo "powersgd stand-in: 42 GB/s" ;;
esac
exit 0
EOS
chmod +x "$tmp/old/hetring"
cp "$tmp/old/hetring" "$tmp/new/hetring"
on_exit="standin_kill '$tmp/all-pids'"
cb=(bash "$SRC/bench/compare_builds.sh" --repeats 1 --nodes 2 -b 1M -e 1M --no-hetero
    "$tmp/old" "$tmp/new")
sl=(bash "$SRC/bench/slow_links.sh" "$tmp/slow" --hetring "$tmp/old/hetring" --only kernels)
sc=(bash "$SRC/bench/start_cost.sh" "$tmp/old/hetring" --runs 1 --port "$base")
es=(bash "$SRC/bench/elastic_scale.sh" "$tmp/old/hetring" --runs 1 --port "$base")
# the scripts' temporary folders, in a TMPDIR whose name holds a space
export TMPDIR="$tmp/tmp dir"
mkdir "$TMPDIR"

# the stand-ins answering at once
out=$(timeout 60 "${cb[@]}" 2>&1) || fail "compare_builds.sh exited $?: $out"
echo "$out" | grep -q '^| all-reduce busbw GB/s | 2 nodes, 1048576 B | 2.500 | 2.500 | 1.000 |' ||
    fail "compare_builds.sh printed no busbw of 2.5: $out"
out=$(timeout 60 "${sl[@]}" 2>&1) || fail "slow_links.sh exited $?: $out"
grep -q '^powersgd stand-in: 42 GB/s$' "$tmp/slow/summary.md" 2> /dev/null ||
    fail "slow_links.sh's summary lacks the stand-in's line: $out"
out=$(timeout 60 "${sc[@]}" 2>&1) || fail "start_cost.sh exited $?: $out"
[ "$(echo "$out" | grep -cE '^(version|node) +[0-9.]+ ms +[0-9.]+ MB$')" = 2 ] ||
    fail "start_cost.sh printed no figures: $out"

# stop NAME SIGNAL RC CALL SCRIPT...: SCRIPT gets SIGNAL once the CALLth call of the stand-in
# sleeps; it must exit RC within 30 s and leave no stand-in running
stop() {
    local name=$1 sig=$2 want=$3 call=$4 script p start
    shift 4
    : > "$tmp/pids"
    echo "$call" > "$tmp/hang"
    # (no timeout: it would signal the script's whole process group; the waits below are
    # bounded. set -m: a background job of a script ignores SIGINT otherwise.)
    set -m
    "$@" > "$tmp/stop.out" 2>&1 &
    script=$!
    set +m
    for _ in $(seq 600); do [ "$(wc -l < "$tmp/pids")" -ge "$call" ] && break; sleep 0.1; done
    [ "$(wc -l < "$tmp/pids")" -ge "$call" ] || fail "$name made no call $call: $(cat "$tmp/stop.out")"
    sleep 0.3 # (the stand-in's exec of sleep)
    signal_script "$name" "$script" "$sig" "$want" "$tmp/stop.out"
    while read -r p start; do
        proc_ends "$p" "$start" || fail "$name left stand-in $p running after SIG$sig"
    done < "$tmp/pids"
    rm -f "$tmp/hang" "$tmp/deaf"
}
# folder_of OPTION: into d, the folder of the file OPTION names in the stand-in's last call
folder_of() {
    local args i
    mapfile -t args < "$tmp/args"
    for ((i = 0; i + 1 < ${#args[@]}; i++)); do
        [ "${args[$i]}" = "$1" ] && { d=$(dirname "${args[$((i + 1))]}"); return 0; }
    done
    fail "the stand-in's last call had no $1: ${args[*]}"
    d="$tmp/no $1"
}
stop compare_builds.sh TERM 143 2 "${cb[@]}"
folder_of --json
case $d in "$TMPDIR"/*) ;; *) fail "compare_builds.sh's folder $d is not in TMPDIR ($TMPDIR)" ;; esac
[ -d "$d" ] && fail "compare_builds.sh left its temporary folder $d behind"
stop slow_links.sh TERM 143 2 "${sl[@]}"
stop start_cost.sh TERM 143 1 "${sc[@]}"
: > "$tmp/deaf"
stop start_cost.sh INT 130 2 "${sc[@]}" # the timed start, under /usr/bin/time

# elastic_scale.sh: two clusters of 2 that never form (0.5 s each, WAIT_TICKS), then SIGTERM
# while the nodes of one sleep
: > "$tmp/pids"
echo 1 > "$tmp/hang"
out=$(WAIT_TICKS=5 timeout 60 "${es[@]}" --nodes "2 2" 2>&1)
rc=$?
[ $rc = 0 ] && [ "$(echo "$out" | grep -c "the ring never formed")" = 2 ] ||
    fail "elastic_scale.sh of clusters that never form: exit $rc, $out"
[ "$(wc -l < "$tmp/pids")" = 4 ] || fail "elastic_scale.sh started $(wc -l < "$tmp/pids") nodes, not 4: $out"
while read -r p start; do
    proc_ends "$p" "$start" || fail "elastic_scale.sh left node $p of a cluster that never formed running"
done < "$tmp/pids"
stop elastic_scale.sh TERM 143 2 "${es[@]}" --nodes 2
folder_of --metrics
case $d in "$TMPDIR"/*) ;; *) fail "elastic_scale.sh's folder $d is not in TMPDIR ($TMPDIR)" ;; esac
[ -d "$d" ] && fail "elastic_scale.sh left its temporary folder $d behind"
# SIGKILL to elastic_scale.sh while the nodes of a cluster sleep: no trap of its runs, and its
# watcher stops them (they ran on for ever, holding their ports)
: > "$tmp/pids"
echo 1 > "$tmp/hang"
"${es[@]}" --nodes 2 > "$tmp/kill.out" 2>&1 &
script=$!
child_rec $script
for _ in $(seq 600); do [ "$(wc -l < "$tmp/pids")" -ge 2 ] && break; sleep 0.1; done
[ "$(wc -l < "$tmp/pids")" -ge 2 ] || fail "elastic_scale.sh started no 2 nodes: $(cat "$tmp/kill.out")"
sleep 0.3 # (the stand-ins' exec of sleep)
child_signal KILL $script
wait $script 2> /dev/null
while read -r p start; do
    proc_ends "$p" "$start" || fail "elastic_scale.sh, killed by SIGKILL, left node $p running"
done < "$tmp/pids"
rm -f "$tmp/hang"
[ "$fails" = 0 ]
