#!/usr/bin/env bash
# hetring gen-data into a directory that holds files of the names it writes (a user's real MNIST
# files): refused without --force, naming the file and the flag, with nothing written or
# removed; with --force, replaced. Each file is written whole beside its name and renamed over
# it: a write that fails (a file size limit stands in for a full disk) keeps the file it would
# replace and leaves no temporary file (it truncated the file and then removed it).
set -u
HR=$1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
# MNIST files of a user's (stand-ins): one plain, one gzipped, which gen-data would also remove
mkdir "$tmp/mnist"
echo "real images" > "$tmp/mnist/train-images-idx3-ubyte"
echo "real labels" | gzip > "$tmp/mnist/t10k-labels-idx1-ubyte.gz"
cp -a "$tmp/mnist" "$tmp/before"
msg=$(timeout 30 "$HR" gen-data --kind synthetic --out "$tmp/mnist" --samples 20 --eval-samples 5 2>&1); rc=$?
[ $rc = 1 ] && [ "$msg" = "hetring gen-data: $tmp/mnist/train-images-idx3-ubyte exists; nothing written (expected a directory without the data set's files, or --force to replace them)" ] ||
    fail "gen-data over existing MNIST files: exit $rc: '$msg'"
diff -r "$tmp/mnist" "$tmp/before" > /dev/null || fail "a refused gen-data changed the directory: $(ls "$tmp/mnist")"
rm "$tmp/mnist/train-images-idx3-ubyte"
msg=$(timeout 30 "$HR" gen-data --kind synthetic --out "$tmp/mnist" --samples 20 --eval-samples 5 2>&1); rc=$?
[ $rc = 1 ] && echo "$msg" | grep -q "t10k-labels-idx1-ubyte.gz exists; nothing written" ||
    fail "gen-data that would remove an existing .gz: exit $rc: '$msg'"
for k in synthetic-rgb:data_batch_3.bin synthetic-regression:test.csv; do
    IFS=: read -r kind name <<< "$k"
    mkdir -p "$tmp/$kind"; echo mine > "$tmp/$kind/$name"
    msg=$(timeout 30 "$HR" gen-data --kind "$kind" --out "$tmp/$kind" --samples 20 --eval-samples 5 2>&1); rc=$?
    [ $rc = 1 ] && echo "$msg" | grep -q "$name exists; nothing written" && [ "$(ls "$tmp/$kind")" = "$name" ] ||
        fail "gen-data --kind $kind over $name: exit $rc: '$msg', left $(ls "$tmp/$kind")"
    timeout 30 "$HR" gen-data --kind "$kind" --out "$tmp/$kind" --samples 20 --eval-samples 5 --force \
        > /dev/null 2>&1 || fail "gen-data --kind $kind --force"
    grep -q mine "$tmp/$kind/$name" && fail "--force did not replace $name"
done
timeout 30 "$HR" gen-data --kind synthetic --out "$tmp/mnist" --samples 20 --eval-samples 5 --force \
    > /dev/null 2>&1 || fail "gen-data --force over existing files"
[ "$(ls "$tmp/mnist" | wc -l)" = 4 ] && [ ! -e "$tmp/mnist/t10k-labels-idx1-ubyte.gz" ] ||
    fail "gen-data --force left $(ls "$tmp/mnist" | tr '\n' ' ')"
"$HR" gen-data --help | grep -q -- "--force" || fail "--help does not describe --force"
# a write that fails part-way keeps each file it would replace, whole
for k in synthetic-regression:train.csv synthetic:train-images-idx3-ubyte synthetic-rgb:data_batch_1.bin; do
    IFS=: read -r kind name <<< "$k"
    rm -rf "$tmp/full"; mkdir "$tmp/full"
    head -c 3000 /dev/urandom > "$tmp/full/$name"; cp "$tmp/full/$name" "$tmp/old"
    msg=$( (ulimit -f 2; trap '' XFSZ; exec timeout 30 "$HR" gen-data --kind "$kind" --out "$tmp/full" \
        --samples 200 --eval-samples 5 --force) 2>&1); rc=$?
    [ $rc = 1 ] && echo "$msg" | grep -q "$tmp/full/$name: write failed (File too large)" ||
        fail "gen-data --kind $kind past the size limit: exit $rc: '$msg'"
    cmp -s "$tmp/full/$name" "$tmp/old" || fail "a failed gen-data --kind $kind lost or changed $name: $(ls -l "$tmp/full")"
    ls "$tmp/full" | grep -q '\.tmp\.' && fail "a failed gen-data left a temporary file: $(ls "$tmp/full")"
done
echo "$fails failure(s)"
[ "$fails" = 0 ]
