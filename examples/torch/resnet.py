#!/usr/bin/env python3
"""resnet.py: torchvision's ResNet-18 (random initial weights, nothing downloaded) on 32x32x3
images, one node of a hetring cluster, with its BatchNorm layers kept consistent.

    python3 resnet.py --conf resnet.ini --node 0                  # and nodes 1, 2
    python3 resnet.py --conf resnet.ini --node 0 --data DIR       # CIFAR-10 binary files
    examples/torch/run_resnet.sh                                  # all of it, with a kill

Without --data the images are synthetic (a class template plus noise, the same on every
node); with it, DIR holds CIFAR-10's binary batches (data_batch_1.bin .. 5, test_batch.bin),
for instance from `hetring gen-data --kind synthetic-rgb --out DIR`.

BatchNorm: --buffers average (the default) keeps the running statistics the same on every
node (each node's change weighted by its share of the global batch, in the gradient
all-reduce); --sync-bn takes the batch statistics over the whole global batch, so the run
follows a 1-node run of the same global batch. A StepLR scheduler and gradient clipping in
before_step (after the all-reduce) show where those go. The last line is `RESULT {json}`
(iterations, losses, held-out accuracy, a hash of every parameter and buffer).

SIGTERM, SIGINT or SIGHUP makes the node leave at the next boundary; killed (SIGKILL) it is dropped by the
others, who run the interrupted iteration again; started again, it rejoins with their state.
"""
import argparse
import json
import os
import signal
import sys
import time

import torch
import torch.nn as nn


def synthetic(n, n_eval, seed=5, classes=10):
    """n training and n_eval held-out images: a class template plus noise (the same on every
    node)."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, classes, (n + n_eval,), generator=g)
    templates = torch.randn(classes, 3, 32, 32, generator=g)
    x = 0.5 * templates[y] + torch.randn(n + n_eval, 3, 32, 32, generator=g)
    return x[:n], y[:n], x[n:], y[n:]


def cifar(d, names):
    """CIFAR-10 binary records: a label byte, then 3x32x32 bytes."""
    data = b"".join(open(os.path.join(d, n), "rb").read() for n in names)
    rec = torch.frombuffer(bytearray(data), dtype=torch.uint8).reshape(-1, 3073)
    x = rec[:, 1:].reshape(-1, 3, 32, 32).float().div_(255)
    return (x - 0.5) / 0.25, rec[:, 0].long()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--conf", required=True)
    p.add_argument("--node", type=int, required=True)
    p.add_argument("--data", help="a directory of CIFAR-10 binary files (default: synthetic)")
    p.add_argument("--samples", type=int, default=2400, help="synthetic training samples")
    p.add_argument("--buffers", default="average", choices=["average", "lowest", "off"])
    p.add_argument("--sync-bn", action="store_true")
    p.add_argument("--lr", type=float, default=0.02)
    p.add_argument("--clip", type=float, default=5.0, help="gradient norm clip (0: none)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    import torchvision
    import hetring.torch as ht

    if a.data:
        X, Y = cifar(a.data, [f"data_batch_{k}.bin" for k in range(1, 6)])
        Xt, Yt = cifar(a.data, ["test_batch.bin"])
    else:
        X, Y, Xt, Yt = synthetic(a.samples, 500)
    torch.manual_seed(a.node)  # any start: the first view gives every node the lowest's state
    model = torchvision.models.resnet18(num_classes=10)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9, weight_decay=5e-4)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=20, gamma=0.5)

    def clip(tr):  # after the all-reduce: the global gradient, the same on every node
        if a.clip:
            torch.nn.utils.clip_grad_norm_(tr.model.parameters(), a.clip)

    def on_view(v):
        if v["rank"] == 0:
            print(f"view {v['epoch']}: nodes {v['nodes']} from iteration {v['iter']}"
                  f"{' (left: ' + str(v['left']) + ')' if v['left'] else ''}"
                  f"{' (joined: ' + str(v['joined']) + ')' if v['joined'] else ''}", flush=True)

    tr = ht.Trainer(a.conf, model, opt, node_id=a.node, n_samples=len(X), overrides=a.set,
                    buffers=a.buffers, sync_bn=a.sync_bn, scheduler=sched, before_step=clip,
                    on_view=on_view, clock=time.thread_time,
                    leave_on=(signal.SIGTERM, signal.SIGINT, signal.SIGHUP))
    loss_fn = nn.CrossEntropyLoss()
    losses, retries, t0 = [], 0, None
    for idx in tr.batches():
        t0 = t0 or time.perf_counter()
        res = tr.step(loss_fn, (X[idx], Y[idx]))
        if res is None:
            retries += 1
            continue
        losses.append(res.loss)
        if tr.node.rank == 0 and (res.iter % 10 == 0 or res.iter + 1 == tr.node.iterations):
            ms = tr.node.members()
            print(f"iter {res.iter:4d}  loss {res.loss:.4f}  lr {opt.param_groups[0]['lr']:.4g}  "
                  f"batches {'/'.join(str(b) for _, b, _ in ms)}", flush=True)
    wall = time.perf_counter() - (t0 or time.perf_counter())
    model.eval()
    with torch.no_grad():
        acc = float(sum((model(Xt[i:i + 250]).argmax(1) == Yt[i:i + 250]).sum()
                        for i in range(0, len(Xt), 250))) / len(Xt)
    out = {"node": a.node, "iterations": len(losses), "retries": retries, "left": tr.left,
           "losses": losses, "wall_s": wall, "accuracy": acc, "hash": ht.state_hash(model),
           "samples_per_s": len(losses) * tr.node.global_batch / max(wall, 1e-9)}
    tr.close()
    print(f"node {a.node}: {len(losses)} iterations in {wall:.1f} s, held-out accuracy "
          f"{acc:.3f} (eval mode: the running statistics), state hash {out['hash']:016x}",
          flush=True)
    print("RESULT " + json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
