#!/usr/bin/env bash
# hetring keygen: mode 0600, a 64-hex public key on stdout that the config accepts as pubkey,
# no overwrite without --force, PSK files, and a key that cannot be written whole leaves none
# (and --force the key it would replace); --force through a link replaces where it leads, 0600.
set -u
HR=$1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
pub=$("$HR" keygen --out "$tmp/n0.key" 2>"$tmp/err") || fail "keygen failed: $(cat "$tmp/err")"
[[ $pub =~ ^[0-9a-f]{64}$ ]] || fail "public key is not 64 hex digits: '$pub'"
[ "$(stat -c %a "$tmp/n0.key")" = 600 ] || fail "key file mode $(stat -c %a "$tmp/n0.key")"
grep -q "$pub" "$tmp/n0.key" && fail "the public key is in the secret file (it holds the seed only)"
"$HR" keygen --out "$tmp/n0.key" 2>/dev/null && fail "an existing key file was replaced"
"$HR" keygen --out "$tmp/n0.key" --force >/dev/null 2>&1 || fail "--force did not replace"
"$HR" keygen --psk --out "$tmp/psk" >"$tmp/psk.out" 2>/dev/null || fail "keygen --psk failed"
[ -s "$tmp/psk.out" ] && fail "keygen --psk printed something on stdout"
[ "$(stat -c %a "$tmp/psk")" = 600 ] || fail "psk file mode"
pub=$("$HR" keygen --out "$tmp/n0.key" --force 2>/dev/null)
printf '[cluster]\nsecurity = encrypt\nkey_file = %s\n[train]\niterations = 1\n[node.0]\nhost = 127.0.0.1\nport = 40999\npubkey = %s\n' \
    "$tmp/n{id}.key" "$pub" > "$tmp/c.ini"
"$HR" config --conf "$tmp/c.ini" >/dev/null 2>"$tmp/err" || fail "config rejects the printed pubkey: $(cat "$tmp/err")"
"$HR" keygen 2>/dev/null; [ $? = 2 ] || fail "keygen without --out is not a usage error"
# a key that cannot be written (a file size limit of 0 stands in for a full disk): --force keeps
# the key it would replace (it was truncated to nothing first), and a new file is not left
# half written; both say why. A directory is named as one (it said "File exists").
cp "$tmp/n0.key" "$tmp/n0.before"
msg=$( (ulimit -f 0; trap '' XFSZ; exec "$HR" keygen --out "$tmp/n0.key" --force) 2>&1 >/dev/null)
[ $? = 1 ] && [ "$msg" = "hetring keygen: $tmp/n0.key: write: File too large" ] ||
    fail "keygen --force past the size limit: '$msg'"
cmp -s "$tmp/n0.key" "$tmp/n0.before" || fail "keygen --force that failed changed the key it replaces"
msg=$( (ulimit -f 0; trap '' XFSZ; exec "$HR" keygen --out "$tmp/n9.key") 2>&1 >/dev/null)
[ -e "$tmp/n9.key" ] && fail "a key that could not be written was left: $(wc -c < "$tmp/n9.key") bytes"
ls "$tmp" | grep -q '\.tmp\.' && fail "a temporary key file was left: $(ls "$tmp")"
mkdir "$tmp/dir"
msg=$("$HR" keygen --out "$tmp/dir" --force 2>&1 >/dev/null)
[ "$msg" = "hetring keygen: $tmp/dir: is a directory (expected a file name for the key, e.g. $tmp/dir/node0.key)" ] ||
    fail "keygen into a directory: '$msg'"
# --force through a symbolic link replaces the file it leads to and keeps the link, as a
# checkpoint does; the new key is 0600 though the file it replaces was 0644, also under umask 0
echo old > "$tmp/real.key"; chmod 644 "$tmp/real.key"; ln -s real.key "$tmp/link.key"
pub=$( (umask 0; exec "$HR" keygen --out "$tmp/link.key" --force) 2>"$tmp/err") ||
    fail "keygen --force through a link: $(cat "$tmp/err")"
[ -L "$tmp/link.key" ] || fail "keygen --force replaced the link $tmp/link.key by a file"
grep -q '^[0-9a-f]\{64\}$' "$tmp/real.key" || fail "the file the link leads to holds no new key"
[ "$(stat -c %a "$tmp/real.key")" = 600 ] || fail "replaced key file mode $(stat -c %a "$tmp/real.key")"
ls "$tmp" | grep -q '\.tmp\.' && fail "a temporary key file was left: $(ls "$tmp")"
# the temporary file is created 0600 by open itself (O_EXCL), never readable by others for a
# moment before a chmod; checked where strace may trace
if command -v strace >/dev/null && strace -o /dev/null true 2>/dev/null; then
    (umask 0; exec strace -f -o "$tmp/trace" -e trace=open,openat,chmod,fchmod,fchmodat \
        "$HR" keygen --out "$tmp/n0.key" --force) >/dev/null 2>&1 || fail "traced keygen --force"
    grep -q 'n0\.key\.tmp\.[0-9]*\.[0-9a-f]\{8\}", O_WRONLY|O_CREAT|O_EXCL|O_CLOEXEC, 0600) = [0-9]' "$tmp/trace" ||
        fail "the temporary key file is not created 0600 with O_EXCL under PATH.tmp.PID.TAG: $(grep -e '\.tmp\.' -e chmod "$tmp/trace")"
    grep chmod "$tmp/trace" | grep -qv ', 0600)' &&
        fail "the key file's mode is set to other than 0600: $(grep chmod "$tmp/trace")"
else
    echo "strace cannot trace here: the creation mode of the temporary file is not checked"
fi
echo "$fails failure(s)"
[ "$fails" = 0 ]
