#!/usr/bin/env bash
# test_bench_elastic.sh HETRING: `hetring bench elastic` end to end on this machine, one kill run
# and one stop run of 4 nodes (the MLP of bench/hetero.ini, 300 iterations): every run completes,
# the JSON has one object per run with every documented key, no sample is missing or
# duplicated, the replicas end identical, the times are positive and the final loss matches the
# uninterrupted reference; the table has its median row; the plots are drawn where gnuplot is;
# no node is left running. Not a timing test: the targets of issue 12 are checked by hand.
set -u
HR=$1
. "$(dirname "$0")/../harness.sh" # the bench's nodes take base.. (--port)
on_exit='pkill -KILL -f "$tmp/" 2>/dev/null'
field() { echo "$1" | sed -n "s/.*\"$2\": \([^,}]*\).*/\1/p"; }
in_range() {
    [[ $1 =~ ^-?[0-9]+(\.[0-9]+)?(e[-+]?[0-9]+)?$ ]] && awk -v v="$1" -v lo="$2" -v hi="$3" 'BEGIN { exit !(v >= lo && v <= hi) }'
}

for event in kill stop; do
    out=$tmp/$event
    # stop: node 2 stays stopped 5 s, past the bench's read timeout (cluster.timeout = 2) and
    # the election after it, so that it is left out before it is continued
    after=1; [ $event = stop ] && after=5
    timeout 240 "$HR" bench elastic --port "$base" --out "$out" --json "$out.json" --runs 1 --iters 300 \
        --$event 2@60 --rejoin-after $after --deadline 120 > "$out.log" 2>&1 ||
        { fail "bench elastic --$event exited $?"; cat "$out.log"; }
    grep -q "^port = $((base + 3))\$" "$out/elastic.ini" ||
        fail "$event: --port $base: elastic.ini has ports $(grep '^port' "$out/elastic.ini" | tr '\n' ' ')"
    line=$(grep '"event"' "$out.json" 2>/dev/null)
    [ "$(grep -c '"event"' "$out.json" 2>/dev/null)" = 1 ] || fail "$event: expected 1 JSON object"
    for key in event detect_s resume_s join_s state_bytes samples_missing samples_duplicated \
        replicas_identical throughput_before throughput_after final_loss reference_loss; do
        echo "$line" | grep -q "\"$key\": " || fail "$event: key $key missing"
    done
    [ "$(field "$line" ok)" = true ] || fail "$event: the run did not complete: $(tail -5 "$out.log")"
    [ "$(field "$line" event)" = "\"$event\"" ] || fail "$event: event is $(field "$line" event)"
    [ "$(field "$line" samples_missing)" = 0 ] && [ "$(field "$line" samples_duplicated)" = 0 ] ||
        fail "$event: samples missing $(field "$line" samples_missing), duplicated $(field "$line" samples_duplicated)"
    [ "$(field "$line" replicas_identical)" = true ] || fail "$event: replicas differ"
    in_range "$(field "$line" join_s)" 1e-6 60 || fail "$event: join_s '$(field "$line" join_s)' not in (0, 60] s"
    # a stopped node that the survivors never left out (no view without it before its SIGCONT)
    # has no detection to measure: null is the bench's right answer then, and says so in the
    # table; the ring's own tests (tests/dist/test_elastic.sh stop) judge whether it should be
    if [ $event = stop ] && [ "$(field "$line" detect_s)" = null ]; then
        echo "NOTE: stop: node 2 was not left out while stopped (detect_s null); see $out/run1/n0.log"
    else
        for key in detect_s resume_s; do
            in_range "$(field "$line" $key)" 1e-6 60 || fail "$event: $key '$(field "$line" $key)' not in (0, 60] s"
        done
        in_range "$(field "$line" state_bytes)" 1e5 1e9 || fail "$event: state_bytes '$(field "$line" state_bytes)'"
    fi
    for key in throughput_before throughput_after; do
        in_range "$(field "$line" $key)" 1 1e9 || fail "$event: $key '$(field "$line" $key)' not positive"
    done
    fl=$(field "$line" final_loss) rl=$(field "$line" reference_loss)
    in_range "$fl" 1e-9 100 && in_range "$rl" 1e-9 100 &&
        awk -v a="$fl" -v b="$rl" 'BEGIN { d = (a - b) / b; exit !(d < 1e-3 && d > -1e-3) }' ||
        fail "$event: final loss $fl against the reference $rl (relative 1e-3)"
    grep -q '^median ' "$out.log" || fail "$event: no median row in the table"
    if command -v gnuplot > /dev/null; then
        for png in elastic-throughput.png elastic-batch.png; do
            [ -s "$out/run1/$png" ] || fail "$event: $png not drawn"
        done
    fi
    [ -z "$(pgrep -f "$out/elastic.ini")" ] || fail "$event: nodes left running: $(pgrep -af "$out/elastic.ini")"
    cat "$out.log"
done

# a fault past the run's end is refused before anything runs
"$HR" bench elastic --iters 100 --kill 2@100 > "$tmp/bad.out" 2>&1; rc=$?
[ $rc = 2 ] && grep -q "past --iters" "$tmp/bad.out" || fail "--kill 2@100 of 100 iterations: exit $rc, $(cat "$tmp/bad.out")"
"$HR" bench elastic --kill 2 > "$tmp/bad2.out" 2>&1; rc=$?
[ $rc = 2 ] && grep -q "expected ID@ITER" "$tmp/bad2.out" || fail "--kill 2: exit $rc, $(cat "$tmp/bad2.out")"
# --kill with --stop is refused (the last one given was run, silently), and so is a negative
# --rejoin-after, -1 too (it stood for the default)
for bad in "--kill 1@5 --stop 1@5|--kill and --stop: a run has one fault" \
    "--rejoin-after -1|--rejoin-after -1 (expected 0..3600 seconds)"; do
    # shellcheck disable=SC2086
    timeout 30 "$HR" bench elastic --iters 8 --runs 1 --out "$tmp/bad3" ${bad%%|*} > "$tmp/bad3.out" 2>&1
    rc=$?
    [ $rc = 2 ] && grep -q -- "${bad#*|}" "$tmp/bad3.out" || fail "${bad%%|*}: exit $rc, $(head -3 "$tmp/bad3.out")"
done

# with HR_KEEP=DIR the runs' files are copied there first, for a look at a failure
[ -n "${HR_KEEP:-}" ] && rm -rf "$HR_KEEP" && cp -r "$tmp" "$HR_KEEP"
echo "$fails failure(s)"
[ "$fails" = 0 ]
