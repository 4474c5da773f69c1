#!/usr/bin/env bash
# slow_links.sh OUT [--hetring PATH] [--iters N] [--rates R,...] [--only PART,...]: the
# slow-link figures of bench/README.md ("Slow links") in one command, for the machine they are
# judged on: one node per many-core machine (the GPU machine's 16 cores), which four nodes on
# a 2-core machine cannot show.
#   hetero   for each rate (default 1gbit,10gbit): `bench hetero --netns --link-rate RATE
#            --scenarios demo --policies static,model --iters N` (default 200) with [cluster]
#            wire = fp32, bf16, powersgd and auto; the fp32 call also runs PyTorch DDP (gloo)
#            with the hooks none, fp16 and bf16 (DDP's PowerSGD hook fails in gloo: README)
#   crypto   `bench allreduce --nodes 4 --netns --link-rate 10gbit -b 4M -e 16M -f 4` with
#            security none and encrypt, two rounds alternating
#   kernels  `bench powersgd` on 1, 2, 4, 8 and 16 threads (those up to the cores)
# OUT/summary.md gathers every table; each call's output stays in OUT (one folder or file a
# call). Every call runs under a timeout of its own and a failed call is said in the summary;
# the script goes on. Needs root, `ip` and `tc` for the netns parts, PyTorch for DDP (without
# it the DDP rows say so). About 6 minutes at the defaults on 16 cores.
set -u
usage() { sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
[ $# -ge 1 ] || { usage >&2; exit 2; }
case $1 in -h | --help) usage; exit 0 ;; esac
OUT=$1
shift
SRC=$(cd "$(dirname "$(readlink -f "$0")")/.." && pwd)
HR=$SRC/build/hetring ITERS=200 RATES=1gbit,10gbit ONLY=hetero,crypto,kernels
while [ $# -gt 0 ]; do
    [ $# -ge 2 ] || { echo "slow_links.sh: $1 needs a value" >&2; exit 2; }
    case $1 in
    --hetring) HR=$2 ;;
    --iters) ITERS=$2 ;;
    --rates) RATES=$2 ;;
    --only) ONLY=$2 ;;
    *) echo "slow_links.sh: unknown option '$1'" >&2; usage >&2; exit 2 ;;
    esac
    shift 2
done
[[ $ITERS =~ ^[0-9]+$ ]] && [ "$ITERS" -ge 10 ] || { echo "slow_links.sh: --iters '$ITERS' (expected 10 or more)" >&2; exit 2; }
[ -x "$HR" ] || { echo "slow_links.sh: no hetring at $HR (--hetring PATH)" >&2; exit 2; }
for p in ${ONLY//,/ }; do
    case $p in hetero | crypto | kernels) ;; *) echo "slow_links.sh: --only '$p' (expected hetero, crypto or kernels)" >&2; exit 2 ;; esac
done
want() { [[ ,$ONLY, == *,$1,* ]]; }
. "$SRC/bench/script_args.sh"
# SIGTERM or SIGINT to this script alone stops the call in progress (its timeout and hetring
# get SIGTERM, SIGKILL 10 s later) and exits 143 or 130
script_traps
mkdir -p "$OUT" || exit 1
S=$OUT/summary.md
{
    echo "# Slow links on $(nproc) cores, $(date -u +%F) ($(git -C "$SRC" rev-parse --short HEAD 2>/dev/null || echo '?'))"
    echo
    echo "$("$HR" version 2>/dev/null | head -1); $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
} > "$S"

# run SECONDS LOG CMD...: CMD under a timeout, its output in LOG; a failure goes in the summary
run() {
    local limit=$1 log=$2
    shift 2
    local rc=0
    script_run timeout "$limit" "$@" > "$log" 2>&1 || rc=$?
    [ $rc = 0 ] || printf '\n**failed** (exit %s): `%s`; the end of %s:\n\n```\n%s\n```\n' \
        "$rc" "$*" "${log##*/}" "$(tail -5 "$log")" >> "$S"
    return $rc
}

if want hetero; then
    for rate in ${RATES//,/ }; do
        printf '\n## bench hetero, demo, %s links, %s iterations\n' "$rate" "$ITERS" >> "$S"
        for wire in fp32 bf16 powersgd auto; do
            ddp=()
            [ "$wire" = fp32 ] && ddp=(--ddp --ddp-hooks none,fp16,bf16)
            d=$OUT/hetero-$rate-$wire
            if run 300 "$d.log" "$HR" bench hetero --netns --link-rate "$rate" --scenarios demo \
                --policies static,model --iters "$ITERS" --set "cluster.wire=$wire" "${ddp[@]}" \
                --out "$d"; then
                printf '\nwire = %s:\n\n' "$wire" >> "$S"
                grep -E '^\| (scenario|demo) |^\|---' "$d/report.md" >> "$S"
            fi
        done
    done
fi

if want crypto; then
    printf '\n## bench allreduce, 4 nodes, 10gbit links: security none and encrypt, two rounds\n\n' >> "$S"
    for round in 1 2; do
        for sec in none encrypt; do
            f=$OUT/crypto-$round-$sec
            run 180 "$f.log" "$HR" bench allreduce --nodes 4 --netns --link-rate 10gbit -b 4M -e 16M \
                -f 4 --iters 10 --security "$sec" &&
                { echo "round $round, $sec:"; echo '```'; grep -v '^\s*$' "$f.log" | tail -4; echo '```'; } >> "$S"
        done
    done
fi

if want kernels; then
    t=1 list=1
    while [ $((t * 2)) -le "$(nproc)" ] && [ $((t * 2)) -le 16 ]; do t=$((t * 2)); list=$list,$t; done
    printf '\n## bench powersgd, threads %s\n' "$list" >> "$S"
    run 180 "$OUT/kernels.log" "$HR" bench powersgd --threads "$list" --repeat 7 &&
        { echo; echo '```'; cat "$OUT/kernels.log"; echo '```'; } >> "$S"
fi
echo "summary: $S"
cat "$S"
