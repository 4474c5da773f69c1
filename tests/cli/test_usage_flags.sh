#!/usr/bin/env bash
# Every long option a command's getopt table accepts appears in its usage text (--help), for
# each cli/cmd_*.c: the option names are read from the source table, the usage from the
# built hetring, so a flag added to one and not the other fails here.
set -u
HR=$1 SRC=$2
fails=0 checked=0
for src in "$SRC"/cli/cmd_*.c; do
    cmd=$(basename "$src" .c); cmd=${cmd#cmd_}; cmd=${cmd//_/-}
    # {"name", no_argument|required_argument|optional_argument, ...} entries of option tables
    opts=$(grep -o '{"[a-z][a-z0-9-]*", *\(no\|required\|optional\)_argument' "$src" |
           sed 's/{"\([^"]*\)".*/\1/' | sort -u)
    [ -n "$opts" ] || continue
    help=$("$HR" "$cmd" --help 2>&1)
    for o in $opts; do
        checked=$((checked + 1))
        grep -q -- "--$o\b" <<< "$help" ||
            { echo "FAIL: hetring $cmd accepts --$o but its usage does not list it"; fails=$((fails+1)); }
        # the usage line(s) at the top, before the first blank line, name every flag too
        sed '/^$/q' <<< "$help" | grep -q -- "--$o\b" || [ "$o" = help ] ||
            { echo "FAIL: hetring $cmd: --$o is missing from the usage line"; fails=$((fails+1)); }
    done
done
echo "options checked: $checked"
[ "$checked" -ge 20 ] || { echo "FAIL: only $checked options found (is the pattern stale?)"; fails=$((fails+1)); }
exit $((fails > 0))
