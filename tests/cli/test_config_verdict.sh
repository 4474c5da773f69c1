#!/usr/bin/env bash
# hetring config gives hetring run's verdict: over a table of cluster files, config --conf FILE
# (for what the file alone decides) and config --conf FILE --node 0 (for what node 0's machine
# decides too) exit with the status hetring run --node 0 exits with, and name the same key.
# HR, fail and $tmp from the shared setup
. "$(dirname "${BASH_SOURCE[0]}")/../dist/lib.sh"
zero=0000000000000000000000000000000000000000000000000000000000000000
# NAME|SCOPE|STATUS|KEY|[train] lines (';' between them)|[cluster] lines. SCOPE file: config
# without --node agrees too; node: only with --node (files, memory, host). KEY: the text both
# outputs must hold.
rows=(
  "good|file|0||model = softmax|"
  "linreg_synthetic|file|2|model = linreg does not fit dataset = synthetic|model = linreg|"
  "linreg_rgb|file|2|model = linreg does not fit dataset = synthetic-rgb|model = linreg;dataset = synthetic-rgb|"
  "softmax_regression|file|2|model = softmax does not fit|model = softmax;dataset = synthetic-regression|"
  "cnn_regression|file|2|model = cnn does not fit|model = cnn;dataset = synthetic-regression|"
  "linreg_mnist|file|2|model = linreg does not fit dataset = mnist|model = linreg;dataset = mnist;data_dir = $tmp/none|"
  "mlp_inputs|file|2|layers starts with 100|model = mlp;layers = 100,10|"
  "mlp_classes|file|2|layers ends with 7|model = mlp;layers = 784,32,7|"
  "few_samples|file|2|samples = 16, fewer than global_batch = 32|model = softmax;samples = 16|"
  "mnist_no_dir|file|2|dataset = mnist needs [train] data_dir|model = softmax;dataset = mnist|"
  "nccl|file|2|backend = nccl|model = softmax|backend = nccl"
  "cnn_rgb|file|0||model = cnn;dataset = synthetic-rgb|"
  "mnist_missing|node|1|data_dir = $tmp/none|model = softmax;dataset = mnist;data_dir = $tmp/none|"
  "checkpoint_dir|node|1|checkpoint $tmp/none/c.ckpt: cannot create|model = softmax;checkpoint = $tmp/none/c.ckpt|"
  "key_file|node|2|$tmp/none/k0: cannot open key file|model = softmax|security = encrypt;key_file = $tmp/none/k{id}"
)
# write FILE TRAIN CLUSTER: one node, or two (pubkeys pinned) when CLUSTER sets a key file; a
# small, quick training unless TRAIN says otherwise
write() {
  { printf '[cluster]\nconnect_timeout = 5\n%s\n' "${3//;/$'\n'}"
    grep -q '^security' <<< "${3//;/$'\n'}" || printf 'security = none\n'
    printf '[train]\n%s\n' "${2//;/$'\n'}"
    for kv in "iterations = 1" "samples = 256" "eval_samples = 32" "global_batch = 32"; do
      grep -q "^${kv%% *} =" <<< "${2//;/$'\n'}" || printf '%s\n' "$kv" # the row's own first
    done
    printf '[node.0]\nhost = 127.0.0.1\nport = %d\n' "$base"
    if grep -q key_file <<< "$3"; then
      printf 'pubkey = %s\n[node.1]\nhost = 127.0.0.1\nport = %d\npubkey = %s\n' \
        $zero $((base + 1)) $zero
    fi
  } > "$1"
}
for row in "${rows[@]}"; do
  IFS='|' read -r name scope want key train cluster <<< "$row"
  ini=$tmp/$name.ini
  write "$ini" "$train" "$cluster"
  timeout 60 "$HR" run --conf "$ini" --node 0 --quiet > "$tmp/run" 2>&1
  rc=$?
  [ "$rc" = "$want" ] || { fail "$name: hetring run exited $rc, expected $want:"; cat "$tmp/run"; }
  forms=("--node 0")
  [ "$scope" = file ] && forms+=("")
  for form in "${forms[@]}"; do
    # shellcheck disable=SC2086 # form is empty or two words
    timeout 60 "$HR" config --conf "$ini" $form > "$tmp/config" 2>&1
    rc=$?
    [ "$rc" = "$want" ] ||
      { fail "$name: hetring config $form exited $rc where hetring run exited $want:"; cat "$tmp/config"; }
    for out in run config; do
      [ -z "$key" ] || grep -qF -- "$key" "$tmp/$out" ||
        { fail "$name: no '$key' from hetring $out ${form:+($form)}:"; cat "$tmp/$out"; }
    done
  done
done
[ $fails = 0 ] && echo "config verdicts: ${#rows[@]} files, as hetring run's"
exit $((fails > 0))
