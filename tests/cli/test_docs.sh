#!/usr/bin/env bash
# test_docs.sh HETRING SRC CTEST BUILD: what a newcomer reads names what the build has.
#   cites    every key, hetring flag, test, file, Python name and hetring_ C name that README.md,
#            DESIGN.md, bench/README.md and python/README.md cite exists (doc_refs.py cites: the
#            schema from `hetring config --reference`, each command's --help, `ctest -N`, the
#            tree, the package's source, cluster/hetring.h)
#   usage    every flag in the synopsis and the option list of each command's and bench suite's
#            --help is one its parser takes
#   logging  the levels and subsystems HETRING_LOG takes are named by hetring --help (levels)
#            and README.md's Logging section
#   scripts  no script takes the tail of several files with tail -N, which GNU tail refuses;
#            no bench script's --help cites an issue number; torch_bench.sh -d reports
#            each iteration once; no two example cluster files share a port;
#            examples/torch/run_resnet.sh refuses fewer ITERATIONS than README.md says it needs
#   records  the keys README.md's tables give the metrics records, the summary and bench
#            allreduce --json are those a run writes, both ways (two nodes of a tiny MLP, six
#            iterations; one size of bench allreduce): about two seconds
# Skipped (77) without python3.
set -u
HR=$1 SRC=$2 CTEST=$3 BUILD=$4
command -v python3 > /dev/null || { echo "SKIP: no python3"; exit 77; }
. "$(dirname "$0")/../harness.sh"
refs=$(dirname "$0")/doc_refs.py

"$CTEST" --test-dir "$BUILD" -N | sed -n 's/^ *Test *#[0-9]*: //p' > "$tmp/tests"
python3 "$refs" cites "$HR" "$SRC" "$tmp/tests" || fail "the docs cite what the build lacks"

# usage: each listed flag, given with a value and then --help, is not refused as unknown
n=0
# listed HEADING PREFIX ARGS...: the first words of the lines after HEADING in hetring ARGS --help
listed() {
    "$HR" "${@:3}" --help | awk -v p="$2" -v h="$1" '$0 == h { on = 1; next }
                                                     on && /^  [a-z]/ { print p $1 }'
}
cmds=$(listed Commands: "" | grep -vx 'bench\|help')
[ -x "$(dirname "$HR")/hetring-bench" ] && cmds+=$'\n'$(listed Suites: bench: bench)
for cmd in $cmds; do
    cmd=${cmd/:/ }
    "$HR" $cmd --help > "$tmp/help"
    # the synopsis (up to the first blank line) and the first column of the option lines;
    # the prose may name another command's flags (local's "--metrics FILE needs {id}")
    for o in $({ sed '/^$/q' "$tmp/help"; grep -E '^ +(-[a-z], )?--' "$tmp/help" |
                 awk '{ print ($1 ~ /,$/) ? $2 : $1 }'; } |
               grep -oE -- '(^|[^a-z0-9-])--[a-z][a-z0-9-]*' | sed 's/^[^-]*//' | sort -u); do
        n=$((n + 1))
        "$HR" $cmd "$o" x --help > /dev/null 2> "$tmp/err"
        ! grep -q "unrecognized option\|invalid option" "$tmp/err" ||
            fail "hetring $cmd --help lists $o, which its parser refuses: $(head -1 "$tmp/err")"
    done
done
echo "usage: $n flags of the --help texts taken by their parsers"
[ $n -ge 60 ] || fail "only $n flags in the --help texts (is the pattern stale?)"

# logging: the levels and subsystems HETRING_LOG takes (its error lists them) are the ones
# hetring --help (levels) and README.md's Logging section name
msg=$(HETRING_LOG=bogus "$HR" version 2>&1)
levels=$(sed -n 's/.*levels \([a-z,]*\);.*/\1/p' <<< "$msg" | tr , ' ')
subs=$(sed -n 's/.*subsystems \([a-z,]*\)).*/\1/p' <<< "$msg" | tr , ' ')
[ -n "$levels" ] && [ -n "$subs" ] || fail "HETRING_LOG=bogus: no levels or subsystems in: $msg"
logline=$("$HR" --help | sed -n '/^Logging:/,$p')
readme=$(sed -n '/^## Logging/,/^## /p' "$SRC/README.md")
for l in $levels; do
    grep -q "\b$l\b" <<< "$logline" || fail "hetring --help's Logging line lacks the level $l"
    grep -q "\`$l\`" <<< "$readme" || fail "README.md's Logging section lacks the level $l"
done
for s in $subs; do
    grep -q "\b$s\b" <<< "$readme" || fail "README.md's Logging section lacks the subsystem $s"
done

# scripts: where a documented script fails, it shows the nodes' logs; `tail -20 F1 F2`, the
# obsolete form over several files, is refused by GNU tail ("option used in invalid context"),
# which examples/torch/run.sh and run_resnet.sh printed instead of the logs
bad=$(cd "$SRC" && git grep -nE '\btail -[0-9]+ [^|;]*(\*|" +")' -- '*.sh' 2> /dev/null ||
      grep -rnE --include='*.sh' '\btail -[0-9]+ [^|;]*(\*|" +")' bench examples tests)
[ -z "$bad" ] || fail "tail -N over several files (use tail -n N): $bad"
# a bench script's --help says what it measures, not which issue asked for it ("issue 29's
# targets", "issue 37")
for f in "$SRC"/bench/*.sh; do
    grep -q '^script_hetring' "$f" || continue
    bash "$f" --help > "$tmp/script_help" 2>&1 || fail "$f --help exited $?"
    ! grep -Ein '\bissues? [0-9]' "$tmp/script_help" ||
        fail "$(basename "$f") --help cites an issue number"
done
# bench/torch_bench.sh -d names each iteration it reports once: with -i 10 it printed "1: ...,
# 10: ..., 10: ..." (its marks line, run on losses of several lengths; torch need not be here)
python3 - "$SRC/bench/torch_bench.sh" <<'PY' || fail "torch_bench.sh -d: an iteration reported twice"
import sys
line = next(l for l in open(sys.argv[1]) if l.startswith("marks = "))
for n in (1, 9, 10, 11, 40, 80, 120):
    rel = [0.0] * n
    marks = eval(line[len("marks = "):])
    assert marks == sorted(set(marks)) and marks[-1] == n - 1, (n, marks)
PY
# no two example cluster files give a node the same port on this machine, so that any two
# examples run at once (examples/c/cluster.ini and examples/torch/resnet.ini both took
# 29520-29522, and the second to start stopped with Address already in use)
python3 - "$SRC" <<'PY' || fail "two example cluster files share a port"
import configparser, glob, sys
seen, bad = {}, 0
for f in sorted(glob.glob(sys.argv[1] + "/examples/*/*.ini") +
                glob.glob(sys.argv[1] + "/conf/examples/*.ini")):
    c = configparser.ConfigParser(inline_comment_prefixes=(";", "#"))
    c.read(f)
    for s in c.sections():
        if s.startswith("node.") and c[s].get("port"):
            port = c[s]["port"]
            if port in seen and seen[port] != f:
                print(f"port {port}: {seen[port]} and {f}")
                bad = 1
            seen.setdefault(port, f)
sys.exit(bad)
PY
# run_resnet.sh refuses the ITERATIONS README says are too few at once, before any node starts
# (with 12, node 2 was killed at iteration 10 and waited rejoin_timeout after the others ended)
PYTHON=false timeout 20 bash "$SRC/examples/torch/run_resnet.sh" 12 > "$tmp/resnet" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "ITERATIONS 12 (expected 30 or more" "$tmp/resnet" ||
    fail "run_resnet.sh 12: exited $rc: $(cat "$tmp/resnet")"

# records: two nodes, an evaluation every 2 iterations, so every documented key is written
{ printf '[cluster]\nsecurity = none\nconnect_timeout = 20\n'
  printf '[train]\nlayers = 784,16,10\nsamples = 1000\neval_samples = 100\nglobal_batch = 32\n'
  printf 'iterations = 6\neval_interval = 2\n'
  for i in 0 1; do printf '[node.%d]\nhost = 127.0.0.1\nport = %d\n' $i $((base + i)); done
} > "$tmp/two.ini"
timeout 60 "$HR" local --conf "$tmp/two.ini" -- --quiet --metrics "$tmp/m{id}.jsonl" \
    --summary "$tmp/summary.json" > "$tmp/local.log" 2>&1 ||
    fail "hetring local exited $?: $(tail -3 "$tmp/local.log")"
bench=
if [ -x "$(dirname "$HR")/hetring-bench" ]; then
    bench=$tmp/allreduce.json
    timeout 60 "$HR" bench allreduce --port $((base + 2)) --rate 1 -b 1K -e 1K --iters 1 \
        --warmup 0 --json "$bench" > "$tmp/bench.log" 2>&1 ||
        fail "bench allreduce exited $?: $(tail -3 "$tmp/bench.log")"
fi
[ -s "$tmp/m0.jsonl" ] && [ -s "$tmp/summary.json" ] &&
    python3 "$refs" records "$SRC/README.md" "$tmp/m0.jsonl" "$tmp/summary.json" $bench ||
    fail "README.md's record tables and the records written differ"
[ $fails = 0 ] && echo "PASS" || { echo "$fails failure(s)"; exit 1; }
