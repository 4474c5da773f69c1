#!/usr/bin/env bash
# hetring config --node ID is a dry run of that node: relative paths in the file are relative to
# the file's directory (not the working directory), and each missing key file, data file,
# checkpoint directory or busy port, a pinned pubkey that is not the key file's, and a loopback
# host beside a node on another machine, is reported
# as FILE:LINE: KEY with hetring run's exit status: 2 for what run refuses as a configuration
# error (a key file, a model that does not fit the data, a host), 1 for the rest (a busy
# port); a node that would start passes with exit status 0.
# HR, fail, $tmp and the port block `base` from the shared setup, whose EXIT trap also stops
# the process holding a port, if it still runs (child_rec)
. "$(dirname "${BASH_SOURCE[0]}")/../dist/lib.sh"
mkdir -p "$tmp/cluster" "$tmp/elsewhere"
ini=$tmp/cluster/c.ini
write_ini() { # write_ini LAYERS PUB0 PUB1
    cat > "$ini" <<INI
[cluster]
security = encrypt
key_file = keys/node{id}.key
[train]
dataset = mnist
data_dir = data
model = mlp
layers = $1
checkpoint = ck/run.ckpt
iterations = 2
global_batch = 20
[node.0]
host = 127.0.0.1
port = $base
pubkey = $2
[node.1]
host = 127.0.0.1
port = $((base + 1))
pubkey = $3
INI
}
zero=0000000000000000000000000000000000000000000000000000000000000000
write_ini 784,16,10 $zero $zero
# dry_run WANT_RC: run from another directory, output in $tmp/out
dry_run() {
    (cd "$tmp/elsewhere" && timeout 20 "$HR" config --conf ../cluster/c.ini --node 1) \
        > "$tmp/out" 2>&1
    local rc=$?
    [ "$rc" = "$1" ] || { fail "config --node 1 exited $rc, expected $1:"; cat "$tmp/out"; }
}
has() { grep -qF -- "$1" "$tmp/out" || { fail "no '$1' in:"; cat "$tmp/out"; }; }

# nothing is there yet: every missing file, by its line, resolved next to the INI file (the
# key file makes it a configuration error)
dry_run 2
has "c.ini:3: key_file: $tmp/cluster/keys/node1.key: cannot open key file"
has "c.ini:9: checkpoint: checkpoint $tmp/cluster/ck/run.ckpt: cannot create"
has "c.ini:6: data_dir: $tmp/cluster/data/train-images-idx3-ubyte: cannot open"
has "node 1 would not start: 3 problems above"

# a FIFO in place of the key file is refused, not waited on
mkdir "$tmp/cluster/keys" && mkfifo "$tmp/cluster/keys/node1.key"
dry_run 2
has "c.ini:3: key_file: $tmp/cluster/keys/node1.key: key file is not a regular file"
rm "$tmp/cluster/keys/node1.key"

# everything in place: the node would start
pub0=$("$HR" keygen --out "$tmp/cluster/keys/node0.key" 2>/dev/null)
pub1=$("$HR" keygen --out "$tmp/cluster/keys/node1.key" 2>/dev/null)
"$HR" gen-data --kind synthetic --out "$tmp/cluster/data" --samples 200 --eval-samples 40 \
    >/dev/null 2>&1 || fail "gen-data"
mkdir "$tmp/cluster/ck"
write_ini 784,16,10 "$pub0" "$pub1"
dry_run 0
has "; dry run of node 1: key files, data, checkpoint and port are ready"
has "; data: 200 training and 40 held-out samples of 28x28x1"
has "key_file = $tmp/cluster/keys/node{id}.key"
ls "$tmp/cluster/ck" | grep -q . && fail "the dry run left files in the checkpoint directory"

# a model that does not fit the data names its key and line
write_ini 1024,16,10 "$pub0" "$pub1"
dry_run 2
has "c.ini:8: layers: starts with 1024, but the mnist inputs have 784 features"
write_ini 784,16,10 "$pub0" "$pub1"

# a key readable by others is refused as the ring would refuse it
chmod 644 "$tmp/cluster/keys/node1.key"
dry_run 2
has "c.ini:3: key_file: $tmp/cluster/keys/node1.key: key file is readable by group or others"
chmod 600 "$tmp/cluster/keys/node1.key"

# another node's pubkey pinned for node 1: refused by its line, as the node refuses it at start
# (the dry run passed it, and the node then exited 2)
write_ini 784,16,10 "$pub1" "$pub0"
dry_run 2
has "c.ini:19: [node.1] pubkey: is not the public key of $tmp/cluster/keys/node1.key (that is $pub1)"
write_ini 784,16,10 "$pub0" "$pub1"

# the node's port in use: named with its line, and released again after the dry run
python3 -c 'import socket,sys,time
s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(1); time.sleep(60)' \
    $((base + 1)) & holder=$!
child_rec "$holder"
for _ in $(seq 50); do
    python3 -c 'import socket,sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])))' \
        $((base + 1)) 2>/dev/null && break
    sleep 0.1
done
dry_run 1
# the whole line, as hetring run reports the busy port (the ring's listen_start)
line="../cluster/c.ini:18: [node.1] port = $((base + 1)): cannot listen on 127.0.0.1:$((base + 1)): Address already in use (is another node or program using it?)"
grep -qxF -- "$line" "$tmp/out" || { fail "no line '$line' in:"; cat "$tmp/out"; }
child_signal TERM "$holder"; wait "$holder" 2>/dev/null
dry_run 0

# a node whose host is loopback here while another node is elsewhere could never be reached:
# refused by its line (the dry run binds, never connects: no traffic leaves loopback)
printf '[cluster]\nsecurity = none\n[node.0]\nhost = localhost\nport = %d\n[node.1]\nhost = 192.0.2.1\nport = %d\n' \
    "$base" $((base + 1)) > "$tmp/lb.ini"
timeout 20 "$HR" config --conf "$tmp/lb.ini" --node 0 > "$tmp/out" 2>&1
rc=$?
[ $rc = 2 ] || fail "loopback host beside a remote node: exited $rc"
has "lb.ini:4: [node.0] host = localhost is 127.0.0.1 on this machine, a loopback address: node 1 (192.0.2.1), on another machine, could never connect to it"
sed -i 's/192.0.2.1/127.0.0.1/' "$tmp/lb.ini"
timeout 20 "$HR" config --conf "$tmp/lb.ini" --node 0 > "$tmp/out" 2>&1 ||
    fail "localhost beside 127.0.0.1 (both on this machine) refused: $(cat "$tmp/out")"

# an override is relative to the working directory, and is named as an override
(cd "$tmp/elsewhere" && "$HR" config --conf ../cluster/c.ini --node 1 \
    --set train.checkpoint=nodir/run.ckpt) > "$tmp/out" 2>&1
has "--set train.checkpoint: checkpoint $tmp/elsewhere/nodir/run.ckpt"

[ $fails = 0 ] && echo "config dry run: ok"
exit $((fails > 0))
