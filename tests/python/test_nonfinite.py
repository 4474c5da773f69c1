"""test_nonfinite.py: hetring.torch with a loss that turns NaN on one node ([train] nonfinite).

    test_nonfinite.py error   3 nodes (an MLP with BatchNorm, buffers="average"); node 1's
                              loss is NaN at iteration 5, and so its gradient: every node's
                              step raises hetring.NonFinite with .iter 5 and .nodes [1] and a
                              message naming both, and every node keeps the finite state of
                              iteration 4, the same on every node
    test_nonfinite.py skip    the same with nonfinite = skip: the run ends on every node,
                              iteration 5's Result says skipped with node 1, Trainer.skipped
                              and Node.skipped are 1, the skipped step changed nothing (the
                              state hash, parameters and buffers, after iteration 5 is the one
                              after 4), every iteration ran once and the replicas end equal
    test_nonfinite.py worker CONF NODE MODE   one node of those (prints RESULT {json})
Exit 77 when PyTorch is missing.
"""
import json
import os
import subprocess
import sys

from harness import check, need_torch, run_case

need_torch()
import torch  # noqa: E402

ITERS, BAD_ITER, BAD_NODE = 12, 5, 1


def worker(conf, node):
    import hetring
    import hetring.torch as ht
    torch.manual_seed(1234 + node)
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(5)
    N, D, C = 512, 20, 4
    X = torch.randn(N, D, generator=g)
    Y = (X @ torch.randn(D, C, generator=g)).argmax(1)
    model = torch.nn.Sequential(torch.nn.Linear(D, 32), torch.nn.BatchNorm1d(32),
                                torch.nn.ReLU(), torch.nn.Linear(32, C))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    ce = torch.nn.CrossEntropyLoss()
    tr = ht.Trainer(conf, model, opt, node_id=node, n_samples=N)
    out = {"iters": [], "skipped": [], "hashes": {}, "error": None}
    at = [-1]  # the iteration being computed

    def loss_fn(o, y):
        bad = at[0] == BAD_ITER and node == BAD_NODE
        return ce(o, y) * (float("nan") if bad else 1.0)

    try:
        for idx in tr.batches():
            at[0] = tr.batch.iter
            res = tr.step(loss_fn, (X[idx], Y[idx]))
            if res is None:
                continue
            out["iters"].append(res.iter)
            if res.skipped:
                out["skipped"].append([res.iter, res.nonfinite_nodes])
            out["hashes"][res.iter] = ht.state_hash(model)
    except hetring.NonFinite as e:
        out["error"] = {"iter": e.iter, "nodes": e.nodes, "message": str(e), "status": e.status}
    out["finite"] = all(bool(torch.isfinite(t).all()) for t in ht.state_tensors(model))
    out["final_hash"] = ht.state_hash(model)
    out["tr_skipped"], out["node_skipped"] = tr.skipped, tr.node.skipped
    tr.close()
    print("RESULT " + json.dumps(out), flush=True)
    return 0


def write_ini(d, port, mode):
    path = os.path.join(d, f"{mode}.ini")
    with open(path, "w") as f:
        f.write("[cluster]\nsecurity = none\nconnect_timeout = 20\ntimeout = 10\n"
                f"[train]\nsamples = 512\nglobal_batch = 48\niterations = {ITERS}\nseed = 3\n"
                f"hash_interval = 1\nnonfinite = {mode}\n[controller]\npolicy = proportional\n"
                "interval = 1\nmin_batch = 2\n")
        for k in range(3):
            f.write(f"[node.{k}]\nhost = 127.0.0.1\nport = {port + k}\n")
    return path


def run(d, port, mode):
    ini = write_ini(d, port, mode)
    ps = []
    for k in range(3):
        log = open(os.path.join(d, f"{mode}{k}.log"), "w+")
        p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "worker", ini, str(k)],
                             stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                             env=dict(os.environ, TMPDIR=d))  # its pymp-* folders: removed with d
        ps.append((p, log))
    rs = []
    for k, (p, log) in enumerate(ps):
        try:
            rc = p.wait(timeout=150)
        except subprocess.TimeoutExpired:
            p.kill()
            rc = "a timeout"
        log.seek(0)
        text = log.read()
        check(rc == 0, f"{mode}: node {k} exited {rc}:\n{text[-3000:]}")
        line = [x for x in text.splitlines() if x.startswith("RESULT ")]
        rs.append(json.loads(line[-1][7:]) if line else None)
    check(all(rs), f"{mode}: a node printed no result")
    return [r for r in rs if r]


def error_case(d, port):
    rs = run(d, port, "error")
    for k, r in enumerate(rs):
        e = r["error"]
        print(f"error: node {k}: {e and e['message']}")
        check(e is not None and e["iter"] == BAD_ITER and e["nodes"] == [BAD_NODE],
              f"error: node {k} raised {e}, expected NonFinite at {BAD_ITER} naming {BAD_NODE}")
        check(e is not None and f"iteration {BAD_ITER}:" in e["message"] and
              f"node {BAD_NODE} (gradient, loss)" in e["message"],
              f"error: node {k}'s message names neither the iteration nor the node: {e}")
        check(r["iters"] == list(range(BAD_ITER)), f"error: node {k} ran {r['iters']}")
        check(r["finite"], f"error: node {k} holds a state that is not finite")
        check(r["final_hash"] == r["hashes"].get(str(BAD_ITER - 1)),
              f"error: node {k}'s state changed after iteration {BAD_ITER - 1}")
    check(len({r["final_hash"] for r in rs}) == 1, "error: the replicas differ")


def skip_case(d, port):
    rs = run(d, port, "skip")
    for k, r in enumerate(rs):
        print(f"skip: node {k}: skipped {r['skipped']}, Trainer.skipped {r['tr_skipped']}, "
              f"Node.skipped {r['node_skipped']}")
        check(r["error"] is None, f"skip: node {k} raised {r['error']}")
        check(r["skipped"] == [[BAD_ITER, [BAD_NODE]]] and r["tr_skipped"] == 1 and
              r["node_skipped"] == 1, f"skip: node {k}: {r['skipped']}, {r['tr_skipped']}, "
              f"{r['node_skipped']}")
        check(r["iters"] == list(range(ITERS)), f"skip: node {k} ran iterations {r['iters']}")
        h = r["hashes"]
        check(h.get(str(BAD_ITER)) == h.get(str(BAD_ITER - 1)) and
              h.get(str(BAD_ITER + 1)) != h.get(str(BAD_ITER)),
              f"skip: node {k}: the skipped step changed the state, or the next did not")
        check(r["finite"], f"skip: node {k} holds a state that is not finite")
    check(len({r["final_hash"] for r in rs}) == 1, "skip: the replicas differ")


if __name__ == "__main__":
    sys.exit(run_case({"error": error_case, "skip": skip_case},
                      lambda conf, node: worker(conf, int(node))))
