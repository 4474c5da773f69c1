#!/usr/bin/env bash
# hetring local under a low open-file limit: the launcher holds a pipe per node. Where the hard
# limit allows, it raises the soft one and the nodes run; where it does not, it refuses before
# any node starts, naming RLIMIT_NOFILE (ulimit -n) and the count it needs (it said "cannot
# start node 24: pipe: Too many open files", 24 nodes already started).
# HR, fail, $tmp and the port block `base` from the shared setup
. "$(dirname "${BASH_SOURCE[0]}")/../dist/lib.sh"
write_conf "$tmp/c.ini" 8 20 <<EOF2
$(mlp_train 784,16,10 256 32 2)
[controller]
policy = static
EOF2
hard=$(ulimit -Hn)
[ "$hard" = unlimited ] || [ "$hard" -ge 256 ] || { echo "SKIP: hard open-file limit $hard"; exit 77; }
# the hard limit at 12: 8 nodes need more in the launcher alone
(ulimit -n 12 && exec timeout 60 "$HR" local --conf "$tmp/c.ini" -- --quiet) > "$tmp/low" 2>&1
rc=$?
[ $rc = 2 ] || fail "ulimit -n 12, 8 nodes: exited $rc, expected 2"
grep -Eq "error cli: the open-file limit \(RLIMIT_NOFILE, ulimit -n\) is 12 \(hard 12\), but starting 8 nodes needs [0-9]+ descriptors .*raise it \(ulimit -n [0-9]+ or more\)" "$tmp/low" ||
  fail "ulimit -n 12: no line naming the limit and the count: $(cat "$tmp/low")"
! grep -q "^node" "$tmp/low" || fail "ulimit -n 12: nodes started: $(grep "^node" "$tmp/low" | head -3)"
# the soft limit at 12, the hard one above: raised, and the nodes train
(ulimit -Sn 12 && exec timeout 60 "$HR" local --conf "$tmp/c.ini" -- --quiet) > "$tmp/soft" 2>&1 ||
  fail "soft limit 12: exited $?: $(grep -v '^node' "$tmp/soft" | tail -3)"
grep -q "info  cli: raised the open-file limit (RLIMIT_NOFILE) from 12 to [0-9]*" "$tmp/soft" ||
  fail "soft limit 12: the launcher did not say it raised the limit: $(head -3 "$tmp/soft")"
grep -q "done: 2 iterations" "$tmp/soft" || fail "soft limit 12: the run did not end: $(tail -3 "$tmp/soft")"
[ $fails = 0 ] && echo "local under a low open-file limit: ok"
exit $((fails > 0))
