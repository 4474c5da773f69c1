#!/usr/bin/env python3
"""What PowerSGD costs in loss, DDP's hook against hetring's wire, on one model and data.

Four variants of one job, each 4 local processes on loopback, equal batches, no slowdown:

    ddp        PyTorch DDP (gloo), float32 all-reduce
    ddp-psgd   DDP with its PowerSGD hook at rank R (error feedback, warm start; compressing
               from iteration 2, the hook's earliest, not its default of 1000)
    hr         hetring.torch, [cluster] wire = fp32, static batches
    hr-psgd    hetring.torch, [cluster] wire = powersgd, powersgd_rank = R

The model is an MLP (default 784-512-512-10) trained with SGD and momentum on a synthetic
set labelled by a random teacher MLP (learnable, not separable at once), global batch B; with
--model resnet18, torchvision's ResNet-18 on 32x32x3 images (a class template plus noise, as
examples/torch/resnet.py makes them; BatchNorm as each system keeps it by default: DDP
broadcasts rank 0's buffers, hetring.torch averages them). Each
variant's mean training loss over windows of its iterations and its held-out loss and accuracy
are printed as a table, and the loss each compressed variant adds over its own float32 run:
what the issue compares ("PowerSGD within what DDP's PowerSGD hook loses").

    powersgd_loss.py [--iters N] [--batch B] [--rank R] [--layers L] [--model mlp|resnet18]
                     [--lr LR] [--port P] [--json FILE]
"""
import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ddp_baseline import wait_all  # noqa: E402  (a failed worker stops the others)

N_TRAIN, N_TEST = 16384, 2048


def data(layers, seed=11):
    import torch
    g = torch.Generator().manual_seed(seed)
    d, c = layers[0], layers[-1]
    x = torch.randn(N_TRAIN + N_TEST, d, generator=g)
    w1 = torch.randn(d, 64, generator=g) / d ** 0.5
    w2 = torch.randn(64, c, generator=g) / 8
    y = (torch.tanh(x @ w1) @ w2).argmax(1)
    return x[:N_TRAIN], y[:N_TRAIN], x[N_TRAIN:], y[N_TRAIN:]


def images(n=2400, n_eval=500, seed=5, classes=10):
    """resnet.py's synthetic set: a class template plus noise, the same in every process."""
    import torch
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, classes, (n + n_eval,), generator=g)
    templates = torch.randn(classes, 3, 32, 32, generator=g)
    x = 0.5 * templates[y] + torch.randn(n + n_eval, 3, 32, 32, generator=g)
    return x[:n], y[:n], x[n:], y[n:]


def setup(a):
    """The data and a fresh model (the same initial weights in every process)."""
    import torch
    if a.model == "resnet18":
        import torchvision
        x, y, xt, yt = images()
        torch.manual_seed(1)
        return x, y, xt, yt, torchvision.models.resnet18(num_classes=10)
    layers = [int(s) for s in a.layers.split(",")]
    x, y, xt, yt = data(layers)
    return x, y, xt, yt, mlp(layers)


def mlp(layers):
    import torch
    torch.manual_seed(1)
    mods = []
    for i in range(len(layers) - 1):
        mods.append(torch.nn.Linear(layers[i], layers[i + 1]))
        if i < len(layers) - 2:
            mods.append(torch.nn.ReLU())
    return torch.nn.Sequential(*mods)


def held_out(model, xt, yt):
    import torch
    model.eval()
    with torch.no_grad():
        out = model(xt)
        return (torch.nn.functional.cross_entropy(out, yt).item(),
                (out.argmax(1) == yt).float().mean().item())


def ddp_worker(rank, n, a, variant, q):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(a.port)
    dist.init_process_group("gloo", rank=rank, world_size=n)
    x, y, xt, yt, net = setup(a)
    n_train = len(x)
    psgd = variant == "ddp-psgd"
    if psgd:  # one bucket: gloo needs the hook's chained all-reduces in one order (ddp_baseline.py)
        dist._DEFAULT_FIRST_BUCKET_BYTES = 1 << 40
    model = torch.nn.parallel.DistributedDataParallel(net, bucket_cap_mb=(1 << 20) if psgd else 25)
    if psgd:
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as ps
        state = ps.PowerSGDState(process_group=None, matrix_approximation_rank=a.rank,
                                 start_powerSGD_iter=2)
        model.register_comm_hook(state, ps.powerSGD_hook)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
    b = a.batch // n
    g = torch.Generator().manual_seed(3)
    perm = torch.randperm(n_train, generator=g)
    losses = []
    per_epoch = n_train // a.batch
    for it in range(a.iters):
        if it and it % per_epoch == 0:
            perm = torch.randperm(n_train, generator=g)
        idx = perm[(it % per_epoch) * a.batch + rank * b:(it % per_epoch) * a.batch + (rank + 1) * b]
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
        loss.backward()
        opt.step()
        t = loss.detach().clone()
        dist.all_reduce(t)  # the global batch's mean loss, as hetring reports it
        losses.append(t.item() / n)
    if rank == 0:
        q.put({"losses": losses, "held_out": held_out(net, xt, yt)})
    dist.destroy_process_group()


def hr_worker(rank, n, a, variant, q, ini):
    import torch
    import hetring.torch as ht
    torch.set_num_threads(1)
    x, y, xt, yt, model = setup(a)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
    tr = ht.Trainer(ini, model, opt, node_id=rank, n_samples=len(x), overlap=False)
    losses = []
    lossf = torch.nn.CrossEntropyLoss()
    for idx in tr.batches():
        idx = torch.as_tensor(idx, dtype=torch.long)
        res = tr.step(lossf, (x[idx], y[idx]))
        if res is not None:
            losses.append(res.loss)
    tr.close()
    if rank == 0:
        q.put({"losses": losses, "held_out": held_out(model, xt, yt)})


def write_ini(d, a, variant):
    path = os.path.join(d, f"{variant}.ini")
    wire = "wire = powersgd\npowersgd_rank = %d\n" % a.rank if variant == "hr-psgd" else ""
    with open(path, "w") as f:
        f.write(f"[cluster]\nsecurity = none\n{wire}[train]\nglobal_batch = {a.batch}\n"
                f"iterations = {a.iters}\nseed = 3\nsamples = {2400 if a.model == 'resnet18' else N_TRAIN}\n"
                f"[controller]\npolicy = static\n")
        for k in range(4):
            f.write(f"[node.{k}]\nhost = 127.0.0.1\nport = {a.port + 10 + k}\n")
    return path


def run(a, variant, d):
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    q = ctx.SimpleQueue()
    if variant.startswith("ddp"):
        procs = [ctx.Process(target=ddp_worker, args=(k, 4, a, variant, q)) for k in range(4)]
    else:
        ini = write_ini(d, a, variant)
        procs = [ctx.Process(target=hr_worker, args=(k, 4, a, variant, q, ini)) for k in range(4)]
    t0 = time.monotonic()
    for p in procs:
        p.start()
    wait_all(procs, 1800)
    if any(p.exitcode != 0 for p in procs) or q.empty():
        sys.exit(f"powersgd_loss: a worker of {variant} failed")
    out = q.get()
    out["seconds"] = time.monotonic() - t0
    a.port += 20
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--rank", type=int, default=4)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--layers", default="784,512,512,10")
    ap.add_argument("--model", default="mlp", choices=["mlp", "resnet18"])
    ap.add_argument("--port", type=int, default=29650)
    ap.add_argument("--json", help="also write the results here")
    a = ap.parse_args()
    res = {}
    with tempfile.TemporaryDirectory(prefix="hetring-psgd.") as d:
        for v in ("ddp", "ddp-psgd", "hr", "hr-psgd"):
            res[v] = run(a, v, d)
            print(f"{v}: {len(res[v]['losses'])} iterations in {res[v]['seconds']:.0f} s",
                  file=sys.stderr)
    w = max(1, a.iters // 5)
    cuts = list(range(0, a.iters, w))
    name = "ResNet-18" if a.model == "resnet18" else f"MLP {a.layers}"
    print(f"# {name}, B = {a.batch}, {a.iters} iterations, 4 processes, PowerSGD rank "
          f"{a.rank}: mean training loss per window, held-out loss and accuracy")
    print("| variant | " + " | ".join(f"{c}-{min(c + w, a.iters) - 1}" for c in cuts) +
          " | held-out loss | accuracy |")
    print("|---" * (len(cuts) + 3) + "|")
    means = {}
    for v, r in res.items():
        ls = r["losses"]
        means[v] = [sum(ls[c:c + w]) / len(ls[c:c + w]) for c in cuts]
        print(f"| {v} | " + " | ".join(f"{m:.5f}" for m in means[v]) +
              f" | {r['held_out'][0]:.5f} | {r['held_out'][1]:.4f} |")
    for comp, base in (("ddp-psgd", "ddp"), ("hr-psgd", "hr")):
        last = means[comp][-1] / means[base][-1] - 1
        print(f"{comp} against {base}: last window's loss {100 * last:+.1f}%, held-out loss "
              f"{100 * (res[comp]['held_out'][0] / res[base]['held_out'][0] - 1):+.1f}%")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "results": res}, f)


if __name__ == "__main__":
    main()
