#!/usr/bin/env bash
# shellcheck disable=SC2317,SC2153 # check_* run through the __check dispatch, with BASE set
# verify.sh: every GPU check of hetring in one command, for a machine with an NVIDIA GPU, in at
# most 10 minutes, with a short report in OUTDIR/report.md and OUTDIR/report.json (one entry
# per check: name, status pass|fail|skip, seconds, a one-line detail, its log file).
#
# usage: tests/gpu/verify.sh OUTDIR [--build DIR] [--libs DIR] [--only CHECK,...]
#        tests/gpu/verify.sh --help
#
#   OUTDIR        the report, one log per check (OUTDIR/CHECK.log) and each check's files
#                 (OUTDIR/CHECK/: cluster files, node logs, metrics); created if missing
#   --build DIR   an existing CUDA build (HETRING_CUDA=ON): the build check only checks that it
#                 has hetring and the CUDA test binaries. Where DIR holds no build (no
#                 CMakeCache.txt), and without --build, the script configures and builds DIR
#                 (default SRC/build-cuda) itself: cmake -S SRC -B DIR -DCMAKE_BUILD_TYPE=Release
#                 -DHETRING_CUDA=ON, then cmake --build DIR -j$(nproc)
#   --libs DIR    libraries the GPU machine lacks (see below): DIR is put first on
#                 LD_LIBRARY_PATH, and a build made here uses DIR/include and DIR/pkgconfig
#   --only LIST   run only these checks; the others are reported skip ("not selected")
#
# The checks, in this order, each under its own hard timeout (`timeout`; the whole run has a
# budget of 585 s, and a check that would start past it fails "not run"), each logging to
# OUTDIR/CHECK.log; a failing check never stops the later ones:
#   versions                nvidia-smi (name, driver, memory), nvcc, NCCL and cuDNN (from their
#                           headers under the CUDA prefix, else ldconfig -p), `hetring version`,
#                           python3 and torch (with torch.cuda.is_available())
#   build                   the CUDA build, or the check of the one --build names
#   gpu-libs                the GPU libraries are loaded at run time, by the processes that
#                           use them: none in hetring's NEEDED; `hetring version` names the CUDA
#                           driver, cuBLAS, cuDNN and NCCL with their versions (one line each in
#                           the report); a one-node cuda:0 run loads the driver, cuBLAS and cuDNN
#                           (LD_DEBUG=files) and logs "cuda: loaded ..."; on cpu it loads none
#   ctest-cuda              ctest -L cuda (a test that exits 77 counts as skip)
#   sanitizer               compute-sanitizer memcheck, racecheck, synccheck and initcheck over
#                           every BUILD/tests/cuda/test_cuda_* (--error-exitcode 1), one line per
#                           tool and binary; racecheck with HR_CUDA_TEST_SMALL=1 (test_cuda_layers
#                           leaves out its large shapes, whose cuDNN kernels racecheck runs for
#                           minutes; the small shapes run the same kernels)
#   gpu-vs-cpu              nodes on cuda:0 and cpu, MLP 784,64,10, B = 64, 40 iterations,
#                           hash_interval = 1: both exit 0 with one parameter hash and one last
#                           loss (the GPU and the CPU replica are bitwise equal, I4), and the
#                           final loss is within 1e-3 (relative) of the same file run on two CPU
#                           nodes. Across the two runs the bits may differ (the GPU node's own
#                           gradient comes from cuBLAS: I3, not I4): the report says whether they
#                           do and the first iteration whose loss differs
#   gpu-shared-kill-rejoin  two nodes sharing cuda:0 and one CPU node (quorum 2); node 1 gets
#                           SIGKILL mid-run and is started again; all end at the last iteration
#                           with one parameter hash and one loss, and over every node's records
#                           (node 1's two lives) each iteration is recorded exactly once (I8)
#   cpu-gpu-cpu             nodes 0 and 2 on cpu, node 1 on cuda:0, hash_interval = 1: all exit
#                           0 with the same final loss and parameter hash
#   nccl-1rank              BUILD/tests/cuda/test_nccl_single, and with two GPUs or more a
#                           2-node cluster with backend = nccl on cuda:0 and cuda:1 (with one GPU
#                           that part is skip: NCCL cannot run two ranks of one communicator on
#                           one device)
#   bench-gpu               BUILD/tests/cuda/cuda_train_bench --batch 512 --iters 300 for mlp,
#                           lenet and vgg (lenet and vgg again with --conv im2col where the build
#                           has cuDNN), then bench/py/torch_gpu_mlp.py on the same models;
#                           hetring / PyTorch per model, against the targets (lenet and vgg at
#                           least 0.8x, mlp at least 1x: a miss is said, not failed)
#   bench-mixed             hetring bench hetero --scenarios mixed (a short run); a build whose
#                           bench does not know the scenario fails with the bench's message
#   torch-cuda              examples/torch/mnist_cnn.py --device cuda:0 on one node, when the
#                           example has that flag (else skip): exit 0, a RESULT line, and the
#                           model's parameters were on cuda:0
# Every node listens on 127.0.0.1, on ports below 32768 claimed through tests/ports.sh;
# nothing is sent to any other address. Every process a check starts is killed when the check
# ends, and the one in flight when the script is interrupted.
#
# Without a GPU (no nvidia-smi, or `nvidia-smi -L` lists none) every check is skip, the
# headline is "no GPU: skipped", and the exit status is 0 (ctest gpu.verify_dryrun runs that).
# Otherwise the exit status is 1 when a check failed, else 0; 2 for a usage error. There, a
# CUDA test or binary that exits 77 (it saw no CUDA device: a driver older than the build's
# CUDA, say) fails its check (ctest-cuda, sanitizer, nccl-1rank), naming hetring version's
# driver line; only the stand-in mode reports it skip.
#
# Environment, for testing this script itself: HR_VERIFY_NO_GPU=1 takes the no-GPU path on any
# machine; HR_VERIFY_STANDIN=cpu runs every check on a machine without a GPU with cpu in place of
# each cuda:N (the report's headline says STAND-IN: it proves nothing about the GPU).
#
# Preparing --libs DIR. The GPU machine has CUDA, PyTorch and a compiler but none of Debian's
# libsodium, inih and OpenBLAS, and no package archive. On a Debian 12 machine (this project's):
#
#   mkdir /tmp/debs && cd /tmp/debs
#   apt-get download libsodium23 libsodium-dev libinih1 libinih-dev libopenblas0-pthread \
#       libopenblas-pthread-dev libopenblas-dev libopenblas0 libgfortran5 libquadmath0
#   for d in ./*.deb; do dpkg -x "$d" root; done
#   L=/tmp/hr-libs a=root/usr/lib/x86_64-linux-gnu
#   mkdir -p "$L/include" "$L/pkgconfig"
#   cp -a "$a"/*.so* "$a"/openblas-pthread/*.so* "$L"/
#   cp -a root/usr/include/*.h root/usr/include/sodium "$L/include"/
#   cp -a root/usr/include/x86_64-linux-gnu/openblas-pthread/*.h "$L/include"/
#   cp "$a"/pkgconfig/*.pc "$a"/openblas-pthread/pkgconfig/openblas.pc "$L/pkgconfig"/
#
# or, to run a build carried from that machine only, copy the .so files `ldd build/hetring`
# names (libsodium.so.23, libinih.so.1, libopenblas.so.0, libgfortran.so.5, libquadmath.so.0)
# into DIR. A build with cuDNN also needs libcudnn*.so.9 (all of them: libcudnn.so.9 opens the
# others at run time), which hetring opens at run time (`hetring version` says whether it can);
# where they are missing every check takes PyTorch's (nvidia.cudnn). Debian's .pc files name /usr paths: the script rewrites their libdir and includedir
# to DIR and DIR/include (in OUTDIR/pkgconfig) and sets PKG_CONFIG_PATH, CPATH and LIBRARY_PATH.
# A carried build folder (--build) must sit at the same absolute path as where it was built
# (and the source tree at its path too): CMake and CTest files hold absolute paths.
set -u

SELF=$(readlink -f "${BASH_SOURCE[0]}")
. "$(dirname "$SELF")/../records.sh" # records_check: exactly once (I8), as the dist tests check
SRC=$(cd "$(dirname "$SELF")/../.." && pwd)
CHECKS=(versions build gpu-libs ctest-cuda sanitizer gpu-vs-cpu gpu-shared-kill-rejoin cpu-gpu-cpu
        nccl-1rank bench-gpu bench-mixed torch-cuda)
# each check's own hard timeout, seconds (and the whole run's budget)
declare -A CAP=([versions]=60 [build]=300 [gpu-libs]=45 [ctest-cuda]=150 [sanitizer]=180 [gpu-vs-cpu]=60
                [gpu-shared-kill-rejoin]=90 [cpu-gpu-cpu]=60 [nccl-1rank]=90 [bench-gpu]=120
                [bench-mixed]=120 [torch-cuda]=90)
BUDGET=${HR_VERIFY_BUDGET:-585}

usage() { sed -n '/^# verify.sh:/,/^set -u$/p' "$SELF" | sed -e '/^set -u$/d' -e 's/^# \{0,1\}//'; }

# ================================================================ helpers of every check

# The check in progress writes its result into $RES/NAME.{status,detail,lines}.
result() { printf '%s\n' "$1" > "$RES/$CHECK.status"; printf '%s\n' "$2" > "$RES/$CHECK.detail"; }
add_line() { printf '%s\n' "$*" >> "$RES/$CHECK.lines"; echo "  $*"; }
say() { echo "== $*"; }
# lib_version NAME PATCH LIB HEADERS...: "MAJOR.MINOR.PATCH (header)" from the first header
# that exists (its #define NAME_MAJOR, NAME_MINOR, NAME_<PATCH>), else the LIB*.so ldconfig knows
lib_version() {
  local name=$1 patch=$2 lib=$3 h v
  shift 3
  for h in "$@"; do
    [ -f "$h" ] || continue
    awk -v n="$name" -v p="$patch" '$1 == "#define" { v[$2] = $3 }
      END { printf "%s.%s.%s", v[n "_MAJOR"], v[n "_MINOR"], v[n "_" p] }' "$h"
    echo " ($h)"
    return
  done
  v=$(ldconfig -p 2>/dev/null | grep -m1 "$lib\\.so" | sed 's/.*=> //')
  [ -n "$v" ] && echo "library $(readlink -f "$v")"
}

BG=()
# kill_bg: every process this check started; a timeout started here leads its own process
# group (with what runs under it), a node does not
kill_bg() {
  local p
  for p in "${BG[@]}"; do
    kill -KILL -- "-$p" 2>/dev/null
    kill -KILL "$p" 2>/dev/null
  done
  BG=()
}

# bg_done PID: PID has been waited for (its number may be reused from now on)
bg_done() {
  local p keep=()
  for p in "${BG[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done
  BG=("${keep[@]}")
}

# run_to SECONDS CMD...: CMD under its own timeout, in the background so that a signal to this
# check is handled at once; the status of CMD (124 or 137: it timed out)
run_to() {
  local t=$1 p
  shift
  timeout -k 3 "$t" "$@" &
  p=$!
  BG+=("$p")
  wait "$p"
  local rc=$?
  bg_done "$p"
  return "$rc"
}

# need_build: the hetring binary, or fail the check
need_build() {
  if [ ! -x "$HR" ]; then
    result fail "no $HR (the build check failed or was not run)"
    return 1
  fi
}

# On a machine whose nvidia-smi lists a GPU, a CUDA test that exits 77 (it saw no device) is a
# failure, never a skip: the usual cause is a driver too old for this build's CUDA.
no_device_hint() {
  local drv said
  drv=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)
  said=$("$HR" version 2>&1 | grep -m1 '^  CUDA driver:' | sed 's/^ *//')
  echo "driver ${drv:-unknown}, too old for this build's CUDA? hetring version: ${said:-no driver line}"
}
# skipped_names CTEST_OUT: the tests ctest reported skipped, space-separated
skipped_names() {
  sed -n 's/.*Test *#[0-9]*: \([^ ]*\) .*Skipped.*/\1/p' "$1" | paste -sd' ' -
}

# dev N: the device string of cuda:N (cpu in the stand-in mode)
dev() { if [ "$STANDIN" = cpu ]; then echo cpu; else echo "cuda:$1"; fi; }

# write_conf FILE PORT0 MIN_NODES BACKEND DEVICE...: a cluster of one node per DEVICE on
# 127.0.0.1 ports PORT0.., without security (loopback only); [train] and [controller] from
# stdin
write_conf() {
  local f=$1 p=$2 q=$3 be=$4 i=0 d
  shift 4
  { printf '; written by tests/gpu/verify.sh\n[cluster]\nsecurity = none\nconnect_timeout = 30\n'
    printf 'timeout = 10\nmin_nodes = %s\nrejoin_timeout = 60\nbackend = %s\n' "$q" "$be"
    cat
    for d in "$@"; do
      printf '[node.%d]\nhost = 127.0.0.1\nport = %d\ndevice = %s\n' "$i" $((p + i)) "$d"
      i=$((i + 1))
    done
  } > "$f"
}

# start_node DIR CONF ID TAG: `hetring run` of node ID in the background, its pid in PIDS[TAG],
# its log, metrics and summary DIR/n-TAG.log, m-TAG.jsonl, s-TAG.json
declare -A PIDS
start_node() {
  "$HR" run --conf "$2" --node "$3" --quiet --metrics "$1/m-$4.jsonl" --summary "$1/s-$4.json" \
    > "$1/n-$4.log" 2>&1 &
  PIDS[$4]=$!
  BG+=("$!")
}

# wait_nodes DIR SECONDS TAGS...: wait for the nodes; a node still running after SECONDS (5 at
# least) is killed; what went wrong is in $NODE_ERR (empty: all exited 0)
wait_nodes() {
  local dir=$1 until tag rc alive
  until=$(($(date +%s) + ($2 > 5 ? $2 : 5)))
  shift 2
  NODE_ERR=
  while :; do
    alive=0
    for tag in "$@"; do kill -0 "${PIDS[$tag]}" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] || [ "$(date +%s)" -ge "$until" ] && break
    sleep 0.2
  done
  local -A who # what went wrong -> the nodes it went wrong on, so that the same error is told once
  local -a what=()
  for tag in "$@"; do
    if kill -0 "${PIDS[$tag]}" 2>/dev/null; then
      kill -KILL "${PIDS[$tag]}" 2>/dev/null
      wait "${PIDS[$tag]}" 2>/dev/null
      bg_done "${PIDS[$tag]}"
      rc="still running after $2 s (killed)"
    else
      wait "${PIDS[$tag]}"
      rc=$?
      bg_done "${PIDS[$tag]}"
      [ "$rc" = 0 ] && continue
      rc="exited $rc: $(grep -v '^ *$' "$dir/n-$tag.log" | tail -1)"
    fi
    [ -n "${who[$rc]:-}" ] || what+=("$rc")
    who[$rc]+=" $tag"
  done
  for rc in "${what[@]}"; do
    tag=${who[$rc]# }
    [[ $tag == *" "* ]] && NODE_ERR+="nodes ${tag// /, } $rc; " || NODE_ERR+="node $tag $rc; "
  done
  NODE_ERR=${NODE_ERR%; }
  for tag in "$@"; do say "log of node $tag"; tail -n 15 "$dir/n-$tag.log"; done
}

# the last iteration's loss a node recorded, its final record's iteration and parameter hash,
# and the final_loss of a summary (empty when absent)
last_loss() {
  sed -n 's/^{"iter":[0-9]*,"epoch":[0-9]*,"loss":\([^,]*\),.*/\1/p' "$1" 2>/dev/null | tail -1
}
end_iter() { grep '"event":"end"' "$1" 2>/dev/null | tail -1 | sed -n 's/.*"iter":\([0-9]*\).*/\1/p'; }
end_hash() {
  grep '"event":"end"' "$1" 2>/dev/null | tail -1 | sed -n 's/.*"param_hash":"\([0-9a-f]*\)".*/\1/p'
}
summary_loss() { sed -n 's/^ *"final_loss": *\([^,]*\),*$/\1/p' "$1" 2>/dev/null | head -1; }
# done_loss LOG: "final loss X" of the rank-0 node's "done:" line
done_loss() { sed -n 's/.*done:.*final loss \([-0-9.eE+naif]*\).*/\1/p' "$1" 2>/dev/null | tail -1; }

# final_loss DIR TAGS...: the run's final loss, from the summary of the node that wrote one,
# else from its "done:" line
final_loss() {
  local dir=$1 tag v
  shift
  for tag in "$@"; do v=$(summary_loss "$dir/s-$tag.json"); [ -n "$v" ] && { echo "$v"; return; }; done
  for tag in "$@"; do v=$(done_loss "$dir/n-$tag.log"); [ -n "$v" ] && { echo "$v"; return; }; done
}

# rel_diff A B: |A - B| / |B|
rel_diff() { awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; m = b < 0 ? -b : b
  printf "%.3g\n", (m > 0 ? d / m : d) }'; }

# agree DIR ITERS TAGS...: the nodes' final records are at ITERS, with one parameter hash and
# one last loss; sets AGREE_ERR (empty: they agree), HASH and LOSS
agree() {
  local dir=$1 iters=$2 tag h l i
  shift 2
  AGREE_ERR='' HASH='' LOSS=''
  for tag in "$@"; do
    i=$(end_iter "$dir/m-$tag.jsonl") h=$(end_hash "$dir/m-$tag.jsonl") l=$(last_loss "$dir/m-$tag.jsonl")
    say "node $tag: final iteration ${i:-none}, parameter hash ${h:-none}, last loss ${l:-none}"
    [ "$i" = "$iters" ] || AGREE_ERR+="node $tag ended at iteration ${i:-none}, not $iters; "
    [ -n "$HASH" ] || HASH=$h
    [ -n "$LOSS" ] || LOSS=$l
    [ -n "$h" ] && [ "$h" = "$HASH" ] || AGREE_ERR+="node $tag's parameter hash ${h:-none} != $HASH; "
    [ -n "$l" ] && [ "$l" = "$LOSS" ] || AGREE_ERR+="node $tag's last loss ${l:-none} != $LOSS; "
  done
  AGREE_ERR=${AGREE_ERR%; }
}

# summaries DIR TAGS...: the final_loss of every summary written (the rank-0 node writes one),
# space-separated as TAG=LOSS
summaries() {
  local dir=$1 tag out=
  shift
  for tag in "$@"; do
    [ -s "$dir/s-$tag.json" ] && out+="$tag=$(summary_loss "$dir/s-$tag.json") "
  done
  echo "${out% }"
}

# A small MLP on the synthetic set, hash check every iteration; ITERS and B from the caller
train_section() {
  cat <<EOF
[train]
model = mlp
layers = ${LAYERS:-784,64,10}
dataset = synthetic
samples = 4096
eval_samples = 256
global_batch = $B
iterations = $ITERS
hash_interval = 1
seed = 1
[controller]
policy = ${POLICY:-model}
EOF
}

# ================================================================ the checks
# (BASE, CHECK_T and CHECK_START come from the run below: the check's first port, its time
# limit and its start)

check_versions() {
  local smi nv prefix nccl="" cudnn="" h v hrv py
  say "nvidia-smi"
  nvidia-smi 2>&1 | head -n 20
  smi=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1)
  local smi_rc=$?
  command -v nvidia-smi > /dev/null || smi="nvidia-smi not found" smi_rc=127
  add_line "GPU: ${smi//$'\n'/; }"
  say "nvcc --version"
  if command -v nvcc > /dev/null; then
    nvcc --version
    nv=$(nvcc --version | sed -n 's/.*release \([^,]*\), \(V[^ ]*\).*/\1 (\2)/p')
    prefix=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
  else
    nv="not on PATH"
    prefix=${CUDA_HOME:-/usr/local/cuda}
  fi
  add_line "nvcc: $nv; CUDA prefix $prefix"
  nccl=$(lib_version NCCL PATCH libnccl "$prefix/include/nccl.h" /usr/local/cuda/include/nccl.h \
    /usr/include/nccl.h)
  add_line "NCCL: ${nccl:-not found}"
  cudnn=$(lib_version CUDNN PATCHLEVEL libcudnn "$prefix/include/cudnn_version.h" \
    /usr/include/cudnn_version.h /usr/include/x86_64-linux-gnu/cudnn_version_v*.h)
  add_line "cuDNN: ${cudnn:-not found}"
  say "hetring version"
  if [ -x "$HR" ]; then
    run_to 20 "$HR" version
    hrv=$("$HR" version 2>&1 | sed -n -e '1p' -e 's/^\(cuda: [a-z]*\).*/\1/p' | paste -sd, - | sed 's/,/ (/; s/$/)/')
  else
    hrv="not built yet ($HR; see the build check)"
  fi
  add_line "hetring: $hrv"
  say "python3 and torch"
  py=$(run_to 40 python3 -c 'import sys
v = "Python " + sys.version.split()[0]
try:
    import torch
except Exception as e:
    print(v + ", no torch (%s)" % e)
else:
    c = torch.cuda.is_available()
    print(v + ", torch %s, cuda available %s, torch cuda %s, torch cudnn %s" % (torch.__version__,
          c, torch.version.cuda, torch.backends.cudnn.version() if c else None))' 2>&1 | tail -1)
  add_line "python3: $py"
  local gpu=${smi%%$'\n'*}
  if [ "$smi_rc" != 0 ]; then
    result fail "nvidia-smi failed: $gpu"
  else
    result pass "$gpu; nvcc $nv; NCCL ${nccl%% *}; cuDNN ${cudnn%% *}; ${hrv%%,*}; ${py%%, torch cuda*}"
  fi
}

# The .pc files of --libs with libdir and includedir pointing into DIR
libs_pkgconfig() {
  local f
  mkdir -p "$OUT/pkgconfig"
  for f in "$LIBS"/pkgconfig/*.pc; do
    [ -f "$f" ] || continue
    sed -e "s|^libdir=.*|libdir=$LIBS|" -e "s|^includedir=.*|includedir=$LIBS/include|" \
      "$f" > "$OUT/pkgconfig/$(basename "$f")"
  done
  export PKG_CONFIG_PATH="$OUT/pkgconfig:$LIBS/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  export CPATH="$LIBS/include${CPATH:+:$CPATH}"
  export LIBRARY_PATH="$LIBS${LIBRARY_PATH:+:$LIBRARY_PATH}"
}

# A build with cuDNN needs libcudnn.so.9 and the libraries it opens beside it (libcudnn_cnn,
# _ops, _graph, _heuristic, _engines_*). Where neither the system nor --libs has them, PyTorch's
# wheel often does (the nvidia-cudnn package): put its folder on LD_LIBRARY_PATH, and say so.
cudnn_from_torch() {
  local d
  [ -x "$HR" ] && "$HR" version 2>/dev/null | grep -q '^  cuDNN: cannot be used' || return 0
  d=$(python3 -c 'import os, nvidia.cudnn as c; print(os.path.join(list(c.__path__)[0], "lib"))' 2>/dev/null)
  if [ -n "$d" ] && [ -e "$d/libcudnn.so.9" ]; then
    say "libcudnn.so.9 is not on the library path; using PyTorch's: $d"
    export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
}

check_build() {
  local t missing="" b rc
  if [ "$BUILD_GIVEN" = 1 ]; then
    say "checking the build in $BUILD"
    # ctest and the CMake files name the folders the build was configured in: a build carried
    # to another path runs none of its tests ("Could not find executable")
    local was src
    was=$(sed -n 's/^CMAKE_CACHEFILE_DIR:INTERNAL=//p' "$BUILD/CMakeCache.txt")
    src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$BUILD/CMakeCache.txt")
    if { [ -n "$was" ] && [ "$(readlink -m "$was")" != "$BUILD" ]; } ||
      { [ -n "$src" ] && [ "$(readlink -m "$src")" != "$(readlink -m "$SRC")" ]; }; then
      result fail "$BUILD was configured as $was from the source $src (here $SRC): ctest and the CMake files name those paths, so carry the build and the source to them, or run without --build"
      return
    fi
    [ -x "$HR" ] || missing+=" hetring"
    for t in test_cuda_layers test_cuda_model test_cuda_sgd test_nccl_single cuda_train_bench; do
      [ -x "$BUILD/tests/cuda/$t" ] || missing+=" tests/cuda/$t"
    done
    if [ -n "$missing" ]; then
      result fail "$BUILD lacks$missing (a build with -DHETRING_CUDA=ON?)"
      return
    fi
  else
    [ -n "$LIBS" ] && libs_pkgconfig
    say "cmake -S $SRC -B $BUILD -DCMAKE_BUILD_TYPE=Release -DHETRING_CUDA=ON"
    run_to $((CHECK_T - 10)) cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DHETRING_CUDA=ON
    rc=$?
    if [ "$rc" = 0 ]; then
      say "cmake --build $BUILD -j$(nproc)"
      run_to $((CHECK_T - 10 - $(date +%s) + CHECK_START)) cmake --build "$BUILD" -j"$(nproc)"
      rc=$?
    fi
    if [ "$rc" != 0 ]; then
      [ "$rc" = 124 ] || [ "$rc" = 137 ] && { result fail "the build timed out"; return; }
      result fail "the build failed (exit $rc): $(grep -m1 -iE 'error|not found' "$OUT/build.log")"
      return
    fi
  fi
  cudnn_from_torch
  say "ldd $HR"
  ldd "$HR"
  missing=$(ldd "$HR" 2>&1 | awk '/not found/ { printf " %s", $1 }')
  if [ -n "$missing" ]; then
    result fail "$HR cannot load:$missing (give --libs DIR; see the header of this script)"
    return
  fi
  say "$HR version"
  "$HR" version
  b=$("$HR" version 2>&1 | sed -n -e '1p' -e 's/^\(cuda: [a-z]*\).*/\1/p' | paste -sd, - | sed 's/,/ (/; s/$/)/')
  case $b in
    *"cuda: yes"*) result pass "$([ "$BUILD_GIVEN" = 1 ] && echo "given" || echo "built") $BUILD: $b" ;;
    *) result fail "$HR was built without CUDA ($b)" ;;
  esac
}

# The GPU libraries are loaded at run time by the processes that use them (README, "GPUs"):
# hetring needs none of them (readelf -d), `hetring version` names each with its version, a
# one-node cuda:0 run loads the driver, cuBLAS and cuDNN (LD_DEBUG=files: dynamically loaded,
# and its log's "cuda: loaded" line), and the same run on cpu loads none.
check_gpu_libs() {
  need_build || return
  local d=$OUT/gpu-libs ITERS=10 B=64 need l bad="" loaded
  local gpu_libs='libcuda\.so|libcudart|libcublas|libcudnn|libnccl'
  if [ "$STANDIN" = cpu ]; then
    result skip "stand-in mode: no GPU node to load the libraries"
    return
  fi
  need=$(readelf -d "$HR" | grep NEEDED | grep -E "$gpu_libs" | sed 's/.*\[\(.*\)\]/\1/' | paste -sd' ' -)
  [ -z "$need" ] || bad+="hetring needs $need in NEEDED; "
  say "$HR version"
  "$HR" version > "$d/version.out" 2>&1
  cat "$d/version.out"
  while read -r l; do add_line "$l"; done < <(grep -E '^  (CUDA driver|cuBLAS|cuDNN|NCCL):' "$d/version.out")
  grep -q 'cannot be used' "$d/version.out" && bad+="hetring version: $(grep -m1 'cannot be used' "$d/version.out" | sed 's/^ *//'); "
  train_section | write_conf "$d/g.ini" "$BASE" 1 tcp cuda:0
  train_section | write_conf "$d/c.ini" $((BASE + 1)) 1 tcp cpu
  say "one node on cuda:0, then on cpu, under LD_DEBUG=files"
  LD_DEBUG=files LD_DEBUG_OUTPUT=$d/ld-gpu start_node "$d" "$d/g.ini" 0 gpu
  wait_nodes "$d" 30 gpu
  [ -z "$NODE_ERR" ] || bad+="the cuda:0 node: $NODE_ERR; "
  LD_DEBUG=files LD_DEBUG_OUTPUT=$d/ld-cpu start_node "$d" "$d/c.ini" 0 cpu
  wait_nodes "$d" 30 cpu
  [ -z "$NODE_ERR" ] || bad+="the cpu node: $NODE_ERR; "
  for l in libcuda.so libcublas.so libcudnn.so; do
    [ "$l" = libcudnn.so ] && ! grep -q '^  cuDNN:' "$d/version.out" && continue # built without
    cat "$d"/ld-gpu.* 2>/dev/null | grep -Eq "file=${l}[^ ]* .*dynamically loaded" ||
      bad+="the cuda:0 node did not load $l; "
  done
  loaded=$(grep -m1 -o 'cuda: loaded .*' "$d/n-gpu.log")
  [ -n "$loaded" ] || bad+="the cuda:0 node's log has no 'cuda: loaded' line; "
  cat "$d"/ld-cpu.* 2>/dev/null | grep -E "file=($gpu_libs)" > "$d/cpu-loaded" &&
    bad+="the cpu node loaded $(sed 's/.*file=\([^ ]*\).*/\1/' "$d/cpu-loaded" | sort -u | paste -sd' ' -); "
  add_line "cuda:0 node: ${loaded:-nothing loaded}"
  if [ -n "$bad" ]; then
    result fail "${bad%; }"
  else
    result pass "cuda:0 node ${loaded#cuda: }; cpu node: no GPU library; none in NEEDED"
  fi
}

check_ctest_cuda() {
  need_build || return
  local rc p s f
  say "ctest --test-dir $BUILD -L cuda --output-on-failure"
  run_to $((CHECK_T - 5)) ctest --test-dir "$BUILD" -L cuda --output-on-failure --no-tests=error \
    > "$OUT/ctest-cuda/ctest.out" 2>&1
  rc=$?
  cat "$OUT/ctest-cuda/ctest.out"
  p=$(grep -cE 'Test +#[0-9]+: .* Passed' "$OUT/ctest-cuda/ctest.out")
  s=$(grep -cE 'Test +#[0-9]+: .*Skipped' "$OUT/ctest-cuda/ctest.out")
  f=$(grep -E 'Test +#[0-9]+: .*(Failed|Timeout|Exception|Not Run)' "$OUT/ctest-cuda/ctest.out" |
    sed -n 's/.*Test *#[0-9]*: \([^ ]*\).*/\1/p' | paste -sd' ' -)
  grep -E 'Test +#[0-9]+:' "$OUT/ctest-cuda/ctest.out" | while read -r l; do add_line "$l"; done
  if grep -q 'No tests were found' "$OUT/ctest-cuda/ctest.out"; then
    result fail "no test labelled cuda in $BUILD (configured without -DHETRING_CUDA=ON?)"
  elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    result fail "ctest timed out ($p passed so far)"
  elif [ "$rc" != 0 ]; then
    result fail "$p passed, $s skipped, failed: ${f:-$(tail -1 "$OUT/ctest-cuda/ctest.out")}"
  elif [ "$s" -gt 0 ] && [ "$STANDIN" != cpu ]; then
    result fail "$s cuda test(s) skipped (exit 77: no CUDA device seen) on a machine whose nvidia-smi lists $NGPU GPU(s): $(skipped_names "$OUT/ctest-cuda/ctest.out"); $(no_device_hint)"
  elif [ "$p" = 0 ] && [ "$s" -gt 0 ]; then
    result skip "all $s cuda tests skipped (exit 77: no CUDA device seen)"
  else
    result pass "$p passed, $s skipped"
  fi
}

check_sanitizer() {
  need_build || return
  local cs bins=() b tool n=0 bad=0 skipped=0 rc errs log pids=() names=() i
  cs=$(command -v compute-sanitizer || true)
  b=$(command -v nvcc || true)
  for b in ${b:+"$(dirname "$(readlink -f "$b")")/compute-sanitizer"} \
           "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer" /usr/local/cuda/bin/compute-sanitizer; do
    [ -z "$cs" ] && [ -x "$b" ] && cs=$b
  done
  if [ -z "$cs" ]; then
    result fail "compute-sanitizer not found (PATH, \$CUDA_HOME/bin, /usr/local/cuda/bin)"
    return
  fi
  while IFS= read -r b; do bins+=("$b"); done < <(find "$BUILD/tests/cuda" -maxdepth 1 -type f \
    -name 'test_cuda_*' -perm -u+x 2>/dev/null | sort)
  if [ ${#bins[@]} = 0 ]; then
    result fail "no test_cuda_* binaries under $BUILD/tests/cuda"
    return
  fi
  say "$cs --version"
  "$cs" --version | tail -2
  # every tool and binary at once (16 cores, one GPU): each under the check's time
  for b in "${bins[@]}"; do
    for tool in memcheck racecheck synccheck initcheck; do
      log="$OUT/sanitizer/$tool-$(basename "$b").log"
      # racecheck runs cuDNN's large convolutions for minutes: the small shapes only there
      (cd "$BUILD/tests/cuda" || exit 1
       [ "$tool" = racecheck ] && export HR_CUDA_TEST_SMALL=1
       exec timeout -k 3 $((CHECK_T - 10)) "$cs" --tool "$tool" --error-exitcode 1 "$b") \
        > "$log" 2>&1 &
      pids+=("$!") names+=("$tool $(basename "$b")")
      BG+=("$!")
    done
  done
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}"
    rc=$?
    bg_done "${pids[$i]}"
    n=$((n + 1))
    log="$OUT/sanitizer/${names[$i]/ /-}.log"
    errs=$(sed -n 's/.*ERROR SUMMARY: \([0-9]*\) error.*/\1/p' "$log" | tail -1)
    say "${names[$i]}: exit $rc"
    tail -n 5 "$log"
    case $rc in
      0) add_line "${names[$i]}: pass, ${errs:-0} errors" ;;
      77) add_line "${names[$i]}: skip (no CUDA device)"; skipped=$((skipped + 1)) ;;
      124|137) add_line "${names[$i]}: fail, timed out"; bad=$((bad + 1)) ;;
      *) add_line "${names[$i]}: fail, exit $rc, ${errs:-?} errors (sanitizer/$(basename "$log"))"
         bad=$((bad + 1)) ;;
    esac
  done
  local all
  all=$(paste -sd';' "$RES/sanitizer.lines" | sed 's/;/; /g')
  if [ "$bad" -gt 0 ]; then
    result fail "$bad of $n tool/binary pairs failed: $all"
  elif [ "$skipped" -gt 0 ] && [ "$STANDIN" != cpu ]; then
    result fail "$skipped of $n tool/binary pairs skipped (no CUDA device seen) on a machine whose nvidia-smi lists $NGPU GPU(s); $(no_device_hint): $all"
  elif [ "$skipped" = "$n" ]; then
    result skip "every pair skipped (no CUDA device): $all"
  else
    result pass "$n pairs clean: $all"
  fi
}

check_gpu_vs_cpu() {
  need_build || return
  local d=$OUT/gpu-vs-cpu ITERS=40 B=64 POLICY=static mixed ref r
  train_section | write_conf "$d/mixed.ini" "$BASE" 2 tcp "$(dev 0)" cpu
  train_section | write_conf "$d/cpu.ini" $((BASE + 2)) 2 tcp cpu cpu
  say "nodes on $(dev 0) and cpu"
  start_node "$d" "$d/mixed.ini" 0 g0
  start_node "$d" "$d/mixed.ini" 1 g1
  wait_nodes "$d" $((CHECK_T / 2 - 5)) g0 g1
  local err1=$NODE_ERR
  say "the same on two cpu nodes"
  start_node "$d" "$d/cpu.ini" 0 c0
  start_node "$d" "$d/cpu.ini" 1 c1
  wait_nodes "$d" $((CHECK_T / 2 - 5)) c0 c1
  local err2=$NODE_ERR
  if [ -n "$err1" ]; then
    result fail "gpu+cpu run: $err1"
    return
  fi
  [ -n "$err2" ] && { result fail "cpu-only reference run: $err2"; return; }
  mixed=$(final_loss "$d" g0 g1)
  ref=$(final_loss "$d" c0 c1)
  if [ -z "$mixed" ] || [ -z "$ref" ]; then
    result fail "no final loss (summary or done: line): gpu+cpu '${mixed}', cpu '${ref}'"
    return
  fi
  r=$(rel_diff "$mixed" "$ref")
  add_line "final loss: $(dev 0)+cpu $mixed, cpu+cpu $ref, relative difference $r"
  # Bitwise equal replicas (I4) within each run. Across the two runs the GPU node's own
  # gradient comes from cuBLAS and nvcc's kernels, which sum and round in another order than
  # OpenBLAS and the C compiler, so the runs agree up to the order of float summation (I3), not
  # bit for bit: the cross-run hashes are reported, not required.
  local h_mixed h_ref err=
  agree "$d" "$ITERS" g0 g1
  h_mixed=$HASH err+=${AGREE_ERR:+"$(dev 0)+cpu: $AGREE_ERR; "}
  agree "$d" "$ITERS" c0 c1
  h_ref=$HASH err+=${AGREE_ERR:+"cpu+cpu: $AGREE_ERR; "}
  err=${err%; }
  add_line "final parameter hash ${h_mixed:-none} on both nodes of $(dev 0)+cpu, ${h_ref:-none} on both of cpu+cpu ($(
    [ "$h_mixed" = "$h_ref" ] && echo "the same bits" || echo "different bits: not required, see I3")); first iteration whose loss differs: $(first_diff "$d/m-g0.jsonl" "$d/m-c0.jsonl")"
  if ! awk -v r="$r" 'BEGIN { exit !(r <= 1e-3) }'; then
    result fail "final loss $mixed ($(dev 0)+cpu) vs $ref (cpu+cpu): relative difference $r > 1e-3"
  elif [ -n "$err" ]; then
    result fail "$err"
  else
    result pass "final loss $mixed ($(dev 0)+cpu) vs $ref (cpu+cpu): relative difference $r <= 1e-3; within each run one parameter hash ($h_mixed, $h_ref)"
  fi
}

# first_diff A B: the first iteration whose loss differs between two metrics files, or "none"
first_diff() {
  paste -d' ' <(sed -n 's/^{"iter":\([0-9]*\),"epoch":[0-9]*,"loss":\([^,]*\),.*/\1 \2/p' "$1") \
              <(sed -n 's/^{"iter":\([0-9]*\),"epoch":[0-9]*,"loss":\([^,]*\),.*/\1 \2/p' "$2") |
    awk '$1 != $3 || $2 != $4 { print $1; f = 1; exit } END { if (!f) print "none" }'
}

check_gpu_shared_kill_rejoin() {
  need_build || return
  # a step long enough that the kill and the rejoin fall well inside the run: static batches
  # (the CPU node computes B/3 = 64 samples of the 784-512-512-10 MLP every step, about 2 ms on
  # one core) and 2.7 MB of gradients all-reduced over TCP each step
  local d=$OUT/gpu-shared-kill-rejoin ITERS=1500 B=192 POLICY=static LAYERS=784,512,512,10
  local kill_at=150 t back first s
  train_section | write_conf "$d/c.ini" "$BASE" 2 tcp "$(dev 0)" "$(dev 0)" cpu
  say "nodes 0 and 1 on $(dev 0), node 2 on cpu; node 1 is killed at iteration $kill_at"
  for t in 0 1 2; do start_node "$d" "$d/c.ini" "$t" "$t"; done
  for ((t = 0; t < 600; t++)); do
    [ "$(sed -n 's/^{"iter":\([0-9]*\),.*/\1/p' "$d/m-1.jsonl" 2>/dev/null | tail -1)" -ge "$kill_at" ] \
      2>/dev/null && break
    kill -0 "${PIDS[1]}" 2>/dev/null || break
    sleep 0.05
  done
  local at
  at=$(sed -n 's/^{"iter":\([0-9]*\),.*/\1/p' "$d/m-1.jsonl" 2>/dev/null | tail -1)
  if ! kill -KILL "${PIDS[1]}" 2>/dev/null; then
    wait_nodes "$d" 5 0 1 2
    result fail "node 1 ended before it could be killed (iteration ${at:-none}): ${NODE_ERR:-it exited 0}"
    return
  fi
  wait "${PIDS[1]}" 2>/dev/null
  bg_done "${PIDS[1]}"
  say "node 1 killed (SIGKILL) after iteration ${at:-none}; started again in 0.5 s"
  sleep 0.5
  start_node "$d" "$d/c.ini" 1 1b
  wait_nodes "$d" $((CHECK_T - 15)) 0 2 1b
  if [ -n "$NODE_ERR" ]; then
    result fail "$NODE_ERR"
    return
  fi
  first=$(sed -n 's/^{"iter":\([0-9]*\),.*/\1/p' "$d/m-1b.jsonl" | head -1)
  back="node 1 killed after iteration ${at:-?}, back from iteration ${first:-never}"
  add_line "$back"
  agree "$d" "$ITERS" 0 2 1b
  s=$(summaries "$d" 0 2 1b)
  add_line "final parameter hash ${HASH:-none}, last loss ${LOSS:-none}; summaries: ${s:-none}"
  local once once_ok=1 # every node's records, node 1's first life (m-1) and second (m-1b)
  once=$(records_check "nodes 0, 2, 1 and 1 restarted" "$ITERS" "$B" "$d/m-0.jsonl" \
    "$d/m-2.jsonl" "$d/m-1.jsonl" "$d/m-1b.jsonl") || once_ok=0
  add_line "$once"
  if [ -z "$first" ]; then
    result fail "$back: the restarted node recorded no iteration (the run ended before it rejoined?)"
  elif [ -n "$AGREE_ERR" ]; then
    result fail "$back; $AGREE_ERR"
  elif [ "$once_ok" = 0 ]; then
    result fail "$back; exactly once (I8) broken: $once"
  elif [ -z "$s" ]; then
    result fail "$back; no node wrote a summary"
  else
    result pass "$back; all 3 ended at iteration $ITERS, hash $HASH, loss $LOSS (summary $s)"
  fi
}

check_cpu_gpu_cpu() {
  need_build || return
  local d=$OUT/cpu-gpu-cpu ITERS=60 B=64 s bad="" v
  train_section | write_conf "$d/c.ini" "$BASE" 2 tcp cpu "$(dev 0)" cpu
  say "node 0 on cpu, node 1 on $(dev 0), node 2 on cpu"
  for v in 0 1 2; do start_node "$d" "$d/c.ini" "$v" "$v"; done
  wait_nodes "$d" $((CHECK_T - 10)) 0 1 2
  if [ -n "$NODE_ERR" ]; then
    result fail "$NODE_ERR"
    return
  fi
  agree "$d" "$ITERS" 0 1 2
  s=$(summaries "$d" 0 1 2)
  for v in $s; do [ "${v#*=}" = "$LOSS" ] || bad+=" $v"; done
  add_line "final parameter hash ${HASH:-none}, last loss ${LOSS:-none}; summaries: ${s:-none}"
  if [ -n "$AGREE_ERR" ]; then
    result fail "$AGREE_ERR"
  elif [ -z "$s" ]; then
    result fail "no node wrote a summary"
  elif [ -n "$bad" ]; then
    result fail "summary final_loss differs from the last loss $LOSS:$bad"
  else
    result pass "all 3 exit 0 with hash checks every iteration; hash $HASH, final_loss $LOSS (summary $s)"
  fi
}

check_nccl_1rank() {
  need_build || return
  local rc one two ngpu d=$OUT/nccl-1rank ITERS=40 B=64
  say "$BUILD/tests/cuda/test_nccl_single"
  if [ -x "$BUILD/tests/cuda/test_nccl_single" ]; then
    run_to 60 "$BUILD/tests/cuda/test_nccl_single"
    rc=$?
    case $rc in
      0) one=pass ;;
      77) one="skip (no CUDA device)"
          [ "$STANDIN" = cpu ] || one="fail (exit 77: no CUDA device seen, but nvidia-smi lists $NGPU; $(no_device_hint))" ;;
      124|137) one="fail (timed out)" ;;
      *) one="fail (exit $rc)" ;;
    esac
  else
    one="fail (no $BUILD/tests/cuda/test_nccl_single)"
  fi
  add_line "1 rank (test_nccl_single): $one"
  ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  if [ "$ngpu" -ge 2 ]; then
    say "2 nodes, backend = nccl, on cuda:0 and cuda:1"
    train_section | write_conf "$d/c.ini" "$BASE" 2 nccl cuda:0 cuda:1
    start_node "$d" "$d/c.ini" 0 0
    start_node "$d" "$d/c.ini" 1 1
    wait_nodes "$d" $((CHECK_T - 70)) 0 1
    if [ -n "$NODE_ERR" ]; then
      two="fail ($NODE_ERR)"
    else
      agree "$d" "$ITERS" 0 1
      if [ -n "$AGREE_ERR" ]; then two="fail ($AGREE_ERR)"; else two="pass (hash $HASH, loss $LOSS)"; fi
    fi
  else
    two="skip ($ngpu GPU: NCCL cannot run two ranks of one communicator on one device; needs 2 GPUs)"
  fi
  add_line "2 ranks (one node per GPU, backend = nccl): $two"
  if [[ $one == fail* ]] || [[ $two == fail* ]]; then
    result fail "1 rank: $one; 2 ranks: $two"
  elif [[ $one == skip* ]] && [[ $two == skip* ]]; then
    result skip "1 rank: $one; 2 ranks: $two"
  else
    result pass "1 rank: $one; 2 ranks: $two"
  fi
}

check_bench_gpu() {
  need_build || return
  local m rc ours theirs r bad="" miss="" line=() tb=$BUILD/tests/cuda/cuda_train_bench
  declare -A H I
  [ -x "$tb" ] || { result fail "no $tb (a build with -DHETRING_CUDA=ON?)"; return; }
  for m in mlp lenet vgg; do
    say "$tb --model $m --batch 512 --iters 300"
    run_to 60 "$tb" --model "$m" --batch 512 --iters 300 > "$OUT/bench-gpu/$m.out" 2>&1
    rc=$?
    cat "$OUT/bench-gpu/$m.out"
    H[$m]=$(sed -n 's/^samples\/s \([0-9.]*\).*/\1/p' "$OUT/bench-gpu/$m.out")
    [ "$rc" = 0 ] && [ -n "${H[$m]}" ] || bad+=" hetring $m: exit $rc $(tail -1 "$OUT/bench-gpu/$m.out");"
    # the conv models again on the im2col reference, where the default is cuDNN
    if [ "$m" = mlp ] || ! grep -q 'conv cuDNN' "$OUT/bench-gpu/$m.out"; then continue; fi
    say "$tb --model $m --batch 512 --iters 300 --conv im2col"
    run_to 60 "$tb" --model "$m" --batch 512 --iters 300 --conv im2col \
      > "$OUT/bench-gpu/$m-im2col.out" 2>&1
    cat "$OUT/bench-gpu/$m-im2col.out"
    I[$m]=$(sed -n 's/^samples\/s \([0-9.]*\).*/\1/p' "$OUT/bench-gpu/$m-im2col.out")
  done
  say "python3 $SRC/bench/py/torch_gpu_mlp.py --batch 512 --iters 300 --models mlp,lenet,vgg"
  run_to 90 python3 "$SRC/bench/py/torch_gpu_mlp.py" --batch 512 --iters 300 \
    --models mlp,lenet,vgg > "$OUT/bench-gpu/torch.out" 2>&1
  rc=$?
  cat "$OUT/bench-gpu/torch.out"
  [ "$rc" = 0 ] || bad+=" torch: exit $rc $(tail -1 "$OUT/bench-gpu/torch.out");"
  for m in mlp lenet vgg; do
    ours=${H[$m]:-}
    theirs=$(grep "\"model\": \"$m\"" "$OUT/bench-gpu/torch.out" |
      sed -n 's/.*"samples_per_s": \([0-9.eE+]*\).*/\1/p' | tail -1)
    if [ -n "$ours" ] && [ -n "$theirs" ]; then
      r=$(awk -v a="$ours" -v b="$theirs" 'BEGIN { printf "%.2f", a / b }')
      line+=("$m $(awk -v a="$ours" -v b="$theirs" -v r="$r" 'BEGIN { printf "%.0f vs %.0f samples/s (%sx)", a, b, r }')")
      # targets: the conv models at least 0.8x PyTorch eager, the MLP ahead of it
      awk -v r="$r" -v t="$([ "$m" = mlp ] && echo 1.0 || echo 0.8)" 'BEGIN { exit !(r < t) }' &&
        miss+=" $m ${r}x"
    else
      line+=("$m ${ours:-?} vs ${theirs:-?} samples/s")
    fi
    [ -n "${I[$m]:-}" ] && line[-1]+=" [im2col ${I[$m]%.*}]"
    add_line "${line[-1]}"
  done
  local all
  all=$(printf '%s; ' "${line[@]}")
  all="hetring vs PyTorch eager, batch 512: ${all%; }"
  [ -n "$miss" ] && all+="; below target (lenet, vgg >= 0.8x, mlp >= 1x):$miss"
  if [ -n "$bad" ]; then result fail "${bad# }${all:+ $all}"; else result pass "$all"; fi
}

check_bench_mixed() {
  need_build || return
  local d=$OUT/bench-mixed rc msg
  say "$HR bench hetero --help"
  "$HR" bench hetero --help 2>&1 | grep -E 'scenarios|subset'
  say "$HR bench hetero --scenarios mixed --iters 100 --policies proportional,model --port $BASE"
  run_to $((CHECK_T - 5)) "$HR" bench hetero --scenarios mixed --iters 100 --policies proportional,model \
    --port "$BASE" --out "$d/out" --json "$d/hetero.json" > "$d/bench.out" 2>&1
  rc=$?
  cat "$d/bench.out"
  msg=$(grep -v '^ *$' "$d/bench.out" | tail -1)
  if [ "$rc" != 0 ]; then
    result fail "exit $rc: ${msg:-no output}"
    return
  fi
  grep -o '"scenario": "[^"]*", "policy": "[^"]*", "samples_per_s": [0-9.]*' "$d/hetero.json" \
    2>/dev/null | tr -d '"' | while read -r l; do add_line "$l"; done
  grep "each node's own compute throughput" "$d/bench.out" | while read -r l; do add_line "$l"; done
  # the issue's target: the best policy at least 0.85 of the ideal speed-up (reported, not gated)
  sed -n 's/.*"policy": "\([a-z]*\)".*"speedup_vs_static": \([0-9.]*\), "ideal_speedup": \([0-9.]*\).*/\1 \2 \3/p' \
    "$d/hetero.json" 2>/dev/null | awk '$1 != "static" && $3 > 0 { printf "%s: %.2f of the ideal speed-up (target 0.85)\n", $1, $2 / $3 }' |
    while read -r l; do add_line "$l"; done
  local rows
  rows=$(paste -sd';' "$RES/bench-mixed.lines" 2>/dev/null | sed 's/;/; /g')
  result pass "${rows:-$msg}"
}

check_torch_cuda() {
  local ex=$SRC/examples/torch/mnist_cnn.py d=$OUT/torch-cuda lib rc on n pids=() h=() one
  if ! grep -qE "add_argument\\([\"']--device[\"']" "$ex" 2>/dev/null; then
    result skip "examples/torch has no --device flag"
    return
  fi
  need_build || return
  lib=$(find "$BUILD" -name 'libhetring.so*' \( -type f -o -type l \) 2>/dev/null | sort | head -1)
  [ -n "$lib" ] || { result fail "no libhetring.so under $BUILD"; return; }
  say "$HR gen-data --kind synthetic --out $d/data"
  run_to 60 "$HR" gen-data --kind synthetic --out "$d/data" --samples 2048 --eval-samples 256 ||
    { result fail "hetring gen-data failed"; return; }
  export PYTHONPATH=$SRC/python${PYTHONPATH:+:$PYTHONPATH} HETRING_LIB=$lib
  ITERS=20 B=64 train_section | write_conf "$d/c.ini" "$BASE" 1 tcp "$(dev 0)"
  say "python3 $ex --conf $d/c.ini --node 0 --data $d/data --device $(dev 0)"
  run_to $((CHECK_T / 2 - 10)) \
    python3 "$ex" --conf "$d/c.ini" --node 0 --data "$d/data" --device "$(dev 0)" > "$d/run.out" 2>&1
  rc=$?
  cat "$d/run.out"
  on=$(result_field device "$d/run.out")
  if [ "$rc" != 0 ] || ! grep -q '^RESULT' "$d/run.out"; then
    result fail "exit $rc: $(grep -v '^ *$' "$d/run.out" | tail -1)"
    return
  elif [ "$on" != "$(dev 0)" ]; then
    result fail "the model ran on '${on:-unknown}', not $(dev 0)"
    return
  fi
  one=$(grep -m1 '^done:' "$d/run.out")
  # a GPU node and a CPU node in one cluster: float32 staging on one, in place on the other,
  # and PyTorch's optimizer on each device; the replicas must end bitwise equal (I4)
  ITERS=20 B=64 train_section | write_conf "$d/two.ini" $((BASE + 2)) 2 tcp "$(dev 0)" cpu
  say "the same with node 0 on $(dev 0) and node 1 on cpu"
  for n in 0 1; do
    timeout -k 3 $((CHECK_T / 2 - 10)) python3 "$ex" --conf "$d/two.ini" --node "$n" \
      --data "$d/data" --device "$([ "$n" = 0 ] && dev 0 || echo cpu)" > "$d/two-$n.out" 2>&1 &
    pids+=("$!")
    BG+=("$!")
  done
  for n in 0 1; do
    wait "${pids[$n]}"
    rc=$?
    bg_done "${pids[$n]}"
    echo "== node $n: exit $rc"
    cat "$d/two-$n.out"
    [ "$rc" = 0 ] || { result fail "two nodes: node $n exit $rc: $(grep -v '^ *$' "$d/two-$n.out" | tail -1)"; return; }
    h[n]=$(result_field hash "$d/two-$n.out")
  done
  add_line "one node on $(dev 0): $one"
  add_line "$(dev 0) + cpu: final parameter hash ${h[0]:-none} (node 0), ${h[1]:-none} (node 1)"
  if [ -z "${h[0]}" ] || [ "${h[0]}" != "${h[1]}" ]; then
    result fail "two nodes ($(dev 0) and cpu): parameter hashes ${h[0]:-none} and ${h[1]:-none} differ"
  else
    result pass "on $on: $one; with a cpu node: one parameter hash ${h[0]}"
  fi
}

# result_field KEY FILE: a field of the RESULT line the examples print (strings and numbers)
result_field() {
  sed -n "s/^RESULT .*\"$1\": \"\\{0,1\\}\\([^\",}]*\\).*/\\1/p" "$2" | head -1
}

# ================================================================ one check, in its own process

if [ "${1:-}" = __check ]; then
  CHECK=$2 CHECK_START=$(date +%s)
  trap 'exit 143' TERM
  trap 'exit 130' INT
  trap 'kill_bg' EXIT
  mkdir -p "$OUT/$CHECK"
  cd "$OUT/$CHECK" || exit 1
  cudnn_from_torch # hetring opens libcudnn.so.9 at run time: each check's process needs the path
  "check_${CHECK//-/_}"
  exit 0
fi

# ================================================================ the run

OUT="" BUILD="" LIBS="" ONLY="" BUILD_GIVEN=0 ARGS="$*"
while [ $# -gt 0 ]; do
  case $1 in
    -h|--help) usage; exit 0 ;;
    --build) BUILD=${2:?--build needs a folder}; BUILD_GIVEN=1; shift 2 ;;
    --libs) LIBS=${2:?--libs needs a folder}; shift 2 ;;
    --only) ONLY=${2:?--only needs a list of checks}; shift 2 ;;
    -*) echo "verify.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) [ -z "$OUT" ] || { echo "verify.sh: one OUTDIR only (see --help)" >&2; exit 2; }
       OUT=$1; shift ;;
  esac
done
[ -n "$OUT" ] || { echo "usage: verify.sh OUTDIR [--build DIR] [--libs DIR] [--only CHECK,...] (see --help)" >&2; exit 2; }
for c in ${ONLY//,/ }; do
  [[ " ${CHECKS[*]} " == *" $c "* ]] || { echo "verify.sh: --only: no check '$c' (${CHECKS[*]})" >&2; exit 2; }
done
mkdir -p "$OUT" || exit 2
OUT=$(cd "$OUT" && pwd)
if [ -n "$LIBS" ]; then
  [ -d "$LIBS" ] || { echo "verify.sh: --libs $LIBS is not a folder" >&2; exit 2; }
  LIBS=$(cd "$LIBS" && pwd)
  export LD_LIBRARY_PATH="$LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
if [ "$BUILD_GIVEN" = 1 ]; then
  BUILD=$(readlink -m "$BUILD")
  [ -f "$BUILD/CMakeCache.txt" ] || BUILD_GIVEN=0 # no build there yet: make one
else
  BUILD=$SRC/build-cuda
fi
HR=$BUILD/hetring
STANDIN=${HR_VERIFY_STANDIN:-}
RES=$OUT/.results
rm -rf "$RES"
mkdir -p "$RES"
START=$(date +%s)
DATE=$(date -u +%Y-%m-%dT%H:%M:%SZ)
COMMIT=$(git -C "$SRC" rev-parse --short HEAD 2>/dev/null || echo unknown)
export OUT SRC BUILD BUILD_GIVEN LIBS HR RES STANDIN

# GPU present? nvidia-smi on PATH and listing one GPU or more
NGPU=0 GPU_WHY=""
if [ "${HR_VERIFY_NO_GPU:-}" = 1 ]; then
  GPU_WHY="HR_VERIFY_NO_GPU=1"
elif ! command -v nvidia-smi > /dev/null; then
  GPU_WHY="nvidia-smi not found"
else
  NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  [ "$NGPU" -gt 0 ] || GPU_WHY="nvidia-smi -L lists no GPU"
fi
GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
[ "$STANDIN" = cpu ] && GPU_WHY="" GPU_NAME="none (STAND-IN: cpu for every cuda:N)"
export NGPU # a check that finds no CUDA device where nvidia-smi lists one fails

# ---------------------------------------------------------------- the report

declare -A ST SEC DET
json_str() {
  local s=$1
  s=${s//\\/\\\\}
  s=${s//\"/\\\"}
  s=${s//$'\t'/ }
  s=${s//$'\r'/}
  s=${s//$'\n'/\\n}
  printf '"%s"' "$(printf '%s' "$s" | LC_ALL=C tr -cd '\40-\176')"
}
md_cell() { local s=${1//|/\\|}; printf '%s' "${s//$'\n'/ }"; }

HEADLINE=""
write_report() {
  local c np=0 nf=0 ns=0 first=1 l
  for c in "${CHECKS[@]}"; do
    case ${ST[$c]:-} in pass) np=$((np + 1)) ;; fail) nf=$((nf + 1)) ;; *) ns=$((ns + 1)) ;; esac
  done
  if [ -n "$GPU_WHY" ]; then
    HEADLINE="no GPU: skipped ($GPU_WHY)"
  else
    HEADLINE="$np passed, $nf failed, $ns skipped"
    [ "$STANDIN" = cpu ] && HEADLINE="STAND-IN (cpu devices, no GPU): $HEADLINE"
  fi
  {
    echo "# hetring GPU verification"
    echo
    echo "**$HEADLINE**"
    echo
    echo "- date: $DATE, $(( $(date +%s) - START )) s"
    echo "- host: $(hostname), $(nproc) cores; GPU: ${GPU_NAME:-none} ($NGPU listed)"
    echo "- source: $SRC ($COMMIT); build: $BUILD${LIBS:+; libs: $LIBS}"
    echo "- command: tests/gpu/verify.sh $ARGS"
    echo
    echo "| check | status | seconds | detail | log |"
    echo "|---|---|---|---|---|"
    for c in "${CHECKS[@]}"; do
      echo "| $c | ${ST[$c]} | ${SEC[$c]} | $(md_cell "${DET[$c]}") | [$c.log]($c.log) |"
    done
    for c in "${CHECKS[@]}"; do
      [ -s "$RES/$c.lines" ] || continue
      echo
      echo "## $c"
      echo
      sed 's/^/- /' "$RES/$c.lines"
    done
  } > "$OUT/report.md"
  {
    printf '{\n  "headline": %s,\n  "date": %s,\n  "host": %s,\n  "gpu": %s,\n  "gpus": %d,\n' \
      "$(json_str "$HEADLINE")" "$(json_str "$DATE")" "$(json_str "$(hostname)")" \
      "$(json_str "${GPU_NAME:-none}")" "$NGPU"
    printf '  "standin": %s,\n  "source": %s,\n  "commit": %s,\n  "build": %s,\n' \
      "$([ "$STANDIN" = cpu ] && echo true || echo false)" "$(json_str "$SRC")" \
      "$(json_str "$COMMIT")" "$(json_str "$BUILD")"
    printf '  "summary": {"pass": %d, "fail": %d, "skip": %d},\n  "checks": [\n' "$np" "$nf" "$ns"
    for c in "${CHECKS[@]}"; do
      [ $first = 1 ] || printf ',\n'
      first=0
      printf '    {"name": %s, "status": %s, "seconds": %s, "detail": %s, "log": %s, "lines": [' \
        "$(json_str "$c")" "$(json_str "${ST[$c]}")" "${SEC[$c]}" "$(json_str "${DET[$c]}")" \
        "$(json_str "$c.log")"
      l=0
      if [ -s "$RES/$c.lines" ]; then
        while IFS= read -r line; do
          [ $l = 0 ] || printf ', '
          l=1
          json_str "$line"
        done < "$RES/$c.lines"
      fi
      printf ']}'
    done
    printf '\n  ]\n}\n'
  } > "$OUT/report.json"
}

for c in "${CHECKS[@]}"; do ST[$c]=skip SEC[$c]=0 DET[$c]="not run"; done

if [ -n "$GPU_WHY" ]; then
  for c in "${CHECKS[@]}"; do
    DET[$c]="no GPU ($GPU_WHY)"
    echo "skip: no GPU ($GPU_WHY)" > "$OUT/$c.log"
  done
  write_report
  echo "$HEADLINE"
  echo "report: $OUT/report.md, $OUT/report.json"
  exit 0
fi

# ---------------------------------------------------------------- running the checks

. "$SRC/tests/ports.sh"
CUR="" CURNAME="" REPORTED=0
on_exit() {
  if [ -n "$CUR" ]; then
    kill -TERM "$CUR" 2>/dev/null
    sleep 1
    kill -KILL -- "-$CUR" 2>/dev/null
    ST[$CURNAME]=fail DET[$CURNAME]="interrupted"
  fi
  port_release
  [ "$REPORTED" = 1 ] || write_report
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

for c in "${CHECKS[@]}"; do
  DET[$c]="not run: the script was interrupted before it"
  [ -n "$ONLY" ] && [[ ",$ONLY," != *",$c,"* ]] && DET[$c]="not selected (--only $ONLY)"
done
for c in "${CHECKS[@]}"; do
  [ -n "$ONLY" ] && [[ ",$ONLY," != *",$c,"* ]] && continue
  left=$((START + BUDGET - $(date +%s)))
  t=${CAP[$c]}
  [ "$t" -gt "$left" ] && t=$left
  if [ "$left" -lt 10 ]; then
    ST[$c]=fail DET[$c]="not run: the ${BUDGET} s budget was spent before it"
    echo "${DET[$c]}" > "$OUT/$c.log"
    continue
  fi
  port_block || exit 1 # a block of 8 ports for the check's nodes
  echo "== $c (at most $t s)"
  t0=$(date +%s.%N)
  CHECK_T=$t BASE=$base timeout -k 5 "$t" bash "$SELF" __check "$c" > "$OUT/$c.log" 2>&1 &
  CUR=$! CURNAME=$c
  wait "$CUR"
  rc=$?
  kill -KILL -- "-$CUR" 2>/dev/null # whatever the check left running
  CUR=""
  port_release
  SEC[$c]=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    ST[$c]=fail DET[$c]="timed out after $t s, in: $(grep '^== ' "$OUT/$c.log" | tail -1 | cut -c4-)"
  elif [ -s "$RES/$c.status" ]; then
    ST[$c]=$(head -1 "$RES/$c.status") DET[$c]=$(head -1 "$RES/$c.detail")
  else
    ST[$c]=fail DET[$c]="the check ended without a result (exit $rc): $(grep -v '^ *$' "$OUT/$c.log" | tail -1)"
  fi
  echo "   ${ST[$c]} (${SEC[$c]} s): ${DET[$c]}"
  write_report # so far: an interrupted run still leaves its report
done
write_report
REPORTED=1
echo
echo "$HEADLINE"
echo "report: $OUT/report.md, $OUT/report.json"
for c in "${CHECKS[@]}"; do [ "${ST[$c]}" = fail ] && exit 1; done
exit 0
