# security.sh: the [cluster] security lines of the ring tests' cluster files, sourced by
# ring_test.sh and elastic_test.sh (both keep their keys in $tmp: psk, node{id}.key).
# security_lines MODE: none, auth (the cluster PSK) or encrypt (every node's identity key)
security_lines() {
    case $1 in
    none) printf 'security = none\n' ;;
    auth) printf 'security = auth\npsk_file = %s\n' "$tmp/psk" ;;
    encrypt) printf 'security = encrypt\nkey_file = %s\n' "$tmp/node{id}.key" ;;
    esac
}
