#!/usr/bin/env bash
# test_link_rate.sh HETRING: `hetring bench allreduce --link-rate RATE`.
#  - without --netns, and with rates that are not tc rates (no number, no unit, an unknown
#    unit, out of range), it exits 2 with a message naming --link-rate and the value, before
#    it makes any namespace (no root needed for this part);
#  - with the privilege to make network namespaces, a run with --link-rate 100mbit prints the
#    rate in its header and JSON, and its busbw stays under 100 Mbit/s (the 1 Gbit/s default
#    would allow ten times that); without that privilege this part exits 77 (skipped);
#  - stopped by SIGINT or SIGTERM as `timeout` sends them (the bench, then its process group),
#    it exits 130 or 143 and leaves none of its namespaces behind.
set -u
HR=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# refused WHAT ARGS...: exit status 2 and a message with WHAT on stderr
refused() {
    local want=$1
    shift
    timeout 20 "$HR" bench allreduce "$@" > "$tmp/out" 2> "$tmp/err"
    local rc=$?
    echo "$* -> $rc: $(head -1 "$tmp/err")"
    [ "$rc" = 2 ] || fail "$*: exit status $rc, expected 2 (a usage error)"
    grep -qF -- "$want" "$tmp/err" || fail "$*: the message lacks '$want': $(cat "$tmp/err")"
    grep -q "size" "$tmp/out" && fail "$*: a bench ran"
}
refused "add --netns" --link-rate 10gbit
refused "--link-rate: '10' has no unit" --netns --link-rate 10
refused "--link-rate: 'fast' does not start with a positive number" --netns --link-rate fast
refused "--link-rate: '-1gbit' does not start with a positive number" --netns --link-rate -1gbit
refused "--link-rate: '10gbitz' has an unknown unit 'gbitz'" --netns --link-rate 10gbitz
refused "--link-rate: '10kbit' is 1e+04 bit/s, outside 1mbit to 1tbit" --netns --link-rate 10kbit
refused "--link-rate: '2tbit' is 2e+12 bit/s, outside 1mbit to 1tbit" --netns --link-rate 2tbit
refused "--link-rate: ';reboot' does not start" --netns --link-rate ';reboot'
"$HR" bench allreduce --help | grep -q -- "--link-rate RATE" || fail "the usage does not list --link-rate"
if [ "$fails" != 0 ]; then
    echo "$fails failure(s)"
    exit 1
fi

ns=hrlr$$
if ! ip netns add "$ns" 2>/dev/null; then
    echo "SKIP: cannot create network namespaces here (the option checks above passed)"
    exit 77
fi
ip netns del "$ns"
# 2 MiB over a 100 Mbit/s link: about 0.17 s per all-reduce of two nodes
timeout 90 "$HR" bench allreduce --netns --link-rate 100mbit --nodes 2 -b 2M -e 2M --iters 3 \
    --warmup 1 --json "$tmp/j" > "$tmp/run" 2>&1 || fail "the netns run exited $?: $(tail -3 "$tmp/run")"
grep "^#" "$tmp/run" | head -2
grep -q "^# link rate = 0.0125 GB/s (100 Mbit/s, --link-rate 100mbit" "$tmp/run" ||
    fail "the header does not give the link rate: $(grep '^# link' "$tmp/run")"
grep -q '"link_rate_bps": 100000000' "$tmp/j" || fail "the JSON lacks link_rate_bps: $(cat "$tmp/j")"
bus=$(sed -n 's/.*"busbw": \([0-9.]*\).*/\1/p' "$tmp/j")
echo "busbw at 2 MiB: $bus GB/s over a 0.0125 GB/s link"
awk -v b="${bus:-x}" 'BEGIN { exit !(b ~ /^[0-9.]+$/ && b > 0.003 && b <= 0.0125 * 1.1) }' ||
    fail "busbw $bus GB/s is not within (0.003, 0.01375] GB/s: the links do not run at 100 Mbit/s"
# a run stopped as `timeout -s SIG` stops it (SIG to the bench, then to its process group, in
# which the bench's own cleanup may have started a command) exits 128 + SIG and leaves none of
# its namespaces hrbPID-*: runs left one where the group's signal killed the `ip netns del`
# of the bench's cleanup
for gap in 0 0.005 0.02; do # between the two signals: the bench's cleanup is under way
    for sig in INT TERM; do
        setsid "$HR" bench allreduce --netns --nodes 2 -b 16M -e 16M --iters 200 --rate 1 \
            > "$tmp/stop" 2>&1 &
        pid=$!
        for _ in $(seq 100); do grep -q "^# *size" "$tmp/stop" && break; sleep 0.1; done
        sleep 0.3
        kill -"$sig" "$pid"
        sleep "$gap"
        kill -"$sig" -- -"$pid" 2> /dev/null
        wait "$pid"
        rc=$?
        want=$((128 + $(kill -l "$sig")))
        left=$(ip netns list | awk -v p="hrb$((pid % 100000))-" 'index($1, p) == 1 { print $1 }' | tr '\n' ' ')
        [ "$rc" = "$want" ] && [ -z "$left" ] ||
            fail "bench allreduce --netns stopped by SIG$sig: exit $rc (expected $want), namespaces left: '$left'"
        for n in $left; do ip netns del "$n"; done
    done
done
ip netns list | grep -q "^hrb" && echo "note: namespaces named hrb* exist (another bench running?)"
echo "$fails failure(s)"
[ "$fails" = 0 ]
