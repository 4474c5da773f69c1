"""torch_worker.py: one node of the Python tests (test_python.sh): a small MLP on synthetic
data trained through hetring.torch. Prints 'RESULT {json}' at the end.

    torch_worker.py CONF NODE_ID [--die-at ITER] [--pace S] [--nodes N] [--loader] [--dtype T]
                    [--save-at ITER FILE] [--resume FILE] [--term-at ITER]
"""
import argparse
import json
import logging
import os
import signal
import sys

import harness

if harness.worker_changed():  # the files its case started on changed: it would run other code
    sys.exit(1)

import torch  # noqa: E402

import hetring  # noqa: E402
import hetring.torch as ht  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("conf")
p.add_argument("node", type=int)
p.add_argument("--die-at", type=int, default=-1)
p.add_argument("--pace", type=float, default=0.0, help="sleep seconds per iteration while a node is missing")
p.add_argument("--nodes", type=int, default=1)
p.add_argument("--loader", action="store_true", help="iterate a DataLoader over tr.sampler()")
p.add_argument("--workers", type=int, default=-1,
               help="iterate tr.loader(dataset, num_workers=N); with --loader, the DataLoader's")
p.add_argument("--dtype", default="float32", help="the model's and the data's dtype")
p.add_argument("--set", action="append", default=[], help="an INI override, section.key=value")
p.add_argument("--no-overlap", action="store_true", help="Trainer(overlap=False)")
p.add_argument("--hidden", type=int, default=32,
               help="the hidden layer's width (512: a gradient that the bf16 wire rounds)")
p.add_argument("--save-at", nargs=2, metavar=("ITER", "FILE"),
               help="torch.save the model and optimizer after ITER iterations")
p.add_argument("--resume", metavar="FILE", help="start from a --save-at file (Trainer resume=)")
p.add_argument("--term-at", type=int, default=-1,
               help="send this process SIGTERM in that iteration (Trainer leave_on=SIGTERM)")
a = p.parse_args()

logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")  # what hetring.torch says
torch.manual_seed(1234 + a.node)  # differs per node: the first view's state transfer aligns them
torch.set_num_threads(1)
g = torch.Generator().manual_seed(5)
N, D, C = 512, 20, 4
X = torch.randn(N, D, generator=g)
W = torch.randn(D, C, generator=g)
Y = (X @ W).argmax(1)
dtype = getattr(torch, a.dtype)
X = X.to(dtype)
model = torch.nn.Sequential(torch.nn.Linear(D, a.hidden), torch.nn.ReLU(),
                            torch.nn.Linear(a.hidden, C))
model = model.to(dtype)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
loss_fn = torch.nn.CrossEntropyLoss()
tr = ht.Trainer(a.conf, model, opt, node_id=a.node, n_samples=N, overrides=a.set,
                overlap=not a.no_overlap, resume=a.resume, leave_on=(signal.SIGTERM,))
done_at_open = tr.done  # the first view's iteration: a node that received the state is there
# a forked child (as a loader worker is) has the default SIGTERM handler, not leave_on's
pid = os.fork()
if pid == 0:
    os._exit(0 if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL else 1)
fork_default = os.waitpid(pid, 0)[1] == 0
losses, retries, iters, buckets, early, members = [], 0, 0, [], [], []
first = None
import time

def batches():
    """(indices, (x, y)) per iteration: from tr.batches(), or a DataLoader on tr.sampler()."""
    ds = torch.utils.data.TensorDataset(X, Y)
    if a.loader:
        dl = torch.utils.data.DataLoader(ds, batch_sampler=tr.sampler(),
                                         num_workers=max(a.workers, 0))
        for xb, yb in dl:
            yield None, (xb, yb)
    elif a.workers >= 0:
        for xb, yb in tr.loader(ds, num_workers=a.workers):
            yield None, (xb, yb)
    else:
        for idx in tr.batches():
            yield idx, (X[idx], Y[idx])


try:
    for idx, xy in batches():
        b = tr.batch
        if b.iter == a.die_at:
            os._exit(3)
        if b.iter == a.term_at:
            os.kill(os.getpid(), signal.SIGTERM)  # leave at the next boundary, not die
        if a.pace and (retries or b.size < a.nodes):
            time.sleep(a.pace)
        res = tr.step(loss_fn, xy)
        if res is None:
            retries += 1
            continue
        iters += 1
        first = b.iter if first is None else first
        members.append(tr.node.members())
        if a.save_at and res.iter + 1 == int(a.save_at[0]):
            tr.save(a.save_at[1])
        losses.append(res.loss)
        buckets.append(res.buckets)
        early.append(res.early)
except RuntimeError as e:  # a DataLoader that prefetches (--loader --workers N)
    print("RAISED " + json.dumps(str(e)), flush=True)
    tr.close()
    sys.exit(4)
flat = torch.cat([q.detach().reshape(-1) for q in model.parameters()])
out = {"node": a.node, "iters": iters, "retries": retries, "first_loss": losses[0] if losses else None,
       "last_loss": losses[-1] if losses else None, "hash": ht.param_hash(list(model.parameters())),
       "params": flat.tolist(), "views": tr.views, "version": hetring.__version__,
       "dtype": str(flat.dtype).split(".")[-1], "staged": tr.staged is not None,
       "buckets": buckets, "early": early, "members": members, "first": first,
       "global_batch": tr.node.global_batch, "left": tr.left, "done": tr.done,
       "done_at_open": done_at_open,
       "fork_default": fork_default}
tr.close()
print("RESULT " + json.dumps(out))
