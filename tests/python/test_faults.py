"""test_faults.py: hetring.torch where something goes wrong, on loopback clusters.

    test_faults.py layout    2 nodes train a model whose weight is transposed (dense, not
                             contiguous); node 0 holds a .grad from a backward of its own
                             before the Trainer, node 1 none (as a node that joins): both
                             all-reduce in the same element order, and the replica hash
                             (every iteration) finds them equal to the end
    test_faults.py left      3 nodes (BatchNorm); in iteration 3 node 0 asks to leave and node
                             1 dies: node 0 leaves in the view change that follows the failed
                             all-reduce, and its step returns None (no hetring.Left),
                             batches() ends, .left is True, and its model and buffers are those
                             of iteration 2, the state node 2 committed
    test_faults.py exception one node (BatchNorm), overlap on and off: loss_fn, then forward
                             after the BatchNorm, raises once in iteration 2; the loop catches
                             it and goes on: the iteration runs again and the run ends with the
                             state of a run without the exception (buffers and
                             num_batches_tracked included)
    test_faults.py abandon   3 nodes, overlap on: a hook in node 0's backward raises after
                             gradients were handed over in iteration 3: node 0's step raises a
                             RuntimeError saying its node is closed, and nodes 1 and 2, though
                             node 0's process goes on for 11 s, run the iteration again at
                             once (well within [cluster] timeout = 10 s) and finish as two
    test_faults.py ctor      a Trainer or a Node that fails to be made holds nothing (with the
                             garbage collector off): leave_on with SIGKILL is refused before a
                             node opens, a failure after the node opened (an on_view callback
                             of Node, a step of Trainer's setup) frees its handle at once
                             (hetring_open's and hetring_free's calls counted); the SIGTERM
                             handler is the one from before
    test_faults.py empty     one node trains a model that holds an empty parameter (numel 0,
                             its .grad at address 0), overlap on and off
    test_faults.py sigterm   SIGTERM (leave_on) while the library blocks: node 0 of 3, whose
                             peers both died, waits in an election for a quorum (rejoin_timeout
                             25 s): it leaves within 6 s of the signal, its step returning
                             None and its loop ending with .left; node 0 of 2, alone, waits in
                             Trainer() for its peer (connect_timeout 20 s): Trainer() raises
                             hetring.Left within 6 s of the signal
    test_faults.py state     state_bytes packs a state received as its sender did (tensors in
                             lists of the optimizer's state, a string shared by two parameter
                             groups or two equal strings, OneCycleLR's and CyclicLR's methods of
                             their own); a state that cannot be pickled is refused before a
                             node opens; 2 nodes with each of those schedulers train to the end,
                             node 0 (the donor) packing its state once in Trainer(); where node
                             1 changes the state it received, the first view's state check
                             stops both
    test_faults.py signals   two Trainers with leave_on=(SIGUSR1,) in one process: closing
                             the first leaves the signal with the second, which it makes
                             leave; nothing is written to the closed pipe's descriptors, now
                             other files; the last close gives back the handler and wakeup fd
                             from before; five Trainers add one fork hook
    test_faults.py commit    3 nodes; once iteration 3 is committed on every node, node 0's
                             before_step raises, or a KeyboardInterrupt arrives as its library
                             step returns; its loop catches the error and goes on: its node is
                             closed (the next batches() raises), where it would train on with
                             a model that missed the iteration; nodes 1 and 2 finish as two
    test_faults.py params    2 nodes change the model alike in iteration 3: converted to
                             float64 (model.double()), it trains on through the staging
                             buffer, replicas equal; a frozen weight made to require grad, a
                             new tensor assigned to a bias, or a larger one to a running mean,
                             is refused by name on both nodes (a gradient would stay each
                             node's own)
    test_faults.py fork      2 nodes stop on their own count after the last step; node 0
                             forks a child that calls next() (refused: the node is its
                             parent's) and closes its copy of the Trainer: the child's close
                             frees nothing, so the end of the run is agreed by the parents
    test_faults.py window    3 nodes; a SIGINT reaches node 0 (Python's handler) between its
                             library step of iteration 3 returning and the update being
                             applied (a test hook on _apply_step raises it there): step()
                             applies the update first and then raises the KeyboardInterrupt;
                             the loop catches it and goes on, and the replica hash (every
                             iteration) finds the three nodes equal to the end
    test_faults.py with      3 nodes train in `with Trainer(...) as tr:`; node 0's loop raises
                             a ValueError, then the KeyboardInterrupt of a SIGINT, in iteration
                             3 outside step(): its with closes its node, and nodes 1 and 2
                             finish as two while node 0's process still runs ([cluster]
                             timeout = 90 s: no failure detection by timeout)
    test_faults.py size      one node passes step(batch_size=): a batch one sample short of its
                             share, and a batch_size that is no int, are refused before anything
                             is computed; the loop goes on and ends with the state of a run
                             without them
    test_faults.py worker CONF NODE MODE   one node of those (prints RESULT {json})
Exit 77 when PyTorch is missing.
"""
import json
import os
import subprocess
import sys
import time

from harness import check, need_torch, run_case

need_torch()
import torch  # noqa: E402

ITERS = 8


def write_ini(d, port, name, n, iters=ITERS, extra="", rejoin=20, timeout=10):
    path = os.path.join(d, f"{name}.ini")
    with open(path, "w") as f:
        f.write(f"[cluster]\nsecurity = none\nconnect_timeout = 20\ntimeout = {timeout}\n"
                f"rejoin_timeout = {rejoin}\n"
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


def bn_model():
    torch.manual_seed(2)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(),
                               torch.nn.Linear(8, 4))


LEAVE_AT = 3


def worker_left(conf, node):
    """Node 0 asks to leave in iteration LEAVE_AT, in which node 1 dies (before its step)."""
    import hetring.torch as ht
    model = bn_model()
    X, Y = data()
    tr = ht.Trainer(conf, model, torch.optim.SGD(model.parameters(), lr=0.1), node_id=node,
                    n_samples=256)
    out = {"iters": [], "none": [], "error": None, "hashes": {}}
    try:
        for idx in tr.batches():
            it = tr.batch.iter
            if it == LEAVE_AT and node == 1:
                os._exit(3)
            if it == LEAVE_AT and node == 0:
                tr.leave()       # as SIGTERM with leave_on does
                time.sleep(0.5)  # node 1 is gone by the time this node's all-reduce runs
            res = tr.step(torch.nn.functional.cross_entropy, (X[idx], Y[idx]))
            if res is None:
                out["none"].append(it)
                continue
            out["iters"].append(res.iter)
            out["hashes"][res.iter] = ht.state_hash(model)
    except Exception as e:  # noqa: BLE001  (reported by the test)
        out["error"] = f"{type(e).__name__}: {e}"
    out["left"], out["done"], out["hash"] = tr.left, tr.done, ht.state_hash(model)
    tr.close()
    return out


class Raiser(torch.nn.Module):
    """The identity, but raises once when armed (a bad batch in forward)."""

    def __init__(self):
        super().__init__()
        self.armed = False

    def forward(self, x):
        if self.armed:
            self.armed = False
            raise ValueError("a bad batch in forward")
        return x


FAIL_AT = 2


def train_one(conf, overlap, where):
    """One node over ITERS iterations; where ("loss", "forward" or None) raises once in
    iteration FAIL_AT, caught by the loop, which goes on. (state hash, num_batches_tracked,
    iterations that raised, Trainer.done)."""
    import hetring.torch as ht
    model = bn_model()
    model.append(Raiser())
    X, Y = data()
    tr = ht.Trainer(conf, model, torch.optim.SGD(model.parameters(), lr=0.1), node_id=0,
                    n_samples=256, overlap=overlap)
    armed, raised = [False], []

    def loss_fn(out, y):
        if armed[0]:
            armed[0] = False
            raise ValueError("a bad batch in loss_fn")
        return torch.nn.functional.cross_entropy(out, y)
    try:
        for idx in tr.batches():
            if tr.batch.iter == FAIL_AT and not raised:
                armed[0] = where == "loss"
                model[-1].armed = where == "forward"
            try:
                tr.step(loss_fn, (X[idx], Y[idx]))
            except ValueError:
                raised.append(tr.done)
        return ht.state_hash(model), int(model[1].num_batches_tracked), raised, tr.done
    finally:
        tr.close()


def exception(d, port):
    for k, overlap in enumerate((True, False)):
        conf = write_ini(d, port + 3 * k, f"clean{k}", 1)
        want, _, _, _ = train_one(conf, overlap, None)
        for j, where in enumerate(("loss", "forward")):
            conf = write_ini(d, port + 3 * k + 1 + j, f"{where}{k}", 1)
            try:
                h, nbt, raised, done = train_one(conf, overlap, where)
            except Exception as e:  # noqa: BLE001  (the check)
                check(False, f"exception: overlap={overlap}, {where}: the run stopped: {e!r}")
                continue
            print(f"exception: overlap={overlap}, raised in {where} in iteration {raised}: "
                  f"done {done}, num_batches_tracked {nbt}, state "
                  f"{'equal to' if h == want else 'DIFFERENT from'} the clean run's")
            check(raised == [FAIL_AT] and done == ITERS and nbt == ITERS,
                  f"exception: overlap={overlap}, {where}: raised in {raised}, done {done}, "
                  f"num_batches_tracked {nbt}, expected {ITERS}")
            check(h == want, f"exception: overlap={overlap}, {where}: the state differs from "
                             f"the run's without the exception")


ABANDON_AT = 3


def worker_abandon(conf, node):
    """Node 0's backward raises in iteration ABANDON_AT from a hook on the first layer's
    weight, after the hooks of the last layer handed its gradients over."""
    import hetring.torch as ht
    model = bn_model()
    X, Y = data()
    tr = ht.Trainer(conf, model, torch.optim.SGD(model.parameters(), lr=0.1), node_id=node,
                    n_samples=256)
    out = {"iters": [], "none": [], "error": None, "retry_s": None}

    def hook(g):
        if tr.batch is None and tr.done == ABANDON_AT and node == 0:
            raise ValueError("a hook of the user's failed")
        return g
    model[0].weight.register_hook(hook)
    try:
        for idx in tr.batches():
            it, t0 = tr.batch.iter, time.monotonic()
            res = tr.step(torch.nn.functional.cross_entropy, (X[idx], Y[idx]))
            if res is None:
                out["none"].append(it)
                out["retry_s"] = time.monotonic() - t0
                continue
            out["iters"].append(res.iter)
    except Exception as e:  # noqa: BLE001  (reported by the test)
        out["error"] = f"{type(e).__name__}: {e}"
        if node == 0:
            time.sleep(11)  # the process goes on (the user's code): its node must not wait
    out["hash"] = ht.state_hash(model)
    tr.close()
    return out


def worker_sigterm(conf, node):
    """leave_on=(SIGTERM,); nodes 1 and 2 die in iteration 3 (node 0 then waits for a quorum).
    Node 0 of a cluster whose other node never starts waits in Trainer()."""
    import signal
    import hetring
    import hetring.torch as ht
    model = bn_model()
    X, Y = data()
    out = {"iters": [], "none": [], "error": None, "left": None}
    print("OPENING", flush=True)
    try:
        tr = ht.Trainer(conf, model, torch.optim.SGD(model.parameters(), lr=0.1), node_id=node,
                        n_samples=256, leave_on=(signal.SIGTERM,))
    except hetring.Left as e:
        out["error"] = f"Left: {e}"
        return out
    try:
        for idx in tr.batches():
            it = tr.batch.iter
            if it == 3 and node > 0:
                os._exit(3)
            res = tr.step(torch.nn.functional.cross_entropy, (X[idx], Y[idx]))
            (out["none"] if res is None else out["iters"]).append(it)
    except Exception as e:  # noqa: BLE001  (reported by the test)
        out["error"] = f"{type(e).__name__}: {e}"
    out["left"] = tr.left
    tr.close()
    return out


COMMIT_AT = 3


def worker_commit(conf, node, how):
    """Node 0 fails on its own once iteration COMMIT_AT is committed on every node: its
    before_step (clipping) raises ("clip"), or a KeyboardInterrupt arrives as the library's
    step returns ("interrupt"). Its loop catches the error and goes on."""
    import hetring.torch as ht
    model = bn_model()
    X, Y = data()

    def clip(tr):
        if node == 0 and how == "clip" and tr.done == COMMIT_AT:
            raise ValueError("clipping failed")
    tr = ht.Trainer(conf, model, torch.optim.SGD(model.parameters(), lr=0.1), node_id=node,
                    n_samples=256, before_step=clip)
    if node == 0 and how == "interrupt":
        real = tr.node.step

        def step(*args):
            res = real(*args)
            if tr.done == COMMIT_AT:
                raise KeyboardInterrupt  # as a SIGINT's handler would, once the call returned
            return res
        tr.node.step = step
    out = {"iters": [], "none": [], "raised": [], "error": None}
    try:
        for idx in tr.batches():
            it = tr.batch.iter
            try:
                res = tr.step(torch.nn.functional.cross_entropy, (X[idx], Y[idx]))
            except (Exception, KeyboardInterrupt) as e:  # noqa: BLE001  (the loop goes on)
                out["raised"].append(f"{it}: {type(e).__name__}: {e}")
                continue
            (out["none"] if res is None else out["iters"]).append(it)
    except Exception as e:  # noqa: BLE001  (reported by the test)
        out["error"] = f"{type(e).__name__}: {e}"
    out["hash"] = ht.state_hash(model)
    tr.close()
    return out


def worker_window(conf, node):
    """Node 0 receives a SIGINT (Python's handler) in iteration COMMIT_AT between the
    library's step returning and the update being applied: a test hook on _apply_step raises
    the signal there. Its loop catches the KeyboardInterrupt and goes on."""
    import signal
    import hetring.torch as ht
    model = bn_model()
    X, Y = data()
    tr = ht.Trainer(conf, model, torch.optim.SGD(model.parameters(), lr=0.1), node_id=node,
                    n_samples=256)
    if node == 0:
        real = tr._apply_step

        def apply_step(b, res, *args, **kw):
            if res.iter == COMMIT_AT:
                signal.raise_signal(signal.SIGINT)  # its handler runs here, before the update
            return real(b, res, *args, **kw)
        tr._apply_step = apply_step
    out = {"iters": [], "none": [], "raised": [], "error": None}
    try:
        for idx in tr.batches():
            it = tr.batch.iter
            try:
                res = tr.step(torch.nn.functional.cross_entropy, (X[idx], Y[idx]))
            except KeyboardInterrupt:
                out["raised"].append(f"{it}: KeyboardInterrupt, done {tr.done}")
                continue
            (out["none"] if res is None else out["iters"]).append(it)
    except Exception as e:  # noqa: BLE001  (reported by the test)
        out["error"] = f"{type(e).__name__}: {e}"
    out["hash"] = ht.state_hash(model)
    tr.close()
    return out


WITH_AT = 3


def worker_with(conf, node, how):
    """`with Trainer(...) as tr:` on every node; node 0's loop raises in iteration WITH_AT,
    outside step(): a ValueError ("error") or the KeyboardInterrupt of a SIGINT ("sigint").
    Nodes 1 and 2 then mark their end in files; node 0's process waits for those marks (up to
    60 s, within the cluster's timeout of 90 s), so they can end only where its node left at
    the with's end."""
    import signal
    import hetring.torch as ht
    model = bn_model()
    X, Y = data()
    out = {"iters": [], "none": [], "error": None, "closed": None}
    tr = None
    try:
        with ht.Trainer(conf, model, torch.optim.SGD(model.parameters(), lr=0.1), node_id=node,
                        n_samples=256) as tr:
            for idx in tr.batches():
                if node == 0 and tr.batch.iter == WITH_AT:
                    if how == "sigint":
                        signal.raise_signal(signal.SIGINT)
                    raise ValueError("the loop failed")
                it = tr.batch.iter
                res = tr.step(torch.nn.functional.cross_entropy, (X[idx], Y[idx]))
                (out["none"] if res is None else out["iters"]).append(it)
    except (Exception, KeyboardInterrupt) as e:  # noqa: BLE001  (reported by the test)
        out["error"] = f"{type(e).__name__}: {e}"
    out["closed"] = tr is not None and not tr.node._h
    out["hash"] = ht.state_hash(model)
    mark = os.path.join(os.path.dirname(conf), f"{how}.end.{node}")
    if node > 0:
        open(mark, "w").close()
        return out
    ends = [os.path.join(os.path.dirname(conf), f"{how}.end.{k}") for k in (1, 2)]
    for _ in range(600):
        if all(os.path.exists(e) for e in ends):
            break
        time.sleep(0.1)
    out["others_ended"] = all(os.path.exists(e) for e in ends)
    return out


def train_sized(conf, wrong):
    """One node over ITERS iterations, passing batch_size=; with wrong, in iteration FAIL_AT
    first a batch one sample short (refused: caught, the loop goes on) and a batch_size that
    is no int. (state hash, the errors, Trainer.done)."""
    import hetring.torch as ht
    model = bn_model()
    X, Y = data()
    tr = ht.Trainer(conf, model, torch.optim.SGD(model.parameters(), lr=0.1), node_id=0,
                    n_samples=256)
    errors = []
    try:
        for idx in tr.batches():
            if wrong and tr.batch.iter == FAIL_AT and len(errors) < 2:
                short = idx[:-1]
                try:
                    if not errors:
                        tr.step(torch.nn.functional.cross_entropy, (X[short], Y[short]),
                                batch_size=len(short))
                    else:
                        tr.step(torch.nn.functional.cross_entropy, (X[idx], Y[idx]),
                                batch_size=float(len(idx)))
                except (ValueError, TypeError) as e:
                    errors.append(f"{type(e).__name__}: {e}")
                continue
            tr.step(torch.nn.functional.cross_entropy, (X[idx], Y[idx]), batch_size=len(idx))
        return ht.state_hash(model), errors, tr.done
    finally:
        tr.close()


CHANGE_AT = 3


def worker_params(conf, node, how):
    """Both nodes change the model alike before iteration CHANGE_AT: convert it to float64
    ("convert"), make its frozen first weight require grad ("unfreeze"), assign a new tensor to
    its last bias ("replace") or a larger one to its BatchNorm's running mean ("resize")."""
    import hetring.torch as ht
    model = bn_model()
    X, Y = data()
    model[0].weight.requires_grad_(how != "unfreeze")
    tr = ht.Trainer(conf, model, torch.optim.SGD(model.parameters(), lr=0.1), node_id=node,
                    n_samples=256)
    out = {"iters": [], "losses": [], "error": None}
    try:
        for idx in tr.batches():
            if tr.batch.iter == CHANGE_AT and not out.get("changed"):
                out["changed"] = True
                if how == "convert":
                    model.double()
                    X = X.double()
                elif how == "unfreeze":
                    model[0].weight.requires_grad_(True)
                elif how == "resize":
                    model[1].running_mean = torch.zeros(9)
                else:
                    model[3].bias = torch.nn.Parameter(model[3].bias.detach().clone())
            res = tr.step(torch.nn.functional.cross_entropy, (X[idx], Y[idx]))
            if res is not None:
                out["iters"].append(res.iter)
                out["losses"].append(res.loss)
    except Exception as e:  # noqa: BLE001  (reported by the test)
        out["error"] = f"{type(e).__name__}: {e}"
    out["hash"] = ht.state_hash(model)
    tr.close()
    return out


def worker_fork(conf, node):
    """Both nodes stop on their own count after the last step (the end of the run is agreed
    when the Trainer closes); node 0 then forks a child that tries the node and closes its
    copy of the Trainer, as a program's finally would, before its parent closes."""
    import hetring.torch as ht
    model = bn_model()
    X, Y = data()
    tr = ht.Trainer(conf, model, torch.optim.SGD(model.parameters(), lr=0.1), node_id=node,
                    n_samples=256)
    out = {"iters": [], "child": None}
    for idx in tr.batches():
        out["iters"].append(tr.step(torch.nn.functional.cross_entropy, (X[idx], Y[idx])).iter)
        if len(out["iters"]) == ITERS:
            break  # no next() that says the run is done: close() agrees on its end
    if node == 0:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: what it tried, through the pipe, then out without cleanup
            try:
                try:
                    tr.node.next()
                    said = "next() returned"
                except Exception as e:  # noqa: BLE001  (reported to the parent)
                    said = f"{type(e).__name__}: {e}"
                tr.close()
                os.write(w, said.encode())
            finally:
                os._exit(0)
        os.close(w)
        end = time.monotonic() + 30
        while not os.waitpid(pid, os.WNOHANG)[0]:
            if time.monotonic() > end:  # it hung: the test fails on what it said
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                break
            time.sleep(0.05)
        out["child"] = os.read(r, 4096).decode()
        os.close(r)
    else:
        time.sleep(1)  # the child closes its copy first
    tr.close()
    print("CLOSED", flush=True)
    return out


def scheduler_for(kind, opt):
    if kind == "onecycle":  # torch 1.x keeps anneal_func, a method of the scheduler
        return torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.2, total_steps=100)
    return torch.optim.lr_scheduler.CyclicLR(opt, 0.01, 0.1)  # a WeakMethod in torch 2.x


def worker_sched(conf, node, kind):
    """2 nodes whose scheduler's state_dict holds one of its own methods; the first view
    sends node 0's state to node 1 and checks the state's hash on both. packs: the calls of
    state_bytes in Trainer()."""
    import hetring.torch as ht
    torch.manual_seed(1)
    lin = torch.nn.Linear(6, 4)
    opt = torch.optim.SGD(lin.parameters(), lr=0.1, momentum=0.9)
    X, Y = data()
    out = {"iters": [], "error": None, "packs": 0}
    real = ht.state_bytes

    def counted(*a):
        out["packs"] += 1
        return real(*a)
    try:
        ht.state_bytes = counted
        try:
            tr = ht.Trainer(conf, lin, opt, node_id=node, n_samples=256,
                            scheduler=scheduler_for(kind, opt))
        finally:
            ht.state_bytes = real
        for idx in tr.batches():
            res = tr.step(torch.nn.functional.cross_entropy, (X[idx], Y[idx]))
            if res is not None:
                out["iters"].append(res.iter)
        tr.close()
    except Exception as e:  # noqa: BLE001  (reported by the test)
        out["error"] = f"{type(e).__name__}: {e}"
    out["hash"] = ht.state_hash(lin)
    return out


def worker_perturb(conf, node):
    """worker_sched's OneCycleLR, where node 1 changes the state it received (bias + 1)."""
    import hetring.torch as ht
    if node == 1:
        real = ht.load_state_bytes

        def changed(model, *a):
            real(model, *a)
            with torch.no_grad():
                model.bias.add_(1)
        ht.load_state_bytes = changed
    return worker_sched(conf, node, "onecycle")


WORKERS = {"layout": worker_layout, "left": worker_left, "abandon": worker_abandon,
           "sigterm": worker_sigterm,
           "onecycle": lambda c, n: worker_sched(c, n, "onecycle"),
           "cyclic": lambda c, n: worker_sched(c, n, "cyclic"), "perturb": worker_perturb,
           "fork": worker_fork, "clip": lambda c, n: worker_commit(c, n, "clip"),
           "interrupt": lambda c, n: worker_commit(c, n, "interrupt"),
           "window": worker_window,
           "with_error": lambda c, n: worker_with(c, n, "error"),
           "with_sigint": lambda c, n: worker_with(c, n, "sigint"),
           "convert": lambda c, n: worker_params(c, n, "convert"),
           "unfreeze": lambda c, n: worker_params(c, n, "unfreeze"),
           "replace": lambda c, n: worker_params(c, n, "replace"),
           "resize": lambda c, n: worker_params(c, n, "resize")}


def worker(conf, node, mode):
    out = WORKERS[mode](conf, node)
    print("RESULT " + json.dumps(out), flush=True)
    return 0


def run(d, ini, n, mode, timeout=120, rcs=None):
    """n worker processes of mode on ini: their results (None for one that gave none); rcs:
    the exit statuses expected where not 0, by node."""
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
        want = (rcs or {}).get(k, 0)
        check(rc == want, f"{mode}: node {k} exited {rc}, expected {want}:\n{text[-3000:]}")
        line = [x for x in text.splitlines() if x.startswith("RESULT ")]
        rs.append(json.loads(line[-1][7:]) if line else None if want == 0 else {})
    check(all(r is not None for r in rs), f"{mode}: a node printed no result")
    return rs


def layout(d, port):
    rs = run(d, write_ini(d, port, "layout", 2), 2, "layout")
    if None in rs:
        return
    for k, r in enumerate(rs):
        print(f"layout: node {k}: iterations {r['iters']}, error {r['error']}")
        check(r["error"] is None and r["iters"] == list(range(ITERS)),
              f"layout: node {k}: {r['error']}, iterations {r['iters']}")
    check(rs[0]["hash"] == rs[1]["hash"], "layout: the replicas differ")


def left(d, port):
    # node 2, alone after that, waits for a quorum until rejoin_timeout and stops
    rs = run(d, write_ini(d, port, "left", 3, iters=12, rejoin=3), 3, "left", rcs={1: 3})
    if None in rs:
        return
    r0, r2 = rs[0], rs[2]
    print(f"left: node 0: iterations {r0['iters']}, step None in {r0['none']}, left "
          f"{r0['left']}, done {r0['done']}, error {r0['error']}; node 2: {r2['iters']}, "
          f"{r2['error']}")
    want = list(range(LEAVE_AT))
    check(r0["error"] is None, f"left: node 0 raised {r0['error']}")
    check(r0["iters"] == want and r0["none"] == [LEAVE_AT] and r0["left"],
          f"left: node 0 ran {r0['iters']}, step None in {r0['none']}, left {r0['left']}")
    check(r0["done"] == LEAVE_AT, f"left: node 0's Trainer.done {r0['done']}")
    last = str(LEAVE_AT - 1)
    check(r0["hash"] == r0["hashes"].get(last) == r2["hashes"].get(last),
          "left: node 0 does not hold the state of the last committed iteration (its buffers "
          "kept what the dropped iteration's forward did to them?)")


def abandon(d, port):
    rs = run(d, write_ini(d, port, "abandon", 3, iters=10), 3, "abandon")
    if None in rs:
        return
    for k, r in enumerate(rs):
        print(f"abandon: node {k}: iterations {r['iters']}, step None in {r['none']} "
              f"({r['retry_s'] and round(r['retry_s'], 2)} s), error {r['error']}")
    e = rs[0]["error"] or ""
    check(e.startswith("RuntimeError: hetring.torch: iteration 3: ValueError raised after this "
                       "node had handed gradients") and "its node is closed" in e,
          f"abandon: node 0's error: {e}")
    check(rs[0]["iters"] == list(range(ABANDON_AT)), f"abandon: node 0 ran {rs[0]['iters']}")
    for k in (1, 2):
        r = rs[k]
        check(r["error"] is None and r["iters"] == list(range(10)) and
              r["none"] == [ABANDON_AT] and r["retry_s"] < 6,
              f"abandon: node {k}: {r['error']}, iterations {r['iters']}, step None in "
              f"{r['none']} after {r['retry_s']} s")
    check(rs[1]["hash"] == rs[2]["hash"], "abandon: nodes 1 and 2 differ")


class Handles:
    """The libhetring handles open (n): hetring_open's successes less hetring_free's calls;
    opens: hetring_open's calls."""

    def __init__(self, L):
        self.n, self.opens, self.L = 0, 0, L
        self.real = L.hetring_open, L.hetring_free

        def opened(out, *a):
            self.opens += 1
            st = self.real[0](out, *a)
            self.n += st == 0
            return st

        def freed(h):
            self.n -= 1
            return self.real[1](h)
        L.hetring_open, L.hetring_free = opened, freed

    def restore(self):
        self.L.hetring_open, self.L.hetring_free = self.real


def ctor(d, port):
    import gc
    import signal
    import hetring
    import hetring.torch as ht
    gc.disable()  # what failed is closed by the code, not found later by a collection
    conf = write_ini(d, port, "ctor", 1)
    live = Handles(hetring._lib_handle())
    model = bn_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def marker(*_):
        pass
    signal.signal(signal.SIGTERM, marker)
    tr = ht.Trainer(conf, model, opt, node_id=0, n_samples=256, leave_on=(signal.SIGTERM,))
    check(live.n == 1, f"ctor: {live.n} handles open with a Trainer made: the count is wrong")
    tr.close()
    check(live.n == 0 and signal.getsignal(signal.SIGTERM) is marker,
          f"ctor: a Trainer closed holds {live.n} handles, or the SIGTERM handler")

    def fails(what, make, kind, text):
        try:
            make()
            check(False, f"ctor: {what}: made")
        except kind as e:
            print(f"ctor: {what}: {type(e).__name__}: {e}")
            check(text in str(e), f"ctor: {what}: {e!r}")
        check(live.n == 0, f"ctor: {what}: {live.n} handle(s) still open")
        check(signal.getsignal(signal.SIGTERM) is marker,
              f"ctor: {what}: the SIGTERM handler is {signal.getsignal(signal.SIGTERM)}")
    opens = live.opens
    fails("leave_on=(SIGTERM, SIGKILL)",
          lambda: ht.Trainer(conf, model, opt, node_id=0, n_samples=256,
                             leave_on=(signal.SIGTERM, signal.SIGKILL)), ValueError,
          "no handler can be installed for <Signals.SIGKILL: 9>")
    check(live.opens == opens, "ctor: leave_on with SIGKILL opened a node before it failed")

    def view(_v):
        raise KeyError("on_view failed")
    fails("Node(on_view raising)", lambda: hetring.Node(conf, node_id=0, n_samples=256,
                                                         on_view=view), KeyError, "on_view")

    def hooks(_self):
        raise RuntimeError("the hooks failed")
    real, ht.Trainer._install_hooks = ht.Trainer._install_hooks, hooks
    try:
        fails("Trainer(_install_hooks raising)",
              lambda: ht.Trainer(conf, model, opt, node_id=0, n_samples=256,
                                 leave_on=(signal.SIGTERM,)), RuntimeError, "hooks failed")
    finally:
        ht.Trainer._install_hooks = real
        live.restore()
        gc.enable()


class WithEmpty(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(6, 4)
        self.extra = torch.nn.Parameter(torch.zeros(0, 6))  # a layer sized 0 by a setting

    def forward(self, x):
        return self.lin(x) + self.extra.sum()


def empty(d, port):
    import hetring.torch as ht
    X, Y = data()
    for k, overlap in enumerate((False, True)):
        torch.manual_seed(1)
        model = WithEmpty()
        tr = ht.Trainer(write_ini(d, port + k, f"empty{k}", 1, iters=3), model,
                        torch.optim.SGD(model.parameters(), lr=0.1), node_id=0, n_samples=256,
                        overlap=overlap)
        try:
            iters = [tr.step(torch.nn.functional.cross_entropy, (X[idx], Y[idx])).iter
                     for idx in tr.batches()]
            print(f"empty: overlap={overlap}: iterations {iters}")
            check(iters == [0, 1, 2], f"empty: overlap={overlap}: iterations {iters}")
        except Exception as e:  # noqa: BLE001  (the check)
            check(False, f"empty: overlap={overlap}: {e!r}")
        finally:
            tr.close()


def sigterm(d, port):
    import signal

    def start(ini, k, name):
        log = open(os.path.join(d, f"{name}{k}.log"), "w+")
        p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "worker", ini, str(k),
                              "sigterm"], stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True, env=dict(os.environ, TMPDIR=d))
        p.log = log
        return p

    def term_and_wait(p, what):
        """SIGTERM to p; its result and the seconds it took to end after it."""
        t0 = time.monotonic()
        p.send_signal(signal.SIGTERM)
        try:
            rc = p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            rc = "a timeout"
        took = time.monotonic() - t0
        p.log.seek(0)
        text = p.log.read()
        check(rc == 0, f"sigterm: {what}: node 0 exited {rc}:\n{text[-3000:]}")
        line = [x for x in text.splitlines() if x.startswith("RESULT ")]
        return (json.loads(line[-1][7:]) if line else None), took

    ini = write_ini(d, port, "sigterm", 3, iters=40, rejoin=25)
    ps = [start(ini, k, "sigterm") for k in range(3)]
    for k in (1, 2):
        try:
            check(ps[k].wait(timeout=60) == 3, f"sigterm: node {k} did not die in iteration 3")
        except subprocess.TimeoutExpired:
            ps[k].kill()
            check(False, f"sigterm: node {k} did not end")
    time.sleep(2)  # node 0 waits in the election that follows the failed all-reduce
    r, took = term_and_wait(ps[0], "in an election")
    print(f"sigterm: in an election: node 0 ended {took:.1f} s after SIGTERM: {r}")
    check(r is not None and r["error"] is None and r["left"] and r["iters"] == [0, 1, 2] and
          r["none"] == [3], f"sigterm: in an election: node 0: {r}")
    check(took < 6, f"sigterm: in an election: node 0 ended {took:.1f} s after SIGTERM")

    p = start(write_ini(d, port + 3, "alone", 2), 0, "alone")
    for _ in range(300):  # Trainer() is called: its handlers are installed within a second
        p.log.seek(0)
        if "OPENING" in p.log.read() or p.poll() is not None:
            break
        time.sleep(0.1)
    time.sleep(1)
    r, took = term_and_wait(p, "in Trainer()")
    print(f"sigterm: in Trainer(): it raised {took:.1f} s after SIGTERM: {r and r['error']}")
    check(r is not None and (r["error"] or "").startswith("Left: "),
          f"sigterm: in Trainer(): {r}")
    check(took < 6, f"sigterm: in Trainer(): node 0 ended {took:.1f} s after SIGTERM")


class Hist(torch.optim.SGD):
    """SGD that also keeps a list of tensors in each parameter's state (as LBFGS does)."""

    def step(self, closure=None):
        super().step(closure)
        for g in self.param_groups:
            for p in g["params"]:
                self.state[p].setdefault("hist", []).append(p.detach().clone())


def state(d, port):
    """state_bytes gives the same bytes for the same state, whoever built it: a state
    received (load_state_bytes) packs as the sender's did, with tensors inside lists of the
    optimizer's state, an object shared or not, a scheduler holding its own methods; a
    Trainer whose state cannot be pickled is refused before its node opens; two nodes with
    those schedulers pass the state check of their first view and train to the end, the
    donor packing its state once in Trainer(); a node that changes the state it received
    fails that check on both nodes."""
    import hetring
    import hetring.torch as ht

    def trained(opt_kind, kind=None, shared=True):
        torch.manual_seed(1)
        lin = torch.nn.Linear(6, 4)
        tag = "head"  # one object in both groups, or two equal strings
        opt = opt_kind([{"params": [lin.weight], "tag": tag},
                        {"params": [lin.bias], "tag": tag if shared else "".join(["he", "ad"])}],
                       lr=0.1, momentum=0.9)
        sched = scheduler_for(kind, opt) if kind else None
        X, Y = data()
        for k in range(0, 24, 8):
            torch.nn.functional.cross_entropy(lin(X[k:k + 8]), Y[k:k + 8]).backward()
            opt.step()
            opt.zero_grad()
            if sched:
                sched.step()
        return lin, opt, sched

    for what, opt_kind, kind in (("SGD", torch.optim.SGD, None), ("Hist", Hist, None),
                                 ("OneCycleLR", torch.optim.SGD, "onecycle"),
                                 ("CyclicLR", torch.optim.SGD, "cyclic")):
        try:
            a = ht.state_bytes(*trained(opt_kind, kind))
            lin, opt, sched = trained(opt_kind, kind)
            torch.nn.init.zeros_(lin.weight)
            ht.load_state_bytes(lin, opt, a, sched)
            b = ht.state_bytes(lin, opt, sched)
            print(f"state: {what}: {len(a)} bytes packed, {len(b)} after a transfer")
            check(a == b, f"state: {what}: a received state packs to other bytes than the "
                          f"sender's ({len(a)}, {len(b)})")
        except Exception as e:  # noqa: BLE001
            check(False, f"state: {what}: {type(e).__name__}: {e}")
    one, two = ht.state_bytes(*trained(torch.optim.SGD)), ht.state_bytes(
        *trained(torch.optim.SGD, shared=False))
    check(one == two, "state: a string shared by two parameter groups packs to other bytes "
                      "than two equal strings")

    live = Handles(hetring._lib_handle())
    try:
        lin = torch.nn.Linear(6, 4)
        opt = torch.optim.SGD([{"params": lin.parameters(), "fn": lambda x: x}], lr=0.1)
        ht.Trainer(write_ini(d, port, "state", 1), lin, opt, node_id=0, n_samples=256)
        check(False, "state: a Trainer whose optimizer holds a lambda was made")
    except ValueError as e:
        print(f"state: a lambda in a parameter group: {e}")
        check("cannot be pickled" in str(e), f"state: {e}")
    finally:
        live.restore()
    check(live.opens == 0, "state: the Trainer that cannot pickle its state opened a node")

    for kind in ("onecycle", "cyclic"):
        rs = run(d, write_ini(d, port + 1, kind, 2, iters=6), 2, kind)
        if None in rs:
            continue
        for k, r in enumerate(rs):
            print(f"state: {kind}: node {k}: iterations {r['iters']}, error {r['error']}")
            check(r["error"] is None and r["iters"] == list(range(6)),
                  f"state: {kind}: node {k}: {r['error']}, iterations {r['iters']}")
        check(rs[0]["hash"] == rs[1]["hash"], f"state: {kind}: the replicas differ")
        packs = [r["packs"] for r in rs]
        print(f"state: {kind}: Trainer() packed the state {packs} times on nodes 0 and 1")
        check(packs[0] == 1 and packs[1] >= 2,
              f"state: {kind}: Trainer() packed the state {packs[0]} time(s) on node 0, the "
              f"donor (1: its transfer and the state check take the bytes of the check before "
              f"it opens), and {packs[1]} on node 1 (2: that check, the state check after the "
              f"transfer)")

    rs = run(d, write_ini(d, port + 1, "perturb", 2, iters=6), 2, "perturb")
    for k, r in enumerate(rs if None not in rs else ()):
        print(f"state: node 1 changes the state it received: node {k}: {r['error']}")
        check(r["iters"] == [] and "training state differs" in (r["error"] or ""),
              f"state: node 1 changed the state it received, and the state check of the first "
              f"view did not stop node {k}: {r['error']}, iterations {r['iters']}")


def commit(d, port):
    for k, how in enumerate(("clip", "interrupt")):
        rs = run(d, write_ini(d, port + 3 * k, how, 3), 3, how)
        if None in rs:
            continue
        r0 = rs[0]
        print(f"commit: {how}: node 0: iterations {r0['iters']}, raised {r0['raised']}, then "
              f"{r0['error']}")
        want = (f"{COMMIT_AT}: RuntimeError: hetring.torch: iteration {COMMIT_AT}: ValueError "
                f"raised in before_step after every node had committed the iteration"
                if how == "clip" else f"{COMMIT_AT}: KeyboardInterrupt")
        check(len(r0["raised"]) == 1 and r0["raised"][0].startswith(want) and
              (how == "interrupt" or "this node left the cluster" in r0["raised"][0]),
              f"commit: {how}: node 0 raised {r0['raised']}")
        check(r0["iters"] == list(range(COMMIT_AT)) and
              (r0["error"] or "").startswith("Error: hetring: this node was closed"),
              f"commit: {how}: node 0, its node not closed, trained on apart from the others: "
              f"iterations {r0['iters']}, then {r0['error']}")
        for j in (1, 2):
            r = rs[j]
            check(r["error"] is None and r["iters"] == list(range(ITERS)),
                  f"commit: {how}: node {j}: {r['error']}, iterations {r['iters']}")
        check(rs[1]["hash"] == rs[2]["hash"], f"commit: {how}: nodes 1 and 2 differ")


def window(d, port):
    rs = run(d, write_ini(d, port, "window", 3), 3, "window")
    if None in rs:
        return
    for k, r in enumerate(rs):
        print(f"window: node {k}: iterations {r['iters']}, raised {r['raised']}, error "
              f"{r['error']}")
    r0 = rs[0]
    check(r0["raised"] == [f"{COMMIT_AT}: KeyboardInterrupt, done {COMMIT_AT + 1}"],
          f"window: node 0 raised {r0['raised']}: expected the KeyboardInterrupt once the "
          f"update of iteration {COMMIT_AT} was applied")
    for k, r in enumerate(rs):
        want = [i for i in range(ITERS) if k or i != COMMIT_AT]
        check(r["error"] is None and r["iters"] == want,
              f"window: node {k}: {r['error']}, iterations {r['iters']}, expected {want}")
    check(rs[0]["hash"] == rs[1]["hash"] == rs[2]["hash"],
          "window: the replicas differ at the end")


def with_(d, port):
    for k, how in enumerate(("error", "sigint")):
        mode = f"with_{how}"
        rs = run(d, write_ini(d, port + 3 * k, mode, 3, timeout=90), 3, mode, timeout=150)
        if None in rs:
            continue
        for j, r in enumerate(rs):
            print(f"with: {how}: node {j}: iterations {r['iters']}, step None in {r['none']}, "
                  f"error {r['error']}, closed {r['closed']}")
        r0 = rs[0]
        want = "ValueError: the loop failed" if how == "error" else "KeyboardInterrupt: "
        check(r0["error"] == want and r0["closed"] and r0["iters"] == list(range(WITH_AT)),
              f"with: {how}: node 0: {r0['error']} (expected {want}), closed {r0['closed']}, "
              f"iterations {r0['iters']}")
        check(r0.get("others_ended"), f"with: {how}: nodes 1 and 2 did not end while node 0's "
                                      f"process waited for them: its node did not leave at "
                                      f"the with's end")
        for j in (1, 2):
            r = rs[j]
            check(r["error"] is None and r["closed"] and r["iters"] == list(range(ITERS)),
                  f"with: {how}: node {j}: {r['error']}, iterations {r['iters']}, closed "
                  f"{r['closed']}")
        check(rs[1]["hash"] == rs[2]["hash"], f"with: {how}: nodes 1 and 2 differ")


def size(d, port):
    want, _, _ = train_sized(write_ini(d, port, "clean", 1), False)
    h, errors, done = train_sized(write_ini(d, port + 1, "sized", 1), True)
    for e in errors:
        print(f"size: {e}")
    check(len(errors) == 2 and errors[0].startswith(
        f"ValueError: hetring.torch: iteration {FAIL_AT}: step() was given a batch of ") and
          "but this node's share of the iteration is" in errors[0] and
          errors[1].startswith("TypeError: hetring.torch: step(batch_size=...) takes"),
          f"size: the wrong batches raised {errors}")
    check(done == ITERS and h == want, f"size: done {done}, the state "
                                       f"{'equals' if h == want else 'differs from'} the run's "
                                       f"without the wrong batches")


def params(d, port):
    import math
    for k, how in enumerate(("convert", "unfreeze", "replace", "resize")):
        rs = run(d, write_ini(d, port + 2 * k, how, 2), 2, how)
        if None in rs:
            continue
        for j, r in enumerate(rs):
            print(f"params: {how}: node {j}: iterations {r['iters']}, error {r['error']}")
        if how == "convert":
            for j, r in enumerate(rs):
                check(r["error"] is None and r["iters"] == list(range(ITERS)) and
                      all(math.isfinite(x) for x in r["losses"]),
                      f"params: convert: node {j}: {r['error']}, iterations {r['iters']}, "
                      f"losses {r['losses']}")
            check(rs[0]["hash"] == rs[1]["hash"] and rs[0]["losses"] == rs[1]["losses"],
                  "params: convert: the replicas differ")
            continue
        name = {"unfreeze": "'0.weight' requires grad now",
                "replace": "'3.bias' was assigned a new tensor",
                "resize": "the buffer '1.running_mean' (8 elements, now 9) was dropped or "
                          "resized"}[how]
        for j, r in enumerate(rs):
            check(r["iters"] == list(range(CHANGE_AT)) and (r["error"] or "").startswith(
                  "RuntimeError: hetring.torch: the model changed since the Trainer") and
                  name in r["error"],
                  f"params: {how}: node {j} ran {r['iters']}, then {r['error']}")


def fork(d, port):
    rs = run(d, write_ini(d, port, "fork", 2, rejoin=4), 2, "fork")
    if None in rs:
        return
    said = rs[0]["child"]
    print(f"fork: the forked child's next(): {said}")
    check(said.startswith("Error: hetring: this node belongs to process") and
          "forked from it" in said, f"fork: the forked child's next(): {said!r}")
    for k in range(2):
        with open(os.path.join(d, f"fork{k}.log")) as f:
            text = f.read()
        check(rs[k]["iters"] == list(range(ITERS)), f"fork: node {k} ran {rs[k]['iters']}")
        # the child's close, freeing the node, would agree on the end with node 1 over the
        # parent's connections, and the parent's own agreement would then fail
        check("not agreed" not in text and "failed" not in text,
              f"fork: node {k}'s end of the run was disturbed by the forked child:\n"
              f"{text[-2000:]}")


def signals(d, port):
    """Trainers with leave_on in one process share its signals: closing the first of two
    leaves SIGUSR1 with the second, which the signal still makes leave; the watcher writes to
    no file descriptor it closed; the last close gives back the handler and the wakeup fd
    there were before; five Trainers add one fork hook."""
    import signal
    import hetring.torch as ht
    hooks, real = [], os.register_at_fork

    def counted(**kw):
        hooks.append(kw)
        real(**kw)
    os.register_at_fork = counted
    try:
        def make(k):
            model = torch.nn.Linear(6, 4)
            return ht.Trainer(write_ini(d, port + k, f"signals{k}", 1), model,
                              torch.optim.SGD(model.parameters(), lr=0.1), node_id=0,
                              n_samples=256, leave_on=(signal.SIGUSR1,))
        before, wake = signal.getsignal(signal.SIGUSR1), signal.set_wakeup_fd(-1)
        signal.set_wakeup_fd(wake)
        a, b = make(0), make(1)
        a.close()
        if signal.getsignal(signal.SIGUSR1) is before:  # SIGUSR1 would end this process
            check(False, "signals: closing the first of two Trainers gave SIGUSR1's handler "
                         "back while the second is open")
            b.close()
            return
        other = [os.path.join(d, f"other{k}") for k in range(2)]  # the numbers a's pipe had
        fds = [os.open(f, os.O_WRONLY | os.O_CREAT) for f in other]
        os.kill(os.getpid(), signal.SIGUSR1)
        for _ in range(100):
            if b._leave_flag.value:
                break
            time.sleep(0.02)
        check(b._leave_flag.value == 1, "signals: SIGUSR1 did not make the second Trainer leave")
        time.sleep(0.2)  # the watcher has read the signal's byte and passed it on
        b.close()
        for fd in fds:
            os.close(fd)
        sizes = [os.path.getsize(f) for f in other]
        print(f"signals: after SIGUSR1, files opened on the numbers of a closed pipe hold "
              f"{sizes} bytes")
        check(sizes == [0, 0], f"signals: the watcher wrote {sizes} bytes to descriptors it "
                               f"had closed, now other files")
        now = signal.set_wakeup_fd(-1)
        signal.set_wakeup_fd(now)
        check(signal.getsignal(signal.SIGUSR1) is before and now == wake,
              f"signals: after the last close SIGUSR1's handler is "
              f"{signal.getsignal(signal.SIGUSR1)} (was {before}), the wakeup fd {now} (was "
              f"{wake})")
        for k in range(3):
            make(2 + k).close()
        print(f"signals: {len(hooks)} fork hook(s) for 5 Trainers")
        check(len(hooks) == 1, f"signals: {len(hooks)} fork hooks for 5 Trainers")
    finally:
        os.register_at_fork = real


if __name__ == "__main__":
    sys.exit(run_case({"layout": layout, "left": left, "exception": exception,
                       "abandon": abandon, "ctor": ctor, "empty": empty, "sigterm": sigterm,
                       "state": state, "signals": signals, "fork": fork,
                       "commit": commit, "params": params, "window": window,
                       "with": with_, "size": size},
                      lambda conf, node, what: worker(conf, int(node), what)))
