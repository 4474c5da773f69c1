#!/usr/bin/env bash
# I4 and I5: a test fault perturbs one node's parameters, or separately one node's decision.
# Either way every node must stop with a clearly worded error, and hetring local exits 1.
set -u
HR=$1
fails=0
fail() { echo "FAIL: $*"; fails=$((fails+1)); }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
base=$((10000 + RANDOM % 22000)) # below the ephemeral range (32768+)
{ printf '[cluster]\nsecurity = none\nconnect_timeout = 20\ntimeout = 20\n'
  printf '[train]\nlayers = 784,16,10\nsamples = 2048\neval_samples = 64\nglobal_batch = 60\n'
  printf 'iterations = 40\nhash_interval = 1\n[controller]\npolicy = proportional\ninterval = 1\n'
  for i in 0 1 2; do printf '[node.%d]\nhost = 127.0.0.1\nport = %d\n' $i $((base+i)); done; } > "$tmp/c.ini"

# clean run: succeeds
timeout 60 "$HR" local --conf "$tmp/c.ini" -- --quiet > "$tmp/ok.log" 2>&1 || fail "clean run failed: $(tail -5 "$tmp/ok.log")"

# I4: node 1's parameters are perturbed at iteration 7
HETRING_FAULT=perturb:1:7 timeout 60 "$HR" local --conf "$tmp/c.ini" -- --quiet > "$tmp/i4.log" 2>&1
rc=$?
[ $rc = 1 ] || fail "I4: local exited $rc, expected 1"
n=$(grep -c "replica check failed at iteration 7: the parameters of node 1 differ" "$tmp/i4.log")
echo "I4: $n node(s) reported the replica mismatch"
[ "$n" -ge 1 ] || fail "I4: no clear replica error: $(tail -8 "$tmp/i4.log")"
grep -q "iteration 8/" "$tmp/i4.log" && fail "I4: training went on past the mismatch"

# I5: node 2's decision is corrupted at iteration 5; the mismatch shows at iteration 6
HETRING_FAULT=decision:2:5 timeout 60 "$HR" local --conf "$tmp/c.ini" -- --quiet > "$tmp/i5.log" 2>&1
rc=$?
[ $rc = 1 ] || fail "I5: local exited $rc, expected 1"
n=$(grep -c "decision check failed at iteration 6: node 2's batch-size controller decided differently" "$tmp/i5.log")
echo "I5: $n node(s) reported the decision mismatch"
[ "$n" -ge 1 ] || fail "I5: no clear decision error: $(tail -8 "$tmp/i5.log")"
echo "$fails failure(s)"
[ "$fails" = 0 ]
