#!/usr/bin/env bash
# test_hetero_netns.sh HETRING: `hetring bench hetero --netns` and `hetring local --netns`.
#  - refused, exit 2, before anything runs: --link-rate or --link-delay without --netns, a rate
#    or a delay that tc cannot take, --ddp-hooks without --ddp or naming no DDP hook, a --netns
#    prefix that is no name, and
#    (hetring local) a --netns whose namespace for a node does not exist, naming the node and
#    the path (no root needed for this part);
#  - with the privilege to make network namespaces: one short run over 100 Mbit/s links says
#    so in its header and report, its nodes ran at 10.77.0.1-4 (in their namespaces), its
#    throughput is what 100 Mbit/s allows (the MLP's 2.7 MB gradient is about 0.32 s of wire
#    a step: at most 1,600 samples/s, where loopback gives several times that), DDP too where
#    PyTorch is installed, and the namespaces are gone afterwards; without that privilege this
#    part exits 77 (skipped).
set -u
HR=$1
. "$(dirname "${BASH_SOURCE[0]}")/../harness.sh"

# refused WHAT CMD...: exit status 2 and a message with WHAT on stderr
refused() {
    local want=$1
    shift
    timeout 20 "$HR" "$@" > "$tmp/out" 2> "$tmp/err"
    local rc=$?
    echo "$* -> $rc: $(head -1 "$tmp/err")"
    [ "$rc" = 2 ] || fail "$*: exit status $rc, expected 2 (a usage error)"
    grep -qF -- "$want" "$tmp/err" || fail "$*: the message lacks '$want': $(cat "$tmp/err")"
}
H=(bench hetero --out "$tmp/o" --port "$base")
refused "--link-rate shapes the links of --netns" "${H[@]}" --link-rate 1gbit
refused "--link-delay shapes the links of --netns" "${H[@]}" --link-delay 1ms
refused "--link-rate: '10' has no unit" "${H[@]}" --netns --link-rate 10
refused "--link-delay: '5' needs a unit" "${H[@]}" --netns --link-delay 5
refused "--link-delay: '2s' is over 1 s" "${H[@]}" --netns --link-delay 2s
refused "--link-delay: ';ls' does not start with a number" "${H[@]}" --netns --link-delay ';ls'
refused "--ddp-hooks picks the variants of --ddp" "${H[@]}" --ddp-hooks none
refused "--ddp-hooks: 'powersgd:0' (expected none, fp16, bf16 or powersgd:R" "${H[@]}" --ddp \
    --ddp-hooks none,powersgd:0
refused "--ddp-hooks: 'zip'" "${H[@]}" --ddp --ddp-hooks fp16,zip
ls "$tmp/o" 2> /dev/null | grep -q . && fail "a refused bench wrote $tmp/o"
conf=$(dirname "${BASH_SOURCE[0]}")/../../conf/examples/demo.ini
refused "--netns 'a b' (expected 1-31 letters" local --conf "$conf" --netns 'a b'
refused "[node.0]: --netns hrnone$$: no network namespace /var/run/netns/hrnone$$-0" \
    local --conf "$conf" --netns "hrnone$$"
"$HR" bench hetero --help | grep -q -- "--link-delay D" || fail "the usage does not list --link-delay"

ns=hrhn$$
if ! ip netns add "$ns" 2> /dev/null; then
    echo "SKIP: cannot create network namespaces here (the option checks above passed)"
    [ "$fails" = 0 ] || exit 1
    exit 77
fi
ip netns del "$ns"
ip netns list | awk '{ print $1 }' | grep "^hrb" | sort > "$tmp/ns-before"
# with PyTorch, DDP runs over the same links
py=()
for p in python3 /usr/bin/python3; do
    command -v "$p" > /dev/null && "$p" -c "import torch" 2> /dev/null && { py=(--ddp --python "$(command -v "$p")"); break; }
done
[ ${#py[@]} = 0 ] && echo "no PyTorch here: the run leaves DDP out"
timeout 200 "$HR" bench hetero --netns --link-rate 100mbit --link-delay 1ms --scenarios homogeneous \
    --policies static --iters 20 --out "$tmp/run" --json "$tmp/j" "${py[@]}" > "$tmp/stdout" 2>&1 ||
    fail "the netns run exited $?: $(tail -3 "$tmp/stdout")"
cat "$tmp/stdout"
grep -q "^# links: veth in network namespaces, 100 Mbit/s" "$tmp/stdout" ||
    fail "the header does not give the links: $(grep '^# links' "$tmp/stdout")"
grep -q "^links: veth in network namespaces, 100 Mbit/s" "$tmp/run/report.md" ||
    fail "report.md does not give the links"
for k in 0 1 2 3; do
    grep -A2 "^\[node.$k\]" "$tmp/run/homogeneous-static.ini" | grep -q "^host = 10.77.0.$((k + 1))$" ||
        fail "the run's cluster file does not put node $k at 10.77.0.$((k + 1))"
done
grep -q "ring formed" "$tmp/run/homogeneous-static.log" || fail "no ring formed: $(tail -3 "$tmp/run/homogeneous-static.log")"
sps=$(sed -n 's/.*"samples_per_s": \([0-9.]*\).*/\1/p' "$tmp/j" | head -1)
echo "throughput over 100 Mbit/s links: ${sps:-none} samples/s (at most about 1,600 there)"
awk -v s="${sps:-x}" 'BEGIN { exit !(s ~ /^[0-9.]+$/ && s > 0 && s <= 2000) }' ||
    fail "${sps:-no} samples/s: not what 100 Mbit/s links allow (the links are not shaped?)"
if [ ${#py[@]} != 0 ]; then
    ddp=$(sed -n 's/.*"policy": "ddp-gloo", "samples_per_s": \([0-9.]*\).*/\1/p' "$tmp/j")
    echo "DDP over the same links: ${ddp:-none} samples/s"
    awk -v s="${ddp:-x}" 'BEGIN { exit !(s ~ /^[0-9.]+$/ && s > 0 && s <= 2000) }' ||
        fail "DDP: ${ddp:-no} samples/s: not a run over 100 Mbit/s links"
fi
ip netns list | awk '{ print $1 }' | grep "^hrb" | sort > "$tmp/ns-after"
# new namespaces hrbPID-* whose bench still runs are another bench's (a second checkout's tests
# on this machine), not left by this one, which has exited
new=
for n in $(comm -13 "$tmp/ns-before" "$tmp/ns-after"); do
    p=${n#hrb}
    p=${p%%-*}
    grep -q "hetring" "/proc/$p/comm" 2> /dev/null || new="$new $n"
done
[ -z "$new" ] || fail "the bench left namespaces behind:$new"
echo "$fails failure(s)"
[ "$fails" = 0 ]
