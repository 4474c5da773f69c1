#!/usr/bin/env bash
# Side-by-side all-reduce comparison on this machine: hetring's ring against Gloo (PyTorch
# torch.distributed) and Open MPI (MPI_Allreduce over TCP on loopback). See --help.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
repeats=5
rate=""
nodes_list="2 4"
bytes=64M
lat_iters=5000
do_latency=1
hetring="$root/build/hetring"
python=""
outdir=""
lock=/tmp/hetring-bench.lock
run_timeout=600
mpi_args="--mca mpi_yield_when_idle 1"

usage() {
    cat <<EOF
usage: bench/compare_allreduce.sh [--repeats K] [--rate R] [--nodes "2 4"] [--bytes 64M]
                                  [--lat-iters I] [--no-latency] [--hetring PATH]
                                  [--python PATH] [--mpi-args ARGS] [--out DIR] [--lock FILE]

All-reduce (float32, sum, N local processes on loopback) of three implementations, side by
side on this machine, in the nccl-tests convention: time = slowest node's mean per all-reduce,
algbw = bytes / time, busbw = algbw * 2(N-1)/N, GB = 1e9 bytes; every run checks exact sums.

  hetring   build/hetring bench allreduce --nodes N --security none --min-bytes B
            --max-bytes B --rate R
  gloo      bench/py/gloo_allreduce.py --nodes N --bytes B (torch.distributed, gloo backend)
  Open MPI  mpirun -np N --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo
            --mca mpi_yield_when_idle 1 bench/mpi/mpi_allreduce --bytes B (built here with
            bench/mpi/build.sh; TCP over lo only, no shared memory, no UCX)

For each N, K repeats of the three, interleaved (the order rotates every repeat) so that the
machine's noise hits them alike; then, at N=2, the latency of a 4-byte all-reduce with I
timed iterations each. Every timed run holds flock $lock, one at a time. Prints a Markdown
table of the medians with the per-run values. A baseline whose tool is missing (no torch, no
mpirun/mpicc) is skipped with a message.

  --repeats K     runs of each implementation per configuration (default $repeats)
  --rate R        R in GB/s (one TCP stream on loopback); default: measured once here with
                  iperf3 (3 s, as hetring bench allreduce does; its output in DIR/iperf3.json),
                  else unknown
  --nodes LIST    node counts, space or comma separated (default "$nodes_list")
  --bytes B       bandwidth size, K/M/G suffixes (default $bytes); 20 timed iterations, 3 warm-up
  --lat-iters I   timed iterations of the 4-byte latency runs (default $lat_iters)
  --no-latency    skip the 4-byte latency comparison
  --hetring PATH  hetring binary (default build/hetring)
  --python PATH   Python with torch (default /usr/bin/python3, then python3 on PATH)
  --mpi-args ARGS extra mpirun arguments (default "$mpi_args": idle ranks yield the CPU;
                  Open MPI's own default spins unless it sees more ranks than cores, which
                  costs whole ~4 ms time slices per wait on a busy 2-core machine;
                  --mpi-args "" measures that default)
  --out DIR       keep every run's output in DIR (default: a new directory under /tmp)
  --lock FILE     the lock every timed run holds (default $lock)
  -h, --help      this text
EOF
}

die() { echo "compare_allreduce: $*" >&2; exit 2; }

while [ $# -gt 0 ]; do
    case "$1" in
    --repeats) repeats=${2:?}; shift 2 ;;
    --rate) rate=${2:?}; shift 2 ;;
    --nodes) nodes_list=${2//,/ }; shift 2 ;;
    --bytes) bytes=${2:?}; shift 2 ;;
    --lat-iters) lat_iters=${2:?}; shift 2 ;;
    --no-latency) do_latency=0; shift ;;
    --hetring) hetring=${2:?}; shift 2 ;;
    --python) python=${2:?}; shift 2 ;;
    --mpi-args) mpi_args=${2?}; shift 2 ;;
    --out) outdir=${2:?}; shift 2 ;;
    --lock) lock=${2:?}; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument: $1" ;;
    esac
done
[[ $repeats =~ ^[1-9][0-9]*$ ]] || die "--repeats must be a positive integer"
[[ $lat_iters =~ ^[1-9][0-9]*$ ]] || die "--lat-iters must be a positive integer"
[ -z "$rate" ] || [[ $rate =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "--rate must be a number (GB/s)"
for n in $nodes_list; do [[ $n =~ ^[1-9][0-9]*$ ]] || die "bad node count: $n"; done
command -v flock >/dev/null || die "flock not found (util-linux)"
command -v timeout >/dev/null || die "timeout not found (coreutils)"

if [ -z "$outdir" ]; then outdir=$(mktemp -d /tmp/compare-allreduce.XXXXXX); fi
mkdir -p "$outdir"
echo "compare_allreduce: run outputs in $outdir" >&2

# ------------------------------------------------------------------ which implementations
impls=()
declare -A label=([hetring]="hetring" [gloo]="gloo" [mpi]="Open MPI")
if [ -x "$hetring" ]; then
    impls+=(hetring)
else
    echo "compare_allreduce: SKIP hetring: $hetring not found (cmake --build build)" >&2
fi

if [ -z "$python" ]; then
    if [ -x /usr/bin/python3 ]; then python=/usr/bin/python3; else python=$(command -v python3 || true); fi
fi
if [ -n "$python" ] && "$python" -c 'import torch.distributed as d, sys; sys.exit(0 if d.is_available() and d.is_gloo_available() else 1)' 2>/dev/null; then
    impls+=(gloo)
    torch_version=$("$python" -c 'import torch; print(torch.__version__)')
else
    echo "compare_allreduce: SKIP gloo: no Python with torch.distributed and gloo (${python:-no python3}; apt-get install python3-torch)" >&2
fi

mpi_bin="$root/bench/mpi/mpi_allreduce"
if ! command -v mpirun >/dev/null || ! command -v mpicc >/dev/null; then
    echo "compare_allreduce: SKIP Open MPI: mpirun/mpicc not found (apt-get install openmpi-bin libopenmpi-dev)" >&2
elif ! "$root/bench/mpi/build.sh" "$mpi_bin" >"$outdir/mpi-build.log" 2>&1; then
    echo "compare_allreduce: SKIP Open MPI: bench/mpi/build.sh failed:" >&2
    cat "$outdir/mpi-build.log" >&2
else
    impls+=(mpi)
    mpi_version=$(mpirun --version 2>/dev/null | head -1)
fi
[ ${#impls[@]} -gt 0 ] || die "nothing to run"

# ------------------------------------------------------------------ stop and lock
# The run in progress (the wait for the lock too) gets SIGTERM, and SIGKILL 10 s later with its
# process group (timeout's: mpirun's ranks, the bench's nodes, iperf3), at exit, also on SIGTERM
# or SIGINT to this script alone (bench/script_args.sh). Every run, iperf3's too, runs in this
# shell, in the background, not in $(...), so that the trap finds it, and holds the lock while
# it runs: this shell holds it, the run does not.
. "$root/bench/script_args.sh"
script_traps
script_lock "$lock"

# ------------------------------------------------------------------ R
if [ -z "$rate" ]; then
    if command -v iperf3 >/dev/null; then
        port=$((10000 + RANDOM % 22000))
        # the server ends after one test, or when the client failed (never connected)
        script_locked timeout 30 bash -c 'iperf3 -s -1 -p "$1" -B 127.0.0.1 >/dev/null 2>&1 &
            sleep 0.5; iperf3 -c 127.0.0.1 -p "$1" -t 3 -J 2>/dev/null || kill $! 2>/dev/null
            wait' - "$port" >"$outdir/iperf3.json" || true
        # bits_per_second of "sum_received", as hetring bench allreduce reads it
        rate=$(awk '/"sum_received"/ {f = 1}
            f && /"bits_per_second"/ { gsub(/[^0-9.eE+-]/, "", $2); printf "%.2f", $2 / 8e9; exit }' \
            "$outdir/iperf3.json")
        [ -n "$rate" ] || echo "compare_allreduce: iperf3 failed; R unknown (give --rate)" >&2
    else
        echo "compare_allreduce: iperf3 not found; R unknown (give --rate)" >&2
    fi
fi
rate_args=()
[ -z "$rate" ] || rate_args=(--rate "$rate")

# ------------------------------------------------------------------ one run
# run IMPL N BYTES ITERS TAG: "busbw time_us wrong" of the one data line, or "fail", into $res.
run_one() {
    local impl=$1 n=$2 b=$3 iters=$4 log=$5
    local cmd=() extra=()
    case "$impl" in
    hetring)
        cmd=("$hetring" bench allreduce --nodes "$n" --security none --min-bytes "$b"
             --max-bytes "$b" "${rate_args[@]}")
        [ -z "$iters" ] || cmd+=(--iters "$iters") ;;
    gloo)
        cmd=("$python" "$root/bench/py/gloo_allreduce.py" --nodes "$n" --bytes "$b")
        [ -z "$iters" ] || cmd+=(--iters "$iters") ;;
    mpi)
        cmd=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$n"
             --mca pml ob1 --mca btl "tcp,self" --mca btl_tcp_if_include lo
             --mca oob_tcp_if_include lo)
        read -ra extra <<<"$mpi_args"
        cmd+=("${extra[@]}" "$mpi_bin" --bytes "$b")
        [ -z "$iters" ] || cmd+=(--iters "$iters") ;;
    esac
    echo "\$ flock $lock ${cmd[*]}" >"$log"
    local rc=0
    script_locked timeout "$run_timeout" "${cmd[@]}" >>"$log" 2>&1 || rc=$?
    # the data line: size count float sum time algbw busbw #wrong
    local line
    line=$(awk '$1 !~ /^#/ && $3 == "float" && $4 == "sum" && NF >= 8 {l = $0} END {print l}' "$log")
    if [ -z "$line" ] || { [ "$rc" -ne 0 ] && [ "$rc" -ne 1 ]; }; then
        echo "compare_allreduce: $impl N=$n $b failed (exit $rc), see $log" >&2
        res=fail
        return
    fi
    res=$(awk '{print $7, $5, $8}' <<<"$line")
}

# ------------------------------------------------------------------ the runs
declare -A runs    # key "impl,config" -> space separated values
configs=()
for n in $nodes_list; do configs+=("bw$n"); done
[ "$do_latency" -eq 0 ] || configs+=(lat2)
nimpl=${#impls[@]}
wrong_total=0
t_start=$SECONDS
rot=0
for rep in $(seq 1 "$repeats"); do
    for cfg in "${configs[@]}"; do
        rot=$((rot + 1)) # rotate the order of the implementations from one block to the next
        for j in $(seq 0 $((nimpl - 1))); do
            impl=${impls[$(((j + rot) % nimpl))]}
            if [ "$cfg" = lat2 ]; then n=2 b=4 iters=$lat_iters; else n=${cfg#bw} b=$bytes iters=""; fi
            run_one "$impl" "$n" "$b" "$iters" "$outdir/$cfg-$impl-$rep.log"
            if [ "$res" = fail ]; then
                val=fail
            else
                read -r busbw time_us wrong <<<"$res"
                if [ "$wrong" != 0 ]; then
                    echo "compare_allreduce: $impl N=$n $b: $wrong wrong elements!" >&2
                    wrong_total=$((wrong_total + 1))
                fi
                if [ "$cfg" = lat2 ]; then val=$time_us; else val=$busbw; fi
            fi
            runs["$impl,$cfg"]="${runs["$impl,$cfg"]:-} $val"
            printf 'compare_allreduce: [%d/%d] %-8s %-5s %s\n' "$rep" "$repeats" "$impl" "$cfg" "$val" >&2
        done
    done
done
elapsed=$((SECONDS - t_start))

# ------------------------------------------------------------------ the table
median() { # values (ignores "fail") -> median or "-"
    printf '%s\n' "$@" | grep -v '^fail$' | sort -g | awk '{v[NR] = $1}
        END { if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2];
              else printf "%.4g\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
cell() { # impl cfg -> "**median** (r1 / r2 / ...)"
    local v=${runs["$1,$2"]:-} list arr
    read -ra arr <<<"$v"
    list="${arr[*]}"
    # shellcheck disable=SC2086
    printf '**%s** (%s)' "$(median $v)" "${list// / \/ }"
}
ratio() { # hetring's advantage over impl at cfg: busbw_h/busbw_x, or time_x/time_h for latency
    local h x
    # shellcheck disable=SC2086
    h=$(median ${runs["hetring,$2"]:-})
    # shellcheck disable=SC2086
    x=$(median ${runs["$1,$2"]:-})
    if [ "$h" = - ] || [ "$x" = - ]; then echo -; return; fi
    if [ "$2" = lat2 ]; then awk -v h="$h" -v x="$x" 'BEGIN {printf "%.2fx", x / h}'
    else awk -v h="$h" -v x="$x" 'BEGIN {printf "%.2fx", h / x}'; fi
}

case "$bytes" in # "64M" -> "64 MiB"
*[kK]) bytes_h="${bytes%?} KiB" ;;
*[mM]) bytes_h="${bytes%?} MiB" ;;
*[gG]) bytes_h="${bytes%?} GiB" ;;
*) bytes_h="$bytes B" ;;
esac
echo
echo "All-reduce, float32 sum, N local processes on loopback, this machine ($(nproc) cores);"
echo "median of $repeats interleaved runs (per-run values in brackets), $(date -u +%Y-%m-%d)."
if [ -n "$rate" ]; then
    echo "R = $rate GB/s (one iperf3 TCP stream on loopback)."
else
    echo "R unknown."
fi
[ -z "${torch_version:-}" ] || echo "gloo: torch $torch_version ($python)."
[ -z "${mpi_version:-}" ] || echo "Open MPI: $mpi_version, pml ob1, btl tcp,self over lo${mpi_args:+, $mpi_args}."
echo
hdr="| | ${label[${impls[0]}]}"
sep="|---|---"
for i in "${impls[@]:1}"; do hdr+=" | ${label[$i]}"; sep+="|---"; done
has_h=0
[ "${impls[0]}" = hetring ] && has_h=1
if [ $has_h -eq 1 ]; then
    for i in "${impls[@]:1}"; do hdr+=" | hetring vs ${label[$i]}"; sep+="|---"; done
fi
echo "$hdr |"
echo "$sep|"
for cfg in "${configs[@]}"; do
    if [ "$cfg" = lat2 ]; then
        row="| latency N=2, 4 B (us)"
    else
        row="| busbw N=${cfg#bw}, $bytes_h (GB/s)"
        [ -z "$rate" ] || row+=" [R/N = $(awk -v r="$rate" -v n="${cfg#bw}" 'BEGIN {printf "%.2f", r / n}')]"
    fi
    for i in "${impls[@]}"; do row+=" | $(cell "$i" "$cfg")"; done
    if [ $has_h -eq 1 ]; then
        for i in "${impls[@]:1}"; do row+=" | $(ratio "$i" "$cfg")"; done
    fi
    echo "$row |"
done
echo
[ $has_h -eq 0 ] || echo "hetring vs X: busbw ratio (hetring / X); for latency, X's time / hetring's (> 1: hetring faster)."
echo "Wall time of the runs: ${elapsed} s (including waits for $lock). Logs: $outdir"
if [ "$wrong_total" -gt 0 ]; then
    echo "WARNING: $wrong_total run(s) reported wrong elements" >&2
    exit 1
fi
