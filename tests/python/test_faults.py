"""test_faults.py: hetring.torch where something goes wrong, on loopback clusters.

    test_faults.py layout    2 nodes train a model whose weight is transposed (dense, not
                             contiguous); node 0 holds a .grad from a backward of its own
                             before the Trainer, node 1 none (as a node that joins): both
                             all-reduce in the same element order, and the replica hash
                             (every iteration) finds them equal to the end
    test_faults.py worker CONF NODE MODE   one node of those (prints RESULT {json})
Exit 77 when PyTorch is missing.
"""
import json
import os
import subprocess
import sys
import tempfile
import time

from harness import check, finish, need_torch, port_block

need_torch()
import torch  # noqa: E402

ITERS = 8


def write_ini(d, port, name, n, iters=ITERS, extra=""):
    path = os.path.join(d, f"{name}.ini")
    with open(path, "w") as f:
        f.write("[cluster]\nsecurity = none\nconnect_timeout = 20\ntimeout = 10\n"
                "rejoin_timeout = 20\n"
                f"[train]\nsamples = 256\nglobal_batch = 32\niterations = {iters}\nseed = 3\n"
                f"hash_interval = 1\n{extra}")
        for k in range(n):
            f.write(f"[node.{k}]\nhost = 127.0.0.1\nport = {port + k}\n")
    return path


def data():
    g = torch.Generator().manual_seed(5)
    X = torch.randn(256, 6, generator=g)
    return X, (X @ torch.randn(6, 4, generator=g)).argmax(1)


def worker_layout(conf, node):
    """A transposed weight; node 0 did a backward before the Trainer (a .grad of the
    parameter's strides), node 1 did not."""
    import hetring.torch as ht
    torch.manual_seed(1)
    lin = torch.nn.Linear(6, 4)
    lin.weight = torch.nn.Parameter(torch.randn(6, 4).t())  # (4, 6), strides (1, 4)
    X, Y = data()
    if node == 0:
        torch.nn.functional.cross_entropy(lin(X[:4]), Y[:4]).backward()
    opt = torch.optim.SGD(lin.parameters(), lr=0.1)
    tr = ht.Trainer(conf, lin, opt, node_id=node, n_samples=256)
    out = {"iters": [], "error": None}
    try:
        for idx in tr.batches():
            res = tr.step(torch.nn.functional.cross_entropy, (X[idx], Y[idx]))
            if res is not None:
                out["iters"].append(res.iter)
    except Exception as e:  # noqa: BLE001  (reported by the test)
        out["error"] = f"{type(e).__name__}: {e}"
    out["hash"] = ht.state_hash(lin)
    tr.close()
    return out


WORKERS = {"layout": worker_layout}


def worker(conf, node, mode):
    out = WORKERS[mode](conf, node)
    print("RESULT " + json.dumps(out), flush=True)
    return 0


def run(d, ini, n, mode, timeout=120):
    """n worker processes of mode on ini: their results (None for one that gave none)."""
    ps = []
    for k in range(n):
        log = open(os.path.join(d, f"{mode}{k}.log"), "w+")
        p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "worker", ini, str(k),
                              mode], stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True, env=dict(os.environ, TMPDIR=d))
        ps.append((p, log))
    rs, end = [], time.monotonic() + timeout
    for k, (p, log) in enumerate(ps):
        try:
            rc = p.wait(timeout=max(1.0, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            rc = "a timeout"
        log.seek(0)
        text = log.read()
        check(rc == 0, f"{mode}: node {k} exited {rc}:\n{text[-3000:]}")
        line = [x for x in text.splitlines() if x.startswith("RESULT ")]
        rs.append(json.loads(line[-1][7:]) if line else None)
    check(all(rs), f"{mode}: a node printed no result")
    return rs


def layout(d, port):
    rs = run(d, write_ini(d, port, "layout", 2), 2, "layout")
    if not all(rs):
        return
    for k, r in enumerate(rs):
        print(f"layout: node {k}: iterations {r['iters']}, error {r['error']}")
        check(r["error"] is None and r["iters"] == list(range(ITERS)),
              f"layout: node {k}: {r['error']}, iterations {r['iters']}")
    check(rs[0]["hash"] == rs[1]["hash"], "layout: the replicas differ")


def main():
    if sys.argv[1] == "worker":
        return worker(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    port, claim = port_block()
    try:
        with tempfile.TemporaryDirectory(prefix="hetring-py.") as d:
            {"layout": layout}[sys.argv[1]](d, port)
    finally:
        os.rmdir(claim)
    return finish()


if __name__ == "__main__":
    t0 = time.monotonic()
    rc = main()
    if sys.argv[1] != "worker":
        print(f"{sys.argv[1]}: {time.monotonic() - t0:.1f} s")
    sys.exit(rc)
