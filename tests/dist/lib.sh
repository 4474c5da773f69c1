# lib.sh: the setup the multi-process scripts share; sourced with the hetring binary as $1.
# Sets HR, a failure counter (fail MSG, then `finish` at the end), a temporary directory $tmp
# removed on exit, and a base port below the ephemeral range (32768+).
set -u
HR=$1
fails=0
fail() { echo "FAIL: $*"; fails=$((fails+1)); }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
base=$((10000 + RANDOM % 22000)) # below the ephemeral range (32768+)

# write_conf FILE NODES TIMEOUT: a cluster of NODES nodes on 127.0.0.1 ports base.., without
# security, with the given read timeout; the [train] and [controller] sections from stdin
write_conf() {
  local i
  { printf '[cluster]\nsecurity = none\nconnect_timeout = 20\ntimeout = %s\n' "$3"
    cat
    for ((i = 0; i < $2; i++)); do printf '[node.%d]\nhost = 127.0.0.1\nport = %d\n' $i $((base+i)); done
  } > "$1"
}

# finish: the failure count, and the exit status of the script
finish() {
  echo "$fails failure(s)"
  [ "$fails" = 0 ]
}
