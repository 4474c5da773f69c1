# script_args.sh: the start every bench script that measures a HETRING shares. Sourced; then
#   script_hetring "$@"; HR=$1; shift
# prints the script's header comment (from line 2 to `set -u`) as its usage for -h/--help
# (exit 0) or no argument (exit 2), and refuses at once a HETRING that is not an executable
# file (exit 2): each node's start would fail and every wait run to its end, minutes before
# the script said anything.
script_usage() { sed -n '2,/^set -u/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; }
script_hetring() {
    case ${1:-} in
    -h | --help) script_usage; exit 0 ;;
    "") script_usage >&2; exit 2 ;;
    esac
    [ -f "$1" ] && [ -x "$1" ] || {
        echo "$(basename "$0"): '$1' is not an executable file (the hetring to measure; --help)" >&2
        exit 2
    }
}
