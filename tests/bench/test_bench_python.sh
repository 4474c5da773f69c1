#!/usr/bin/env bash
# test_bench_python.sh HETRING: the benches find PyTorch where the user has it, and say which.
# Fake interpreters answer the torch probe and the bench scripts with fixed figures:
#   python3 on PATH with torch      bench train uses it (header names it, its rate in the table)
#   --python PATH                   wins over PATH
#   python3 on PATH without torch   its answer is in the header, /usr/bin/python3 is tried next
#   --python /nonexistent           a usage error (exit 2) before anything is measured
#   --no-torch                      no interpreter runs at all
#   bench hetero --ddp              the DDP row comes from the python3 on PATH; --python
#                                   without --ddp is a usage error
# Every header also names the BLAS kernels.
set -u
HR=$1
. "$(dirname "$0")/../harness.sh" # the bench's nodes take base..base+4 (--port)
unset PYTHONPATH

# fake DIR VERSION RATE: DIR/python3 "with torch VERSION"; every call is logged in DIR/calls
fake() {
    mkdir -p "$1"
    cat > "$1/python3" <<EOS
#!/bin/sh
echo "\$*" >> "$1/calls"
case "\$1" in
-c) echo "$2 3.99.1"; exit 0 ;;
*torch_mlp.py) echo '{"torch": "$2", "samples_per_s": $3}'; exit 0 ;;
*ddp_baseline.py) echo '{"nodes": 4, "samples_per_s": $3}'; exit 0 ;;
esac
echo "fake python3: unexpected \$*" >&2
exit 3
EOS
    chmod +x "$1/python3"
}
fake "$tmp/a" 7.7.7-fake 4321.25
fake "$tmp/b" 8.8.8-fake 1234.25
mkdir -p "$tmp/none"
printf '#!/bin/sh\necho "Traceback (most recent call last):" >&2\necho "ModuleNotFoundError: No module named '"'"'torch'"'"'" >&2\nexit 1\n' > "$tmp/none/python3"
chmod +x "$tmp/none/python3"
train() { timeout 120 "$HR" bench train --iters 2 --repeat 1 --batch 16 --layers 784,16,10 "$@"; }

PATH="$tmp/a:$PATH" train > "$tmp/t1.out" 2>&1 || fail "bench train with python3 on PATH exited $?"
grep -q "^# pytorch: torch 7.7.7-fake, Python 3.99.1, $tmp/a/python3 (python3 on PATH)$" "$tmp/t1.out" ||
    fail "the header does not name the python3 on PATH: $(grep pytorch "$tmp/t1.out")"
grep -Eq '^pytorch +4321 ' "$tmp/t1.out" || fail "the pytorch row is not the fake's 4321 samples/s"
grep -q '^# hetring / pytorch: ' "$tmp/t1.out" || fail "no hetring / pytorch ratio"
grep -q "torch_mlp.py 784,16,10 16 1 2$" "$tmp/a/calls" || fail "torch_mlp.py not run with LAYERS BATCH THREADS ITERS: $(cat "$tmp/a/calls")"
grep -q '^# blas: OpenBLAS .*, kernels ' "$tmp/t1.out" || fail "bench train's header does not name the BLAS kernels"

PATH="$tmp/a:$PATH" train --python "$tmp/b/python3" > "$tmp/t2.out" 2>&1 || fail "bench train --python exited $?"
grep -q "^# pytorch: torch 8.8.8-fake, Python 3.99.1, $tmp/b/python3 (--python)$" "$tmp/t2.out" ||
    fail "--python is not the one used: $(grep pytorch "$tmp/t2.out")"
grep -Eq '^pytorch +1234 ' "$tmp/t2.out" || fail "the pytorch row is not --python's 1234 samples/s"

PATH="$tmp/none:$PATH" train > "$tmp/t3.out" 2>&1 || fail "bench train with a torch-less python3 exited $?"
grep -q "^# pytorch: .*$tmp/none/python3: ModuleNotFoundError: No module named 'torch'" "$tmp/t3.out" ||
    fail "the header does not say the python3 on PATH has no torch: $(grep pytorch "$tmp/t3.out")"
if /usr/bin/python3 -c 'import torch' 2> /dev/null; then
    grep -q "^# pytorch: torch [^ ]*, Python [^ ]*, /usr/bin/python3 (python3 on PATH has none: " "$tmp/t3.out" ||
        fail "/usr/bin/python3 (which has torch) was not used next: $(grep pytorch "$tmp/t3.out")"
else
    grep -q "^# pytorch: not available (.*; /usr/bin/python3: " "$tmp/t3.out" ||
        fail "/usr/bin/python3 was not tried next: $(grep pytorch "$tmp/t3.out")"
fi

train --python /nonexistent/python3 > "$tmp/t4.out" 2>&1
rc=$?
[ $rc = 2 ] && grep -q -- "--python /nonexistent/python3: no such file" "$tmp/t4.out" ||
    fail "--python /nonexistent/python3: exit $rc, $(cat "$tmp/t4.out")"
grep -Eq '^hetring +[0-9]' "$tmp/t4.out" && fail "--python /nonexistent/python3 measured before refusing"

rm -f "$tmp/a/calls"
PATH="$tmp/a:$PATH" train --no-torch > "$tmp/t5.out" 2>&1 || fail "bench train --no-torch exited $?"
[ ! -e "$tmp/a/calls" ] || fail "--no-torch still ran python3: $(cat "$tmp/a/calls")"
grep -q '^# pytorch' "$tmp/t5.out" && fail "--no-torch still has a pytorch line"

"$HR" bench train --help | grep -q -- '--python PATH' || fail "bench train --help does not list --python"
"$HR" bench hetero --help | grep -q -- '--python PATH' || fail "bench hetero --help does not list --python"

rm -f "$tmp/a/calls"
PATH="$tmp/a:$PATH" timeout 120 "$HR" bench hetero --port "$base" --ddp --out "$tmp/h" --iters 20 --batch 64 \
    --layers 784,16,10 --scenarios homogeneous --policies model > "$tmp/h.out" 2>&1 ||
    { fail "bench hetero --ddp exited $?"; cat "$tmp/h.out"; }
grep -q "^# pytorch: torch 7.7.7-fake, Python 3.99.1, $tmp/a/python3 (python3 on PATH)$" "$tmp/h.out" ||
    fail "bench hetero's header does not name the python3 on PATH: $(grep pytorch "$tmp/h.out")"
grep -q '^# blas: OpenBLAS .*, kernels ' "$tmp/h.out" || fail "bench hetero's header does not name the BLAS kernels"
grep -Eq '^homogeneous +ddp-gloo +4321 ' "$tmp/h.out" || fail "the DDP row is not the fake's 4321 samples/s"
grep -q "ddp_baseline.py --nodes 4 --layers 784,16,10 --batch 64 --slowdowns 1,1,1,1 --iters 10 " "$tmp/a/calls" ||
    fail "ddp_baseline.py not run with the bench's values: $(cat "$tmp/a/calls")"
grep -q '^pytorch: torch 7.7.7-fake' "$tmp/h/report.md" || fail "report.md does not name the PyTorch used"
"$HR" bench hetero --python "$tmp/b/python3" > "$tmp/h2.out" 2>&1
rc=$?
[ $rc = 2 ] && grep -q -- "--python is for the --ddp baseline" "$tmp/h2.out" ||
    fail "bench hetero --python without --ddp: exit $rc, $(cat "$tmp/h2.out")"

cat "$tmp/t1.out" "$tmp/t3.out"
echo "$fails failure(s)"
[ "$fails" = 0 ]
