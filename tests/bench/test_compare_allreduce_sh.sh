#!/usr/bin/env bash
# test_compare_allreduce_sh.sh: bench/compare_allreduce.sh with a stand-in for hetring (a
# script that prints a data line at once, or sleeps), gloo and Open MPI skipped, so that it
# runs in seconds:
#   - a run prints the table of the stand-in's busbw;
#   - without --rate, R comes from iperf3 (a stand-in on PATH whose client prints its result at
#     once, or sleeps);
#   - SIGTERM to the script alone while iperf3 measures R: it exits 143, no iperf3 is left and
#     the lock is free (iperf3 ran in $(...), out of the trap's reach, and was left running,
#     holding the lock, under a flock of its own);
#   - SIGTERM to the script alone while a run sleeps: it exits 143 without waiting for it, the
#     run is gone and the lock free (the run ran in $(...), out of the trap's reach, and was
#     left running, holding the lock);
#   - SIGINT to the script alone while a run that ignores SIGTERM sleeps, and a child of it
#     that ignores SIGTERM too: it exits 130 and both are gone (SIGKILL after the grace of 10 s,
#     to the run's process group);
#   - SIGTERM while it waits for the lock: it exits 143 at once.
# Skipped (77) without flock or timeout, which the script needs.
set -u
SRC=$(cd "$(dirname "$0")/../.." && pwd)
HR=unused
. "$SRC/tests/harness.sh"
command -v flock > /dev/null && command -v timeout > /dev/null || { echo "SKIP: no flock or timeout"; exit 77; }

# the stand-in: records itself (in run-pids, and in all-pids for on_exit); sleeps while
# $tmp/hang exists (ignoring SIGTERM while $tmp/deaf exists, with a child that sleeps too,
# recorded as well), else prints a data line
cat > "$tmp/hetring" << EOS
#!/bin/sh
$standin_rec
rec \$\$ >> "$tmp/run-pids"
rec \$\$ >> "$tmp/all-pids"
[ -e "$tmp/deaf" ] && trap '' TERM
if [ -e "$tmp/hang" ]; then
    [ -e "$tmp/deaf" ] && { sleep 300 & rec \$! >> "$tmp/run-pids"; rec \$! >> "$tmp/all-pids"; }
    exec sleep 300
fi
echo "     67108864  16777216  float  sum  10000.0  6.71  6.71  0"
EOS
chmod +x "$tmp/hetring"
on_exit="standin_kill '$tmp/all-pids'"
args=(--hetring "$tmp/hetring" --python /bin/false --rate 1 --repeats 1 --no-latency --nodes 2
      --out "$tmp/out" --lock "$tmp/lock") # (R given: no iperf3)

out=$(timeout 60 bash "$SRC/bench/compare_allreduce.sh" "${args[@]}" 2>&1) ||
    fail "compare_allreduce.sh exited $?: $out"
echo "$out" | grep -q '^| busbw N=2, .* | \*\*6.71\*\* (6.71) |$' || fail "compare_allreduce.sh printed no busbw of 6.71: $out"

# R from iperf3: the stand-in records itself (in iperf3-pids and all-pids), sleeps while
# $tmp/hang exists, else as a client (-c) prints a result of 80 Gbit/s
mkdir -p "$tmp/bin"
cat > "$tmp/bin/iperf3" << EOS
#!/bin/sh
$standin_rec
rec \$\$ >> "$tmp/iperf3-pids"
rec \$\$ >> "$tmp/all-pids"
[ -e "$tmp/hang" ] && exec sleep 300
case " \$* " in
*" -c "*) printf '{"end": {"sum_received": {\n\t"bits_per_second":\t80000000000\n}}}\n' ;;
esac
EOS
chmod +x "$tmp/bin/iperf3"
measure=(--hetring "$tmp/hetring" --python /bin/false --repeats 1 --no-latency --nodes 2
         --out "$tmp/out" --lock "$tmp/lock")
out=$(PATH=$tmp/bin:$PATH timeout 60 bash "$SRC/bench/compare_allreduce.sh" "${measure[@]}" 2>&1) ||
    fail "compare_allreduce.sh without --rate exited $?: $out"
echo "$out" | grep -q '^R = 10.00 GB/s (one iperf3' || fail "compare_allreduce.sh gave no R of 10.00 GB/s: $out"

# SIGTERM once iperf3's server and client sleep
: > "$tmp/hang"
rm -f "$tmp/iperf3-pids"
set -m # (see stop below)
PATH=$tmp/bin:$PATH bash "$SRC/bench/compare_allreduce.sh" "${measure[@]}" > "$tmp/term.out" 2>&1 &
script=$!
set +m
for _ in $(seq 600); do [ "$(wc -l 2> /dev/null < "$tmp/iperf3-pids")" = 2 ] && break; sleep 0.1; done
[ "$(wc -l 2> /dev/null < "$tmp/iperf3-pids")" = 2 ] ||
    fail "compare_allreduce.sh started no iperf3 server and client: $(cat "$tmp/term.out")"
signal_script compare_allreduce.sh "$script" TERM 143 "$tmp/term.out" "iperf3 sleeps 300 s"
left=0
[ -f "$tmp/iperf3-pids" ] && while read -r p start; do
    proc_ends "$p" "$start" || { fail "compare_allreduce.sh left iperf3 $p running after SIGTERM"; left=1; }
done < "$tmp/iperf3-pids"
flock -n "$tmp/lock" true || fail "compare_allreduce.sh left $tmp/lock held after SIGTERM to iperf3"
# (an iperf3 left running holds the lock: the checks below need it free)
[ $left = 0 ] || { standin_kill "$tmp/iperf3-pids"; flock -w 10 "$tmp/lock" true; }

# stop SIGNAL RC RUNS: the script gets SIGNAL once RUNS runs (or their children) sleep (0: once
# it waits for the lock, held here); it must exit RC within 30 s, leave none running and the
# lock free
stop() {
    local sig=$1 want=$2 runs=$3 script p start
    rm -f "$tmp/run-pids" "$tmp/term.out"
    # (no timeout: it would signal the script's whole process group; the waits below are
    # bounded. set -m: a background job of a script ignores SIGINT otherwise.)
    set -m
    # (9<&-: the lock held below is this shell's alone: a run left behind would hold it for good)
    bash "$SRC/bench/compare_allreduce.sh" "${args[@]}" > "$tmp/term.out" 2>&1 9<&- &
    script=$!
    set +m
    if [ "$runs" = 0 ]; then
        for _ in $(seq 600); do grep -q 'SKIP Open MPI' "$tmp/term.out" 2> /dev/null && break; sleep 0.1; done
        sleep 0.5 # (it waits for the lock or has not reached it yet: the signal is taken either way)
    else
        for _ in $(seq 600); do [ "$(wc -l 2> /dev/null < "$tmp/run-pids")" = "$runs" ] && break; sleep 0.1; done
        [ "$(wc -l 2> /dev/null < "$tmp/run-pids")" = "$runs" ] ||
            fail "compare_allreduce.sh started no run: $(cat "$tmp/term.out")"
    fi
    signal_script compare_allreduce.sh "$script" "$sig" "$want" "$tmp/term.out" "runs: $runs"
    [ -f "$tmp/run-pids" ] || return 0
    while read -r p start; do
        proc_ends "$p" "$start" || fail "compare_allreduce.sh left run $p running after SIG$sig"
    done < "$tmp/run-pids"
}
stop TERM 143 1
flock -n "$tmp/lock" true || fail "compare_allreduce.sh left $tmp/lock held after SIGTERM"
: > "$tmp/deaf"
stop INT 130 2
# the lock held by another: SIGTERM while the script waits for it
exec 9< "$tmp/lock"
flock 9
stop TERM 143 0
[ ! -s "$tmp/run-pids" ] || fail "compare_allreduce.sh started a run while the lock was held"
exec 9<&-
[ "$fails" = 0 ]
