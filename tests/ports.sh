# ports.sh: blocks of 8 TCP ports for the multi-process tests, claimed so that tests running
# side by side (ctest -j) never pick the same ones. A claim is a directory (mkdir is atomic),
# removed by port_release; claims older than 30 minutes are left over from killed tests and are
# cleared. Ports stay below the kernel's ephemeral range (32768+), so that no outgoing
# connection can hold one.
PORT_CLAIMS=()
find "${TMPDIR:-/tmp}" -maxdepth 1 -name 'hetring-ports.*' -mmin +30 -exec rmdir {} + 2>/dev/null
# port_block: set `base` to the first port of a block of 8 that no other test holds
port_block() {
    local d
    for _ in $(seq 1 200); do
        base=$((10000 + (RANDOM % 2700) * 8))
        d=${TMPDIR:-/tmp}/hetring-ports.$base
        if mkdir "$d" 2>/dev/null; then
            PORT_CLAIMS+=("$d")
            return 0
        fi
    done
    echo "ports.sh: no free block of ports" >&2
    return 1
}
port_release() {
    local d
    for d in "${PORT_CLAIMS[@]}"; do rmdir "$d" 2>/dev/null; done
    PORT_CLAIMS=()
}
