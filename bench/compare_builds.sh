#!/usr/bin/env bash
# Two builds of hetring side by side on this machine, interleaved: the before/after check of a
# change that must not make loopback slower. See --help.
set -euo pipefail

repeats=5
nodes="2 4"
min_bytes=1M
max_bytes=64M
scenarios=homogeneous,graded
policies=model
iters=300
do_allreduce=1
do_hetero=1
outdir=""

usage() {
    cat <<EOF
usage: bench/compare_builds.sh [--repeats K] [--nodes "2 4"] [-b 1M] [-e 64M]
                               [--scenarios S,...] [--policies P,...] [--iters N]
                               [--no-allreduce] [--no-hetero] [--out DIR] OLD NEW

OLD and NEW are build folders, each holding a hetring (e.g. a build of the commit before a
change and one of the change). Each of K rounds runs, for OLD and NEW in an order that
alternates every round (so the machine's noise hits both alike):

  allreduce  BUILD/hetring bench allreduce --nodes N --security none -b 1M -e 64M -f 4
             for each N of --nodes (busbw per size)
  hetero     BUILD/hetring bench hetero --scenarios homogeneous,graded --policies model
             --iters 300 (samples/s of static and of each policy)

then prints the median of each figure for OLD and NEW and their ratio NEW/OLD (above 1:
NEW is faster), with the per-round values. Run it on an otherwise idle machine; a ratio
within the spread of the rounds is no difference.

  --repeats K       rounds (default 5)
  --nodes "N ..."   node counts of the all-reduce (default "2 4")
  -b, -e SIZE       smallest and largest all-reduce (default 1M and 64M; steps of x4)
  --scenarios S     bench hetero's scenarios (default homogeneous,graded)
  --policies P      bench hetero's policies besides static (default model)
  --iters N         bench hetero's iterations per run (default 300)
  --no-allreduce    leave the all-reduce out
  --no-hetero       leave bench hetero out
  --out DIR         keep every run's output there (default: a temporary folder, removed)
  -h, --help        this text
EOF
}

while [ $# -gt 0 ]; do
    case $1 in
    --repeats) repeats=$2; shift 2 ;;
    --nodes) nodes=$2; shift 2 ;;
    -b | --min-bytes) min_bytes=$2; shift 2 ;;
    -e | --max-bytes) max_bytes=$2; shift 2 ;;
    --scenarios) scenarios=$2; shift 2 ;;
    --policies) policies=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --no-allreduce) do_allreduce=0; shift ;;
    --no-hetero) do_hetero=0; shift ;;
    --out) outdir=$2; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    -*) echo "compare_builds.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) break ;;
    esac
done
[ $# = 2 ] || { echo "compare_builds.sh: give two build folders, OLD and NEW (see --help)" >&2; exit 2; }
case $repeats in '' | *[!0-9]* | 0) echo "compare_builds.sh: --repeats must be a positive integer" >&2; exit 2 ;; esac
old=$1 new=$2
for b in "$old" "$new"; do
    [ -x "$b/hetring" ] || { echo "compare_builds.sh: $b/hetring is not an executable" >&2; exit 2; }
done
command -v python3 > /dev/null || { echo "compare_builds.sh: needs python3 for the tables" >&2; exit 2; }
. "$(dirname "$0")/script_args.sh"
# SIGTERM or SIGINT to this script alone stops the run in progress (SIGKILL 10 s later) and
# exits 143 or 130; a temporary folder goes once the run is gone
if [ -z "$outdir" ]; then
    outdir=$(mktemp -d)
    script_traps 'rm -rf "$outdir"'
else
    script_traps
fi
mkdir -p "$outdir"

# run WHICH BUILD ROUND: one round of the suites for one build; fails loudly with its log
run() {
    local which=$1 build=$2 r=$3 n log
    if [ "$do_allreduce" = 1 ]; then
        for n in $nodes; do
            log="$outdir/$which-ar$n-$r"
            script_run "$build/hetring" bench allreduce --nodes "$n" --security none -b "$min_bytes" \
                -e "$max_bytes" -f 4 --json "$log.json" > "$log.out" 2>&1 ||
                { echo "compare_builds.sh: $build: bench allreduce --nodes $n failed:" >&2; tail -5 "$log.out" >&2; exit 1; }
        done
    fi
    if [ "$do_hetero" = 1 ]; then
        log="$outdir/$which-het-$r"
        script_run "$build/hetring" bench hetero --scenarios "$scenarios" --policies "$policies" \
            --iters "$iters" --out "$log.d" --json "$log.json" > "$log.out" 2>&1 ||
            { echo "compare_builds.sh: $build: bench hetero failed:" >&2; tail -5 "$log.out" >&2; exit 1; }
    fi
}

for ((r = 1; r <= repeats; r++)); do
    if ((r % 2)); then run old "$old" "$r"; run new "$new" "$r"; else run new "$new" "$r"; run old "$old" "$r"; fi
    echo "round $r of $repeats done" >&2
done

python3 - "$outdir" "$repeats" "$old" "$new" <<'EOF'
import glob, json, statistics, sys

out, k, old, new = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]

def objects(path):
    text = open(path).read().strip()
    if text.startswith('['):
        return json.loads(text)
    return [json.loads(line) for line in text.splitlines() if line.strip()]

def collect(which):
    fig = {}  # (kind, key) -> [value per round]
    for r in range(1, k + 1):
        for path in glob.glob(f"{out}/{which}-ar*-{r}.json"):
            for o in objects(path):
                fig.setdefault(("all-reduce busbw GB/s", f"{o['nodes']} nodes, {o['bytes']} B"), []).append(o["busbw"])
        for path in glob.glob(f"{out}/{which}-het-{r}.json"):
            for o in objects(path):
                fig.setdefault(("bench hetero samples/s", f"{o['scenario']}, {o['policy']}"), []).append(o["samples_per_s"])
    return fig

a, b = collect("old"), collect("new")
print(f"OLD = {old}\nNEW = {new}\n{k} rounds, interleaved; medians\n")
print("| figure | case | OLD | NEW | NEW/OLD | OLD rounds | NEW rounds |")
print("|---|---|---|---|---|---|---|")
def key(kc):
    kind, case = kc
    parts = case.replace(",", "").split()
    return (kind, [int(p) if p.isdigit() else p for p in parts])
for kc in sorted(a, key=key):
    if kc not in b:
        continue
    ma, mb = statistics.median(a[kc]), statistics.median(b[kc])
    fmt = (lambda v: f"{v:.3f}") if kc[0].startswith("all") else (lambda v: f"{v:.0f}")
    print(f"| {kc[0]} | {kc[1]} | {fmt(ma)} | {fmt(mb)} | {mb / ma:.3f} | "
          f"{' '.join(fmt(v) for v in a[kc])} | {' '.join(fmt(v) for v in b[kc])} |")
EOF
