#!/usr/bin/env bash
# Data files whose samples this process cannot hold (ulimit -v, which base/hr_cores'
# hr_memory_bytes counts as it counts a cgroup's memory limit) are refused as they load, naming
# the file, its size on disk, what its samples need and the memory there is, long before the
# node holds that memory (under a cgroup limit the kernel killed the node instead): a plain IDX
# file (sparse), a gzipped IDX file (its header says the size), a plain and a gzipped CIFAR-10
# batch and a gzipped CSV file (their size at the rate of the samples read so far, counted where
# that rate says they do not fit). Sets that fit load under the same limit, a CSV whose first
# rows are much shorter on disk than the rest too.
set -u
HR=$1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
limit=900000 # KiB: 0.922 GB
ini() { # ini DATASET MODEL DIR
    printf '[cluster]\nsecurity = none\n[train]\ndataset = %s\nmodel = %s\ndata_dir = %s\nglobal_batch = 2\niterations = 2\n[node.0]\nhost = 127.0.0.1\nport = 7001\n' \
        "$1" "$2" "$3" > "$tmp/c.ini"
}
run() { (ulimit -v $limit; exec timeout 60 "$HR" run --conf "$tmp/c.ini" --quiet) 2>&1; }
# expect FILE NEED: the run refuses FILE, naming its size on disk, NEED GB and the 0.922 GB
expect() {
    local rc=$1 msg=$2 file=$3 need=$4
    [ "$rc" = 1 ] && echo "$msg" | grep -q "$file (.* GB on disk): .* need $need GB of memory, more than the 0.922 GB this process may use here" ||
        fail "$file: exit $rc: $(echo "$msg" | tail -2)"
}
small() { # the labels and held-out files: 2 samples of images of $1x$1
    printf '\x00\x00\x08\x01\x00\x00\x00\x02\x00\x00' > "$2/t10k-labels-idx1-ubyte"
    { printf '\x00\x00\x08\x03\x00\x00\x00\x02'; printf "\\x00\\x00\\x$(printf %02x $(($1 >> 8)))\\x$(printf %02x $(($1 & 255)))%.0s" 1 2; head -c $((2 * $1 * $1)) /dev/zero; } \
        > "$2/t10k-images-idx3-ubyte"
}
# MNIST: 1000 images of 1024x1024 (1.05 GB), plain (sparse) and gzipped
mkdir "$tmp/idx" "$tmp/idxgz"
{ printf '\x00\x00\x08\x03\x00\x00\x03\xe8\x00\x00\x04\x00\x00\x00\x04\x00'; } > "$tmp/idx/train-images-idx3-ubyte"
truncate -s $((16 + 1000 * 1024 * 1024)) "$tmp/idx/train-images-idx3-ubyte"
{ printf '\x00\x00\x08\x01\x00\x00\x03\xe8'; head -c 1000 /dev/zero; } > "$tmp/idx/train-labels-idx1-ubyte"
small 1024 "$tmp/idx"
ini mnist softmax "$tmp/idx"
msg=$(run); expect $? "$msg" "$tmp/idx/train-images-idx3-ubyte" 1.05
{ printf '\x00\x00\x08\x03\x00\x00\x03\xe8\x00\x00\x04\x00\x00\x00\x04\x00'; head -c $((1000 * 1024 * 1024)) /dev/zero; } |
    gzip -1 > "$tmp/idxgz/train-images-idx3-ubyte.gz"
cp "$tmp/idx/train-labels-idx1-ubyte" "$tmp/idx/t10k-"* "$tmp/idxgz/"
ini mnist softmax "$tmp/idxgz"
msg=$(run); expect $? "$msg" "$tmp/idxgz/train-images-idx3-ubyte.gz" 1.05
# CIFAR-10: 320000 records (0.983 GB in memory), plain (sparse) and gzipped
mkdir "$tmp/cifar" "$tmp/cifargz"
truncate -s $((320000 * 3073)) "$tmp/cifar/data_batch_1.bin"
: > "$tmp/cifar/test_batch.bin"
ini cifar10 softmax "$tmp/cifar"
msg=$(run); expect $? "$msg" "$tmp/cifar/data_batch_1.bin" 0.98[0-9]
head -c $((320000 * 3073)) /dev/zero | gzip -1 > "$tmp/cifargz/data_batch_1.bin.gz"
mv "$tmp/cifargz/data_batch_1.bin.gz" "$tmp/cifargz/data_batch_1.bin" # gzread reads either
: > "$tmp/cifargz/test_batch.bin"
ini cifar10 softmax "$tmp/cifargz"
msg=$(run); expect $? "$msg" "$tmp/cifargz/data_batch_1.bin" 0.9[0-9]*
# CSV: rows of 1 label and 499 zeros, 1000 bytes of text and 2000 in memory each: 0.5 GB of
# text, 1 GB of floats
mkdir "$tmp/csv"
row="1$(printf ',0%.0s' $(seq 499))"
yes "$row" | head -n 500000 | gzip -1 > "$tmp/csv/train.csv"
: > "$tmp/csv/test.csv"
ini csv softmax "$tmp/csv"
msg=$(run); expect $? "$msg" "$tmp/csv/train.csv" "[0-9.]*"
# CSV whose first rows are much shorter on disk than the rest: 4096 rows of zeros, which gzip
# packs to next to nothing, then 5000 rows of random numbers; at the rate of the first rows the
# file would need GBs, its 9096 rows of 500 floats need 18 MB: counted, they load
mkdir "$tmp/csvshort"
awk 'BEGIN { srand(7); z = "1"; for (j = 1; j < 500; j++) z = z ",0"
  for (i = 0; i < 4096; i++) print z
  for (i = 0; i < 5000; i++) { l = i % 10; for (j = 1; j < 500; j++) l = l sprintf(",%.9f", rand()); print l } }' |
  gzip -1 > "$tmp/csvshort/train.csv"
: > "$tmp/csvshort/test.csv"
ini csv softmax "$tmp/csvshort"
msg=$(run) || fail "a CSV whose first rows are short, which fits: $(echo "$msg" | tail -2)"
echo "$msg" | grep -q "loaded csv from .*: 9096 training" || fail "csvshort: $(echo "$msg" | tail -2)"
# a set that fits loads under the same limit
"$HR" gen-data --kind synthetic --out "$tmp/fits" --samples 2000 --eval-samples 100 > /dev/null
ini mnist softmax "$tmp/fits"
msg=$(run) || fail "a set that fits under the limit: $(echo "$msg" | tail -2)"
echo "$fails failure(s)"
[ "$fails" = 0 ]
