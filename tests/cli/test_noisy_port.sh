#!/usr/bin/env bash
# A noisy port: while a node rejoins a running cluster, strangers (tests/ring/stranger.c, the
# second argument) connect to the members' ports as port scanners, health checkers and wrong
# clients do: 50 idle connections held open, 20 sending garbage, an HTTP request, and 1000
# connections closed as soon as made. The node still rejoins, every stranger is closed, the
# members hold no descriptor or thread more afterwards than before, and their logs name the
# strangers at a bounded rate, not one line each (the gate: ring/form.c).
set -u
HR=$1 STRANGER=$2
. "$(dirname "$0")/../harness.sh"
on_exit='pkill -KILL -f "$tmp/" 2>/dev/null'

{ printf '[cluster]\nname = noise\nsecurity = none\nconnect_timeout = 20\n[train]\nmodel = mlp\n'
  printf 'layers = 784,16,10\ndataset = synthetic\nsamples = 1000\nglobal_batch = 32\n'
  printf 'iterations = 1000000\n'
  for i in 0 1 2; do printf '[node.%d]\nhost = 127.0.0.1\nport = %d\n' $i $((base + i)); done
} > "$tmp/c.ini"
start() { # start ID: node ID in the background, its output in $tmp/out.ID
    "$HR" run --conf "$tmp/c.ini" --node "$1" --quiet --metrics "$tmp/m.$1.$2" > "$tmp/out.$1" 2>&1 &
    pid[$1]=$!
    child_rec $!
}
# what PID holds: "FDS THREADS"
holds() { echo "$(ls "/proc/$1/fd" | wc -l) $(ls "/proc/$1/task" | wc -l)"; }

for i in 0 1 2; do start $i a; done
for i in 0 1 2; do wait_for_line "$tmp/m.$i.a" '^\{"iter":3,' 60 || exit 1; done
declare -A before
for i in 0 1; do before[$i]=$(holds "${pid[$i]}"); done
child_signal TERM "${pid[2]}"
wait "${pid[2]}" || fail "node 2 did not leave cleanly: $(tail -2 "$tmp/out.2")"
wait_for_line "$tmp/out.0" "ring: node 2 left at iteration" 30 || exit 1

# the strangers, at nodes 0 and 1, and node 2 rejoining among them
sp=()
for i in 0 1; do
    port=$((base + i))
    "$STRANGER" $port 50 idle 10 > "$tmp/s.idle.$i" 2>&1 & sp+=($!)
    "$STRANGER" $port 20 garbage 10 > "$tmp/s.garbage.$i" 2>&1 & sp+=($!)
    "$STRANGER" $port 1 http 10 > "$tmp/s.http.$i" 2>&1 & sp+=($!)
    "$STRANGER" $port 1000 churn 10 > "$tmp/s.churn.$i" 2>&1 & sp+=($!)
done
child_rec "${sp[@]}"
start 2 b
wait_for_line "$tmp/out.0" "ring: node 2 rejoined at iteration [0-9]*" 30 &&
    echo "ok: $(grep -o "node 2 rejoined at iteration [0-9]*.*" "$tmp/out.0" | head -1)"
for p in "${sp[@]}"; do wait "$p" || fail "a stranger was not closed or could not connect: $(cat "$tmp"/s.*)"; done
tail -qn 1 "$tmp"/s.*.0 | sed 's/^/    node 0: /'

# the members hold no more descriptors and threads than before (the ring of view 3 has node 0's
# and node 1's links of view 1), within 10 s
fewer() { # fewer "FDS THREADS" "FDS THREADS": the first holds no more of either than the second
    local a=($1) b=($2)
    [ "${a[0]:-999999}" -le "${b[0]}" ] && [ "${a[1]:-999999}" -le "${b[1]}" ]
}
for i in 0 1; do
    for _ in $(seq 100); do fewer "$(holds "${pid[$i]}")" "${before[$i]}" && break; sleep 0.1; done
    fewer "$(holds "${pid[$i]}")" "${before[$i]}" &&
        echo "ok: node $i holds $(holds "${pid[$i]}") descriptors and threads, before the strangers ${before[$i]}" ||
        fail "node $i holds $(holds "${pid[$i]}") descriptors and threads, before the strangers ${before[$i]}"
done

# 1071 strangers a node: named at a bounded rate, the rest counted
# (once the one-second window of the last line has ended, within 10 s)
for i in 0 1; do
    wait_for_line "$tmp/out.$i" "sec: [0-9]+ more lines about strangers' connections not shown" 10 ||
        fail "node $i did not count the lines it did not show"
    n=$(grep -c "warn  sec: .*connection from" "$tmp/out.$i")
    echo "node $i: $n lines naming strangers; $(grep -o "[0-9]* more lines .*" "$tmp/out.$i" | tail -1)"
    [ "$n" -lt 300 ] || fail "node $i wrote $n lines about 1071 strangers"
done
child_signal TERM "${pid[0]}" "${pid[1]}" "${pid[2]}"
wait "${pid[0]}" "${pid[1]}" "${pid[2]}"
[ "$fails" = 0 ]
