#!/usr/bin/env bash
# test_bench_mixed.sh HETRING: bench hetero's mixed scenario (node 0 on cuda:0, three CPU nodes,
# real speeds). Not a timing test: it checks what the scenario runs and reports.
#   no GPU   where cuda:0 cannot be used the scenario is refused before anything runs (exit 2),
#            with the reason (skipped where a GPU is present)
#   emulated with the host-emulated GPU of the test hooks in node 0's place: node 0's cluster
#            file says device = cuda:0 and no other's does, every node's own throughput is
#            reported, the ideal speed-up is sum / (4 min) of those rates, and the JSON rows
#            of static and model say emulated: false
#   help     --help lists it
set -u
HR=$1
. "$(dirname "$0")/../harness.sh" # the bench's nodes take base..base+4 (--port)
small=(--policies model --iters 40 --batch 128 --layers 784,32,10 --port "$base")

msg=$("$HR" bench hetero --scenarios mixed "${small[@]}" --out "$tmp/no" 2>&1)
rc=$?
if [ $rc = 2 ]; then
  echo "$msg" | grep -q "scenario mixed needs cuda:0: " || fail "no GPU: no reason given: $msg"
elif ! nvidia-smi -L > /dev/null 2>&1; then
  fail "no GPU here, yet the mixed scenario ran (exit $rc): $msg"
fi
[ -d "$tmp/no" ] && [ $rc = 2 ] && ls "$tmp/no"/*.ini > /dev/null 2>&1 &&
  fail "no GPU: a run was started before the refusal"

HETRING_FAULT=emu_device:0:0.05 "$HR" bench hetero --scenarios mixed "${small[@]}" \
  --out "$tmp/emu" --json "$tmp/emu.json" > "$tmp/emu.out" 2>&1 ||
  fail "emulated: the bench failed: $(tail -5 "$tmp/emu.out")"
grep -q '^device = cuda:0$' "$tmp/emu/mixed-static.ini" ||
  fail "emulated: node 0's cluster file has no device = cuda:0"
[ "$(grep -c '^device = cuda:0$' "$tmp/emu/mixed-static.ini")" = 1 ] ||
  fail "emulated: more than one GPU node in the cluster file"
line=$(grep "^mixed: each node's own compute throughput" "$tmp/emu.out")
echo "$line"
echo "$line" | awk '{
    n = 0; for (i = 1; i <= NF; i++) if ($i ~ /^samples\/s[,;]?$/) r[n++] = $(i - 1)
    match($0, /= [0-9.]+x/); ideal = substr($0, RSTART + 2, RLENGTH - 3) + 0
    s = 0; m = 1e300; for (i = 0; i < n; i++) { s += r[i]; if (r[i] < m) m = r[i] }
    want = s / (4 * m); d = ideal - want; if (d < 0) d = -d
    exit !(n == 4 && m > 0 && d <= 0.01 * want + 0.005)
  }' || fail "emulated: the ideal speed-up is not sum/(4 min) of the reported rates: $line"
for pol in static model; do
  grep -q "\"scenario\": \"mixed\", \"policy\": \"$pol\".*\"emulated\": false" "$tmp/emu.json" ||
    fail "emulated: no $pol row with emulated: false in the JSON"
done

"$HR" bench hetero --help | grep -q "interference,mixed" || fail "--help does not list mixed"
[ "$fails" = 0 ]
