# records.sh: the exactly-once check (I8) over the metrics of a run, shared by the multi-process
# tests (tests/dist/lib.sh) and tests/gpu/verify.sh; needs only awk.
#
# records_check WHO ITERS B FILES...: over the metrics files (each node's life that recorded
# iterations), every iteration 0..ITERS-1 was recorded by one of them at least (a node that
# takes the state at a view change has not recorded the iteration the state brings) and by
# none twice, and every record's split sums to B (I8). Prints one line naming WHO; returns 1
# when the records break it.
records_check() {
  local who=$1 iters=$2 b=$3
  shift 3
  awk -v n="$iters" -v B="$b" -v ids="$who" '
    /^\{"iter":/ {
      match($0, /^\{"iter":[0-9]+/); it = substr($0, 9, RLENGTH - 8) + 0
      if ((FILENAME, it) in seen) dup++
      seen[FILENAME, it] = 1; any[it] = 1
      match($0, /"b":\[[0-9,]*\]/); s = substr($0, RSTART + 5, RLENGTH - 6)
      k = split(s, b, ","); sum = 0; for (j = 1; j <= k; j++) sum += b[j]
      if (sum != B) bad++
    }
    END {
      for (i = 0; i < n; i++) if (!(i in any)) miss++
      printf "%s: %d iterations recorded by none, %d recorded twice by one node, %d splits not summing to B\n", ids, miss, dup, bad
      exit (miss || dup || bad) ? 1 : 0
    }' "$@"
}
