#!/usr/bin/env bash
# Build bench/mpi/mpi_allreduce with mpicc (Open MPI: apt-get install openmpi-bin libopenmpi-dev).
# usage: bench/mpi/build.sh [OUTPUT]   (default: bench/mpi/mpi_allreduce next to the source)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/mpi_allreduce}
if ! command -v mpicc >/dev/null 2>&1; then
    echo "bench/mpi/build.sh: mpicc not found (apt-get install openmpi-bin libopenmpi-dev)" >&2
    exit 1
fi
mpicc -std=c11 -O2 -Wall -Wextra -o "$out" "$here/mpi_allreduce.c"
echo "built $out"
