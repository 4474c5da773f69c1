#!/usr/bin/env bash
# test_bench_aliases.sh HETRING: `hetring bench allreduce` takes nccl-tests' -b/-e/-f (smallest
# size, largest size, step factor; K/M/G suffixes, value attached or apart) as aliases of
# --min-bytes/--max-bytes/--step-factor, and its usage lists every option its parser takes;
# `hetring bench help [SUITE]` is `hetring bench [SUITE] --help`.
# Two nodes on loopback, sizes of a few KiB: about a second.
set -u
HR=$(realpath "$1")
. "$(dirname "$0")/../harness.sh"

# sizes RUN-ARGS...: the sizes column of the table, one line
sizes() {
    timeout 60 "$HR" bench allreduce --port "$base" --rate 1 --iters 1 --warmup 0 "$@" \
        > "$tmp/out" 2> "$tmp/err" || { fail "bench allreduce $* exited $?: $(cat "$tmp/err")"; return; }
    grep -v '^#' "$tmp/out" | awk '{ print $1 }' | tr '\n' ' '
}
got=$(sizes -b 1K -e 4K -f 2)
[ "$got" = "1024 2048 4096 " ] || fail "-b 1K -e 4K -f 2: sizes '$got', expected 1024 2048 4096"
got=$(sizes -b1K -e16K -f4)
[ "$got" = "1024 4096 16384 " ] || fail "-b1K -e16K -f4: sizes '$got', expected 1024 4096 16384"
got=$(sizes --min-bytes 2K --max-bytes 18K --step-factor 3)
[ "$got" = "2048 6144 18432 " ] || fail "long names: sizes '$got', expected 2048 6144 18432"
# an alias is only an option where an option can be: the value of --json stays a file name
got=$(cd "$tmp" && sizes --json -b -e 8 -b 8)
[ "$got" = "8 " ] && [ -s "$tmp/-b" ] || fail "--json -b: sizes '$got', file: $(ls "$tmp")"
"$HR" bench allreduce -f 1 > /dev/null 2> "$tmp/err"
rc=$?
[ $rc = 2 ] && grep -q -- "--step-factor '1' (expected 2..1024)" "$tmp/err" ||
    fail "-f 1: exit $rc (expected 2), $(cat "$tmp/err")"

# the usage names every option the parser takes, and the parser takes every one it names
"$HR" bench allreduce --help > "$tmp/help" || fail "--help exited $?"
sed '/^$/q' "$tmp/help" > "$tmp/synopsis"
for opt in --nodes --security -b --min-bytes -e --max-bytes -f --step-factor --iters --warmup \
           --json --netns --rate --segment --port --help; do
    [[ $opt = --help ]] || grep -q -- "[[|]$opt\b" "$tmp/synopsis" || fail "the synopsis lacks $opt"
    grep -Eq -- "^  (-[a-z], )?$opt\b" "$tmp/help" || fail "no line of the usage explains $opt"
done
for opt in $(grep -o -- '--[a-z-]*' "$tmp/help" | sort -u); do
    "$HR" bench allreduce "$opt" x --help > /dev/null 2> "$tmp/err"
    ! grep -q "unrecognized option" "$tmp/err" || fail "usage lists $opt, which the parser refuses"
done
# hetring --help's line for bench names every suite hetring bench --help lists (it named three)
line=$("$HR" --help | grep '^  bench ')
suites=$("$HR" bench --help | awk '/^Suites:/ { on = 1; next } on && /^  [a-z]/ { print $1 }')
[ -n "$suites" ] || fail "hetring bench --help lists no suite"
for s in $suites; do
    grep -qw -- "$s" <<< "$line" || fail "hetring --help does not name the bench suite $s: '$line'"
done
# hetring bench help [SUITE] answers as hetring help [COMMAND] does (it said "unknown suite
# 'help'"): the usage, or the suite's
"$HR" bench help > "$tmp/h1" 2>&1 || fail "bench help exited $?: $(cat "$tmp/h1")"
"$HR" bench --help > "$tmp/h2" 2>&1
cmp -s "$tmp/h1" "$tmp/h2" || fail "bench help is not bench --help: $(cat "$tmp/h1")"
"$HR" bench help allreduce > "$tmp/h1" 2>&1 || fail "bench help allreduce exited $?"
cmp -s "$tmp/h1" "$tmp/help" || fail "bench help allreduce is not allreduce --help: $(cat "$tmp/h1")"
"$HR" bench help nosuch > /dev/null 2> "$tmp/err"
rc=$?
[ $rc = 2 ] && grep -q "unknown suite 'nosuch'" "$tmp/err" || fail "bench help nosuch: exit $rc, $(cat "$tmp/err")"
[ $fails = 0 ] && echo "PASS" || { echo "$fails failure(s)"; exit 1; }
